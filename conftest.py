"""Repository-level pytest wiring only.

The plugin itself loads through its ``pytest11`` entry point (``pip install -e .``).
"""
