"""The history file: a record round-trips report.json, a session records its root, and a corrupt or locked
history file is one line while the run keeps its own exit code and root."""

from __future__ import annotations

import json
import re
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import as_both_regimes, capped_gpu_state, simple_campaign, synthetic_root, with_gpu_state
from pytest_abbench.history.record import record_root
from pytest_abbench.core.layout import RootLayout
from pytest_abbench.core.outcome import SETTLED
from pytest_abbench.core.plan import CampaignManifest, CampaignPlan, write_manifest
from pytest_abbench.core.status import StatusRow, append_status_row
from pytest_abbench.history import view
from pytest_abbench.history.store import SCHEMA_VERSION, History, HistoryError
from pytest_abbench.report import build_report, write_report

FAST = ("--ab-ir-target", "none", "--ab-samples", "1", "-p", "no:cacheprovider")


def cli(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.run(sys.executable, "-m", "pytest_abbench.cli", *args)


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout.strip()


def test_a_record_round_trips_report_json_and_the_campaign_repository_commit(tmp_path: Path,
                                                                              campaign_dir: pytest.Pytester) -> None:
    root = tmp_path / "runs" / "root"
    synthetic_root(root, {"s1": [0.10, 0.11, 0.09, 0.10], "s2": [0.001, -0.001, 0.0, 0.0005]})
    # campaign.json names a campaign file in a git repository with an uncommitted change: commit and dirty kept.
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    (repo / "camp.py").write_text("OPS = []\n")
    git(repo, "add", "camp.py")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "a campaign")
    (repo / "camp.py").write_text("OPS = [] # edited\n")
    (root / "campaign.json").write_text(json.dumps({"schema": 1, "campaign_files": {str(repo / "camp.py"): "h1"},
                                                    "switch_env": None}))
    assert cli(campaign_dir, "summary", str(root)).ret == 0  # writes report.json
    report = json.loads((root / "report.json").read_text())

    history_file = tmp_path / "runs" / "history.sqlite"
    run_id = record_root(history_file, root, 0, label="nightly")
    with History(history_file, create=False) as history:
        (run,) = history.runs()
        assert history.root_path(run).resolve() == root.resolve()
    assert run.id == run_id and run.root == "root" and run.label == "nightly" and run.exit_code == 0
    tree = run.subject_tree
    assert tree is not None and tree.commit == git(repo, "rev-parse", "HEAD") and tree.dirty is True
    assert tree.subject == "a campaign"
    assert run.identity["device"] == "H200" and run.identity["timer"] == "cudagraph"
    stored = {(s.op, s.shape): s for s in run.shapes}
    for shape in report["ops"][0]["shapes"]:
        s = stored[("op", shape["shape"])]
        assert (s.delta_pct, list(s.ci_pct or ()), s.verdict, s.a_ms, s.b_ms, s.rounds) == (
            shape["delta_pct"], shape["ci_pct"], shape["verdict"], shape["a_ms"], shape["b_ms"], shape["rounds"])
    assert {s.verdict for s in run.shapes} == {"slower", "same"}
    (op,) = run.ops
    assert (op.geomean_pct, list(op.geomean_ci_pct or ())) == (report["ops"][0]["geomean_pct"],
                                                              report["ops"][0]["geomean_ci_pct"])

    # The same root recorded again (resumed) keeps its latest record only; another root lands beside it.
    record_root(history_file, root, 7, label="resumed")
    shutil.copytree(root, root.with_name("copy"))
    record_root(history_file, root.with_name("copy"), 0)
    listed = cli(campaign_dir, "history", "--history", str(history_file))
    assert listed.ret == 0, listed.stdout.str()
    listed.stdout.fnmatch_lines([f"   2  *  {tree.commit[:12]}[*]     7  same 1, slower 1 *  resumed: root",
                                 f"   3  *  {tree.commit[:12]}[*]     0  same 1, slower 1 *  copy"])
    assert "nightly" not in listed.stdout.str()
    series = cli(campaign_dir, "history", "--history", str(history_file), "--op", "op", "--shape", "s1")
    assert series.ret == 0, series.stdout.str()
    series.stdout.fnmatch_lines(["== op[[]s1[]]: 2 run(s), ordered by commit time", "*+10.0%*slower*"])


def test_schema_is_versioned_and_a_newer_file_is_refused_by_name(tmp_path: Path) -> None:
    path = tmp_path / "history.sqlite"
    with History(path) as history:
        assert history.version == SCHEMA_VERSION
    with History(path) as history:  # opened again: the schema is created once
        assert history.db.execute("SELECT version FROM schema_info").fetchone() == (SCHEMA_VERSION,)
    db = sqlite3.connect(path)
    db.execute("UPDATE schema_info SET version = ?", (SCHEMA_VERSION + 1,))
    db.commit()
    db.close()
    with pytest.raises(HistoryError, match=f"{path}: history schema version {SCHEMA_VERSION + 1} is newer"):
        History(path)
    (tmp_path / "other.sqlite").unlink(missing_ok=True)
    other = sqlite3.connect(tmp_path / "other.sqlite")
    other.execute("CREATE TABLE t (x)")
    other.commit()
    other.close()
    with pytest.raises(HistoryError, match="not a pytest-abbench history file"):
        History(tmp_path / "other.sqlite")


def regimes_auto_gpu_root(root: Path, scratch: Path) -> None:
    """A root timed under --ab-regime both with --ab-rounds auto:3-5 and GPU state: op ``settles`` settled after
    its first look (rounds 4 and 5 skipped), op ``noisy`` ran to the cap, every window power-capped."""
    for where, scale in ((root, 1.0), (scratch, 4.0)):  # steady: four times the burst delta
        synthetic_root(where, {"s": [0.10 * scale, 0.101 * scale, 0.099 * scale]}, op="settles")
        synthetic_root(where, {"s": [0.10, -0.05, 0.02, -0.01, 0.03], "t": [0.01] * 5}, op="noisy")
    as_both_regimes(root, scratch)
    with_gpu_state(root, capped_gpu_state)
    for rnd in (4, 5):
        for side in ("A", "B"):
            append_status_row(root, StatusRow(rnd, "settles", side, "X=1", 0, SETTLED, 0.0, 0, 0))
    write_manifest(RootLayout(root).manifest, CampaignManifest(
        campaign_files={}, plan=CampaignPlan(5, ops={"settles": "c.py", "noisy": "c.py"}, auto_min=3)))
    write_report(root, build_report(root))


def test_a_record_keeps_each_regime_every_flag_and_the_rounds_each_op_ran(tmp_path: Path) -> None:
    root = tmp_path / "root"
    regimes_auto_gpu_root(root, tmp_path / "steady")
    report = json.loads((root / "report.json").read_text())
    history_file = tmp_path / "history.sqlite"
    record_root(history_file, root, 0)
    with History(history_file, create=False) as history:
        (run,) = history.runs()
    assert run.identity["regime"] == "both"
    assert run.auto_rounds == report["auto_rounds"] == {"first": 3, "last": 5, "rounds_run": 16, "settled": 2,
                                                        "cap": 2, "budget": 0}
    # --ab-regime both reports each op twice: both are kept, told apart by their regime.
    ops = {(o.op, o.regime): (o.state, o.rounds_completed, o.rounds_expected, o.stopped) for o in run.ops}
    assert ops == {(o["op"], o["regime"]): (o["state"], o["rounds_completed"], o["rounds_expected"], o["stopped"])
                   for o in report["ops"]}
    assert ops[("settles", "steady")] == ("verdict", 3, 3, "settled") and ops[("noisy", "burst")][1:] == (5, 5, "cap")
    shapes = {(s.op, s.regime, s.shape): (s.delta_pct, s.rounds, s.flags) for s in run.shapes}
    assert shapes == {(o["op"], o["regime"], s["shape"]): (s["delta_pct"], s["rounds"], s["flags"])
                      for o in report["ops"] for s in o["shapes"]}
    assert len(shapes) == 6 and {"power_capped", "clocks_differ"} <= {f for _, _, flags in shapes.values()
                                                                     for f in flags}
    # abbench history follows each regime's delta apart: a burst and a steady delta are different quantities.
    found = view.series([run], "settles")
    assert {key: [p.shape.delta_pct for p in points] for key, points in found.items()} == {
        f"s ({o['regime']})": [o["shapes"][0]["delta_pct"]] for o in report["ops"] if o["op"] == "settles"}


def test_a_file_of_an_older_schema_is_refused_by_name_for_reading_and_writing(tmp_path: Path) -> None:
    path = tmp_path / "history.sqlite"
    old = sqlite3.connect(path, isolation_level=None)
    old.execute("CREATE TABLE schema_info (version INTEGER NOT NULL)")
    old.execute("INSERT INTO schema_info (version) VALUES (1)")
    old.execute("CREATE TABLE runs (id INTEGER PRIMARY KEY)")
    old.close()
    for create in (False, True):  # abbench history reads; a session's end writes
        with pytest.raises(HistoryError, match=f"^{re.escape(str(path))}: history schema version 1, older than "
                                               f"{SCHEMA_VERSION}, which this pytest-abbench no longer reads"):
            History(path, create=create)
    root = tmp_path / "root"
    regimes_auto_gpu_root(root, tmp_path / "steady")
    with pytest.raises(HistoryError, match="history schema version 1"):
        record_root(path, root, 0)
    old = sqlite3.connect(path)
    assert old.execute("SELECT version FROM schema_info").fetchone() == (1,)  # left as it was
    assert [r[0] for r in old.execute("SELECT name FROM sqlite_master WHERE type = 'table'")] == [
        "schema_info", "runs"]
    old.close()


def test_a_session_records_its_root_by_default_and_not_with_off(campaign_dir: pytest.Pytester,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ABBENCH_HISTORY")  # the default file, not the one every test gets (conftest.py)
    campaign_dir.makepyfile(c=simple_campaign('"one"'))
    result = campaign_dir.runpytest_subprocess("c.py", "--ab-rounds", "2", "--ab-root", "r1", *FAST)
    assert result.ret == 0, result.stdout.str()
    history_file = campaign_dir.path / ".abbench" / "history.sqlite"
    result.stdout.fnmatch_lines([f"history: run 1 recorded in {history_file}"])
    with History(history_file, create=False) as history:
        (run,) = history.runs()
    assert history.root_path(run).resolve() == (campaign_dir.path / "r1").resolve()
    assert {s.shape for s in run.shapes} == {"n=8", "n=16"} and run.rounds == 2 and run.exit_code == 0

    result = campaign_dir.runpytest_subprocess("c.py", "--ab-rounds", "1", "--ab-root", "r2", "--ab-history", "off",
                                               *FAST)
    assert result.ret == 0, result.stdout.str()
    assert "history:" not in result.stdout.str()
    with History(history_file, create=False) as history:
        assert len(history.runs()) == 1


def test_a_corrupt_history_file_is_one_line_and_the_exit_code_stays_the_runs(campaign_dir: pytest.Pytester) -> None:
    # One op fails its cells: the run's own exit code is 1, and it must stay 1.
    campaign_dir.makepyfile(c=simple_campaign('"one"', extra='''
        def broken(shape, device):
            raise RuntimeError("no")
        ''') + 'OPS.append(Op("broken", build=broken, shapes={"smoke": [{"n": 8}]}))\n')
    history_file = campaign_dir.path / "h.sqlite"
    history_file.write_bytes(b"this is not an SQLite file" * 100)
    result = campaign_dir.runpytest_subprocess("c.py", "--ab-rounds", "1", "--ab-root", "r", "--ab-history",
                                               str(history_file), *FAST)
    assert result.ret == 1, result.stdout.str()
    root = campaign_dir.path / "r"
    result.stdout.fnmatch_lines([f"abbench: history not recorded: {history_file}: corrupt or not an SQLite file "
                                 f"(*); the root {root} and exit code 1 are this run's own*",
                                 "abbench: exit 1: *"])
    assert (root / "report.json").is_file()
    assert history_file.read_bytes() == b"this is not an SQLite file" * 100  # left as it was
    listed = cli(campaign_dir, "history", "--history", str(history_file))
    assert listed.ret == 2
    listed.stderr.fnmatch_lines([f"abbench history: {history_file}: corrupt or not an SQLite file*"])


def test_a_locked_history_file_is_one_line_and_the_run_is_untouched(campaign_dir: pytest.Pytester) -> None:
    campaign_dir.makepyfile(c=simple_campaign('"one"'))
    history_file = campaign_dir.path / "h.sqlite"
    History(history_file).db.close()
    holder = sqlite3.connect(history_file, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")  # another writer holds the file for the whole session
    try:
        result = campaign_dir.runpytest_subprocess("c.py", "--ab-rounds", "1", "--ab-root", "r", "--ab-history",
                                                   str(history_file), *FAST)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert result.ret == 0, result.stdout.str()
    root = campaign_dir.path / "r"
    result.stdout.fnmatch_lines([f"abbench: history not recorded: {history_file}: locked by another process (still "
                                 f"busy after 2 s); the root {root} and exit code 0 are this run's own*",
                                 "abbench: exit 0: *"])
    assert (root / "report.json").is_file()
    with History(history_file, create=False) as history:
        assert history.runs() == []
