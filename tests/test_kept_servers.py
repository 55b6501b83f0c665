"""``--ab-keep-servers``: a session's fork servers wait for the next session of their key, which imports nothing.

Real pytest sessions in the interpreter, one after another in one folder: each
cell records which server forked it and which process imported the campaign's
SERVER_IMPORTS module, so reuse, staleness and the end of a kept server are
seen from inside the cells, not from the plugin's own words.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from helpers import process_alive
from pytest_abbench.cli import main as abbench_main
from pytest_abbench.core import keptservers
from pytest_abbench.spawn.forkserver import ForkServers

FAST = ("--ab-ir-target", "none", "--ab-samples", "1", "-p", "no:cacheprovider", "--ab-rounds", "1",
        "--ab-spawn", "fork")

KEPT_CAMPAIGN = textwrap.dedent('''
    import json, os, time
    import torch
    from pytest_abbench.campaign.model import Case, Op, Switch

    SERVER_IMPORTS = ("helper",)

    def ppid_of(pid):
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read()
        return int(stat[stat.rfind(b")") + 2:].split()[1])

    def build(shape, device):
        import helper
        cell = os.getppid()  # the cell's own process, forked by its server
        side = "B" if os.environ.get("ABBENCH_TEST_SWITCH") else "A"
        line = {"side": side, "cell": cell, "server": ppid_of(cell), "measuring": os.getpid(),
                "value": helper.VALUE, "helper_imported_in": helper.IMPORTED_IN}
        seen = os.environ["SEEN_FILE"]
        with open(seen, "a") as handle:
            handle.write(json.dumps(line) + "\\n")
        if os.path.exists(seen + ".touch"):  # helper.py edited while the session runs
            os.utime(helper.__file__, (time.time() + 5, time.time() + 5))
        if side == "B" and os.path.exists(seen + ".hang"):
            time.sleep(600)  # until something ends this cell
        x = torch.ones(4)
        return Case(run=lambda: x * 2, expected=lambda: torch.full((4,), 2.0))

    OPS = [Op("op", build=build, shapes={"smoke": [{"n": 4}]})]
    SWITCH = Switch(env_b={"ABBENCH_TEST_SWITCH": "1"})
''')
HELPER = "import os\nVALUE = {value}\nIMPORTED_IN = os.getpid()\n"


class Sessions:
    """KEPT_CAMPAIGN's sessions in one pytester folder, each on a root of its own."""

    def __init__(self, pytester: pytest.Pytester, tmp_path: Path) -> None:
        self.pytester = pytester
        self.tmp_path = tmp_path
        self.seen_file = tmp_path / "seen"
        self.count = 0

    def run(self, *args: str) -> tuple[pytest.RunResult, dict[str, dict[str, object]]]:
        """One session; what its cells recorded, by side."""
        self.count += 1
        start = len(self.seen())
        result = self.pytester.runpytest_subprocess("c.py", "--ab-root", str(self.root(self.count)), *FAST, *args)
        result.assert_outcomes(passed=2)
        return result, {str(line["side"]): line for line in self.seen()[start:]}

    def root(self, n: int) -> Path:
        return self.tmp_path / f"root{n}"

    def seen(self) -> list[dict[str, object]]:
        text = self.seen_file.read_text() if self.seen_file.exists() else ""
        return [json.loads(line) for line in text.splitlines()]


@pytest.fixture
def sessions(campaign_dir: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Sessions:
    campaign_dir.makepyfile(c=KEPT_CAMPAIGN, helper=HELPER.format(value=1))
    dated_before_now(campaign_dir.path / "helper.py")
    monkeypatch.setenv("SEEN_FILE", str(tmp_path / "seen"))
    return Sessions(campaign_dir, tmp_path)


def dated_before_now(path: Path) -> None:
    """A file written a minute ago, not while the next server imports it (which would make it stale at once)."""
    os.utime(path, (time.time() - 60, time.time() - 60))


def wait_until(condition: object, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():  # type: ignore[operator]
            return True
        time.sleep(0.05)
    return False


def test_a_kept_server_serves_the_next_session_and_one_with_changed_code_is_not_used(
        sessions: Sessions, kept_servers_dir: Path) -> None:
    first, cells_1 = sessions.run("--ab-keep-servers", "60")
    first.stdout.fnmatch_lines(["abbench: 2 fork server(s) kept for 60 s (side A's and side B's): a next session*"])
    assert "fork servers kept from an earlier session" not in first.stdout.str()
    # The server leaves the session in a process of its own, forked from it: torch and helper stay imported.
    assert wait_until(lambda: len(keptservers.read_kept(kept_servers_dir)[0]) == 2), "their info files are written"
    waiting, problems = keptservers.read_kept(kept_servers_dir)
    assert problems == [] and sorted(s.side for s in waiting) == ["side-A", "side-B"]
    kept = {s.side[-1]: s.pid for s in waiting}
    assert all(process_alive(pid) for pid in kept.values())
    started = [int(cells_1[side]["server"]) for side in "AB"]  # type: ignore[call-overload]
    assert wait_until(lambda: not any(process_alive(pid) for pid in started)), "the session's own servers leave"

    # The next session's cells are forked by the kept servers, whose helper is the one imported before session 1.
    second, cells_2 = sessions.run("--ab-keep-servers", "60")
    # The time line says what this session did not pay: the imports the kept servers had paid (each side's cell
    # that took its server keeps that side's figure).
    imports = [json.loads((sessions.root(2) / f"r1_{side}" / "op" / "cell_timing.json").read_text())
               ["servers_kept_import_s"] for side in "AB"]
    assert all(s.import_s == pytest.approx(imported, abs=1e-3) for s, imported in
               zip(sorted(waiting, key=lambda s: s.side), imports)), (waiting, imports)
    second.stdout.fnmatch_lines([f"time: 2 cells *; fork servers kept from an earlier session (--ab-keep-servers): "
                                 f"their imports, {sum(imports):.1f} s when they started, not paid*"])
    for side in "AB":
        assert cells_2[side]["server"] == kept[side], (side, kept, cells_2)
        assert cells_2[side]["helper_imported_in"] == cells_1[side]["helper_imported_in"]
        log = (sessions.root(2) / f"r1_{side}" / "op" / "run.log").read_text()
        assert f"side {side}'s fork server was kept from an earlier session (pid {kept[side]}, session 2" in log

    # The folder made again under its name (a fresh clone): the kept servers' cells would run in the old one.
    folder = sessions.pytester.path
    shutil.move(folder, folder.with_name(folder.name + "-old"))
    shutil.copytree(folder.with_name(folder.name + "-old"), folder, symlinks=True)
    os.chdir(folder)
    moved, cells_moved = sessions.run("--ab-keep-servers", "60")
    moved.stdout.fnmatch_lines([f"abbench: side A's kept fork server was not used (stale: its working folder "
                                f"{folder} was made again since it started): a new one imports"])
    assert all(cells_moved[side]["helper_imported_in"] != cells_1[side]["helper_imported_in"] for side in "AB")
    assert wait_until(lambda: not any(process_alive(pid) for pid in kept.values())), "the stale servers end"
    assert wait_until(lambda: len(keptservers.read_kept(kept_servers_dir)[0]) == 2), "their info files are written"
    kept = {s.side[-1]: s.pid for s in keptservers.read_kept(kept_servers_dir)[0]}

    # helper.py changed: the kept servers would fork cells with its old code.  New servers import the new one.
    sessions.pytester.makepyfile(helper=HELPER.format(value=22))
    dated_before_now(folder / "helper.py")  # stale by its size and date all the same
    third, cells_3 = sessions.run("--ab-keep-servers", "0")
    third.stdout.fnmatch_lines([f"abbench: side A's kept fork server was not used (stale: "
                                f"{folder / 'helper.py'} changed since it was imported): a new one imports"])
    for side in "AB":
        assert cells_3[side]["value"] == 22
        assert cells_3[side]["server"] != kept[side]
        assert cells_3[side]["helper_imported_in"] != cells_moved[side]["helper_imported_in"]
        assert wait_until(lambda: not process_alive(kept[side])), "a stale server ends"
    # --ab-keep-servers 0: this session's servers end with it, and nothing waits.
    assert not any(process_alive(int(cells_3[side]["server"])) for side in "AB")  # type: ignore[call-overload]
    assert keptservers.read_kept(kept_servers_dir) == ([], [])
    assert not list(kept_servers_dir.glob("*.sock"))


def test_a_session_that_dies_takes_its_cells_down_with_it_in_a_kept_server(
        sessions: Sessions, kept_servers_dir: Path) -> None:
    """The kept server is not the session's child, so no parent-death signal reaches it: when the session's
    connection ends with a cell running, the server ends that cell as its own death would, and ends too."""
    sessions.run("--ab-keep-servers", "60")
    assert wait_until(lambda: len(keptservers.read_kept(kept_servers_dir)[0]) == 2), "their info files are written"
    kept = {s.side[-1]: s.pid for s in keptservers.read_kept(kept_servers_dir)[0]}
    server_b = kept["B"]
    Path(str(sessions.seen_file) + ".hang").touch()
    # As runpytest_subprocess starts a session (its environment), but in the background.
    log = open(sessions.tmp_path / "session.log", "w")
    session = sessions.pytester.popen([sys.executable, "-m", "pytest", "c.py", "--ab-root", str(sessions.root(9)),
                                       *FAST, "--ab-keep-servers", "60"], stdout=log, stderr=subprocess.STDOUT)
    try:
        assert wait_until(lambda: len([c for c in sessions.seen() if c["side"] == "B"]) == 2, 60), \
            "side B's cell of the second session never started: " + (sessions.tmp_path / "session.log").read_text()
        hung = [c for c in sessions.seen() if c["side"] == "B"][-1]
        assert hung["server"] == server_b, "the second session took the kept server"
    finally:
        session.kill()
        session.wait()
        log.close()
    measuring = int(hung["measuring"])  # type: ignore[call-overload]
    assert wait_until(lambda: not process_alive(measuring)), "the hung cell was left running"
    assert wait_until(lambda: not process_alive(server_b)), "the server a dead session held was left running"
    # Side A's server was kept again when its last cell ended, before the session died.
    (waiting,), _ = keptservers.read_kept(kept_servers_dir)
    assert (waiting.side, waiting.pid, waiting.sessions) == ("side-A", kept["A"], 2)


def test_kept_servers_end_when_idle_are_listed_and_stopped_on_request(
        sessions: Sessions, kept_servers_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sessions.run("--ab-keep-servers", "60")
    assert wait_until(lambda: len(keptservers.read_kept(kept_servers_dir)[0]) == 2), "their info files are written"
    servers = sorted(s.pid for s in keptservers.read_kept(kept_servers_dir)[0])
    assert len(servers) == 2
    assert abbench_main(["servers"]) == 0
    out = capsys.readouterr().out
    assert "side-A" in out and "side-B" in out and all(f"pid {pid} side-" in out for pid in servers), out
    assert "abbench servers: 2 waiting in" in out
    assert abbench_main(["servers", "--stop"]) == 0
    assert capsys.readouterr().out.count("ended: pid") == 2
    assert wait_until(lambda: not any(process_alive(pid) for pid in servers))
    assert not list(kept_servers_dir.glob("*.sock")) and not list(kept_servers_dir.glob("*.json"))

    _, cells_2 = sessions.run("--ab-keep-servers", "1")
    assert cells_2["A"]["server"] not in servers, "a stopped server is never taken"
    logs = sorted(kept_servers_dir.glob("*.log"))
    assert len(logs) == 2
    assert wait_until(lambda: not list(kept_servers_dir.glob("*.sock")), 15), "idle servers end on their own"
    assert not list(kept_servers_dir.glob("*.json"))
    for log in logs:  # each key's log: session 1's server stopped, then session 2's waited its second and ended
        lines = log.read_text().splitlines()
        assert "asked to end (SIGTERM: abbench servers --stop" in lines[1] and "kept for 1 s at" in lines[2], lines
        assert lines[3].endswith(": no session came; ending"), lines
    assert abbench_main(["servers"]) == 0
    assert "none waiting" in capsys.readouterr().out


@pytest.mark.parametrize("value, why", [("-1", "must be 0 to 86400 seconds (0: keep none), got '-1'"),
                                        ("1e10", "must be 0 to 86400 seconds (0: keep none), got '1e10'"),
                                        ("soon", "expected auto or a number of seconds, got 'soon'")])
def test_a_bad_keep_servers_value_is_named(campaign_dir: pytest.Pytester, value: str, why: str) -> None:
    result = campaign_dir.runpytest("--ab-keep-servers", value)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*argument --ab-keep-servers: {why}"])


def test_a_kept_folder_others_can_open_or_too_long_for_a_socket_is_refused_by_name(kept_servers_dir: Path) -> None:
    folder = kept_servers_dir / "open"
    folder.mkdir()
    folder.chmod(0o755)  # another user could connect and have cells run as this one
    with pytest.raises(keptservers.KeptFolderError, match=f"{folder}: kept fork servers need a folder only this "
                                                          "user can open .*mode 0o755"):
        keptservers.kept_dir({"ABBENCH_SERVER_DIR": str(folder)})
    long = kept_servers_dir / ("x" * 60)
    with pytest.raises(keptservers.KeptFolderError, match=f"{long}: the kept servers' folder is longer than 60 "
                                                          "characters"):
        keptservers.kept_dir({"ABBENCH_SERVER_DIR": str(long)})


def test_an_unreadable_info_file_is_named_and_the_others_listed(kept_servers_dir: Path) -> None:
    (kept_servers_dir / "0123.json").write_text("{not json")
    (kept_servers_dir / "4567.json").write_text(json.dumps({"digest": "4567"}))
    waiting, problems = keptservers.read_kept(kept_servers_dir)
    assert waiting == []
    assert problems[0].startswith(f"{kept_servers_dir / '0123.json'}: not valid JSON (")
    assert problems[1] == f"{kept_servers_dir / '4567.json'}: field 'pid': missing (expected a whole number)"


def test_a_file_written_while_the_server_imported_it_counts_as_changed(tmp_path: Path) -> None:
    """Its date after the imports began: it may have changed after it was read, whatever it says now."""
    from pytest_abbench.child.server import first_change, module_signature

    started_at = time.time()
    late = tmp_path / "late_module.py"
    late.write_text("VALUE = 1\n")
    os.utime(late, (started_at + 1, started_at + 1))
    sys.path.insert(0, str(tmp_path))
    try:
        import late_module  # noqa: F401

        signature = module_signature(started_at)
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("late_module", None)
    assert signature[str(late)] == (-1, -1)
    assert first_change({str(late): signature[str(late)]}) == f"{late} was written while the server was importing"
    assert first_change({k: v for k, v in signature.items() if k != str(late)}) is None


def test_a_server_kept_at_its_sides_last_cell_and_taken_again_in_the_session_is_not_counted_as_kept_before(
        tmp_path: Path, kept_servers_dir: Path) -> None:
    """A retired server is kept (its side's last cell ended); a cell that needs it after all (an op an xdist
    worker is handed later) takes it again: no imports, but none an earlier session paid either, and the end
    counts it once."""
    servers = ForkServers(tmp_path / "servers", keep_s=60)
    env = dict(os.environ)
    servers.server(sys.executable, env, "side-A")
    assert servers.retire(sys.executable, env, "side-A")
    assert wait_until(lambda: len(keptservers.read_kept(kept_servers_dir)[0]) == 1), "its info file is written"
    (waiting,), _ = keptservers.read_kept(kept_servers_dir)
    servers.notices.clear()
    again = servers.server(sys.executable, env, "side-A")
    assert again.pid == waiting.pid
    assert servers.notices == [f"side A's fork server, kept when its last cell ended, is taken again "
                               f"(pid {waiting.pid}): no imports"]
    assert servers.taken_import_s == 0.0
    lines = servers.close()
    assert lines[0].startswith("1 fork server(s) kept for 60 s (side A's)"), lines
    assert wait_until(lambda: len(keptservers.read_kept(kept_servers_dir)[0]) == 1), "its info file is written"
    (kept,), _ = keptservers.read_kept(kept_servers_dir)
    assert (kept.pid, kept.sessions) == (waiting.pid, 2)


def test_an_xdist_workers_kept_servers_serve_the_next_run(sessions: Sessions, kept_servers_dir: Path) -> None:
    """xdist gives each run a new PYTEST_XDIST_TESTRUNUID, in every server's environment: a kept server's name
    leaves it out, or no later run would find one."""
    first, cells_1 = sessions.run("-n", "1", "--ab-keep-servers", "60")
    # The worker's own terminal is not shown: the controller says what it kept.
    first.stdout.fnmatch_lines(["abbench: gw0: 2 fork server(s) kept for 60 s (side A's and side B's): *"])
    assert wait_until(lambda: len(keptservers.read_kept(kept_servers_dir)[0]) == 2), "their info files are written"
    _, cells_2 = sessions.run("-n", "1", "--ab-keep-servers", "60")
    for side in "AB":
        assert cells_2[side]["helper_imported_in"] == cells_1[side]["helper_imported_in"], (cells_1, cells_2)


def test_a_server_whose_code_changed_during_the_session_is_not_kept(sessions: Sessions, kept_servers_dir: Path) -> None:
    Path(str(sessions.seen_file) + ".touch").touch()
    result, _ = sessions.run("--ab-keep-servers", "60")
    result.stdout.fnmatch_lines([f"abbench: side A's fork server was not kept: stale: "
                                 f"{sessions.pytester.path / 'helper.py'} changed since it was imported"])
    assert "fork server(s) kept for" not in result.stdout.str()
    assert keptservers.read_kept(kept_servers_dir) == ([], [])


def test_each_xdist_worker_keeps_its_sides_servers_beyond_the_single_session_cap(
        sessions: Sessions, kept_servers_dir: Path) -> None:
    """Three workers, an op each: six servers, each worker's own (their names differ by worker).  A cap of
    MAX_KEPT (4) for the host would leave one worker's sides to import again next run."""
    ops = 'OPS = [Op(name, build=build, shapes={"smoke": [{"n": 4}]}) for name in ("op1", "op2", "op3")]'
    sessions.pytester.makepyfile(c=KEPT_CAMPAIGN.replace('OPS = [Op("op", build=build, shapes={"smoke": [{"n": 4}]})]',
                                                         ops))
    result = sessions.pytester.runpytest_subprocess("c.py", "--ab-root", str(sessions.root(1)), *FAST,
                                                    "-n", "3", "--ab-keep-servers", "60")
    result.assert_outcomes(passed=6)
    kept_by = [line for line in result.stdout.lines if "fork server(s) kept for 60 s" in line]
    assert len(kept_by) == 3 and all(": 2 fork server(s)" in line for line in kept_by), result.stdout.str()
    assert keptservers.MAX_KEPT < 6
    assert wait_until(lambda: len(keptservers.read_kept(kept_servers_dir)[0]) == 6), keptservers.read_kept(
        kept_servers_dir)
