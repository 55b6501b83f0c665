"""Starting cells: the runner, the fork servers, the precompile pass, and interrupt handling."""
