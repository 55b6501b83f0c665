"""What runs inside a cell's own process: ``python -m pytest_abbench.child ...``.

One such process measures one (round, op, side).  This package is the only
part of the product that imports torch and triton; nothing outside it imports
from it, so pytest's start-up and the report never pay for them.
"""
