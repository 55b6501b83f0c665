"""``--ab-spawn fork``: cells forked from one server per side, isolated as fresh processes are.

Real pytest sessions in the interpreter: the servers import torch and Triton
once; each cell records, from inside its measuring process, the pids of its
process chain and the environment it saw.
"""

from __future__ import annotations

import json
import os
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

from helpers import process_alive
from pytest_abbench.core.layout import IDENTITY_FILE
from pytest_abbench.core.status import read_status
from pytest_abbench.spawn.forkserver import ForkServers
from pytest_abbench.spawn.strategy import PRESTART_SERVERS

FAST = ("--ab-ir-target", "none", "--ab-samples", "1", "-p", "no:cacheprovider")

# Each cell appends one line to $SEEN_FILE: its op and side, its pids, and the variables fork must honour.
CHAIN_CAMPAIGN = textwrap.dedent('''
    import json, os, signal, time
    import torch
    from pytest_abbench.campaign.model import Case, Op, Switch

    def ppid_of(pid):
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read()
        return int(stat[stat.rfind(b")") + 2:].split()[1])

    def record(op, shape):
        supervisor = os.getppid()  # the cell's own process, forked by its server (or exec'd by pytest)
        line = {"op": op, "shape": shape["n"], "measuring": os.getpid(), "cell": supervisor,
                "server": ppid_of(supervisor), "switch": os.environ.get("ABBENCH_TEST_SWITCH"),
                "tuner_cache": os.environ.get("FLAGGEMS_CACHE_DIR"), "sid": os.getsid(0)}
        with open(os.environ["SEEN_FILE"], "a") as handle:
            handle.write(json.dumps(line) + "\\n")

    def ok(shape, device):
        record("ok", shape)
        x = torch.ones(4)
        return Case(run=lambda: x * 2, expected=lambda: torch.full((4,), 2.0))

    def crash(shape, device):
        record("crash", shape)
        if os.environ.get("ABBENCH_TEST_SWITCH") == "1":
            os.kill(os.getpid(), signal.SIGSEGV)
        return ok(shape, device)

    def kill_server(shape, device):
        record("kill_server", shape)
        once = os.environ.get("KILL_SERVER")
        if os.environ.get("ABBENCH_TEST_SWITCH") == "1" and once and not os.path.exists(once):
            open(once, "w").close()
            os.kill(ppid_of(os.getppid()), signal.SIGKILL)
            time.sleep(30)  # the parent-death signal ends this cell
        return ok(shape, device)

    OPS = [Op("crash", build=crash, shapes={"smoke": [{"n": 4}]}),
           Op("ok", build=ok, shapes={"smoke": [{"n": 4}, {"n": 8}]}),
           Op("kill_server", build=kill_server, shapes={"smoke": [{"n": 4}]})]
    SWITCH = Switch(env_b={"ABBENCH_TEST_SWITCH": "1"})
''')


@dataclass
class Chain:
    """CHAIN_CAMPAIGN in a pytester folder: its sessions, the root they write, what each cell recorded."""

    pytester: pytest.Pytester
    root: Path
    seen_file: Path

    def run(self, *args: str) -> pytest.RunResult:
        return self.pytester.runpytest_subprocess("c.py", *args, "--ab-root", str(self.root), *FAST)

    def seen(self) -> list[dict[str, object]]:
        return [json.loads(line) for line in self.seen_file.read_text().splitlines()]


@pytest.fixture
def chain(campaign_dir: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Chain:
    campaign_dir.makepyfile(c=CHAIN_CAMPAIGN)
    monkeypatch.setenv("SEEN_FILE", str(tmp_path / "seen"))
    return Chain(campaign_dir, tmp_path / "root", tmp_path / "seen")


def test_forked_cells_share_one_server_per_side_and_keep_their_own_environment(chain: Chain) -> None:
    root = chain.root
    result = chain.run("-k", "ok", "--ab-rounds", "2", "--ab-spawn", "fork")
    result.assert_outcomes(passed=4)
    cells = [line for line in chain.seen() if line["shape"] == 4]
    by_side = {side: [c for c in cells if c["switch"] == ("1" if side == "B" else None)] for side in "AB"}
    assert [len(by_side["A"]), len(by_side["B"])] == [2, 2]
    servers = {side: {c["server"] for c in by_side[side]} for side in "AB"}
    assert all(len(s) == 1 for s in servers.values()), f"one server per side: {servers}"
    assert servers["A"] != servers["B"], "the two sides' environments differ: two servers"
    assert len({c["cell"] for c in cells}) == 4, "every cell is a process of its own"
    assert all(c["sid"] == c["cell"] for c in cells), "every cell leads its own session (process group)"
    # A per-cell variable is the cell's own although the server was started once.
    assert len({c["tuner_cache"] for c in cells}) == 4
    for c in cells:
        assert str(c["tuner_cache"]).startswith(str(root))
    identity = json.loads((root / "r2_B" / "ok" / IDENTITY_FILE).read_text())
    assert identity["spawn"] == "fork"
    # The servers end with the session.
    assert not any(process_alive(int(pid)) for pid in servers["A"] | servers["B"])  # type: ignore[call-overload]
    assert sorted(p.name for p in (root / "servers").iterdir()) == ["side-A-1.log", "side-B-2.log"]


def test_exec_spawns_a_fresh_interpreter_per_cell(chain: Chain) -> None:
    root = chain.root
    result = chain.run("-k", "ok", "--ab-rounds", "1", "--ab-spawn", "exec")
    result.assert_outcomes(passed=2)
    cells = [line for line in chain.seen() if line["shape"] == 4]
    assert len({c["server"] for c in cells}) == 1, "an exec'd cell's parent is the session itself"
    assert [c["switch"] for c in cells] == [None, "1"]
    assert json.loads((root / "r1_A" / "ok" / IDENTITY_FILE).read_text())["spawn"] == "exec"
    assert not (root / "servers").exists()


def test_a_crashed_forked_cell_costs_only_itself(chain: Chain) -> None:
    """Side B of ``crash`` dies of SIGSEGV in round 1; its server and every later cell carry on."""
    root = chain.root
    result = chain.run("-k", "crash or ok", "--ab-rounds", "2", "--ab-spawn", "fork")
    assert result.ret == 1
    rows = {(r.round, r.op, r.side): r.status for r in read_status(root)}
    assert rows[(1, "crash", "B")] == "SEGFAULT"
    assert [rows[(n, "ok", side)] for n in (1, 2) for side in "AB"] == ["ok"] * 4
    side_b = [c for c in chain.seen() if c["switch"] == "1"]
    assert [c["op"] for c in side_b][:2] == ["crash", "ok"], "ok's side B ran after the crash"
    assert len({c["server"] for c in side_b}) == 1, "the crash did not take the server down"


def test_a_dead_server_fails_its_cell_by_name_and_is_replaced(chain: Chain, monkeypatch: pytest.MonkeyPatch) -> None:
    """kill_server's side B SIGKILLs its own server in round 1: that cell fails saying so, its processes die
    with the server, and the next side-B cell runs on a new server and says why there is one."""
    root = chain.root
    monkeypatch.setenv("KILL_SERVER", str(chain.root.parent / "killed-once"))
    result = chain.run("-k", "kill_server or ok", "--ab-rounds", "2", "--ab-spawn", "fork")
    assert result.ret == 1
    rows = {(r.round, r.op, r.side): r.status for r in read_status(root)}
    assert rows[(1, "kill_server", "B")] != "ok"
    assert rows[(2, "ok", "B")] == "ok"
    log = (root / "r1_B" / "kill_server" / "run.log").read_text()
    assert "the fork server (pid" in log and "died while this cell" in log, log
    killer = next(c for c in chain.seen() if c["op"] == "kill_server" and c["switch"] == "1")
    assert not process_alive(int(killer["measuring"])) and not process_alive(int(killer["cell"]))  # type: ignore[call-overload]
    side_b = [c for c in chain.seen() if c["switch"] == "1"]
    assert len({c["server"] for c in side_b}) == 2, "a new server after the first one was killed"
    assert "starting a new one" in (root / "r2_B" / "ok" / "run.log").read_text()


# The end of the campaigns below: a cell's ``build`` appends its ``line`` to SEEN_FILE, then times a tiny op; one
# op named OP, whose side B sets VAR.
RECORDING_CELL = textwrap.dedent('''
        with open(os.environ["SEEN_FILE"], "a") as handle:
            handle.write(json.dumps(line) + "\\n")
        x = torch.ones(4)
        return Case(run=lambda: x * 2, expected=lambda: torch.full((4,), 2.0))

    OPS = [Op(OP, build=build, shapes={"smoke": [{"n": 4}]})]
    SWITCH = Switch(env_b={VAR: "1"})
''')


# A campaign whose cells record when their fork server was started and when they themselves ran, both on
# the boot clock (/proc's process start times count from boot).
TIMED_CAMPAIGN = textwrap.dedent('''
    import json, os, time
    import torch
    from pytest_abbench.campaign.model import Case, Op, Switch

    def started_s(pid):
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read()
        fields = stat[stat.rfind(b")") + 2:].split()
        return int(fields[19]) / os.sysconf("SC_CLK_TCK"), int(fields[1])

    def build(shape, device):
        cell = os.getppid()
        _, server = started_s(cell)
        line = {"op": OP, "side": "B" if os.environ.get(VAR) else "A",
                "server_started": started_s(server)[0], "ran": time.clock_gettime(time.CLOCK_BOOTTIME)}
''') + RECORDING_CELL


def test_the_servers_of_every_collected_switch_start_with_the_first_cell(
        campaign_dir: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two campaigns, two switches: the second campaign's side-B server imports while the first campaign's
    cells run, instead of when its own first cell comes (seconds of an idle GPU each)."""
    campaign_dir.makepyfile(first=f"OP, VAR = 'first', 'ABBENCH_TEST_FIRST'\n{TIMED_CAMPAIGN}",
                            second=f"OP, VAR = 'second', 'ABBENCH_TEST_SECOND'\n{TIMED_CAMPAIGN}")
    seen_file = tmp_path / "seen"
    monkeypatch.setenv("SEEN_FILE", str(seen_file))
    root = tmp_path / "root"
    result = campaign_dir.runpytest_subprocess("first.py", "second.py", "--ab-rounds", "1", "--ab-spawn", "fork",
                                               "--ab-root", str(root), *FAST)
    result.assert_outcomes(passed=4)
    cells = {(c["op"], c["side"]): c for c in map(json.loads, seen_file.read_text().splitlines())}
    assert sorted(cells) == [("first", "A"), ("first", "B"), ("second", "A"), ("second", "B")]
    first_cell_ran = cells[("first", "A")]["ran"]
    # Started ahead: before the session's first cell got to its build, not when "second" came.
    assert cells[("second", "B")]["server_started"] < first_cell_ran, cells
    assert sorted(p.name for p in (root / "servers").iterdir()) == ["side-A-1.log", "side-B-2.log", "side-B-3.log"]


@pytest.mark.parametrize("first_line, version", [
    ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.04  Thu Oct  2 12:00:00 UTC 2025", "580.159.04"),
    ("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.86.15  Release Build  (dvs-builder@U16)", "570.86.15"),
])
def test_the_driver_version_is_read_from_proc(tmp_path: Path, first_line: str, version: str) -> None:
    """Each cell's identity names the driver; /proc has it without an nvidia-smi process per cell."""
    from pytest_abbench.child.identity import driver_version

    path = tmp_path / "version"
    path.write_text(first_line + "\nGCC version:  gcc version 12.3.0\n")
    assert driver_version(path) == version


# Each cell writes which fork servers of this test are alive as it builds, read from /proc: a server is a
# process running the server module whose parent is not one (its forked cells run the same command line).
# Nothing waits: a server told to end must be gone before the next cell starts.
LIVE_SERVERS_CAMPAIGN = textwrap.dedent('''
    import json, os
    import torch
    from pytest_abbench.campaign.model import Case, Op, Switch

    SERVER = b"pytest_abbench.child.server"

    def cmdline(pid):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                return handle.read()
        except OSError:
            return b""

    def live_servers():
        found = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or SERVER not in cmdline(entry):
                continue
            try:
                with open(f"/proc/{entry}/stat", "rb") as handle:
                    stat = handle.read().rsplit(b")", 1)[1].split()
                with open(f"/proc/{entry}/environ", "rb") as handle:
                    env = dict(v.split(b"=", 1) for v in handle.read().split(b"\\0") if b"=" in v)
            except OSError:
                continue
            if stat[0] == b"Z" or SERVER in cmdline(int(stat[1])):
                continue
            if env.get(b"SEEN_FILE", b"").decode() != os.environ["SEEN_FILE"]:
                continue  # another test's
            found.append(next((k.decode() for k in env if k.startswith(b"ABBENCH_TEST_SW")), "A"))
        return sorted(found)

    def build(shape, device):
        side = "B" if os.environ.get(VAR) else "A"
        with open(os.environ["SEEN_FILE"], "a") as handle:
            handle.write(json.dumps({"cell": f"{OP}-{side}", "live": live_servers()}) + "\\n")
        x = torch.ones(4)
        return Case(run=lambda: x * 2, expected=lambda: torch.full((4,), 2.0))

    OPS = [Op(OP, build=build, shapes={"smoke": [{"n": 4}]})]
    SWITCH = Switch(env_b={VAR: "1"})
''')


def test_eight_switches_never_keep_more_servers_than_have_cells_left(campaign_dir: pytest.Pytester, tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Eight switches, one round each, in one session: cells run s1-A, s1-B, ..., s8-A, s8-B; side A has one
    server for all eight (the same environment), each switch's side B one of its own.  At every cell the live
    servers are among those that still have a cell to fork (this one included), and at most PRESTART_SERVERS."""
    switches = 8
    for k in range(1, switches + 1):
        campaign_dir.makepyfile(**{f"s{k}": f"OP, VAR = 's{k}', 'ABBENCH_TEST_SW{k}'\n{LIVE_SERVERS_CAMPAIGN}"})
    seen_file = tmp_path / "seen"
    monkeypatch.setenv("SEEN_FILE", str(seen_file))
    files = [f"s{k}.py" for k in range(1, switches + 1)]
    result = campaign_dir.runpytest_subprocess(*files, "--ab-rounds", "1", "--ab-spawn", "fork",
                                               "--ab-root", str(tmp_path / "root"), *FAST)
    result.assert_outcomes(passed=2 * switches)
    seen = [json.loads(line) for line in seen_file.read_text().splitlines()]
    order = [f"s{k}-{side}" for k in range(1, switches + 1) for side in "AB"]
    assert [c["cell"] for c in seen] == order, seen

    def server(cell: str) -> str:
        op, side = cell.split("-")
        return "A" if side == "A" else f"ABBENCH_TEST_SW{op[1:]}"

    for i, cell in enumerate(seen):
        needed = {server(later) for later in order[i:]}
        assert server(cell["cell"]) in cell["live"], cell
        assert set(cell["live"]) <= needed, f"{cell['cell']}: live {cell['live']}, still needed {sorted(needed)}"
        assert len(cell["live"]) <= PRESTART_SERVERS, cell
    # Started ahead at the first cell: the next two switches' side B (four in all with s1's own two).
    assert seen[0]["live"] == ["A", "ABBENCH_TEST_SW1", "ABBENCH_TEST_SW2", "ABBENCH_TEST_SW3"], seen[0]


def test_the_two_sides_never_share_a_server_even_with_equal_environments(campaign_dir: pytest.Pytester,
                                                                        tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """A switch made by a setup hook leaves both sides' environments equal. When the sides shared a server, round
    1's precompile on a GPU sent both sides' compiles to it at once; a server forks one at a time, and the
    session waited for a reply that never came (seen on the H200 with campaigns/topk.py)."""
    hook_switch = ('def mark_b():\n    os.environ["ABBENCH_TEST_SWITCH"] = "1"\n\n'
                   'SWITCH = Switch(setup_b=mark_b)')
    campaign_dir.makepyfile(c=CHAIN_CAMPAIGN.replace('SWITCH = Switch(env_b={"ABBENCH_TEST_SWITCH": "1"})',
                                                     hook_switch))
    monkeypatch.setenv("SEEN_FILE", str(tmp_path / "seen"))
    chain = Chain(campaign_dir, tmp_path / "root", tmp_path / "seen")
    chain.run("-k", "ok", "--ab-rounds", "2", "--ab-spawn", "fork").assert_outcomes(passed=4)
    cells = [line for line in chain.seen() if line["shape"] == 4]
    servers = {side: {c["server"] for c in cells if c["switch"] == ("1" if side == "B" else None)} for side in "AB"}
    assert all(len(s) == 1 for s in servers.values()) and servers["A"] != servers["B"], servers
    assert sorted(p.name for p in (chain.root / "servers").iterdir()) == ["side-A-1.log", "side-B-2.log"]


# SERVER_IMPORTS: heavy_ok is kept by each side's server; inits_cuda stands for a library whose import initialises
# CUDA (FlagGems does): setting torch's flag is the part that needs a GPU, which these tests do not have; flaky
# fails its first import on each side (the server's) and imports in the cells.
SERVER_IMPORT_MODULES = {
    "heavy_ok": "import os\n__version__ = '1.2.3'\nIMPORTED_IN = os.getpid()\n",
    "inits_cuda": "import torch.cuda\ntorch.cuda._initialized = True\n",
    "flaky": textwrap.dedent('''
        import os
        marker = os.path.join(os.environ["MARKER_DIR"], "flaky-" + os.environ.get("ABBENCH_TEST_SWITCH", "A"))
        if not os.path.exists(marker):
            open(marker, "w").close()
            raise ImportError("flaky: the first import fails")
    '''),
}
SERVER_IMPORTS_CAMPAIGN = textwrap.dedent('''
    import json, os
    import torch
    from pytest_abbench.campaign.model import Case, Op, Switch

    SERVER_IMPORTS = ("heavy_ok", "inits_cuda", "flaky")

    def ppid_of(pid):
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read()
        return int(stat[stat.rfind(b")") + 2:].split()[1])

    def build(shape, device):
        import heavy_ok
        line = {"side": "B" if os.environ.get("ABBENCH_TEST_SWITCH") else "A", "measuring": os.getpid(),
                "server": ppid_of(os.getppid()), "heavy_ok_imported_in": heavy_ok.IMPORTED_IN}
        with open(os.environ["SEEN_FILE"], "a") as handle:
            handle.write(json.dumps(line) + "\\n")
        x = torch.ones(4)
        return Case(run=lambda: x * 2, expected=lambda: torch.full((4,), 2.0))

    OPS = [Op("op", build=build, shapes={"smoke": [{"n": 4}]})]
    SWITCH = Switch(env_b={"ABBENCH_TEST_SWITCH": "1"})
''')


def test_server_imports_are_paid_once_per_server_and_unsafe_ones_are_left_to_the_cells(
        campaign_dir: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each side's server imports heavy_ok before it forks: the cells find it imported by their server.  It
    refuses inits_cuda (CUDA does not survive fork) and starts again without it; flaky fails in the server and
    imports in the cells.  Both cells pass; the terminal and the first cell's log of each side say what happened;
    the identity names the versions that ran and what the server imported."""
    campaign_dir.makepyfile(c=SERVER_IMPORTS_CAMPAIGN, **SERVER_IMPORT_MODULES)
    monkeypatch.setenv("SEEN_FILE", str(tmp_path / "seen"))
    monkeypatch.setenv("MARKER_DIR", str(tmp_path))
    root = tmp_path / "root"
    result = campaign_dir.runpytest_subprocess("c.py", "--ab-rounds", "1", "--ab-spawn", "fork",
                                               "--ab-root", str(root), *FAST)
    result.assert_outcomes(passed=2)
    for side in "AB":
        result.stdout.fnmatch_lines([
            f"abbench: side {side}'s fork server did not import inits_cuda (SERVER_IMPORTS): importing it "
            "initialised CUDA, and a forked cell cannot use a CUDA context made before the fork; its cells import "
            "it themselves (server log: *)",
            f"abbench: side {side}'s fork server could not import flaky (SERVER_IMPORTS): importing it raised "
            "ImportError: flaky: the first import fails; its cells import it themselves*"], consecutive=False)
        log = (root / f"r1_{side}" / "op" / "run.log").read_text()
        assert "did not import inits_cuda" in log and "could not import flaky" in log, log
        identity = json.loads((root / f"r1_{side}" / "op" / IDENTITY_FILE).read_text())
        assert identity["server_imports"] == "heavy_ok==1.2.3 inits_cuda==unknown flaky==unknown", identity
        assert identity["imported_by_server"] == "heavy_ok", identity
    cells = [json.loads(line) for line in (tmp_path / "seen").read_text().splitlines()]
    assert sorted(c["side"] for c in cells) == ["A", "B"]
    assert all(c["heavy_ok_imported_in"] == c["server"] for c in cells), cells
    # Per side: the server that refused inits_cuda, then the one that forked the cell.
    assert sorted(p.name for p in (root / "servers").iterdir()) == [
        "side-A-1.log", "side-A-3.log", "side-B-2.log", "side-B-4.log"]


# UNUSED_IMPORTS: probes tries an optional dependency at import, as liger_kernel.utils tries peft; slowdep stands
# for that dependency (peft pulls in transformers: 12-16 s per interpreter on the H200 host) and leaves a file when
# it is imported.
UNUSED_IMPORT_MODULES = {
    "slowdep": "import os\nopen(os.path.join(os.environ['MARKER_DIR'], f'slowdep-{os.getpid()}'), 'w').close()\n",
    "probes": "try:\n    import slowdep\n    FOUND = True\nexcept ImportError:\n    FOUND = False\n",
}
UNUSED_IMPORTS_CAMPAIGN = textwrap.dedent('''
    import json, os
    import torch
    from pytest_abbench.campaign.model import Case, Op, Switch

    SERVER_IMPORTS = ("probes",)
    UNUSED_IMPORTS = ("slowdep",)

    def build(shape, device):
        import probes
        with open(os.environ["SEEN_FILE"], "a") as handle:
            handle.write(json.dumps({"found": probes.FOUND}) + "\\n")
        x = torch.ones(4)
        return Case(run=lambda: x * 2, expected=lambda: torch.full((4,), 2.0))

    OPS = [Op("op", build=build, shapes={"smoke": [{"n": 4}]})]
    SWITCH = Switch(env_b={"ABBENCH_TEST_SWITCH": "1"})
''')


@pytest.mark.parametrize("spawn", ["fork", "exec"])
def test_an_unused_import_is_missing_in_every_cell_forked_or_not(
        campaign_dir: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spawn: str) -> None:
    campaign_dir.makepyfile(c=UNUSED_IMPORTS_CAMPAIGN, **UNUSED_IMPORT_MODULES)
    monkeypatch.setenv("SEEN_FILE", str(tmp_path / "seen"))
    monkeypatch.setenv("MARKER_DIR", str(tmp_path))
    root = tmp_path / "root"
    result = campaign_dir.runpytest_subprocess("c.py", "--ab-rounds", "1", "--ab-spawn", spawn,
                                               "--ab-root", str(root), *FAST)
    result.assert_outcomes(passed=2)
    assert [json.loads(line) for line in (tmp_path / "seen").read_text().splitlines()] == [{"found": False}] * 2
    assert not list(tmp_path.glob("slowdep-*")), "slowdep was imported somewhere"
    for side in "AB":
        identity = json.loads((root / f"r1_{side}" / "op" / IDENTITY_FILE).read_text())
        assert identity["server_imports"].split()[0] == "!slowdep==missing", identity
    # The same campaign without UNUSED_IMPORTS: probes finds slowdep (the test can tell).
    campaign_dir.makepyfile(c=UNUSED_IMPORTS_CAMPAIGN.replace('UNUSED_IMPORTS = ("slowdep",)', ""))
    (tmp_path / "seen").unlink()
    campaign_dir.runpytest_subprocess("c.py", "--ab-rounds", "1", "--ab-spawn", spawn, "--ab-root",
                                      str(tmp_path / "root2"), *FAST).assert_outcomes(passed=2)
    assert [json.loads(line) for line in (tmp_path / "seen").read_text().splitlines()] == [{"found": True}] * 2


def test_a_server_two_campaigns_share_after_a_refusal_is_kept_for_the_second(
        campaign_dir: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """c1 names inits_cuda, which each side's server refuses; c2 names nothing.  After the refusal both campaigns'
    cells fork from one server per side, so c1's last cell must not end it while c2's cells are still to come."""
    lines = SERVER_IMPORTS_CAMPAIGN.replace('("heavy_ok", "inits_cuda", "flaky")', '("inits_cuda",)').replace(
        "        import heavy_ok\n", "").replace(', "heavy_ok_imported_in": heavy_ok.IMPORTED_IN', "")
    campaign_dir.makepyfile(c1=lines, c2=lines.replace('SERVER_IMPORTS = ("inits_cuda",)', "").replace(
        'Op("op"', 'Op("op2"'), **SERVER_IMPORT_MODULES)
    monkeypatch.setenv("SEEN_FILE", str(tmp_path / "seen"))
    root = tmp_path / "root"
    result = campaign_dir.runpytest_subprocess("c1.py", "c2.py", "--ab-rounds", "1", "--ab-spawn", "fork",
                                               "--ab-root", str(root), *FAST)
    result.assert_outcomes(passed=4)
    cells = [json.loads(line) for line in (tmp_path / "seen").read_text().splitlines()]
    servers = {side: {c["server"] for c in cells if c["side"] == side} for side in "AB"}
    assert all(len(found) == 1 for found in servers.values()), cells  # one server per side for both campaigns
    # Per side: the server that refused inits_cuda, then the one both campaigns' cells were forked from.
    assert len(list((root / "servers").iterdir())) == 4, sorted(p.name for p in (root / "servers").iterdir())


def importing_from(folder: Path) -> dict[str, str]:
    """This process's environment with ``folder`` first on PYTHONPATH: a server started with it imports the
    modules a test writes there."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(folder), os.environ.get("PYTHONPATH", "")])}


def test_a_server_refuses_a_module_that_reads_a_per_cell_variable(tmp_path: Path) -> None:
    """A module that reads FLAGGEMS_CACHE_DIR at import would keep the server's value (none) for every cell."""
    (tmp_path / "reads_cell_env.py").write_text("import os\nCACHE = os.environ.get('FLAGGEMS_CACHE_DIR')\n")
    env = importing_from(tmp_path)
    servers = ForkServers(tmp_path / "servers")
    try:
        server = servers.server(sys.executable, env, "side-B", ("reads_cell_env",))
        assert server.imports == ()
        assert servers.said == [
            "side B's fork server did not import reads_cell_env (SERVER_IMPORTS): importing it read "
            "FLAGGEMS_CACHE_DIR, whose value differs per cell; a module imported by the server keeps what it read "
            f"for every cell; its cells import it themselves (server log: {tmp_path / 'servers' / 'side-B-1.log'})"]
        assert "refused reads_cell_env" in (tmp_path / "servers" / "side-B-1.log").read_text()
    finally:
        servers.close()


def test_a_server_refuses_a_module_after_which_torch_refuses_cuda_in_a_fork(tmp_path: Path) -> None:
    """poisons_fork stands for a library whose import asked the CUDA runtime for the device count: no context is
    made (torch.cuda.is_initialized() stays False), but torch's own at-fork handler marks every later child
    'bad' and its first CUDA call fails.  The handler is what needs a GPU; this module registers one that sets
    the same mark.  Without the probe every cell of the server failed (on the H200, with Liger-Kernel)."""
    (tmp_path / "poisons_fork.py").write_text(
        "import os\nimport torch.cuda\n"
        "os.register_at_fork(after_in_child=lambda: setattr(torch.cuda, '_is_in_bad_fork', lambda: True))\n")
    env = importing_from(tmp_path)
    servers = ForkServers(tmp_path / "servers")
    try:
        server = servers.server(sys.executable, env, "side-A", ("poisons_fork",))
        assert server.imports == ()
        assert servers.said == [
            "side A's fork server did not import poisons_fork (SERVER_IMPORTS): importing it queried the CUDA "
            "runtime (a device count or property), and torch refuses CUDA in a process forked after that; its "
            f"cells import it themselves (server log: {tmp_path / 'servers' / 'side-A-1.log'})"]
    finally:
        servers.close()


def test_a_server_imports_with_torch_asking_nvml_whether_cuda_is_there(tmp_path: Path) -> None:
    """torch.cuda.is_available() at import (Liger-Kernel's device detection) counts devices through the CUDA
    runtime, which poisons fork, unless PYTORCH_NVML_BASED_CUDA_CHECK is set: the server sets it for its imports,
    and a cell runs with its own environment, without it."""
    seen = tmp_path / "seen"
    (tmp_path / "asks_cuda.py").write_text(
        f"import os\nimport torch\nopen({str(seen)!r}, 'w').write(os.environ.get('PYTORCH_NVML_BASED_CUDA_CHECK', "
        "'unset'))\nAVAILABLE = torch.cuda.is_available()\n")
    env = importing_from(tmp_path)
    env.pop("PYTORCH_NVML_BASED_CUDA_CHECK", None)
    servers = ForkServers(tmp_path / "servers")
    try:
        server = servers.server(sys.executable, env, "side-A", ("asks_cuda",))
        assert server.imports == ("asks_cuda",) and servers.said == []
        assert seen.read_text() == "1"
    finally:
        servers.close()


def test_a_module_a_server_cannot_import_is_said_once_however_often_the_server_starts(tmp_path: Path) -> None:
    """Servers retire with their last cell and start again for later ones: each new one fails the same import,
    and the terminal hears of it once."""
    servers = ForkServers(tmp_path / "servers")
    try:
        for _ in range(2):
            server = servers.server(sys.executable, dict(os.environ), "side-A", ("no_such_module_here",))
            assert server.imports == ("no_such_module_here",)  # kept in its key: the cells import it (and fail)
            assert servers.retire(sys.executable, dict(os.environ), "side-A", ("no_such_module_here",))
        assert len(servers.said) == 1, servers.said
        assert servers.said[0].startswith("side A's fork server could not import no_such_module_here "
                                          "(SERVER_IMPORTS): importing it raised ModuleNotFoundError")
        assert len(list((tmp_path / "servers").iterdir())) == 2  # two servers did start
    finally:
        servers.close()


def test_a_forked_cell_inherits_tritons_compiler_key_from_its_server(tmp_path: Path) -> None:
    """Triton hashes its compiler files and libtriton (over 400 MB) once per process, at its first compile or
    cache load: the server computes it before any fork, so a forked cell's first kernel does not pay it again."""
    seen = tmp_path / "seen"
    (tmp_path / "probe_key.py").write_text(
        "import triton.runtime.cache\n\n"
        "def main(argv):\n"
        f"    open({str(seen)!r}, 'w').write(str(triton.runtime.cache.triton_key.cache_info().currsize))\n"
        "    return 0\n")
    env = importing_from(tmp_path)
    env.pop("TRITON_INTERPRET", None)
    servers = ForkServers(tmp_path / "servers")
    try:
        for side, interpret, cached, log in (("A", None, "1", "side-A-1.log"), ("B", "1", "0", "side-B-2.log")):
            side_env = env if interpret is None else {**env, "TRITON_INTERPRET": interpret}
            server = servers.server(sys.executable, side_env, f"side-{side}")
            assert server.spawn(["probe_key"], side_env, tmp_path / "run.log").wait(timeout=60) == 0, \
                (tmp_path / "run.log").read_text()
            # "1": in the function's cache before the cell called it; "0": interpreter cells compile nothing
            assert seen.read_text() == cached, side
            said = "Triton's compiler key hashed in" in (tmp_path / "servers" / log).read_text()
            assert said == (cached == "1"), side
    finally:
        servers.close()


def test_a_server_that_cannot_hash_tritons_compiler_key_still_serves_and_says_why(tmp_path: Path) -> None:
    """breaks_key stands for an unreadable libtriton: Triton's key function raises OSError.  The server is not
    the place to fail for it: it says why in its log and forks the cells, which hash (and fail) themselves."""
    (tmp_path / "breaks_key.py").write_text(
        "import triton.runtime.cache\n\n"
        "def unreadable():\n"
        "    raise PermissionError(13, 'Permission denied', 'libtriton.so')\n\n"
        "triton.runtime.cache.triton_key = unreadable\n\n"
        "def main(argv):\n"
        "    return 0\n")
    env = importing_from(tmp_path)
    env.pop("TRITON_INTERPRET", None)
    servers = ForkServers(tmp_path / "servers")
    try:
        server = servers.server(sys.executable, env, "side-A", ("breaks_key",))
        assert server.imports == ("breaks_key",) and servers.said == []
        assert server.spawn(["breaks_key"], env, tmp_path / "run.log").wait(timeout=60) == 0  # a cell was forked
        log = (tmp_path / "servers" / "side-A-1.log").read_text()
        assert "Triton's compiler key not hashed here: [Errno 13] Permission denied: 'libtriton.so'" in log, log
    finally:
        servers.close()


# Each cell writes which fork servers of its own xdist worker are alive: the server's parent is the worker.
WORKER_SERVERS_CAMPAIGN = textwrap.dedent('''
    import json, os
    import torch
    from pytest_abbench.campaign.model import Case, Op, Switch

    SERVER = b"pytest_abbench.child.server"

    def read(path):
        try:
            with open(path, "rb") as handle:
                return handle.read()
        except OSError:
            return b""

    def stat(pid):
        return read(f"/proc/{pid}/stat").rsplit(b")", 1)[-1].split()

    def worker_servers(worker):
        found = []
        for entry in os.listdir("/proc"):
            fields = stat(entry) if entry.isdigit() and SERVER in read(f"/proc/{entry}/cmdline") else []
            if len(fields) < 2 or fields[0] == b"Z" or int(fields[1]) != worker:
                continue
            env = read(f"/proc/{entry}/environ")
            found.append(next((v.split(b"=")[0].decode() for v in env.split(b"\\0") if v.startswith(b"ABBENCH_TEST_SW")), "A"))
        return sorted(found)

    def build(shape, device):
        server = int(stat(os.getppid())[1])
        worker = int(stat(server)[1])
        side = "B" if os.environ.get(VAR) else "A"
        line = {"op": OP, "cell": os.environ["PYTEST_CURRENT_TEST"].split("[")[1].split("]")[0],
                "worker": worker, "live": worker_servers(worker)}
''') + RECORDING_CELL


def test_an_xdist_workers_servers_end_with_its_last_cell_that_needs_them(
        campaign_dir: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two switches, one op each, 2 rounds, ``-n 2``: each worker gets one op (CellsByOp) and runs r1-A, r1-B,
    r2-B, r2-A.  It starts no server for the other worker's switch, and its side-B server ends after r2-B:
    r2-A, the worker's last cell, runs with only side A's server alive."""
    for k in (1, 2):
        campaign_dir.makepyfile(**{f"s{k}": f"OP, VAR = 's{k}', 'ABBENCH_TEST_SW{k}'\n{WORKER_SERVERS_CAMPAIGN}"})
    seen_file = tmp_path / "seen"
    monkeypatch.setenv("SEEN_FILE", str(seen_file))
    result = campaign_dir.runpytest_subprocess("s1.py", "s2.py", "-n", "2", "--ab-rounds", "2", "--ab-spawn", "fork",
                                               "--ab-root", str(tmp_path / "root"), *FAST)
    result.assert_outcomes(passed=8)
    seen = [json.loads(line) for line in seen_file.read_text().splitlines()]
    for k in (1, 2):
        cells = {c["cell"]: c["live"] for c in seen if c["op"] == f"s{k}"}
        assert len({c["worker"] for c in seen if c["op"] == f"s{k}"}) == 1, seen
        switch = f"ABBENCH_TEST_SW{k}"
        assert cells == {"r1-A": ["A", switch], "r1-B": ["A", switch], "r2-B": ["A", switch], "r2-A": ["A"]}, seen


def test_an_xdist_worker_keeps_a_server_its_next_op_needs(chain: Chain) -> None:
    """``-n 1``: one worker gets both ops, ok then kill_server (not told to kill), 1 round: ok-A, ok-B,
    kill_server-A, kill_server-B.  When ok-A ends, the worker does not yet know its next op; side A's server is
    held, not ended, and forks kill_server-A: one server per side for the whole session."""
    chain.run("-k", "ok or kill_server", "-n", "1", "--ab-rounds", "1", "--ab-spawn", "fork").assert_outcomes(passed=4)
    cells = chain.seen()
    assert sorted({c["op"] for c in cells}) == ["kill_server", "ok"]
    servers = {side: {c["server"] for c in cells if c["switch"] == switch} for side, switch in (("A", None), ("B", "1"))}
    assert all(len(s) == 1 for s in servers.values()), servers
