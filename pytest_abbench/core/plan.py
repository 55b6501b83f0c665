"""CampaignPlan: which cells a session set out to run, kept beside what ran.

The report judges an op against its plan, never against the cells that
happened to finish: a campaign stopped after round 3 of 6 (Ctrl-C, ``-x``,
``--maxfail``, a crash) must not print a verdict that reads like a complete
one.  The plan is written into ``campaign.json`` so ``abbench summary`` sees
the same plan offline.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pytest_abbench.core.fileio import read_json
from pytest_abbench.core.layout import CONTROL, SIDES, CellKey, RootLayout

PLAN_FIELD = "plan"  # the plan's key in campaign.json


def side_order(round_no: int, control: bool = False) -> tuple[str, ...]:
    """r1: A then B, r2: B then A, ...: alternation cancels one-directional drift.

    The control cell runs last in its round, after both sides, so the A/A
    pair is as far apart in time as the A/B pair can be.
    """
    order = SIDES if round_no % 2 == 1 else SIDES[::-1]
    return (*order, CONTROL) if control else order


@dataclass
class CampaignPlan:
    """Rounds and roles of every op; ``ops`` maps an op to the file that declares it (empty when unknown)."""

    rounds: int
    control: bool = False
    ir_only: bool = False
    ops: dict[str, str] = field(default_factory=dict)

    def roles(self, round_no: int) -> tuple[str, ...]:
        return side_order(round_no, self.control)

    def cells(self, op: str) -> list[CellKey]:
        """Every cell of ``op`` in the order it runs."""
        return [CellKey(r, op, role) for r in range(1, self.rounds + 1) for role in self.roles(r)]

    def sort_key(self, key: CellKey) -> tuple[int, int]:
        """(round, position of the role in its round): round-major, sides alternating."""
        return key.round, side_order(key.round, True).index(key.role)

    def to_json(self) -> dict[str, Any]:
        return {"rounds": self.rounds, "control": self.control, "ir_only": self.ir_only, "ops": dict(self.ops)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "CampaignPlan":
        return cls(int(data["rounds"]), bool(data.get("control", False)), bool(data.get("ir_only", False)),
                   {str(k): str(v) for k, v in dict(data.get("ops") or {}).items()})


def read_plan(layout: RootLayout) -> CampaignPlan | None:
    """The plan a session wrote into ``campaign.json``; None for a root written before plans were kept."""
    if not layout.manifest.exists():
        return None
    plan = read_json(layout.manifest).get(PLAN_FIELD)
    return CampaignPlan.from_json(plan) if isinstance(plan, dict) else None
