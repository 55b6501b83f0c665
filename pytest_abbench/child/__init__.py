"""What runs inside a cell's own process: ``python -m pytest_abbench.child ...``.

One such process measures one (round, op, side).  This package is the only
part of the product that imports torch and triton; the plugin, the report and
the CLI never import from it, so pytest's start-up does not pay for them.
"""
