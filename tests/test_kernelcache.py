"""The persistent per-side kernel cache (``--ab-kernel-cache``): a second run compiles nothing, a changed
switch or campaign gets a key of its own, ``off`` keeps the root's own cache; compile counts reach the report.
A side's cache exported as one file (``abbench kernels export``) seeds an empty cache (``--ab-kernel-import``)
when its key is the side's, and is refused otherwise, as is a torn file or one with a member outside the folder.

Real sessions of a real Triton kernel in the interpreter: round 1 compiles it for cuda:90 (the IR capture),
through the side's Triton cache, and Triton's compile listener counts what was loaded and what was compiled.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from helpers import ADD_KERNEL_SOURCE, DOT_SOURCE

CAMPAIGN = DOT_SOURCE + ADD_KERNEL_SOURCE + '''

def build_add(shape, device):
    import torch
    x = torch.arange(shape["n"], device=device, dtype=torch.float32)
    y = torch.empty_like(x)
    return Case(run=lambda: (add_kernel[(1,)](x, y, N=shape["n"]), y)[1], expected=lambda: x + 1)


OPS = [Op("add", build=build_add, shapes={"smoke": [{"n": 16}]})]
SWITCH = Switch(env_b={"ABBENCH_TEST_SWITCH": "1"})
'''
ARGS = ("--ab-rounds", "1", "-p", "no:cacheprovider")


def kernels(pytester: pytest.Pytester, root: Path, *args: str) -> dict[str, dict[str, int]]:
    """Run a session of the campaign into ``root``; the report's compile counts by side."""
    result = pytester.runpytest_subprocess("kc.py", "--ab-root", str(root), *ARGS, *args)
    assert result.ret == 0, result.stdout.str()[-3000:]
    counts: dict[str, dict[str, int]] = json.loads((root / "report.json").read_text())["time_spent"]["kernels"]
    line = next(ln for ln in result.outlines if "compile cache:" in ln)
    for side, n in counts.items():
        assert f"side {side} {n['loaded']} kernel" in line and f"loaded, {n['compiled']} compiled" in line
    return counts


def kernel_entries(base: Path) -> list[Path]:
    """Triton's cache entries (one folder per compiled kernel) under every key folder of ``base``."""
    return [p for key in base.iterdir() for p in key.iterdir() if p.is_dir()] if base.is_dir() else []


def test_second_run_on_a_new_root_compiles_nothing(campaign_dir: pytest.Pytester, kernel_cache_home: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    campaign_dir.makepyfile(kc=CAMPAIGN)
    base = kernel_cache_home / "pytest-abbench" / "kernels"

    # With the per-pass dump on (the default IR capture without a GPU), each compile's key holds its own dump
    # file: those compiles stay out of the persistent cache, where they could never be loaded.
    dumped = kernels(campaign_dir, campaign_dir.path / "root0")
    assert dumped["A"]["compiled"] > 0 and dumped["B"]["compiled"] > 0, dumped
    assert kernel_entries(base) == []
    # So the time line promises no warm re-run there (it did, and the re-run compiled them all again).
    said = (campaign_dir.path / "root0" / "report.md").read_text()
    assert "warm re-run" not in said and "a re-run loads them only with ABBENCH_PASS_DUMP=0" in said

    monkeypatch.setenv("ABBENCH_PASS_DUMP", "0")
    first = kernels(campaign_dir, campaign_dir.path / "root1")
    assert first["A"]["compiled"] > 0 and first["B"]["compiled"] > 0, first
    folders = sorted(p.name for p in base.iterdir())
    assert len(folders) == 2 and folders[0].startswith("kc-A-") and folders[1].startswith("kc-B-"), folders
    assert len(kernel_entries(base)) == first["A"]["compiled"] + first["B"]["compiled"]
    assert not (campaign_dir.path / "root1" / "cache").exists()  # nothing compiled into the root

    second = kernels(campaign_dir, campaign_dir.path / "root2")
    assert second["A"] == {"loaded": first["A"]["compiled"], "compiled": 0}, second
    assert second["B"] == {"loaded": first["B"]["compiled"], "compiled": 0}, second
    assert sorted(p.name for p in base.iterdir()) == folders


def test_off_keeps_the_roots_own_cache_per_side(campaign_dir: pytest.Pytester, kernel_cache_home: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ABBENCH_PASS_DUMP", "0")
    campaign_dir.makepyfile(kc=CAMPAIGN)
    root = campaign_dir.path / "root"
    counts = kernels(campaign_dir, root, "--ab-kernel-cache", "off")
    assert counts["A"]["compiled"] > 0 and counts["B"]["compiled"] > 0, counts
    for side in "AB":
        assert any((root / "cache" / f"triton_{side}").iterdir())
    assert not (kernel_cache_home / "pytest-abbench").exists()


def test_keys_follow_side_switch_environment_source_and_device(tmp_path: Path) -> None:
    """A real probe of this interpreter's Triton; each part of the key moves the folder, the sides never share."""
    import os
    import sys

    from pytest_abbench.campaign.model import source_hash
    from pytest_abbench.core.layout import RootLayout
    from pytest_abbench.spawn.kernelcache import KernelCaches

    campaign = tmp_path / "camp.py"
    campaign.write_text("OPS = []\n")
    env = dict(os.environ)
    caches = KernelCaches(str(tmp_path / "kc"), RootLayout(tmp_path / "root"), "interpreter", None)

    def folder(side: str = "A", switch: dict[str, str] | None = None, source: str | None = None,
               environ: dict[str, str] | None = None, into: KernelCaches = caches) -> Path:
        return into.folder(campaign, source or source_hash(campaign), side, sys.executable, switch or {},
                           environ or env)

    base = folder()
    assert base == folder() and base.parent == tmp_path / "kc" and base.name.startswith("camp-A-")
    assert folder("B") != base  # the same everything else: never one folder for both sides
    assert folder(switch={"DISABLE_MMA_V3": "1"}) != base
    assert folder(environ={**env, "TRITON_F32_DEFAULT": "ieee"}) != base  # an inherited Triton knob
    assert folder(environ={**env, "UNRELATED": "1"}) == base
    campaign.write_text("OPS = []  # edited\n")
    assert folder() != base
    helpers = tmp_path / "_helpers"
    helpers.mkdir()
    (helpers / "__init__.py").write_text("")
    campaign.write_text("from _helpers import x\nOPS = []  # edited\n")
    before = folder()
    (helpers / "__init__.py").write_text("x = 1\n")  # a helper beside the campaign is part of its source
    assert folder() != before
    on_gpu = KernelCaches(str(tmp_path / "kc"), RootLayout(tmp_path / "root"), "cuda", None)
    on_gpu._device = "NVIDIA H200 cuda:90"  # NVML cannot answer on a machine without a GPU
    assert folder(into=on_gpu) != folder()
    off = KernelCaches("off", RootLayout(tmp_path / "root"), "interpreter", None)
    assert folder(into=off) == tmp_path / "root" / "cache" / "triton_A"
    assert json.loads((base / "abbench-key.json").read_text())["side"] == "A"


def export(root: Path, side: str, out: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """``abbench kernels export ROOT --side SIDE -o OUT``: its exit code and what it printed."""
    from pytest_abbench.cli import main

    code = main(["kernels", "export", str(root), "--side", side, "-o", str(out)])
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def test_an_exported_side_seeds_an_empty_cache_and_a_changed_key_is_refused(
        campaign_dir: pytest.Pytester, kernel_cache_home: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    import tarfile

    monkeypatch.setenv("ABBENCH_PASS_DUMP", "0")
    campaign_dir.makepyfile(kc=CAMPAIGN)
    first = kernels(campaign_dir, campaign_dir.path / "root1")
    assert first["A"]["compiled"] > 0 and first["B"]["compiled"] > 0, first

    # The root names the folder each side's cells compiled into; the file holds that folder and its key.
    exported = {side: campaign_dir.path / f"kernels-{side}.tar.gz" for side in "AB"}
    for side, out in exported.items():
        code, said = export(campaign_dir.path / "root1", side, out, capsys)
        assert code == 0, said
        assert f"wrote {out}: side {side}'s kernel cache" in said, said
    with tarfile.open(exported["A"]) as tar:
        names = tar.getnames()
    kernel_dirs = {n.split("/")[0] for n in names[1:] if "/" in n}
    assert names[0] == "abbench-key.json" and len(kernel_dirs) == first["A"]["compiled"]
    assert "abbench-autotune-add.json" in names, "round 1's autotune record rides with side A's kernels"
    assert not list(campaign_dir.path.glob(".kernels-*"))  # no temporary file left beside it

    # A fresh machine: an empty cache folder seeded with side A's file compiles nothing for A, B as before.
    empty = campaign_dir.path / "fresh-cache"
    seeded = kernels(campaign_dir, campaign_dir.path / "root2", "--ab-kernel-cache", str(empty),
                     "--ab-kernel-import", str(exported["A"]))
    assert seeded["A"] == {"loaded": first["A"]["compiled"], "compiled": 0}, seeded
    assert seeded["B"]["compiled"] == first["B"]["compiled"], seeded
    log = (campaign_dir.path / "root2" / "r1_A" / "add" / "run.log").read_text()
    import hashlib

    sha = hashlib.sha256(exported["A"].read_bytes()).hexdigest()
    assert (f"kernel cache: imported {exported['A']} (sha256 {sha}; made by campaign kc, side A, triton 3."
            in log and f"device interpreter, switch none) into {empty}{os.sep}kc-A-" in log), log
    assert "a kernel file is native code that Triton loads: import only files you would run" in log, log

    # Side B's file under another switch: refused before any cell starts, naming the field and the side.
    result = campaign_dir.runpytest_subprocess("kc.py", "--ab-root", str(campaign_dir.path / "root3"), *ARGS,
                                               "--ab-switch-env", "ABBENCH_TEST_SWITCH=2",
                                               "--ab-kernel-import", str(exported["B"]))
    assert result.ret == 1, result.stdout.str()[-3000:]
    result.stdout.fnmatch_lines([
        f"*cell add[[]r1-A[]] not started: --ab-kernel-import {exported['B']}: refused, its kernels were compiled "
        "under another key than side B's of kc.py in this session; "
        "switch_env.ABBENCH_TEST_SWITCH: file '1', this session '2'; nothing imported*"])
    assert "KERNEL_IMPORT_REFUSED" in (campaign_dir.path / "root3" / "status.tsv").read_text()
    assert not (campaign_dir.path / "root3" / "r1_A" / "add" / "run.log").exists()  # no child started


def test_export_names_what_it_cannot_write(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A root without the record, and one whose side compiled into the root's own cache (``off``)."""
    root = tmp_path / "root"
    cell = root / "r1_A" / "add"
    cell.mkdir(parents=True)
    code, said = export(root, "A", tmp_path / "a.tgz", capsys)
    assert code == 2 and "no cell of side A" in said and "names its kernel cache" in said, said
    own = root / "cache" / "triton_A"
    (own / "abc").mkdir(parents=True)
    (own / "abc" / "k.cubin").write_bytes(b"x")
    (cell / "origin.json").write_text(json.dumps({"schema": 1, "host": "h", "worker": "main", "cell_dir": str(cell),
                                                  "kernel_cache": str(own), "campaign": "kc.py"}))
    code, said = export(root, "A", tmp_path / "a.tgz", capsys)
    assert code == 2 and f"side A compiled into {own}, which has no kernel cache key" in said, said
    assert not (tmp_path / "a.tgz").exists()


KEY = {"schema": 1, "campaign": "kc", "side": "A", "triton": {"version": "0"}, "switch_env": {}, "env": {},
       "campaign_source": "0", "device": "interpreter"}


def kernel_file(path: Path, members: dict[str, bytes], links: dict[str, str] | None = None) -> Path:
    """A gzip'd tar holding ``KEY`` and ``members`` (name -> content), and symbolic links (name -> target)."""
    import io
    import tarfile

    with tarfile.open(path, "w:gz") as tar:
        for name, data in {"abbench-key.json": json.dumps(KEY).encode(), **members}.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        for name, target in (links or {}).items():
            info = tarfile.TarInfo(name)
            info.type, info.linkname = tarfile.SYMTYPE, target
            tar.addfile(info)
    return path


@pytest.mark.parametrize("bad", ["../outside", "/tmp/abs", "link"])
def test_a_kernel_file_member_outside_the_folder_is_refused(campaign_dir: pytest.Pytester, bad: str) -> None:
    campaign_dir.makepyfile(kc=CAMPAIGN)
    members = {"abc/add_kernel.cubin": b"x"}
    links = {}
    if bad == "link":
        links["abc/link"] = "/etc/passwd"
    else:
        members[bad] = b"planted"
    tampered = kernel_file(campaign_dir.path / "tampered.tgz", members, links)
    result = campaign_dir.runpytest_subprocess("kc.py", *ARGS, "--ab-kernel-import", str(tampered))
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str()[-3000:]
    name = "abc/link" if bad == "link" else bad
    why = {"../outside": "a path that climbs out of the folder", "/tmp/abs": "an absolute path", "link": "a link"}[bad]
    result.stderr.fnmatch_lines([f"*--ab-kernel-import: {tampered}: member {name!r} is {why}*: refused*"])
    assert not (campaign_dir.path.parent / "outside").exists()


def test_a_truncated_kernel_file_is_refused_naming_it(campaign_dir: pytest.Pytester) -> None:
    campaign_dir.makepyfile(kc=CAMPAIGN)
    whole = kernel_file(campaign_dir.path / "whole.tgz", {"abc/add_kernel.cubin": os.urandom(50_000)})
    # Cut in a member's data, and cut in gzip's trailer only (its CRC and length: every member still reads).
    for name, size in (("torn.tgz", whole.stat().st_size * 2 // 3), ("no-trailer.tgz", whole.stat().st_size - 6)):
        torn = campaign_dir.path / name
        torn.write_bytes(whole.read_bytes()[:size])
        result = campaign_dir.runpytest_subprocess("kc.py", *ARGS, "--ab-kernel-import", str(torn))
        assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str()[-3000:]
        result.stderr.fnmatch_lines([f"*--ab-kernel-import: {torn}: *truncated*"])
    result = campaign_dir.runpytest_subprocess("kc.py", *ARGS, "--ab-kernel-import", str(whole),
                                               "--ab-kernel-cache", "off")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--ab-kernel-import needs a kernel cache to seed: --ab-kernel-cache is off*"])


def test_unpacking_keeps_the_files_a_cache_holds(tmp_path: Path) -> None:
    """Triton may be reading the folder: a file already there is never replaced, the others arrive whole."""
    from pytest_abbench.core.kernelarchive import read_archive, unpack

    archive = read_archive(kernel_file(tmp_path / "k.tgz", {"abc/add_kernel.cubin": b"new",
                                                             "abc/__grp__add_kernel.json": b"{}",
                                                             "def/add_kernel.cubin": b"other"}))
    folder = tmp_path / "cache"
    (folder / "abc").mkdir(parents=True)
    (folder / "abc" / "add_kernel.cubin").write_bytes(b"old")
    assert unpack(archive, folder) == 2
    assert (folder / "abc" / "add_kernel.cubin").read_bytes() == b"old"
    assert (folder / "def" / "add_kernel.cubin").read_bytes() == b"other"
    assert sorted(p.name for p in folder.rglob("*") if p.name.startswith(".")) == []  # no temporary file left


def test_a_member_over_the_size_limit_is_refused_by_its_header_before_anything_is_read(tmp_path: Path) -> None:
    import gzip
    import io
    import tarfile

    from pytest_abbench.core.kernelarchive import KernelArchiveError, read_archive, unpack

    # 200 MiB of zeros in a file of about 200 KB: a decompression bomb by the member's own header.
    bomb = tmp_path / "bomb.tgz"
    with gzip.open(bomb, "wb", compresslevel=1) as raw, tarfile.open(fileobj=raw, mode="w") as tar:
        key = json.dumps(KEY).encode()
        info = tarfile.TarInfo("abbench-key.json")
        info.size = len(key)
        tar.addfile(info, io.BytesIO(key))
        info = tarfile.TarInfo("abc/zeros.cubin")
        info.size = 200 << 20
        tar.addfile(info, io.BytesIO(bytes(200 << 20)))
    assert bomb.stat().st_size < 1 << 20
    with pytest.raises(KernelArchiveError, match=r"member 'abc/zeros.cubin' is 209715200 bytes, over the 67108864 a "
                                                 r"member may be: refused, nothing unpacked"):
        read_archive(bomb)
    # Unpacking checks the same headers again: nothing lands in the folder.
    from pytest_abbench.core.kernelarchive import KernelArchive

    folder = tmp_path / "cache"
    folder.mkdir()
    with pytest.raises(KernelArchiveError, match="over the 67108864"):
        unpack(KernelArchive(bomb, KEY, 1, 1), folder)
    assert list(folder.iterdir()) == []


def test_kernel_files_that_are_not_regular_files_or_clash_are_named(tmp_path: Path) -> None:
    from pytest_abbench.core.kernelarchive import KernelArchiveError, read_archive

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for path, kind in ((Path("/dev/zero"), "a device"), (fifo, "a FIFO"), (tmp_path, "a folder")):
        with pytest.raises(KernelArchiveError, match=f"^{path}: {kind}, not a kernel file"):
            read_archive(path)  # before: /dev/zero and a FIFO were "no such file" (or a read that never ends)
    clash = kernel_file(tmp_path / "clash.tgz", {"kx": b"file", "kx/inner.bin": b"inside"})
    with pytest.raises(KernelArchiveError, match="member 'kx' is a file and the folder of another member: refused, "
                                                 "nothing unpacked"):
        read_archive(clash)


def test_a_huge_pax_header_is_refused_before_tarfile_reads_it(tmp_path: Path) -> None:
    """tarfile reads a PAX header's payload whole before a caller sees the member: the bound is on each read."""
    import gzip
    import tarfile

    from pytest_abbench.core.kernelarchive import KernelArchiveError, read_archive

    bomb = tmp_path / "pax.tgz"
    size = 200 << 20
    header = tarfile.TarInfo("././@PaxHeader")
    header.type, header.size = tarfile.XHDTYPE, size
    with gzip.open(bomb, "wb", compresslevel=1) as raw:
        raw.write(header.tobuf(format=tarfile.USTAR_FORMAT))
        zeros = bytes(1 << 20)
        for _ in range(size >> 20):
            raw.write(zeros)
    assert bomb.stat().st_size < 1 << 20
    with pytest.raises(KernelArchiveError, match=r"a tar header asks to read \d+ bytes at once, over the \d+ a "
                                                 r"member may be: refused, nothing unpacked"):
        read_archive(bomb)


class _TwoGpuNvml:
    """Stands for pynvml on a host with two different GPUs (this machine has none): index 0 an H100 (9.0),
    index 1, UUID GPU-a100, an A100 (8.0)."""

    GPUS = [("GPU-h100", "NVIDIA H100 80GB HBM3", (9, 0)), ("GPU-a100", "NVIDIA A100-SXM4-80GB", (8, 0))]

    def nvmlInit(self) -> None:
        pass

    def nvmlShutdown(self) -> None:
        pass

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> int:
        return [g[0] for g in self.GPUS].index(uuid)

    def nvmlDeviceGetName(self, handle: int) -> str:
        return self.GPUS[handle][1]

    def nvmlDeviceGetCudaComputeCapability(self, handle: int) -> tuple[int, int]:
        return self.GPUS[handle][2]


def test_a_gpu_named_by_uuid_keys_and_targets_that_gpu_not_gpu_0(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """--ab-gpus GPU-<uuid> on a host with mixed GPUs: the kernel-cache key and the precompile's target are the
    named GPU's (an A100 behind an H100 compiles for cuda:80), never GPU 0's."""
    import sys

    from pytest_abbench.spawn.kernelcache import gpu_device
    from pytest_abbench.spawn.precompile import gpu_target

    monkeypatch.setitem(sys.modules, "pynvml", _TwoGpuNvml())
    # nvidia-smi on the same host, answering by index only: what a query for GPU 0 would read.
    smi = tmp_path / "bin" / "nvidia-smi"
    smi.parent.mkdir()
    smi.write_text("#!/bin/sh\necho 'NVIDIA H100 80GB HBM3, 9.0'\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{smi.parent}{os.pathsep}{os.environ['PATH']}")
    assert gpu_device("GPU-a100") == "NVIDIA A100-SXM4-80GB cuda:80"
    assert gpu_target("GPU-a100") == "cuda:80"
    assert (gpu_device("1"), gpu_target("0")) == ("NVIDIA A100-SXM4-80GB cuda:80", "cuda:90")
