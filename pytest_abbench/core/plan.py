"""CampaignPlan: which cells a session set out to run, kept beside what ran; and campaign.json, which holds it.

The report judges an op against its plan, never against the cells that
happened to finish: a campaign stopped after round 3 of 6 (Ctrl-C, ``-x``,
``--maxfail``, a crash) must not print a verdict that reads like a complete
one.  The plan is written into ``campaign.json`` (``CampaignManifest``) so
``abbench summary`` sees the same plan offline, and a resumed session the
root's campaign files, switch and op fingerprints.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_abbench.core.fileio import SCHEMA_FIELD, Fields, read_object, write_json_atomic
from pytest_abbench.core.layout import CONTROL, SIDES, CellKey, RootLayout

MANIFEST_SCHEMA = 1
PLAN_FIELD = "plan"  # the plan's key in campaign.json
CALIBER_OPTIONS_FIELD = "caliber_options"
OPS_FIELD = "op_fingerprints"  # campaign.json: op -> its fingerprint parts (Campaign.fingerprint)


def side_order(round_no: int, control: bool = False) -> tuple[str, ...]:
    """r1: A then B, r2: B then A, ...: alternation cancels one-directional drift.

    The control cell runs last in its round, after both sides, so the A/A
    pair is as far apart in time as the A/B pair can be.
    """
    order = SIDES if round_no % 2 == 1 else SIDES[::-1]
    return (*order, CONTROL) if control else order


@dataclass
class CampaignPlan:
    """Rounds and roles of every op; ``ops`` maps an op to the file that declares it (empty when unknown).

    ``auto_min``: with ``--ab-rounds auto`` the rounds every op runs before its verdicts are first looked at;
    ``rounds`` is then the most an op may run (each op stops at the first look where its shapes settled,
    ``report.sequential``).  None: every op runs ``rounds``.  ``energy_target_pct``: with ``auto_min``, a shape
    whose energy per call interval is wider than +-this many points is not settled either (--ab-energy-target;
    None or 0: energy adds no round).
    """

    rounds: int
    control: bool = False
    ir_only: bool = False
    ops: dict[str, str] = field(default_factory=dict)
    auto_min: int | None = None
    energy_target_pct: float | None = None

    @property
    def auto(self) -> bool:
        return self.auto_min is not None

    def roles(self, round_no: int) -> tuple[str, ...]:
        return side_order(round_no, self.control)

    def cells(self, op: str) -> list[CellKey]:
        """Every cell of ``op`` in the order it runs."""
        return [CellKey(r, op, role) for r in range(1, self.rounds + 1) for role in self.roles(r)]

    def sort_key(self, key: CellKey) -> tuple[int, int]:
        """(round, position of the role in its round): round-major, sides alternating."""
        return key.round, side_order(key.round, True).index(key.role)

    def to_json(self) -> dict[str, Any]:
        out = {"rounds": self.rounds, "control": self.control, "ir_only": self.ir_only, "ops": dict(self.ops)}
        if self.auto_min is not None:  # absent from a fixed plan: roots written before auto rounds read the same
            out["auto_min"] = self.auto_min
        if self.energy_target_pct is not None:
            out["energy_target_pct"] = self.energy_target_pct
        return out

    @classmethod
    def from_json(cls, data: Fields) -> "CampaignPlan":
        plan = cls(data.whole("rounds"), data.flag("control", False), data.flag("ir_only", False),
                   dict(data.text_map("ops", {})), data.whole_or_none("auto_min"),
                   data.number_or_none("energy_target_pct"))
        if plan.auto_min is not None and not 1 <= plan.auto_min <= plan.rounds:
            raise data.error("auto_min", f"a number of rounds from 1 to rounds ({plan.rounds})", plan.auto_min)
        if plan.energy_target_pct is not None and plan.energy_target_pct < 0:
            raise data.error("energy_target_pct", "a number of percentage points, 0 or more", plan.energy_target_pct)
        return plan


@dataclass
class CampaignManifest:
    """``campaign.json``: what a root was written with, read back by a resumed session and by ``abbench summary``.

    Each field is None where the root's file lacks it: a root written before
    op fingerprints or plans were kept, or an op set aside by a resumed
    session (``attempts/<op>_<stamp>/``: its fingerprint and plan only).
    """

    campaign_files: dict[str, str] | None = None  # campaign file -> content hash
    switch_env: dict[str, str] | None = None  # --ab-switch-env (None: the campaign's own switch)
    op_fingerprints: dict[str, dict[str, str]] | None = None
    plan: CampaignPlan | None = None
    # The options that decide what a number means (``Settings.caliber_options``) and --ab-allow-no-ir-diff, which
    # decides which rounds run (``Settings.kept_options``): a resumed session must match.
    caliber_options: dict[str, str] | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {SCHEMA_FIELD: MANIFEST_SCHEMA}
        if self.campaign_files is not None:
            out.update(campaign_files=dict(self.campaign_files), switch_env=self.switch_env)
        if self.op_fingerprints is not None:
            out[OPS_FIELD] = {op: dict(parts) for op, parts in self.op_fingerprints.items()}
        if self.plan is not None:
            out[PLAN_FIELD] = self.plan.to_json()
        if self.caliber_options is not None:
            out[CALIBER_OPTIONS_FIELD] = dict(self.caliber_options)
        return out

    @classmethod
    def from_json(cls, data: Fields) -> "CampaignManifest":
        data.version(MANIFEST_SCHEMA)
        fingerprints = data.or_none(OPS_FIELD, data.nested)
        return cls(data.or_none("campaign_files", data.text_map), data.or_none("switch_env", data.text_map),
                   None if fingerprints is None else {op: dict(fingerprints.text_map(op)) for op in fingerprints.data},
                   data.or_none(PLAN_FIELD, lambda name: CampaignPlan.from_json(data.nested(name))),
                   data.or_none(CALIBER_OPTIONS_FIELD, data.text_map))


def read_manifest(path: Path) -> CampaignManifest:
    """A root's campaign.json; a CorruptFileError (FormatError) names the file and the field when it is not one."""
    return CampaignManifest.from_json(read_object(path))


def write_manifest(path: Path, manifest: CampaignManifest) -> None:
    write_json_atomic(path, manifest.to_json())


def read_plan(layout: RootLayout) -> CampaignPlan | None:
    """The plan a session wrote into ``campaign.json``; None for a root written before plans were kept."""
    if not layout.manifest.exists():
        return None
    return read_manifest(layout.manifest).plan
