"""The version a cell's identity names for a SERVER_IMPORTS module without ``__version__``.

Real distributions installed into a temporary folder on ``sys.path`` (a ``.dist-info`` folder beside the package,
as pip leaves them): the one named after the package is read directly; the scan of every installed distribution
is left for a package whose distribution has another name.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Iterator

import pytest

from pytest_abbench.child import preload


def _install(site: Path, dist: str, version: str, package: str, top_level: str | None = "same") -> None:
    """``package`` (no ``__version__``) and distribution ``dist`` ``version``; ``top_level`` None leaves out
    ``top_level.txt`` (the distribution's RECORD then says what it installs)."""
    (site / package).mkdir()
    (site / package / "__init__.py").write_text("")
    info = site / f"{dist.replace('-', '_')}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
    if top_level is not None:
        (info / "top_level.txt").write_text(f"{package if top_level == 'same' else top_level}\n")
    (info / "RECORD").write_text(f"{package}/__init__.py,,\n{info.name}/METADATA,,\n")


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.syspath_prepend(str(tmp_path))
    preload._distributions.cache_clear()
    yield tmp_path
    preload._distributions.cache_clear()
    for name in [m for m in sys.modules if m.startswith("abbench_probe")]:
        del sys.modules[name]


def test_a_package_named_like_its_distribution_is_read_without_scanning_them_all(site: Path) -> None:
    _install(site, "abbench-probe-kernel", "0.8.2", "abbench_probe_kernel")  # as liger-kernel's liger_kernel
    _install(site, "abbench_probe_record", "1.0", "abbench_probe_record", top_level=None)  # no top_level.txt
    __import__("abbench_probe_kernel")
    __import__("abbench_probe_record")
    assert preload.version_of("abbench_probe_kernel.ops") == "0.8.2"
    assert preload.version_of("abbench_probe_record") == "1.0"
    assert preload._distributions.cache_info().currsize == 0, "every installed distribution was scanned"


def test_a_distribution_named_after_a_package_it_does_not_install_is_not_believed(site: Path) -> None:
    # "abbench-probe-shadow" takes the package's name but installs another; the package comes from another
    # distribution: only the scan finds that one.
    _install(site, "abbench-probe-real", "2.0", "abbench_probe_shadow")
    _install(site, "abbench-probe-shadow", "9.9", "abbench_probe_other")
    __import__("abbench_probe_shadow")
    assert preload.version_of("abbench_probe_shadow") == "2.0"
    assert preload._distributions.cache_info().currsize == 1  # found by the scan
