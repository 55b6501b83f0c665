"""Replay recorded steady settlings under the product's rule, or under changed constants, without a GPU.

``benchmarks/regimes/settle_trace.py --record FILE`` keeps what each settling read (every NVML reading with its time, and
the energy counter's polls), running on past the rule's answer for ``--hold`` seconds.  This script feeds those
readings, as they arrived, to ``child/regime.py``'s ``judge``, as ``settle`` does (a judgement per reading from
``STEADY_MIN_S``), and prints per trace when the rule would have settled, its detail, and how far the settled
clock lies from the median clock of the recorded second after it (a rule that settles on an unrepresentative
moment shows there), and how far the energy counter's power over the half second after it (what the windows
would draw) lies from its power over the recording's last half second (what the card converged to).
``--set NAME=VALUE`` changes a ``core/regimes.py`` constant for the replay, to try a rule
on the card's own readings before running it on the card.

    python benchmarks/regimes/settle_replay.py settle.jsonl
    python benchmarks/regimes/settle_replay.py settle.jsonl --set STEADY_CAP_POWER_SPAN_S=1.0 --set STEADY_CAP_TEMP_SPAN_S=2
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
WINDOWS_S = 0.5  # the stretch after settling whose counter power is held against the recording's last one


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
        times = data.numbers("times")
        if len(times) != len(readings):
            raise data.error("times", f"one time per reading ({len(readings)})", f"{len(times)} times")
        counter = data.data.get("counter", [])
        if not isinstance(counter, list) or not all(
                isinstance(point, list) and len(point) == 3
                and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in point) for point in counter):
            raise data.error("counter", "a list of [began, returned, mJ] polls", counter)
        return cls(data.text("kernel"), data.whole("repeat"), data.number_or_none("max_clock"),
                   data.number_or_none("power_limit_w"), data.number("start"), times, readings,
                   [(float(a), float(b), float(c)) for a, b, c in counter])


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
    power_vs_end_pct: float | None = None


def replay(trace: Trace) -> Replayed:
    """``judge`` on the readings as they arrived, from ``STEADY_MIN_S`` to ``STEADY_MAX_S``, as ``settle`` calls
    it."""
    last_unsettled = "no judgement"
    for index, at in enumerate(trace.times):
        elapsed = at - trace.start
        if elapsed < regimes.STEADY_MIN_S and elapsed < regimes.STEADY_MAX_S:
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
            windows = counter_power(trace, at, at + WINDOWS_S)
            end = counter_power(trace, trace.times[-1] - WINDOWS_S, trace.times[-1])
            power = None if windows is None or not end else 100.0 * (windows / end - 1.0)
            return Replayed(round(elapsed, 3), f"{seen.clock_mhz or 0:.0f} MHz {how}", off, power)
        last_unsettled = "; ".join(seen.unsettled) or "no reading"
        if elapsed >= regimes.STEADY_MAX_S:
            return Replayed(None, f"not settled within STEADY_MAX_S: {last_unsettled}", None)
    return Replayed(None, f"not settled in the recording: {last_unsettled}", None)


def counter_power(trace: Trace, after: float, until: float) -> float | None:
    """The counter's power (W) over its updates from ``after`` to ``until`` (``regime.counter_power_since`` on the
    polls returned by then)."""
    return regime.counter_power_since([point for point in trace.counter if point[1] <= until], after)


def apply_overrides(overrides: Sequence[str]) -> list[str]:
    """``NAME=VALUE`` pairs onto ``core/regimes.py``'s numeric constants, then the constants derived from them
    (``regimes.STEADY_DERIVED``) that were not set themselves; returns every changed constant as ``NAME=value``.  An unknown
    name, a value that is not a number, or a fraction for a whole-number constant is an error naming it."""
    named = set()
    for item in overrides:
        name, _, value = item.partition("=")
        current = getattr(regimes, name, None)
        if not isinstance(current, (int, float)) or isinstance(current, bool):
            raise SystemExit(f"--set {item}: {name} is not a numeric constant of core/regimes.py")
        try:
            number = float(value)
        except ValueError:
            raise SystemExit(f"--set {item}: {value!r} is not a number") from None
        if isinstance(current, int) and not number.is_integer():
            raise SystemExit(f"--set {item}: {name} is a whole number")
        setattr(regimes, name, int(number) if isinstance(current, int) else number)
        named.add(name)
    for name, derive in regimes.STEADY_DERIVED.items():
        if name not in named and derive() != getattr(regimes, name):
            setattr(regimes, name, derive())
            named.add(name)
    return [f"{name}={getattr(regimes, name):g}" for name in sorted(named)]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("record", type=Path)
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE")
    args = parser.parse_args(argv)
    changed = apply_overrides(args.set)
    print(f"# {args.record}{'; ' + ', '.join(changed) if changed else ''}")
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
        if out.power_vs_end_pct is not None:
            off += f", power over the next {WINDOWS_S:g} s {out.power_vs_end_pct:+.1f}% from the last {WINDOWS_S:g} s"
        when = "-" if out.settled_s is None else f"{out.settled_s:.2f} s"
        print(f"{trace.kernel} #{trace.repeat}: {when}: {out.detail}{off}")
    for kernel, took in by_kernel.items():
        done = [t for t in took if t is not None]
        mean = f"mean {statistics.fmean(done):.2f} s" if done else "none settled"
        print(f"-- {kernel}: {len(done)} of {len(took)} settled, {mean}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
