"""``--ab-reference``: after the cells, each judged op's two sides timed in one process, beside the cells' verdict.

The cells time each side in processes of its own, which is what a user of
either side pays.  One process that builds both sides on the same inputs and
times them interleaved sees the same card at the same moment for both:
where its delta lies outside the cells' interval, a bias between processes is
worth a look (``report/reference.py`` flags it; no verdict changes).  Only a
kernel-variant switch allows it (``campaign/inprocess.py`` decides); for any
other the root and the terminal say why not.  One reference process per op
(``child/reference.py``), bounded by the cell timeout: a crash or a timeout is
recorded as such in reference.jsonl and the report says so.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Iterable

from pytest_abbench.campaign.inprocess import build_env, not_applicable_notice, why_not_in_one_process
from pytest_abbench.campaign.model import Campaign, CampaignError, CampaignSkipped
from pytest_abbench.core import envnames, reference, tunercache
from pytest_abbench.core.exitcodes import describe, status_word
from pytest_abbench.core.layout import SIDES, CellKey, RootLayout
from pytest_abbench.core.settings import Settings
from pytest_abbench.core.wording import count

if TYPE_CHECKING:
    from pytest_abbench.session.campaign_session import AbbenchSession

CHILD_MODULE = "pytest_abbench.child.reference"
INTERRUPTED_RC = 130  # a Ctrl-C or SIGTERM stopped the reference process (128 + SIGINT)


def spec_for(campaign: Campaign, op: str, settings: Settings, layout: RootLayout) -> reference.ReferenceSpec:
    """What the reference process of ``op`` is told: the cells' measurement settings and the op's records."""
    side_record = layout.autotune_side_record(op, "B")
    return reference.ReferenceSpec(
        campaign=str(campaign.path), module=campaign.module.__name__, adapter=campaign.adapter, op=op,
        level=settings.level, backend=settings.backend, timer=settings.timer, pairs=settings.samples,
        direct_rep_ms=settings.direct_rep_ms, direct_warmup_ms=settings.direct_warmup_ms, regime=settings.regime,
        rows=str(layout.reference), build_env={side: build_env(campaign.switch, side) for side in SIDES},
        autotune_record=str(layout.autotune_record(op)),
        autotune_side_record=str(side_record) if side_record.exists() else None)


def run_references(session: AbbenchSession, judged: Iterable[str]) -> bool:
    """Run the reference of every ``judged`` op of this session whose switch allows it, one process per op, and
    record why not for the others; True when reference.jsonl got a record."""
    layout = session.root.layout
    wrote = False
    session.write_line("")  # the progress line of the last test may still be open
    by_campaign: dict[str, Campaign | None] = {}
    for op in dict.fromkeys(judged):
        path = session.plan.ops.get(op)
        if not path:
            continue  # an op of the resumed root that this session did not select
        if path not in by_campaign:
            try:
                by_campaign[path] = session.campaign(Path(path))
            except (CampaignError, CampaignSkipped) as exc:
                session.write_line(f"abbench: reference {op}: {exc}")
                by_campaign[path] = None
        campaign = by_campaign[path]
        if campaign is None:
            continue
        reference.drop_op(layout.reference, op)
        why = why_not_in_one_process(campaign)
        wrote = True
        if why is not None:
            reference.append_not_applicable(layout.reference, op, campaign.path.name, why)
            notice = not_applicable_notice(campaign)
            if notice is not None and notice not in session.notices_shown:
                session.notices_shown.add(notice)  # an xdist controller collected nothing: said here, once
                session.write_line(notice)
            continue
        if not run_one(session, campaign, op):
            break
    return wrote


def run_one(session: AbbenchSession, campaign: Campaign, op: str) -> bool:
    """The reference process of ``op``, to its end or the cell timeout; False when the session was interrupted."""
    from pytest_abbench.spawn.cellrun import run_child

    layout = session.root.layout
    settings = session.settings
    spec = spec_for(campaign, op, settings, layout)
    spec_path = layout.reference_spec(op)
    spec.write(spec_path)
    log_path = layout.reference_log(op)
    log_path.unlink(missing_ok=True)  # an earlier session's
    shapes = len(campaign.op(op).shapes_for(settings.level))
    session.write_line(f"abbench: reference {op}: {count(shapes, 'shape')}, side A and side B in one process, "
                       f"{settings.samples} pairs each ...")
    started = time.monotonic()
    try:
        result = run_child([sys.executable, "-m", CHILD_MODULE, str(spec_path)], reference_env(session, campaign, op),
                           log_path, settings.budget.child_s, session.controller_check)
    except KeyboardInterrupt:
        # The time the process ran until the stop, so the report does not read as if it never started.
        reference.append_process(layout.reference, op, INTERRUPTED_RC, "INTERRUPTED", time.monotonic() - started,
                                 _relative(log_path, layout))
        session.write_line(f"abbench: reference {op}: interrupted; no later op's reference runs")
        return False
    reference.append_process(layout.reference, op, result.rc, status_word(result.rc), result.elapsed_s,
                             _relative(log_path, layout))
    found = reference.read_reference(layout.reference).get(op, reference.OpReference())
    timed = sum(1 for s in found.shapes.values() if s.error is None)
    ended = "" if result.rc == 0 else f"; the process ended {describe(result.rc)}, see {log_path}"
    session.write_line(f"abbench: reference {op}: {timed} of {count(len(found.shapes) or shapes, 'shape')} timed "
                       f"in {result.elapsed_s:.1f} s{ended} (no verdict changes)")
    return True


def reference_env(session: AbbenchSession, campaign: Campaign, op: str) -> dict[str, str]:
    """The reference process's environment: a side-A cell's (interpreter flag, GPU, side A's Triton cache), without
    the switch's variables (each side's build gets its own, ``child/reference.environment_set``), with a library tuner
    cache seeded from side B's record (it holds side A's keys and those only side B met)."""
    layout = session.root.layout
    env = session.runner().env(campaign, CellKey(1, op, "A"), layout.reference_spec(op).parent)
    for name in set(campaign.switch.env_a) | set(campaign.switch.env_b):
        env.pop(name, None)
    tuner = layout.reference_tuner_cache(op)
    if session.settings.tuner_cache == "per-cell":
        tunercache.seed_from_record(layout.root, op, tuner, side="B")
        env[envnames.FLAGGEMS_CACHE_DIR] = str(tuner)
    return env


def _relative(path: Path, layout: RootLayout) -> str:
    try:
        return str(path.relative_to(layout.root))
    except ValueError:
        return str(path)
