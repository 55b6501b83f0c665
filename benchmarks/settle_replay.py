"""Replay recorded steady settlings under the product's rule, or under changed constants, without a GPU.

``benchmarks/settle_trace.py --record FILE`` keeps what each settling read (every NVML reading with its time, and
the energy counter's polls), running on past the rule's answer for ``--hold`` seconds.  This script feeds those
readings, as they arrived, to ``child/regime.py``'s ``judge``, as ``settle`` does (a judgement per reading from
``STEADY_MIN_S``), and prints per trace when the rule would have settled, its detail, and how far the settled
clock lies from the median clock of the recorded second after it (a rule that settles on an unrepresentative
moment shows there).  ``--set NAME=VALUE`` changes a ``core/regimes.py`` constant for the replay, to try a rule
on the card's own readings before running it on the card.

    python benchmarks/settle_replay.py settle.jsonl
    python benchmarks/settle_replay.py settle.jsonl --set STEADY_POWER_SPAN_S=0.5 --set STEADY_MIN_S=1.1
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from pytest_abbench.child import regime
from pytest_abbench.core import regimes
from pytest_abbench.core.fileio import Fields
from pytest_abbench.core.results import GpuReading

AFTER_S = 1.0  # the recorded stretch after settling whose median clock the settled clock is held against


@dataclass
class Trace:
    """One recorded settling: its kernel, the card's maximum clock and power limit, when it began, each reading
    with the time it returned, and the energy counter's polls (began, returned, mJ)."""

    kernel: str
    repeat: int
    max_clock: float | None
    power_limit_w: float | None
    start: float
    times: list[float]
    readings: list[GpuReading | None]
    counter: list[tuple[float, float, float]]

    def to_json(self) -> dict[str, Any]:
        return {"kernel": self.kernel, "repeat": self.repeat, "max_clock": self.max_clock,
                "power_limit_w": self.power_limit_w, "start": self.start, "times": self.times,
                "readings": [None if r is None else r.to_json() for r in self.readings],
                "counter": [list(point) for point in self.counter]}

    @classmethod
    def from_json(cls, data: Fields) -> "Trace":
        raw = data.data.get("readings")
        if not isinstance(raw, list):
            raise data.error("readings", "a list of readings (or nulls)", raw)
        readings = [None if r is None else GpuReading.from_json(Fields(data.where, r, f"readings[{i}]."))
                    for i, r in enumerate(raw)]
        return cls(data.text("kernel"), data.whole("repeat"), data.number_or_none("max_clock"),
                   data.number_or_none("power_limit_w"), data.number("start"), data.numbers("times"), readings,
                   [(float(a), float(b), float(c)) for a, b, c in data.data.get("counter", [])])


def read_traces(path: Path) -> list[Trace]:
    """Every trace of a ``--record`` file; a bad line raises naming the file, the line and the field."""
    traces = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if line.strip():
            try:
                data = json.loads(line)
            except ValueError as exc:
                raise ValueError(f"{path}:{number}: not JSON ({exc})") from None
            traces.append(Trace.from_json(Fields(f"{path}:{number}", data)))
    return traces


@dataclass
class Replayed:
    """When the rule settled a trace (None: not within the recording), what it said, and the settled clock
    against the median clock of the next ``AFTER_S`` of readings (percent; None without both)."""

    settled_s: float | None
    detail: str
    clock_vs_after_pct: float | None


def replay(trace: Trace) -> Replayed:
    """``judge`` on the readings as they arrived, from ``STEADY_MIN_S`` on, as ``settle`` calls it."""
    last_unsettled = "no judgement"
    for index, at in enumerate(trace.times):
        elapsed = at - trace.start
        if elapsed < regimes.STEADY_MIN_S:
            continue
        counter = [point for point in trace.counter if point[1] <= at]
        seen = regime.judge(trace.readings[:index + 1], trace.max_clock, trace.times[:index + 1],
                            trace.power_limit_w, counter)
        if seen.settled:
            after = [r.sm_clock_mhz for t, r in zip(trace.times, trace.readings)
                     if at < t <= at + AFTER_S and r is not None and r.sm_clock_mhz is not None]
            off = (None if seen.clock_mhz is None or not after
                   else 100.0 * (seen.clock_mhz / statistics.median(after) - 1.0))
            how = "at the cap" if seen.at_cap else "below the cap"
            return Replayed(round(elapsed, 3), f"{seen.clock_mhz or 0:.0f} MHz {how}", off)
        last_unsettled = "; ".join(seen.unsettled) or "no reading"
    return Replayed(None, f"not settled in the recording: {last_unsettled}", None)


def apply_overrides(overrides: Sequence[str]) -> None:
    """``NAME=VALUE`` pairs onto ``core/regimes.py``'s numeric constants; an unknown name or a value that is not a
    number is an error naming it."""
    for item in overrides:
        name, _, value = item.partition("=")
        current = getattr(regimes, name, None)
        if not isinstance(current, (int, float)) or isinstance(current, bool):
            raise SystemExit(f"--set {item}: {name} is not a numeric constant of core/regimes.py")
        try:
            setattr(regimes, name, type(current)(float(value)) if isinstance(current, int) else float(value))
        except ValueError:
            raise SystemExit(f"--set {item}: {value!r} is not a number") from None


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("record", type=Path)
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE")
    args = parser.parse_args(argv)
    apply_overrides(args.set)
    print(f"# {args.record}{'; ' + ', '.join(args.set) if args.set else ''}")
    by_kernel: dict[str, list[float | None]] = {}
    try:
        traces = read_traces(args.record)
    except (OSError, ValueError) as exc:  # FormatError and a torn JSON line are ValueErrors
        print(f"settle_replay: {exc}", file=sys.stderr)
        return 2
    for trace in traces:
        out = replay(trace)
        by_kernel.setdefault(trace.kernel, []).append(out.settled_s)
        off = "" if out.clock_vs_after_pct is None else f", {out.clock_vs_after_pct:+.1f}% from the next second's clock"
        when = "-" if out.settled_s is None else f"{out.settled_s:.2f} s"
        print(f"{trace.kernel} #{trace.repeat}: {when}: {out.detail}{off}")
    for kernel, took in by_kernel.items():
        done = [t for t in took if t is not None]
        mean = f"mean {statistics.fmean(done):.2f} s" if done else "none settled"
        print(f"-- {kernel}: {len(done)} of {len(took)} settled, {mean}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
