"""What a side's interpreter finds under its environment, asked without importing anything (torch alone takes
seconds): whether it has torch and triton, and which Triton build (the kernel cache's key names it)."""

from __future__ import annotations

import json
import subprocess
from typing import Any, Mapping

CELL_PACKAGES = ("torch", "triton")  # what every cell child imports

# Where the side's Triton is, which version, and its library's size and time (a rebuilt Triton of the same version
# is another build).  Finding a package does not import it.
_PROBE = r"""
import importlib.util, json, os, sys
out = {"python": sys.executable, "version": "", "location": "", "build": "",
       "missing": [p for p in PACKAGES if importlib.util.find_spec(p) is None]}
spec = importlib.util.find_spec("triton")
if spec is not None and spec.submodule_search_locations:
    where = list(spec.submodule_search_locations)[0]
    out["location"] = os.path.realpath(where)
    try:
        import importlib.metadata as md
        out["version"] = md.version("triton")
    except Exception:
        pass
    lib = os.path.join(where, "_C")
    names = sorted(n for n in os.listdir(lib) if n.startswith("libtriton")) if os.path.isdir(lib) else []
    for name in names[:1]:
        st = os.stat(os.path.join(lib, name))
        out["build"] = f"{name} {st.st_size} {st.st_mtime_ns}"
print(json.dumps(out))
""".replace("PACKAGES", repr(CELL_PACKAGES))
PROBE_TIMEOUT_S = 60.0


class SideProbeError(RuntimeError):
    """The interpreter could not be started, or did not answer: says which of the two and why."""


def probe_side(python: str, env: Mapping[str, str]) -> dict[str, Any]:
    """``python``'s answer under ``env``: ``python``, ``version``, ``location``, ``build`` of its Triton (empty where it
    has none) and ``missing``, the cell packages it cannot find."""
    try:
        done = subprocess.run([python, "-c", _PROBE], env=dict(env), capture_output=True, text=True,
                              timeout=PROBE_TIMEOUT_S, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError) as exc:
        raise SideProbeError(f"cannot be started ({exc})") from None
    try:
        found = json.loads(done.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise SideProbeError(f"exits {done.returncode} when asked for {', '.join(CELL_PACKAGES)} ({last})") from None
    return dict(found)
