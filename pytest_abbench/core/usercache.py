"""The user's cache folder for what pytest-abbench keeps across sessions and roots (kernels, bytecode)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping

from pytest_abbench.core import envnames


def user_cache(environ: Mapping[str, str] | None = None) -> Path:
    """``$XDG_CACHE_HOME/pytest-abbench``, ``~/.cache/pytest-abbench`` without it (XDG rules: a relative
    XDG_CACHE_HOME is ignored)."""
    env = os.environ if environ is None else environ
    xdg = env.get(envnames.XDG_CACHE_HOME, "")
    base = Path(xdg) if xdg and os.path.isabs(xdg) else Path.home() / ".cache"
    return base / "pytest-abbench"
