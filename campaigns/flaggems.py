"""FlagGems operators (the Triton library these users ship), A/B under DISABLE_MMA_V3=1.

Each cell calls ``flag_gems.ops.<op>`` and checks it against torch.  Its
LibTuner cache is per cell: round 1 side A tunes into a fresh one, every
other cell starts from a copy (``--ab-tuner-cache shared:DIR`` shares one
folder instead, with a caliber warning).  FlagGems 5.0.2 has no router gemm,
so this campaign has none.  Skipped at collection without FlagGems or a GPU.

    pytest campaigns/flaggems.py --ab-rounds 4
"""

from __future__ import annotations

from pytest_abbench import Switch
from pytest_abbench.campaign.flaggems import gems_ops, unavailable_reason

from _kernels.gems_specs import SPECS

SKIP = unavailable_reason()
OPS = gems_ops(SPECS)
SWITCH = Switch(env_b={"DISABLE_MMA_V3": "1"})
