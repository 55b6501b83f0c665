"""Hooks that exist only when pytest-xdist is loaded: op-scoped scheduling and the controller's root."""

from __future__ import annotations

import re
from typing import Any

import pytest

from pytest_abbench.session import AbbenchSession

# A cell test's node id ends in its cell id (``topk[r3-B]``), with xdist's ``@group`` suffix under loadgroup.
CELL_NODEID = re.compile(r"\[r\d+-[AB]\d?\](@\S+)?$")


def op_scope(nodeid: str) -> str:
    """The xdist scheduling scope of a test: ``campaign::op`` for a cell, the node id for anything else."""
    match = CELL_NODEID.search(nodeid)
    return nodeid[: match.start()] if match else nodeid


class XdistHooks:
    """Registered by the plugin only when xdist is active."""

    def __init__(self, session: AbbenchSession) -> None:
        self.session = session

    def pytest_configure_node(self, node: Any) -> None:
        # Workers write into the controller's root; they never choose their own.
        node.workerinput["abbench_root"] = str(self.session.root.path)

    def pytest_xdist_make_scheduler(self, config: pytest.Config, log: Any) -> Any:
        """Every cell of an op on one worker, in collection order, whatever ``--dist`` load mode was asked for.

        The sides of an op must be timed on one GPU and round 1 side A must
        record before anything replays it.  xdist's own ``loadgroup`` relies on
        rewriting node ids, which pytest 9.2 no longer allows, so the grouping
        is done here, by scope: a cell's scope is its op; any other test is its own.
        """
        if config.getvalue("dist") in ("no", "each"):
            return None
        from xdist.scheduler import LoadScopeScheduling

        class CellsByOp(LoadScopeScheduling):  # type: ignore[misc]  # xdist ships no type information
            def _split_scope(self, nodeid: str) -> str:
                return op_scope(nodeid)

        return CellsByOp(config, log)

    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        cells = [nodeid for nodeid in ids if CELL_NODEID.search(nodeid)]
        if cells:
            rootpath = node.config.rootpath
            files = list(dict.fromkeys(rootpath / nodeid.split("::")[0] for nodeid in cells))
            self.session.root.claim(files, self.session.settings.switch_env, self.session.plan)
