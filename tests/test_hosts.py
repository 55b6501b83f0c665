"""Many hosts: workers that measure into scratch roots of their own and ship each cell to the controller,
campaign files found by name under the rsync'd folder, a host-local GPU claim, and a worker that dies.

No second host here: two popen workers, each in a folder of its own with the
campaign sent by ``--rsyncdir``, are what xdist does with ``ssh`` workers.
Real pytest processes, real signals.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from helpers import simple_campaign

from pytest_abbench.core.layout import IDENTITY_FILE, LOG_TAIL_FILE, ORIGIN_FILE, RESULTS_FILE, RUN_LOG, TIMING_FILE
from pytest_abbench.core.status import read_status
from pytest_abbench.session.xdist_hooks import local_workers

FAST = ("--ab-ir-target", "none", "-p", "no:cacheprovider", "-W", "ignore::DeprecationWarning")


def _workers_in_own_folders(tmp_path: Path, campaign: Path) -> list[str]:
    """xdist's remote recipe on one machine: each worker in a folder of its own, the campaign sent by rsync.

    Path options take the ``--opt=PATH`` form (docs/hosts.md): a worker whose pytest sees PATH as a separate,
    existing argument takes it as a rootdir candidate, so a worker started after another created that
    folder named its cells ``w2/camp/c.py`` instead of ``camp/c.py`` (xdist: different tests collected).
    """
    (tmp_path / "scratch").mkdir(exist_ok=True)  # each worker's TMPDIR: where it measures
    args = ["--dist", "load", "--rsyncdir", str(campaign)]
    for name in ("w1", "w2"):
        (tmp_path / name).mkdir()
        args += ["--tx", f"popen//chdir={tmp_path / name}//env:TMPDIR={tmp_path / 'scratch'}"]
    return args


def _report(root: Path) -> list[tuple[str, str, int, int, list[tuple[str, str]]]]:
    data = json.loads((root / "report.json").read_text())
    return [(o["op"], o["state"], o["rounds_completed"], o["rounds_expected"],
             [(s["shape"], s["verdict"]) for s in o["shapes"]]) for o in data["ops"]]


def _rows(root: Path) -> set[tuple[int, str, str, str, int]]:
    return {(r.round, r.op, r.side, r.status, r.success) for r in read_status(root)}


def test_workers_in_folders_of_their_own_ship_every_cell_to_the_controllers_root(campaign_dir: pytest.Pytester,
                                                                                 tmp_path: Path,
                                                                                 kernel_cache_home: Path) -> None:
    # The campaign folder lies outside the controller's rootdir: a worker's node id (camp/c.py, relative
    # to its own folder) names no file there.  That was an INTERNALERROR at collection.
    campaign = tmp_path / "camp"
    campaign.mkdir()
    (campaign / "c.py").write_text(simple_campaign())
    serial, parallel = tmp_path / "serial", tmp_path / "parallel"
    campaign_dir.runpytest_subprocess(str(campaign), "--ab-rounds", "1", "--ab-root", str(serial), "-p", "no:xdist",
                                      *FAST).assert_outcomes(passed=4)
    result = campaign_dir.runpytest_subprocess(str(campaign), "--ab-rounds", "1", f"--ab-root={parallel}",
                                               *_workers_in_own_folders(tmp_path, campaign), *FAST)
    out = result.stdout.str()
    assert "INTERNALERROR" not in out and result.ret == 0, out
    result.assert_outcomes(passed=4)

    # The controller alone wrote its root: every row, every cell's small files, the same report as serial.
    assert _rows(parallel) == _rows(serial) and len(_rows(parallel)) == 4
    assert _report(parallel) == _report(serial)
    manifest = json.loads((parallel / "campaign.json").read_text())
    assert list(manifest["campaign_files"]) == [str(campaign / "c.py")]
    assert set(manifest["plan"]["ops"].values()) == {str(campaign / "c.py")}
    scratch = (tmp_path / "scratch").resolve()
    for folder in sorted(parallel.glob("r1_*/*")):
        for name in (RESULTS_FILE, IDENTITY_FILE, TIMING_FILE, LOG_TAIL_FILE, ORIGIN_FILE):
            assert (folder / name).is_file(), f"{folder / name} missing"
        assert not (folder / RUN_LOG).exists(), "the full log stays on the worker's host"
        origin = json.loads((folder / ORIGIN_FILE).read_text())
        measured = Path(origin["cell_dir"])
        # Measured in the worker's own scratch root, outside the controller's root; the full log stayed there.
        assert measured.is_relative_to(scratch) and not measured.is_relative_to(parallel)
        assert origin["worker"] in ("gw0", "gw1") and Path(origin["run_log"]).stat().st_size == origin["run_log_bytes"]
        # The kernel cache the worker's side compiled into, on its host (abbench kernels export reads it).
        kernels = Path(origin["kernel_cache"])
        assert kernels.parent == kernel_cache_home / "pytest-abbench" / "kernels", kernels
        assert kernels.name.startswith(f"c-{folder.parent.name[-1]}-") and (kernels / "abbench-key.json").is_file()
        assert (folder / RESULTS_FILE).read_bytes() == (measured / RESULTS_FILE).read_bytes()
        tail = (folder / LOG_TAIL_FILE).read_bytes()
        assert tail and (measured / RUN_LOG).read_bytes().endswith(tail)
    # Round 1 side A's autotune record and side B's supplement came back too: a resumed session sends them to
    # whichever worker resumes.
    assert sorted(p.relative_to(parallel / "autotune").as_posix() for p in (parallel / "autotune").rglob("*.json")) \
        == ["one.json", "side-B/one.json", "side-B/two.json", "two.json"]


def _claimer(lock_dir: Path, who: str) -> subprocess.Popen[str]:
    """A process that claims one of GPUs 0 and 1 under ``lock_dir``, prints the result, and holds it until killed."""
    code = textwrap.dedent(f'''
        import sys, time
        from pathlib import Path
        from pytest_abbench.session.gpuclaim import claim_gpu
        claim = claim_gpu(["0", "1"], {who!r}, Path({str(lock_dir)!r}))
        print(claim.gpu, claim.problem, sep="|", flush=True)
        time.sleep(600)
    ''')
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)


def test_each_process_claims_its_own_gpu_and_one_too_many_gets_none(tmp_path: Path) -> None:
    processes = []
    try:
        answers = []
        for who in ("gw0 on a", "gw1 on a", "gw2 on a"):
            processes.append(_claimer(tmp_path, who))
            assert processes[-1].stdout is not None
            answers.append(processes[-1].stdout.readline().strip().split("|"))
        assert [a[0] for a in answers[:2]] == ["0", "1"] and answers[0][1] == answers[1][1] == "None"
        gpu, problem = answers[2]
        assert gpu == "None"
        assert "no free GPU on host" in problem and "held by gw0 on a" in problem and "held by gw1 on a" in problem

        # A worker killed outright frees its GPU: the next one claims it.
        processes[0].send_signal(signal.SIGKILL)
        processes[0].wait()
        processes.append(_claimer(tmp_path, "gw3 on a"))
        assert processes[-1].stdout is not None
        assert processes[-1].stdout.readline().strip() == "0|None"
    finally:
        for process in processes:
            process.kill()
            process.wait()


# "victim" SIGKILLs its xdist worker (the nearest ancestor that is not the cell's own process) from the
# third cell process that builds it: round 2's first cell.  "steady" runs on the other worker.
KILL_CAMPAIGN = simple_campaign('"steady"', extra='''
        def worker_pid():
            pid = os.getppid()
            while b"pytest_abbench.child" in open(f"/proc/{pid}/cmdline", "rb").read():
                pid = int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])
            return pid

        def victim(shape, device):
            pids = PIDS_FILE.read_text().split() if PIDS_FILE.exists() else []
            if str(os.getpid()) not in pids:
                pids.append(str(os.getpid()))
                PIDS_FILE.write_text(" ".join(pids))
                if len(pids) == 3:
                    os.kill(worker_pid(), signal.SIGKILL)
                    time.sleep(60)  # the worker's death takes this cell with it
            return build(shape, device)
        ''')


def test_a_killed_worker_fails_its_ops_remaining_cells_and_resume_runs_exactly_those(campaign_dir: pytest.Pytester,
                                                                                   tmp_path: Path) -> None:
    header = f"import os, signal, time\nfrom pathlib import Path\nPIDS_FILE = Path({str(tmp_path / 'pids')!r})\n"
    source = KILL_CAMPAIGN.replace("OPS = [", header + "OPS = [")
    campaign_dir.makepyfile(c=source + 'OPS.append(Op("victim", build=victim, shapes={"smoke": [{"n": 8}]}))\n')
    root = tmp_path / "root"
    args = ("--ab-rounds", "2", "--ab-root", str(root), "-n", "2", *FAST)
    first = campaign_dir.runpytest_subprocess("c.py", *args)
    out = first.stdout.str()
    first.assert_outcomes(passed=6, failed=2)
    lost = {(r.round, r.side) for r in read_status(root) if r.op == "victim" and r.status == "WORKER_LOST"}
    assert lost == {(2, "A"), (2, "B")}, out
    assert {r.status for r in read_status(root) if r.op == "steady"} == {"ok"}
    first.stdout.fnmatch_lines(["*abbench: worker gw? (host *, pid *) died: killed by SIGKILL; 2 cell(s) of op victim "
                                f"fail with it; --ab-resume={root} runs them again*"])
    assert "crashed while running" not in out  # one report per lost cell, ours

    resumed = campaign_dir.runpytest_subprocess("c.py", *args, "--ab-resume", str(root))
    out = resumed.stdout.str()
    resumed.assert_outcomes(passed=8)
    ran = sorted(line.split()[2:4] for line in out.splitlines()
                 if line.startswith("abbench: gw") and line.endswith("s)") and "resumed" not in line)
    assert ran == [["victim", "r2-A"], ["victim", "r2-B"]], out
    # Round 1's records reached the worker that resumed: its replays match, the report judges all rounds.
    assert resumed.ret == 0, out
    assert [(op, state, done) for op, state, done, _, _ in _report(root)] == [("steady", "verdict", 2),
                                                                              ("victim", "verdict", 2)]


def test_a_path_option_as_an_argument_of_its_own_is_a_usage_error_with_workers_in_folders(
        campaign_dir: pytest.Pytester, tmp_path: Path) -> None:
    """xdist would stop with an INTERNALERROR (an existing path outside the rsync'd folder): the plugin says
    which option and how to write it."""
    campaign = tmp_path / "camp"
    campaign.mkdir()
    (campaign / "c.py").write_text(simple_campaign())
    scratch = tmp_path / "elsewhere"
    scratch.mkdir()
    args = _workers_in_own_folders(tmp_path, campaign)
    result = campaign_dir.runpytest_subprocess(str(campaign), "--ab-rounds", "1", "--ab-root", str(scratch),
                                               *args, *FAST)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()
    result.stderr.fnmatch_lines([f"*--ab-root {scratch}: with --tx, xdist rewrites*"
                                 f"write it as one argument: --ab-root={scratch}*"])


@pytest.mark.parametrize("tx, moves", [("popen", False), ("2*popen", False), ("popen//python=/opt/py", False),
                                       ("popen//chdir=/w1", True), ("8*ssh=gpu-a//python=/opt/py", True),
                                       ("ssh=gpu-b//chdir=/scratch", True)])
def test_which_tx_specs_get_their_path_arguments_rewritten(tx: str, moves: bool) -> None:
    from pytest_abbench.session.xdist_hooks import moves_arguments

    assert moves_arguments(tx) is moves


def test_only_a_path_option_written_as_two_arguments_whose_path_exists_is_named(tmp_path: Path,
                                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_abbench.session.xdist_hooks import separate_path_arguments

    (tmp_path / "camp" / "runs").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    args = ["camp", "--ab-root", "camp/runs", f"--ab-resume={tmp_path}", "--ab-resume", "missing",
            "-k", "camp", "--ab-costs-from", str(tmp_path / "camp")]
    # A relative path inside the rsync'd folder is refused too: xdist compares the path as written.
    assert separate_path_arguments(args) == [("--ab-root", "camp/runs"), ("--ab-costs-from", str(tmp_path / "camp"))]


def test_more_workers_than_gpus_is_refused_before_any_cell(campaign_dir: pytest.Pytester,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """-n 2 on a host with one GPU ran half the cells and failed the other half NO_GPU; now a usage error.

    No GPU here: --ab-backend cuda and CUDA_VISIBLE_DEVICES stand for a host with one GPU (the refusal comes
    before anything touches a device)."""
    campaign_dir.makepyfile(c=simple_campaign('"one"'))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    result = campaign_dir.runpytest_subprocess("c.py", "-n", "2", "--ab-backend", "cuda", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*2 xdist workers on this host, but 1 GPU(s) for them (0: visible on this host); "
                                 "each worker times on a GPU of its own: use -n 1 (or fewer)*"])
    assert local_workers(["popen", "2*popen", "popen//python=python3"]) == 4
    assert local_workers(["popen", "ssh=gpu-host"]) is None


def test_a_worker_scratch_that_cannot_be_used_moves_each_worker_to_a_private_folder_it_names(
        campaign_dir: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each worker used to die at its first cell ("worker died: lost") without the OS error ever printed."""
    campaign_dir.makepyfile(c=simple_campaign('"one"'))
    blocker = tmp_path / f"abbench-scratch-{os.getuid()}"
    blocker.write_text("not a folder")
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    result = campaign_dir.runpytest_subprocess("c.py", "-n", "2", *FAST)
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines([f"*abbench: worker scratch {blocker}: not a folder: refused; this worker's root is "
                                 f"in {blocker}-* instead*"])
