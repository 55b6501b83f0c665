"""Bytecode for a fork server's imports where the packages keep none beside their sources (child/bytecode.py).

The distributions here are real installed ones (a package folder and its ``.dist-info``), written without any
``__pycache__`` as ``pip install --no-compile`` leaves them; each check runs in a Python process of its own with
``PYTHONDONTWRITEBYTECODE=1``, as a container image sets it, since the folder is chosen once per process.
"""

from __future__ import annotations

import compileall
import fcntl
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from helpers import process_alive

from pytest_abbench.spawn.forkserver import ForkServers

# Run in a fresh process: prepare, then import, counting each module Python compiled from its source.
PROBE = textwrap.dedent('''
    import importlib.machinery, json, os, sys
    compiled = []
    original = importlib.machinery.SourceFileLoader.source_to_code
    def counted(self, data, path, *args, **kwargs):
        compiled.append(os.path.basename(os.path.dirname(path)) + "/" + os.path.basename(path))
        return original(self, data, path, *args, **kwargs)
    importlib.machinery.SourceFileLoader.source_to_code = counted
    from pytest_abbench.child import bytecode
    mode = sys.argv[4]
    def die(chunk):
        os._exit(1)
    if mode == "break":  # every pool process dies at its first chunk, as one the OOM killer takes
        bytecode._compile_chunk = die
    done, why = bytecode.start(sys.argv[1].split(","), os.environ, int(sys.argv[3]))
    if mode == "die":  # the server killed while it imports: the pool never shut down
        print(json.dumps(sorted(done.pool._processes)), flush=True)
        os._exit(0)
    line = None if done is None else done.finish()  # the pool first, so that what the imports compile is certain
    compiled.clear()
    for name in sys.argv[2].split(","):
        __import__(name)
    keep = ("distributions", "compiled", "copied", "current", "failed", "processes", "busy", "broken")
    print(json.dumps({"why": why, "prefix": sys.pycache_prefix, "compiled_at_import": sorted(compiled),
                      "done": None if done is None else {k: getattr(done, k) for k in keep}, "line": line}))
''')


def install(site: Path, name: str, modules: dict[str, str], requires: tuple[str, ...] = (),
            compiled: bool = False) -> None:
    """An installed distribution ``name`` with a package of that name holding ``modules`` (name -> source)."""
    package = site / name
    package.mkdir(parents=True)
    for module, text in modules.items():
        (package / f"{module}.py").write_text(text)
    info = site / f"{name}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n"
                                   + "".join(f"Requires-Dist: {r}\n" for r in requires))
    (info / "RECORD").write_text("".join(f"{name}/{module}.py,,\n" for module in modules)
                                 + f"{name}-1.0.dist-info/METADATA,,\n")
    if compiled:
        assert compileall.compile_dir(str(package), quiet=1)


@pytest.fixture
def site(tmp_path: Path) -> Path:
    """apkg (no bytecode) requires deppkg (none either) and, as an extra only, extrapkg; keptpkg keeps its own."""
    site = tmp_path / "site"
    install(site, "apkg", {"__init__": "import deppkg\n", "one": "X = 1\n"},
            requires=("deppkg>=1", 'extrapkg; extra == "more"'))
    install(site, "deppkg", {"__init__": "from deppkg import two\n", "two": "Y = 2\n"})
    install(site, "extrapkg", {"__init__": "", "three": "Z = 3\n"})
    install(site, "keptpkg", {"__init__": "", "four": "W = 4\n"}, compiled=True)
    return site


def probe(site: Path, tmp_path: Path, prepare: str, then: str, cores: int = 8, mode: str = "", **env: str) -> Any:
    environ = {k: v for k, v in os.environ.items() if k not in ("ABBENCH_BYTECODE", "PYTHONPYCACHEPREFIX")}
    environ.update(PYTHONPATH=os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]),
                   PYTHONDONTWRITEBYTECODE="1", XDG_CACHE_HOME=str(tmp_path / "cache"))
    environ.update(env)
    out = subprocess.run([sys.executable, "-c", PROBE, prepare, then, str(cores), mode], env=environ,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def caches_in(site: Path) -> list[str]:
    return sorted(str(p.relative_to(site)) for p in site.rglob("__pycache__") if "keptpkg" not in str(p))


def test_sources_without_bytecode_are_compiled_once_into_the_users_cache_and_imported_from_there(
        site: Path, tmp_path: Path) -> None:
    first = probe(site, tmp_path, "apkg", "apkg.one,extrapkg.three")
    folder = tmp_path / "cache" / "pytest-abbench" / "bytecode"
    assert first["why"] == "apkg keeps no bytecode beside its sources" and first["prefix"] == str(folder)
    assert first["done"]["distributions"] == ["apkg", "deppkg"]  # the extra's requirement is not followed
    assert (first["done"]["compiled"], first["done"]["copied"], first["done"]["current"]) == (4, 0, 0)
    # Every module of the two was read from the folder; extrapkg, outside them, compiled at its import.
    assert first["compiled_at_import"] == ["extrapkg/__init__.py", "extrapkg/three.py"]
    assert first["line"].startswith(f"[abbench] fork server: bytecode read from {folder} (apkg keeps no bytecode "
                                     "beside its sources): 0 sources of apkg, deppkg already there, 4 compiled and "
                                     "0 copied there by 4 processes beside the imports in "), first["line"]
    assert caches_in(site) == []  # the packages' own folders are not written, whatever Python was told
    second = probe(site, tmp_path, "apkg", "apkg.one,extrapkg.three")
    assert (second["done"]["compiled"], second["done"]["current"]) == (0, 4)
    assert second["compiled_at_import"] == []  # what the first import compiled was written to the folder too


def test_on_few_cores_nothing_is_compiled_ahead_and_the_imports_fill_the_folder(site: Path, tmp_path: Path) -> None:
    first = probe(site, tmp_path, "apkg", "apkg.one", cores=7)
    assert first["line"].endswith("the imports compile there what it lacks (no compiling ahead on fewer than 8 "
                                  "cores)"), first["line"]
    assert first["compiled_at_import"] == ["apkg/__init__.py", "apkg/one.py", "deppkg/__init__.py", "deppkg/two.py"]
    assert probe(site, tmp_path, "apkg", "apkg.one", cores=7)["compiled_at_import"] == []
    assert caches_in(site) == []


def test_while_one_servers_processes_compile_another_server_only_imports(site: Path, tmp_path: Path) -> None:
    """The test holds the lock as the other side's server, started at the same moment, would."""
    folder = tmp_path / "cache" / "pytest-abbench" / "bytecode"
    folder.mkdir(parents=True)
    with open(folder / ".abbench-compile.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        second = probe(site, tmp_path, "apkg", "apkg.one")
    assert second["line"].endswith("another server's processes are compiling there; the imports read what they "
                                   "wrote"), second["line"]
    assert second["done"]["busy"] and second["done"]["compiled"] == 0 and second["prefix"] == str(folder)


def test_packages_that_keep_their_bytecode_are_left_as_python_finds_them(site: Path, tmp_path: Path) -> None:
    kept = probe(site, tmp_path, "keptpkg", "keptpkg.four,apkg.one")
    assert kept["why"] == "keptpkg keeps its bytecode beside its sources"
    assert kept["prefix"] is None and kept["done"] is None
    assert not (tmp_path / "cache").exists()


def test_the_variable_turns_it_off_or_names_the_folder_which_then_gets_a_copy_of_bytecode_kept_beside(
        site: Path, tmp_path: Path) -> None:
    off = probe(site, tmp_path, "apkg", "apkg.one", ABBENCH_BYTECODE="off")
    assert (off["why"], off["prefix"]) == ("ABBENCH_BYTECODE=off", None)
    relative = probe(site, tmp_path, "apkg", "apkg.one", ABBENCH_BYTECODE="bytecode")
    assert relative["why"] == "ABBENCH_BYTECODE='bytecode' is neither 'off' nor an absolute folder"
    assert relative["prefix"] is None
    folder = tmp_path / "mine"
    chosen = probe(site, tmp_path, "keptpkg", "keptpkg.four", ABBENCH_BYTECODE=str(folder))
    assert chosen["prefix"] == str(folder) and chosen["why"] == "ABBENCH_BYTECODE"
    assert (chosen["done"]["compiled"], chosen["done"]["copied"], chosen["done"]["processes"]) == (0, 2, 2)
    assert chosen["compiled_at_import"] == []  # read from the copies: the folder hides the package's own


def test_a_users_own_prefix_is_left_as_it_is(site: Path, tmp_path: Path) -> None:
    theirs = probe(site, tmp_path, "apkg", "apkg.one", PYTHONPYCACHEPREFIX=str(tmp_path / "theirs"))
    assert theirs["why"] == (f"Python already reads bytecode from {tmp_path / 'theirs'} (PYTHONPYCACHEPREFIX)")
    assert theirs["prefix"] == str(tmp_path / "theirs") and theirs["done"] is None


def test_a_fork_server_prepares_before_its_imports_and_its_cells_read_from_the_same_folder(
        site: Path, tmp_path: Path) -> None:
    """torch here keeps its bytecode beside its sources (a venv pip compiled), so the folder is named: the server
    copies torch's and its requirements' bytecode there and compiles apkg's (8 processes: ahead, whatever this
    machine's cores); a cell forked from it reads there."""
    seen = tmp_path / "seen"
    (site / "probe_prefix.py").write_text(
        "import sys\n\ndef main(argv):\n"
        f"    open({str(seen)!r}, 'w').write(f'{{sys.pycache_prefix}} {{sys.dont_write_bytecode}}')\n    return 0\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPYCACHEPREFIX"}
    env.update(PYTHONPATH=os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]), PYTHONDONTWRITEBYTECODE="1",
               ABBENCH_BYTECODE=str(tmp_path / "bytecode"), ABBENCH_COMPILE_JOBS="8")
    servers = ForkServers(tmp_path / "servers")
    try:
        server = servers.server(sys.executable, env, "side-A", ("apkg",))
        assert server.imports == ("apkg",) and servers.said == []
        assert server.spawn(["probe_prefix"], env, tmp_path / "run.log").wait(timeout=60) == 0, \
            (tmp_path / "run.log").read_text()
        # Reads there; writes as its interpreter was told (PYTHONDONTWRITEBYTECODE): the folder is the server's.
        assert seen.read_text() == f"{tmp_path / 'bytecode'} True"
        log = (tmp_path / "servers" / "side-A-1.log").read_text()
        assert f"bytecode read from {tmp_path / 'bytecode'} (ABBENCH_BYTECODE): " in log, log
        assert " already there, 4 compiled and " in log, log  # apkg's and deppkg's; torch's and the rest copied
        assert (tmp_path / "bytecode" / str(site).lstrip("/") / "apkg" / f"one.{sys.implementation.cache_tag}.pyc"
                ).is_file()
        assert caches_in(site) == []
    finally:
        servers.close()


def test_a_pool_that_breaks_or_a_folder_that_cannot_be_made_costs_only_the_head_start(
        site: Path, tmp_path: Path) -> None:
    broken = probe(site, tmp_path, "apkg", "apkg.one", mode="break")
    assert broken["done"]["broken"].startswith("BrokenProcessPool"), broken
    assert "; compiling ahead failed (BrokenProcessPool" in broken["line"], broken["line"]
    assert broken["compiled_at_import"] == ["apkg/__init__.py", "apkg/one.py", "deppkg/__init__.py",
                                            "deppkg/two.py"]  # the imports did it, into the folder
    (tmp_path / "not-a-folder").write_text("")
    unmade = probe(site, tmp_path, "apkg", "apkg.one", XDG_CACHE_HOME=str(tmp_path / "not-a-folder"))
    assert unmade["why"].startswith("no bytecode folder: [Errno 20] Not a directory: "), unmade["why"]
    assert unmade["prefix"] is None and unmade["done"] is None


def test_the_pools_processes_end_with_a_server_killed_while_it_imports(site: Path, tmp_path: Path) -> None:
    """Killed before it could shut its pool down (pytest gone, a module that crashes the import), the server
    leaves no process behind: each dies with it (a parent-death signal)."""
    pids = probe(site, tmp_path, "apkg", "apkg.one", mode="die")
    assert len(pids) == 4  # one per source
    deadline = time.monotonic() + 20
    while any(process_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(process_alive(pid) for pid in pids), pids

