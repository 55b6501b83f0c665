"""The xdist scheduler: every cell of an op on one worker, in collection order, the costliest op first.

Made by ``xdist_hooks.XdistHooks.pytest_xdist_make_scheduler`` (xdist's
documented hook); imported only there, so xdist's scheduler module is loaded
only when xdist schedules.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping

import pytest
from xdist.scheduler import LoadScopeScheduling

from pytest_abbench.core.layout import CELL_NODEID
from pytest_abbench.session.balance import order_ops


def op_scope(nodeid: str) -> str:
    """The xdist scheduling scope of a test: ``campaign::op`` for a cell, the node id for anything else."""
    match = CELL_NODEID.search(nodeid)
    return nodeid[: match.start()] if match else nodeid


class CellsByOp(LoadScopeScheduling):  # type: ignore[misc]  # xdist ships no type information
    """xdist's load-scope scheduling with an op as the scope and the costliest op handed out next.

    The sides of an op must be timed on one GPU and round 1 side A must record
    before anything replays it.  xdist's own ``loadgroup`` relies on rewriting
    node ids, which pytest 9.2 no longer allows, so the grouping is done here,
    by scope: a cell's scope is its op; any other test is its own.
    """

    def __init__(self, config: pytest.Config, log: Any, *,
                 costs_of: Callable[[Mapping[str, Iterable[str]]], dict[str, float]],
                 lost_op: Callable[[Any], list[str]],
                 fail_lost: Callable[[Any, list[str]], None]) -> None:
        super().__init__(config, log)
        self.costs_of = costs_of  # scope -> cost, for the work units (node ids by scope)
        self.lost_op = lost_op  # a dead worker's workload -> the cells of the op it was running (taken out)
        self.fail_lost = fail_lost  # reports those cells failed, naming the dead worker
        self.costs: dict[str, float] | None = None

    def _split_scope(self, nodeid: str) -> str:
        return op_scope(nodeid)

    def _assign_work_unit(self, node: Any) -> None:
        # schedule() fills the queue in collection order and then assigns from its front; a
        # crashed worker's ops go back at its end.  Either way the costliest op goes next.
        if self.costs is None:
            self.costs = self.costs_of(self.workqueue)
        if self.costs:  # a session without cells keeps xdist's order, untouched
            for scope in order_ops(list(self.workqueue), self.costs):
                self.workqueue.move_to_end(scope)
        super()._assign_work_unit(node)

    def remove_node(self, node: Any) -> str | None:
        # A worker that died mid-op took the op's round-1 records (its scratch root) with it: the op's
        # remaining cells fail here, each with the reason, instead of replaying nothing on another
        # worker.  Ops it had not started go back to the queue.
        lost = self.lost_op(self.assigned_work.get(node))
        crashitem: str | None = super().remove_node(node)
        if lost:
            self.fail_lost(node, lost)
            return None  # each lost cell has its report; xdist's "crashed while running" would be a second
        return crashitem
