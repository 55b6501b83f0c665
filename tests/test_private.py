"""Folders and files others can write are never used: a bytecode folder, the workers' scratch base, a GPU lock file.

Each case is the attack as it was seen: a folder of mode 0777 (another user's where the tests run as root: it is
handed to uid 65534), and a symbolic link planted where a lock file goes.  Real calls of the code that uses them.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import pytest

from pytest_abbench.child import bytecode
from pytest_abbench.core.private import NotPrivate, open_no_follow, private_folder
from pytest_abbench.session.gpuclaim import claim_gpu
from pytest_abbench.session.transport import scratch_root

NOBODY = 65534


def foreign_folder(path: Path) -> Path:
    """A folder anyone can write, owned by another user where this process may give it away."""
    path.mkdir(parents=True)
    os.chmod(path, 0o777)
    if os.geteuid() == 0:
        os.chown(path, NOBODY, NOBODY)
    return path


def test_a_foreign_bytecode_folder_gets_nothing_written(tmp_path: Path) -> None:
    planted = foreign_folder(tmp_path / "shared-bytecode")
    before = sys.pycache_prefix
    try:
        prepared, why = bytecode.start(["json"], {"ABBENCH_BYTECODE": str(planted)}, cores=1)
        assert prepared is None and sys.pycache_prefix == before
    finally:
        sys.pycache_prefix = before
    owner = "owned by uid 65534, not by this user" if os.geteuid() == 0 else "writable by other users (mode 0777)"
    assert why.startswith(f"no bytecode folder: {planted}: {owner}") and why.endswith("refused"), why
    assert list(planted.iterdir()) == []


def test_a_foreign_scratch_base_gets_no_worker_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    scratch = f"abbench-scratch-{os.getuid()}"

    def in_temp_folder(folder: Path) -> tuple[Path, str | None]:
        """The worker's root with ``folder`` as the temporary folder (TMPDIR)."""
        folder.mkdir(exist_ok=True)
        monkeypatch.setattr(tempfile, "tempdir", str(folder))
        return scratch_root("gw0")

    planted = foreign_folder(tmp_path / "base" / scratch)
    root, note = in_temp_folder(tmp_path / "base")
    assert not root.is_relative_to(planted) and note is not None
    assert note.startswith(f"abbench: worker scratch {planted}: ") and "refused; this worker's root is in" in note
    assert os.stat(root.parent).st_mode & 0o077 == 0  # the fallback is private
    # A link planted at the base is refused as well, not followed.
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / scratch).symlink_to(tmp_path)
    _, note = in_temp_folder(tmp_path / "other")
    assert note is not None and "a symbolic link: refused" in note
    # A base of this user's own, made fresh, is used.
    root, note = in_temp_folder(tmp_path / "mine")
    assert note is None and root.parent == tmp_path / "mine" / scratch


def test_a_planted_link_at_a_gpu_lock_is_not_followed(tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    (tmp_path / "abbench-gpu-0.lock").symlink_to(victim)
    claim = claim_gpu(["0"], "pid 1 (main on this host)", lock_dir=tmp_path)
    assert claim.gpu is None and claim.problem is not None and "a symbolic link: refused" in claim.problem
    assert victim.read_text() == "precious"
    fresh = claim_gpu(["1"], "pid 1 (main on this host)", lock_dir=tmp_path)
    assert fresh.gpu == "1"
    fresh.release()


def test_the_checks_name_what_they_refuse(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(NotPrivate, match="file: not a folder: refused"):
        private_folder(tmp_path / "file")
    with pytest.raises(NotPrivate, match="not a regular file: refused"):
        open_no_follow(tmp_path, os.O_RDONLY)
    assert private_folder(tmp_path / "new" / "deep") == tmp_path / "new" / "deep"
    assert os.stat(tmp_path / "new" / "deep").st_mode & 0o777 == 0o700 & ~_umask()


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_a_foreign_kernel_cache_folder_is_not_used(tmp_path: Path) -> None:
    from pytest_abbench.core.layout import RootLayout
    from pytest_abbench.spawn.kernelcache import KernelCaches

    planted = foreign_folder(tmp_path / "team-cache")
    caches = KernelCaches(str(planted), RootLayout(tmp_path / "root"), "interpreter", None)
    assert caches.base is None and caches.notices and f"kernel cache: {planted}: " in caches.notices[0]
    assert caches.folder(tmp_path / "c.py", "0", "A", sys.executable, {}, {}) == tmp_path / "root" / "cache" / "triton_A"
    assert list(planted.iterdir()) == []


def test_a_fifo_planted_at_a_gpu_lock_is_refused_without_waiting(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "abbench-gpu-0.lock", 0o644)
    if os.geteuid() == 0:
        os.chown(tmp_path / "abbench-gpu-0.lock", NOBODY, NOBODY)
    claim = claim_gpu(["0"], "pid 1 (main on this host)", lock_dir=tmp_path)  # before: an open that never returned
    assert claim.gpu is None and claim.problem is not None and "not a regular file: refused" in claim.problem
