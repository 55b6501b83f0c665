"""run_identity.json as the parent reads it: its name, the axes compared between sides, the notes.

The cell process builds and writes the file (``pytest_abbench.child.identity``);
this module is what both sides share, so it imports neither torch nor triton.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from pytest_abbench.core.layout import IDENTITY_FILE as IDENTITY_FILE  # the name readers of identities import here

# Axes that must be equal between sides (autotune_mode is judged by rule in caliber.py).
CALIBER_AXES = ("backend", "device", "timer", "bench_level", "shape_mode", "tuner_cache", "direct_repeat")
# Axes added later: compared like the others, but an identity written before them may lack them.
LATER_AXES = ("layout_shift", "spawn")
INFO_FIELDS = ("torch", "triton", "driver", "python", "host", "gpu_uuid", "campaign_hash")


def file_hash(path: Path) -> str:
    """Short content hash naming a campaign file or an autotune record in identities."""
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]
