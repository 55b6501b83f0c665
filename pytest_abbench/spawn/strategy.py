"""How a cell's process is started, chosen once per session: forked from its side's server, or a fresh interpreter.

The runner holds ``servers``: the session's ``ForkServers`` under ``--ab-spawn fork``, None under exec.
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import Callable

from pytest_abbench.core.cellconfig import CellConfig
from pytest_abbench.spawn import precompile
from pytest_abbench.spawn.cellrun import ChildResult, run_child
from pytest_abbench.spawn.forkserver import ForkServerError, ForkServers

# Servers a session starts ahead of their first cell: side A and three switches' side B.  Each idle server
# holds torch and Triton imported (about 280 MB resident with a CPU torch), so the count stays bounded when a
# session collects many campaigns of different switches.
PRESTART_SERVERS = 4
EXIT_NO_SERVER = 3  # the cell could not be started: its side's fork server failed (the cell's setup-error code)

Check = Callable[[], None] | None
EnvFor = Callable[[Path], dict[str, str]]  # a side's cell environment for an output folder
Imports = tuple[str, ...]  # a campaign's SERVER_IMPORTS


def run_cell(servers: ForkServers | None, argv: list[str], env: dict[str, str], label: str, imports: Imports,
             log_path: Path, timeout_s: float, check: Check, warm_others: Callable[[], None]) -> ChildResult:
    """Run one cell (``argv`` is the whole command; ``label`` names its side's server, ``imports`` what that
    server imports ahead) to its end or ``timeout_s``; ``warm_others`` starts the servers other cells will need,
    once this cell's own is on its way."""
    if servers is None:
        return run_child(argv, env, log_path, timeout_s, check)
    started = time.monotonic()
    python = argv[0]
    try:
        servers.start(python, env, label, imports)
        warm_others()
        server = servers.server(python, env, label, imports)
    except ForkServerError as exc:
        with open(log_path, "a", encoding="utf-8") as log:
            log.write(f"[abbench] {exc}\n[abbench] --ab-spawn exec starts each cell in a fresh interpreter\n")
        return ChildResult(rc=EXIT_NO_SERVER, elapsed_s=time.monotonic() - started)
    for notice in servers.notices:
        with open(log_path, "a", encoding="utf-8") as log:
            log.write(f"[abbench] {notice}\n")
    servers.notices.clear()
    waited = time.monotonic() - started  # a server started for this cell: its imports are this cell's start-up
    child = run_child(argv[2:], env, log_path, timeout_s, check, server)  # what follows "python -m"
    return ChildResult(child.rc, child.elapsed_s + waited)


def room(servers: ForkServers | None) -> int:
    """How many more servers may be started ahead of their first cell."""
    return 0 if servers is None else max(0, PRESTART_SERVERS - len(servers.servers))


def precompile_jobs(servers: ForkServers | None, side: str, compile_all: CellConfig, python: str, env_for: EnvFor,
                    folder: Path, shares: int, imports: Imports) -> list[precompile.Job]:
    """A side's compile-only jobs for ``shares`` shares of its shapes, writing under ``folder``."""
    if servers is None:  # a fresh interpreter per share
        return [precompile.exec_job(f"{side}-{i + 1}of{shares}", python,
                                    replace(compile_all, out=folder / f"{side}-{i + 1}of{shares}",
                                            shard=f"{i}/{shares}"), env_for)
                for i in range(shares)]
    # Forked from the side's server, which forks the shares: no share pays for imports.
    out = folder / side
    env = precompile.env_for(env_for(out))
    server = servers.server(python, env, f"side-{side}", imports)
    return [precompile.Job(side, replace(compile_all, out=out, shares=shares).module_argv(), env,
                           out / "compile.log", server, processes=shares)]
