"""What a report holds, and its report.json form.

``report.json`` is ``asdict`` of :class:`Report`; ``report_from_json`` turns
it back into the same objects, so the renderer and the plots work from
either.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pytest_abbench.core.fileio import Fields, read_json

from pytest_abbench.core.layout import REPORT_JSON as REPORT_JSON  # the names callers import with the model
from pytest_abbench.core.layout import REPORT_MD as REPORT_MD
from pytest_abbench.core.exitcodes import EXIT_CELL_FAILED, exit_reason, session_exit_code
from pytest_abbench.core.settings import DEFAULT_MARGIN_PCT, GATE_SHAPES

SCHEMA_FIELD = "schema_version"  # report.json's own name for its format version (the other files say "schema")
SCHEMA_VERSION = 9  # the one version read and written: a report.json of another is refused by name (read_report)


@dataclass
class ShapeReport:
    """One shape of one op: its per-round deltas, their interval and the verdict they give."""

    shape: str
    rounds: int
    a_ms: float
    b_ms: float
    delta_pct: float  # median over rounds of B/A-1
    delta_min_pct: float
    delta_max_pct: float
    ci_pct: tuple[float, float] | None
    delta_spread_pct: float  # stdev of per-round deltas: does the verdict hold?
    noise_within_a_pct: float | None  # median within-cell robust CV: how noisy was the machine?
    noise_within_b_pct: float | None
    noise_across_a_pct: float | None  # CV of side medians across rounds
    noise_across_b_pct: float | None
    sign_flip: bool
    verdict: str
    per_round_pct: list[float]
    margin_pct: float = DEFAULT_MARGIN_PCT  # the 'same' margin this shape was judged with
    ci90_pct: tuple[float, float] | None = None  # the equivalence test's interval: 'same' when inside +-margin
    p_value: float | None = None  # two-sided one-sample t-test of the round log ratios
    p_adjusted: float | None = None  # Benjamini-Hochberg across the op's shapes
    within_margin: bool = False  # a direction whose 90% interval lies inside +-margin: real and small
    note: str = ""  # why the data's direction was withheld
    aa_delta_pct: float | None = None  # A/A control: median over rounds of A2/A-1
    aa_ci_pct: tuple[float, float] | None = None  # the A/A interval: a diagnostic, never the margin
    aa_per_round_pct: list[float] = field(default_factory=list)
    aa_bias_pct: float | None = None  # the A/A t-test held after BH across the op's shapes: a bias of this size
    aa_p_adjusted: float | None = None  # the A/A t-test's p after Benjamini-Hochberg across the op's shapes
    flags: list[str] = field(default_factory=list)  # report/flags.py FLAGS names: those that withhold, the GPU's
    spread_floor_pct: float = 0.0  # the least spread a round's delta can have (its cells' own noise), in percent
    faster_rounds: int = 0  # rounds in which B was faster than A ("faster in x of N rounds")
    energy_a_j: float | None = None  # joules per call, median over rounds (NVML's energy counter / calls per window)
    energy_b_j: float | None = None
    energy_delta_pct: float | None = None  # median over rounds of B's energy per call against A's
    energy_ci_pct: tuple[float, float] | None = None  # t-interval of the per-round energy log ratios
    energy_withheld: str = ""  # why no energy per call is stated: the windows were too short for the counter
    work: dict[str, Any] = field(default_factory=dict)  # per call as the campaign declares it: flops, bytes, dtype
    throughput: dict[str, Any] = field(default_factory=dict)  # side -> achieved TFLOP/s, GB/s and % of peak
    gpu: dict[str, Any] = field(default_factory=dict)  # side -> this shape's median SM clock, power, power-cap share
    # --ab-reference (report/reference.py): both sides in one process, interleaved in pairs; never the verdict
    reference_delta_pct: float | None = None  # median over pairs of B/A-1
    reference_ci_pct: tuple[float, float] | None = None  # t-interval of the pairs' log ratios
    reference_per_pair_pct: list[float] = field(default_factory=list)
    reference_note: str = ""  # why this shape has no reference delta where its op has one
    reference_clocks_mhz: dict[str, float] = field(default_factory=dict)  # side -> SM clock in the reference's pairs
    # at the power cap each side's windows followed its own side's settling: [settlings met, settlings]
    reference_settled_alone: list[int] | None = None
    reference_ms: dict[str, float] = field(default_factory=dict)  # side -> median time per call over the pairs

    def round_log_ratios(self) -> list[float]:
        """Each round's ln(B/A), the unit the statistics judge in (``per_round_pct`` holds B/A-1 in percent)."""
        return [math.log1p(d / 100.0) for d in self.per_round_pct]

    def spread_floor_log(self) -> float:
        """``spread_floor_pct`` back in ln(B/A) units, as ``stats.interval`` and the t-tests take it."""
        return math.log1p(self.spread_floor_pct / 100.0)


@dataclass
class OpReport:
    """One op: its shapes' verdicts, or the reason it has none (caliber, IR gate, missing cells)."""

    op: str
    campaign: str
    rounds_completed: int
    rounds_expected: int
    state: str  # verdict | no_verdict | no_ir_diff | ir_only
    reason: str = ""
    gate: dict[str, Any] | None = None
    gate_lines: list[str] = field(default_factory=list)
    caliber: list[str] = field(default_factory=list)
    caliber_mismatch: bool = False  # a caliber line of this op is a mismatch: its sides measured different things
    markers: dict[str, int] = field(default_factory=dict)
    shapes: list[ShapeReport] = field(default_factory=list)
    geomean_pct: float | None = None
    geomean_ci_pct: tuple[float, float] | None = None
    verdicts: dict[str, int] = field(default_factory=dict)
    sign_flips: int = 0
    mixed_timer_shapes: list[str] = field(default_factory=list)
    control: bool = False
    aa_geomean_ci_pct: tuple[float, float] | None = None
    findings: list[str] = field(default_factory=list)  # conditions of the whole op (report/flags.py), as text
    flags: dict[str, int] = field(default_factory=dict)  # flag name -> shapes carrying it
    gpu_state: dict[str, Any] = field(default_factory=dict)  # side -> its timed windows' GPU state (report/gpustate.py)
    switch: str = ""  # what side B changes for this op (its cells' status rows), as Switch.describe() says it
    alpha: float = 0.05  # the level its verdicts were judged at (with --ab-rounds auto: its look's share)
    stopped: str = ""  # --ab-rounds auto: why its rounds ended: settled | cap | budget ("" with fixed rounds)
    # shapes with no verdict and an interval wider than the margin, then (an auto plan's energy target) those whose
    # energy per call interval is wider than the target: ``shape (energy per call +-9.9%)``
    unsettled: list[str] = field(default_factory=list)
    regime: str = ""  # the timing regime its shapes were timed under (core/regimes.py); "" before regimes
    regimes_note: str = ""  # --ab-regime both: how this op's other regime's delta compares with this one's
    energy_geomean_pct: float | None = None  # geomean over shapes of B's energy per call against A's
    energy_geomean_ci_pct: tuple[float, float] | None = None
    energy_withheld: str = ""  # why the op states no energy per call: every shape's windows too short for the counter
    energy_basis: str = ""  # "spans": steady spans around the windows (core/results.py EnergySpan); "": the
    # windows; "mixed": some of each (report/gpustate.py)
    peak: str = ""  # where the % of peak comes from (report/peak.py), or why there is none
    autotune: str = ""  # which tuner keys were pinned from which side (report/build.py autotune_pins_line)
    reference: str = ""  # --ab-reference: what its in-process reference gave, or why it has none (report/reference.py)
    # cell ("op[r2-B]") -> its results records that could not be read ("<file>:<line>: why"): those shapes' rounds
    # are left out, the other shapes keep theirs, and the cell counts as failed in the exit code
    unreadable: dict[str, list[str]] = field(default_factory=dict)
    # each shape that failed in a cell, in one line: where, and each distinct error once (report/build.py failed_line)
    failed_shapes: list[str] = field(default_factory=list)
    # ABBENCH_KERNEL_SPLIT: shape -> its kernels per call matched across the sides (report/kernelsplit.py Split)
    kernel_splits: dict[str, Any] = field(default_factory=dict)


@dataclass
class Report:
    """A whole root: every op, the caliber lines of all of them, and the regression gate's outcome."""

    schema_version: int
    root: str
    margin_pct: float
    margin_source: str
    ops: list[OpReport]
    caliber_lines: list[str]
    caliber_mismatch: bool
    slower_ops: list[str]  # what tripped --ab-fail-if-slower: ``op`` (geomean scope) or ``op[geomean, shape, ...]``
    problems: list[str]
    complete: bool = True  # every planned cell has an outcome (False after Ctrl-C, -x, --maxfail, a crash)
    failed_cells: list[str] = field(default_factory=list)  # cells that did not finish, e.g. "topk[r2-B]"
    exit_code: int | None = None  # the session's (or abbench summary's) exit code and why
    exit_reason: str = ""
    rounds_planned: int = 0
    setup: dict[str, str] = field(default_factory=dict)  # switch, backend, timer, device (from the identities)
    gpu_timed: bool = True  # False: interpreter or wall-clock numbers, which say nothing about GPU speed
    time_spent: dict[str, Any] = field(default_factory=dict)  # report/cost.py: where the cells' time went
    gate_scope: str = GATE_SHAPES  # --ab-gate: what slower_ops judged (every shape and geomean, or geomeans alone)
    gate_held: list[str] = field(default_factory=list)  # shapes beyond --ab-fail-if-slower with no plain 'slower'
    # --ab-rounds auto: {"first": rounds before the first look, "last": the cap, "settled"/"cap"/"budget": ops that
    # stopped so, "rounds_run": rounds summed over the ops judged}; empty with fixed rounds
    auto_rounds: dict[str, int] = field(default_factory=dict)
    allow_caliber_mismatch: bool = False  # --allow-caliber-mismatch: mismatches were printed, not an exit 4
    fail_if_slower_pct: float | None = None  # --ab-fail-if-slower: the threshold slower_ops was judged against

    def decide_exit(self, pytest_status: int, allow_caliber_mismatch: bool) -> int:
        """Set ``exit_code`` and ``exit_reason`` by the one rule of ``exitcodes``; returns the code.

        A cell that failed or a planned cell that never ran is 1 even where pytest saw nothing fail (a cell
        deselected with ``--deselect`` or ``-k``): the report says the op has no verdict, so the exit must not say
        clean, and ``abbench gate`` reads the same report the same way.
        """
        cells_status = EXIT_CELL_FAILED if self.failed_cells or not self.complete else 0
        self.exit_code = session_exit_code(pytest_status or cells_status, self.caliber_mismatch,
                                           bool(self.slower_ops), allow_caliber_mismatch)
        self.exit_reason = exit_reason(self.exit_code, self.failed_cells, self.complete,
                                       [o.op for o in self.ops if o.caliber_mismatch], self.slower_ops)
        return self.exit_code

    def offline_exit(self) -> int:
        """``decide_exit`` from the report alone (``abbench summary``, ``abbench gate``): the cells stand for pytest's
        status, as they do in the live session."""
        return self.decide_exit(0, self.allow_caliber_mismatch)

    def exit_line(self) -> str:
        return f"abbench: exit {self.exit_code}: {self.exit_reason}"

    def to_json(self) -> dict[str, Any]:
        """The report.json object: every field, tuples as lists."""
        return asdict(self)


def report_from_json(data: Any, where: str = REPORT_JSON) -> Report:
    """The Report a report.json holds, every field checked against its declared type (JSON's lists become the
    pairs they were).

    ``where`` names the file in errors: a report of another schema_version, a field of the wrong type, a missing or
    unknown one is a FormatError naming the file and the field (``ops[0].shapes[1].ci_pct``).
    """
    fields = Fields(where, data)
    version = fields.whole(SCHEMA_FIELD)
    if version != SCHEMA_VERSION:
        raise fields.error(SCHEMA_FIELD, f"{SCHEMA_VERSION}, the version this pytest-abbench writes (rebuild the "
                                         "report with `abbench summary ROOT`)", version)
    return fields.dataclass(Report)


def read_report(path: Path) -> Report:
    """The Report in the report.json at ``path``; errors name the file."""
    return report_from_json(read_json(path), str(path))
