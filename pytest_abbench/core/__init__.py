"""The shared core: formats and facts both processes use (root layout, cell config, identity, status, outcome, plan, markers, exit codes, file I/O, wording).

Nothing here imports pytest, torch or Triton at import time: the pytest side, the cell child and the report all build on it.
"""
