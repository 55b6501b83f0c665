"""How a cell's process is started, chosen once per session: forked from its side's server, or a fresh interpreter.

``CellRunner`` asks its ``CellSpawn`` to run a cell, to warm a side's server
ahead of use, and to make a precompile's jobs; it never asks which one it has.
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import Callable, Protocol

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


class CellSpawn(Protocol):
    """Starts cell processes for one session (``--ab-spawn``)."""

    def run(self, argv: list[str], env: dict[str, str], label: str, imports: Imports, log_path: Path,
            timeout_s: float, check: Check, warm_others: Callable[[], None]) -> ChildResult:
        """Run one cell (``argv`` is the whole command; ``label`` names its side's server, ``imports`` what that
        server imports ahead) to its end or ``timeout_s``; ``warm_others`` starts the servers other cells will
        need, once this cell's own is on its way."""

    def warm(self, python: str, env: dict[str, str], label: str, imports: Imports) -> None:
        """Start the server for ``python``, ``env`` and ``imports`` in the background, if this spawn keeps servers."""

    def room(self) -> int:
        """How many more servers may be started ahead of their first cell."""

    def precompile_jobs(self, side: str, compile_all: CellConfig, python: str, env_for: EnvFor, folder: Path,
                        shares: int, imports: Imports) -> list[precompile.Job]:
        """A side's compile-only jobs for ``shares`` shares of its shapes, writing under ``folder``."""

    def retire(self, python: str, env: dict[str, str], label: str, imports: Imports) -> None:
        """End the server for ``python``, ``env`` and ``imports`` (no cell needs it any more), if this spawn
        keeps servers."""

    def held_imports(self, python: str, env: dict[str, str], label: str, imports: Imports) -> tuple[str, ...]:
        """The SERVER_IMPORTS the server for ``python``, ``env`` and ``imports`` holds: those none of this side's
        servers refused (two campaigns whose lists differ only by a refused module share one server)."""

    def said(self) -> list[str]:
        """Lines for the terminal since the last call (a server that refused a SERVER_IMPORTS module)."""

    def close(self) -> None:
        """End whatever this spawn keeps running."""


class ExecSpawn:
    """``--ab-spawn exec``: every cell, and every precompile share, is a fresh interpreter."""

    def run(self, argv: list[str], env: dict[str, str], label: str, imports: Imports, log_path: Path,
            timeout_s: float, check: Check, warm_others: Callable[[], None]) -> ChildResult:
        return run_child(argv, env, log_path, timeout_s, check)

    def warm(self, python: str, env: dict[str, str], label: str, imports: Imports) -> None:
        return None

    def room(self) -> int:
        return 0

    def precompile_jobs(self, side: str, compile_all: CellConfig, python: str, env_for: EnvFor, folder: Path,
                        shares: int, imports: Imports) -> list[precompile.Job]:
        jobs = []
        for i in range(shares):
            out = folder / f"{side}-{i + 1}of{shares}"
            share = replace(compile_all, out=out, shard=f"{i}/{shares}")
            jobs.append(precompile.Job(out.name, [python, "-m", *share.module_argv()],
                                       precompile.env_for(env_for(out)), out / "compile.log"))
        return jobs

    def retire(self, python: str, env: dict[str, str], label: str, imports: Imports) -> None:
        return None

    def held_imports(self, python: str, env: dict[str, str], label: str, imports: Imports) -> tuple[str, ...]:
        return tuple(imports)

    def said(self) -> list[str]:
        return []

    def close(self) -> None:
        return None


class ForkSpawn:
    """``--ab-spawn fork``: cells are forked from a per-side server that imported torch and Triton once."""

    def __init__(self, servers_dir: Path) -> None:
        self.servers = ForkServers(servers_dir)

    def run(self, argv: list[str], env: dict[str, str], label: str, imports: Imports, log_path: Path,
            timeout_s: float, check: Check, warm_others: Callable[[], None]) -> ChildResult:
        started = time.monotonic()
        python = argv[0]
        try:
            self.servers.start(python, env, label, imports)
            warm_others()
            server = self.servers.server(python, env, label, imports)
        except ForkServerError as exc:
            with open(log_path, "a", encoding="utf-8") as log:
                log.write(f"[abbench] {exc}\n[abbench] --ab-spawn exec starts each cell in a fresh interpreter\n")
            return ChildResult(rc=EXIT_NO_SERVER, elapsed_s=time.monotonic() - started)
        for notice in self.servers.notices:
            with open(log_path, "a", encoding="utf-8") as log:
                log.write(f"[abbench] {notice}\n")
        self.servers.notices.clear()
        waited = time.monotonic() - started  # a server started for this cell: its imports are this cell's start-up
        child = run_child(argv[2:], env, log_path, timeout_s, check, server)  # what follows "python -m"
        return ChildResult(child.rc, child.elapsed_s + waited)

    def warm(self, python: str, env: dict[str, str], label: str, imports: Imports) -> None:
        self.servers.start(python, env, label, imports)

    def room(self) -> int:
        return max(0, PRESTART_SERVERS - len(self.servers.servers))

    def precompile_jobs(self, side: str, compile_all: CellConfig, python: str, env_for: EnvFor, folder: Path,
                        shares: int, imports: Imports) -> list[precompile.Job]:
        # Forked from the side's server, which forks the shares: no share pays for imports.
        out = folder / side
        env = precompile.env_for(env_for(out))
        server = self.servers.server(python, env, f"side-{side}", imports)
        return [precompile.Job(side, replace(compile_all, out=out, shares=shares).module_argv(), env,
                               out / "compile.log", server, processes=shares)]

    def retire(self, python: str, env: dict[str, str], label: str, imports: Imports) -> None:
        self.servers.retire(python, env, label, imports)

    def held_imports(self, python: str, env: dict[str, str], label: str, imports: Imports) -> tuple[str, ...]:
        return self.servers.kept_imports(python, env, label, imports)

    def said(self) -> list[str]:
        said, self.servers.said = self.servers.said, []
        return said

    def close(self) -> None:
        self.servers.close()
