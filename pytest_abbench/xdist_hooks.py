"""Hooks that exist only when pytest-xdist is loaded: op-scoped scheduling, most expensive op first,
and the controller's root."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Iterable, Mapping

import pytest

from pytest_abbench.balance import op_costs, op_work, order_ops
from pytest_abbench.campaign import CampaignError, CampaignSkipped, looks_like_campaign
from pytest_abbench.layout import CellKey
from pytest_abbench.session import AbbenchSession

# A cell test's node id ends in its cell id (``topk[r3-B]``), with xdist's ``@group`` suffix under loadgroup.
CELL_NODEID = re.compile(r"\[r(\d+)-([AB]\d?)\](@\S+)?$")


def op_scope(nodeid: str) -> str:
    """The xdist scheduling scope of a test: ``campaign::op`` for a cell, the node id for anything else."""
    match = CELL_NODEID.search(nodeid)
    return nodeid[: match.start()] if match else nodeid


def cell_key(nodeid: str) -> CellKey | None:
    """The cell a test runs, read from its node id (the controller collects nothing): its op is the test's name."""
    match = CELL_NODEID.search(nodeid)
    if match is None:
        return None
    return CellKey(int(match.group(1)), nodeid[: match.start()].rsplit("::", 1)[-1], match.group(2))


class XdistHooks:
    """Registered by the plugin only when xdist is active."""

    def __init__(self, session: AbbenchSession) -> None:
        self.session = session

    def pytest_configure_node(self, node: Any) -> None:
        # Workers write into the controller's root; they never choose their own.
        node.workerinput["abbench_root"] = str(self.session.root.path)

    # -- scheduling --------------------------------------------------------------
    def pytest_xdist_make_scheduler(self, config: pytest.Config, log: Any) -> Any:
        """Every cell of an op on one worker, in collection order, whatever ``--dist`` load mode was asked for.

        The sides of an op must be timed on one GPU and round 1 side A must
        record before anything replays it.  xdist's own ``loadgroup`` relies on
        rewriting node ids, which pytest 9.2 no longer allows, so the grouping
        is done here, by scope: a cell's scope is its op; any other test is its own.
        The most expensive op is handed out first (``balance.py``).
        """
        if config.getvalue("dist") in ("no", "each"):
            return None
        from xdist.scheduler import LoadScopeScheduling

        hooks = self

        class CellsByOp(LoadScopeScheduling):  # type: ignore[misc]  # xdist ships no type information
            costs: dict[str, float] | None = None

            def _split_scope(self, nodeid: str) -> str:
                return op_scope(nodeid)

            def _assign_work_unit(self, node: Any) -> None:
                # schedule() fills the queue in collection order and then assigns from its front; a
                # crashed worker's ops go back at its end.  Either way the costliest op goes next.
                if self.costs is None:
                    self.costs = hooks.scope_costs(self.workqueue)
                for scope in order_ops(list(self.workqueue), self.costs):
                    self.workqueue.move_to_end(scope)
                super()._assign_work_unit(node)

        return CellsByOp(config, log)

    def scope_costs(self, units: Mapping[str, Iterable[str]]) -> dict[str, float]:
        """The cost of each op scope among xdist's work units (node ids by scope); other tests get none."""
        session = self.session
        work = []
        for scope, nodeids in units.items():
            keys = [key for nodeid in nodeids if (key := cell_key(nodeid)) is not None]
            if keys:
                path = session.config.rootpath / scope.split("::")[0]
                work.append(op_work(scope, keys, self.shape_count(path, keys[0].op), session.root.finished))
        return op_costs(work)

    def shape_count(self, path: Path, op: str) -> int | None:
        """The op's shapes at the session's level; None when its file is not a campaign declaring it."""
        if not looks_like_campaign(path):
            return None  # a hand-written @pytest.mark.abbench test: its scope does not name the op
        try:
            return len(self.session.campaign(path).op(op).shapes_for(self.session.settings.level))
        except (CampaignError, CampaignSkipped):
            return None

    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        cells = [nodeid for nodeid in ids if CELL_NODEID.search(nodeid)]
        if cells:
            rootpath = node.config.rootpath
            files = list(dict.fromkeys(rootpath / nodeid.split("::")[0] for nodeid in cells))
            self.session.root.claim(files, self.session.settings.switch_env, self.session.plan)
