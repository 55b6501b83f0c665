"""``python -m pytest_abbench.child``: the command the plugin runs for each cell."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from typing import Sequence

from pytest_abbench.cellconfig import CellConfig
from pytest_abbench.child.measure import measure, run_ir_only


def guard_group(poll_s: float = 0.5) -> None:
    """Take this cell's whole process group down when the pytest that started it dies.

    The parent set a parent-death SIGTERM; its handler (and, for a parent that
    dies while this process sits in a long C call, a watchdog thread that sees
    the parent pid change) SIGKILLs the group, grandchildren included.
    """
    parent = os.getppid()

    def kill_group(*_: object) -> None:
        os.killpg(os.getpgid(0), signal.SIGKILL)

    signal.signal(signal.SIGTERM, kill_group)

    def watch() -> None:
        while True:
            time.sleep(poll_s)
            if os.getppid() != parent:
                kill_group()

    threading.Thread(target=watch, name="abbench-parent-watch", daemon=True).start()


def main(argv: Sequence[str] | None = None) -> int:
    config = CellConfig.from_argv(sys.argv[1:] if argv is None else argv)
    if os.getpgid(0) == os.getpid():  # started by the plugin as its group's leader (not in-process)
        guard_group()
    return run_ir_only(config.compile_only()) if config.ir_only else measure(config)


if __name__ == "__main__":
    sys.exit(main())
