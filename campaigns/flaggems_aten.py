"""FlagGems against ATen: the same operators and inputs, torch's own kernels on side A, FlagGems' on side B.

A kernel-variant switch: side A never calls (or imports) FlagGems, so round 1
side A's record has none of FlagGems' tuner keys.  Round 1 side B tunes them
once into side B's supplement record, and side B's later cells replay it
(docs/explanation/cell.md).  Skipped at collection without FlagGems or a GPU.

    pytest campaigns/flaggems_aten.py --ab-rounds 3
"""

from __future__ import annotations

from pytest_abbench.campaign.flaggems import AGAINST_ATEN, gems_ops, unavailable_reason

from _kernels.gems_specs import SPECS

SKIP = unavailable_reason()
OPS = gems_ops(SPECS, against_aten=True)
SWITCH = AGAINST_ATEN
