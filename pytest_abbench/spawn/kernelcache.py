"""Each side's Triton cache folder for a session: the persistent one for its key, or the root's own (``off``).

The key (``core.kernelcache``) needs the side's Triton build, which only the
side's interpreter under the side's environment can tell (a switch may put
another build first on ``PYTHONPATH``): a short probe finds it there without
importing it, once per interpreter and environment.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Mapping

from pytest_abbench.core import envnames, kernelcache
from pytest_abbench.core.kernelcache import KernelCacheKey
from pytest_abbench.core.layout import RootLayout

# Run with the side's interpreter: where its Triton is, which version, and its library's size and time (a
# rebuilt Triton of the same version is another build).  Finding a package does not import it.
_PROBE = r"""
import importlib.util, json, os, sys
out = {"python": sys.executable, "version": "", "location": "", "build": ""}
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
"""
_PROBE_TIMEOUT_S = 60.0


class KernelCacheError(RuntimeError):
    """The side's Triton could not be probed for its key: names the interpreter and why."""


def probe_triton(python: str, env: Mapping[str, str]) -> dict[str, str]:
    """The side's Triton as its key names it: interpreter, version, location, build; empty fields when absent."""
    try:
        done = subprocess.run([python, "-c", _PROBE], env=dict(env), capture_output=True, text=True,
                              timeout=_PROBE_TIMEOUT_S, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError) as exc:
        raise KernelCacheError(f"kernel cache: cannot ask {python} where its Triton is: {exc}") from None
    try:
        found = json.loads(done.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise KernelCacheError(f"kernel cache: {python} did not say where its Triton is (rc {done.returncode}): "
                               f"{done.stderr.strip()[-500:]}") from None
    return {str(k): str(v) for k, v in found.items()}


def gpu_device(gpu: str | None) -> str:
    """``<name> cuda:<major><minor>`` of the GPU cells run on, from nvidia-smi; ``cuda:unknown`` when it cannot say."""
    index = gpu if gpu is not None and gpu.isdigit() else "0"
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,compute_cap", "--format=csv,noheader", "-i", index],
                             capture_output=True, text=True, timeout=20, check=True).stdout.strip()
        name, cap = (part.strip() for part in out.splitlines()[0].rsplit(",", 1))
        major, minor = cap.split(".")
        return f"{name} cuda:{int(major)}{int(minor)}"
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return "cuda:unknown"


class KernelCaches:
    """One session's Triton cache folders, by side: looked up once per (interpreter, environment)."""

    def __init__(self, option: str, layout: RootLayout, backend: str, gpu: str | None) -> None:
        self.base = kernelcache.resolve_base(option)
        self.layout = layout
        self.backend = backend
        self.gpu = gpu
        self._device: str | None = None
        self._folders: dict[tuple[str, ...], Path] = {}
        self.notices: list[str] = []  # for the next cell's log

    def device(self) -> str:
        if self._device is None:
            self._device = gpu_device(self.gpu) if self.backend == "cuda" else self.backend
        return self._device

    def folder(self, campaign_path: Path, source_hash: str, side: str, python: str, switch_env: Mapping[str, str],
               env: Mapping[str, str]) -> Path:
        """The side's ``TRITON_CACHE_DIR``; ``env`` is the side's cell environment without the cache folder."""
        if self.base is None:
            return self.layout.triton_cache(side)
        keyed = kernelcache.keyed_env(env)
        memo = (str(campaign_path), source_hash, side, python, json.dumps(sorted(switch_env.items())),
                json.dumps(sorted(keyed.items())), env.get(envnames.PYTHONPATH, ""))
        folder = self._folders.get(memo)
        if folder is None:
            try:
                triton = probe_triton(python, env)
            except KernelCacheError as exc:
                # The cell finds out what is wrong with its interpreter itself; its compiles stay in the root.
                self.notices.append(f"{exc}; side {side} compiles into {self.layout.triton_cache(side)}")
                folder = self._folders[memo] = self.layout.triton_cache(side)
                return folder
            key = KernelCacheKey(campaign=campaign_path.stem, side=side, triton=triton, switch_env=dict(switch_env),
                                 env=keyed, campaign_source=source_hash, device=self.device())
            folder = self._folders[memo] = kernelcache.key_folder(self.base, key)
        return folder
