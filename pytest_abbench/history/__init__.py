"""The history of runs: one SQLite file that remembers every finished root by commit (``store``), the record
made from a root (``record``), and the binary search over commits built on it (``bisect``)."""
