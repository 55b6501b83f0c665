"""Each side's Triton cache folder for a session: the persistent one for its key, or the root's own (``off``).

The key (``core.kernelcache``) needs the side's Triton build, which only the
side's interpreter under the side's environment can tell (a switch may put
another build first on ``PYTHONPATH``): a short probe finds it there without
importing it, once per interpreter and environment.

Kernel files given with ``--ab-kernel-import`` (``core.kernelarchive``) are
unpacked into the folder of the side whose key equals theirs once that key is
known; a file whose key is neither side's refuses the campaign's cells.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import AbstractSet, Mapping, Sequence

from pytest_abbench.core import envnames, gpuinfo, kernelarchive, kernelcache
from pytest_abbench.core.kernelarchive import KernelArchive, KernelArchiveError
from pytest_abbench.core.kernelcache import KernelCacheKey
from pytest_abbench.core.layout import RootLayout
from pytest_abbench.core.private import private_folder
from pytest_abbench.core.sideprobe import SideProbeError, probe_side

class KernelCacheError(RuntimeError):
    """The side's Triton could not be probed for its key: names the interpreter and why."""


def probe_triton(python: str, env: Mapping[str, str]) -> dict[str, str]:
    """The side's Triton as its key names it: interpreter, version, location, build; empty fields when absent."""
    try:
        found = probe_side(python, env)
    except SideProbeError as exc:
        raise KernelCacheError(f"kernel cache: {python} did not say where its Triton is: {exc}") from None
    return {name: str(found.get(name, "")) for name in ("python", "version", "location", "build")}


def gpu_device(gpu: str | None) -> str:
    """``<name> cuda:<major><minor>`` of the GPU cells run on (an index or a UUID); ``cuda:unknown`` when NVML
    cannot say."""
    found = gpuinfo.name_and_capability(gpu)
    return f"{found[0]} cuda:{found[1]}{found[2]}" if found else "cuda:unknown"


class KernelCaches:
    """One session's Triton cache folders, by side: looked up once per (interpreter, environment).

    ``imports``: the kernel files (``--ab-kernel-import``) to seed the folders of the keys they hold.
    """

    def __init__(self, option: str, layout: RootLayout, backend: str, gpu: str | None,
                 imports: Sequence[Path] = ()) -> None:
        self.base = kernelcache.resolve_base(option)
        self.layout = layout
        self.backend = backend
        self.gpu = gpu
        self.imports = tuple(imports)
        self._device: str | None = None
        self._folders: dict[tuple[str, ...], Path] = {}
        self.notices: list[str] = []  # for the next cell's log
        self.keys: dict[tuple[str, str], KernelCacheKey] = {}  # (campaign file, side) -> its key, once probed
        self._archives: list[KernelArchive] | None = None  # read at the first key
        self._import_problem: str | None = None  # a kernel file that could not be read or unpacked
        self._imported: set[Path] = set()  # the kernel files unpacked into the folder of their key
        if self.base is not None:
            try:  # Triton loads native code (launchers, cubins) from it: this user's alone, or not used
                private_folder(self.base)
            except OSError as exc:
                self.notices.append(f"kernel cache: {exc.strerror or exc}; Triton loads native code from it, so "
                                    "this session compiles into the root's own cache per side instead")
                self.base = None

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
            self.keys[(str(campaign_path), side)] = key
            self._seed(key, folder)
        return folder

    def archives(self) -> list[KernelArchive]:
        """The kernel files, each read whole once; one that cannot be read is the session's import problem."""
        if self._archives is None:
            self._archives = []
            for path in self.imports:
                try:
                    self._archives.append(kernelarchive.read_archive(path))
                except KernelArchiveError as exc:
                    self._import_problem = self._import_problem or f"--ab-kernel-import: {exc}"
        return self._archives

    def _seed(self, key: KernelCacheKey, folder: Path) -> None:
        """Unpack each kernel file whose key is ``key`` into ``folder`` (the folder of that key)."""
        wanted = key.to_json()
        for archive in self.archives():
            if archive.key != wanted or archive.path in self._imported:
                continue
            try:
                written = kernelarchive.unpack(archive, folder)
            except (KernelArchiveError, OSError) as exc:
                self._import_problem = self._import_problem or f"--ab-kernel-import: {exc}"
                continue
            self._imported.add(archive.path)
            self.notices.append(f"kernel cache: imported {archive.path} (sha256 {archive.sha256}; made by "
                                f"{archive.made_by()}) into {folder} ({archive.kernels} kernel(s), {archive.files} "
                                f"file(s), {archive.size} bytes: {written} written, the others were there); a kernel "
                                "file is native code that Triton loads: import only files you would run")

    def import_refusal(self, campaign_path: Path, session_campaigns: AbstractSet[str]) -> str | None:
        """Why the cells of ``campaign_path`` must not run with the kernel files given, once both its sides' keys
        were looked up: a file that could not be read, or one whose key is neither side's.  A file is checked
        against the side its key names; one naming another campaign of the session (``session_campaigns``: the
        files' stems) is that campaign's."""
        self.archives()
        if self._import_problem is not None:
            return self._import_problem
        for archive in self.archives():
            if archive.path in self._imported:
                continue
            if archive.campaign != campaign_path.stem and archive.campaign in session_campaigns:
                continue
            mine = self.keys.get((str(campaign_path), archive.side))
            if mine is None:
                return (f"--ab-kernel-import {archive.path}: side {archive.side}'s kernel cache key of "
                        f"{campaign_path.name} could not be made (its cell log says why), so the file cannot be "
                        "checked against it; nothing imported")
            differ = kernelarchive.key_differences(archive.key, mine.to_json())
            return (f"--ab-kernel-import {archive.path}: refused, its kernels were compiled under another key than "
                    f"side {archive.side}'s of {campaign_path.name} in this session; "
                    f"{'; '.join(differ) or 'the keys differ'}; nothing imported (export that side's cache again "
                    "under this setup, or leave the file out)")
        return None
