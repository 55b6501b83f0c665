"""Parallel precompile (``--ab-precompile``): compile-only shares fill a side's Triton cache, every autotune candidate.

Without a GPU the timed cells cannot run, so the test drives what the runner
starts before an op's round 1: compile-only cell children for cuda:90 with
``--autotune-mode compile-all --shard I/N`` (``precompile.run_groups``), and
checks the Triton cache they leave.  Whether a GPU cell then loads from that
cache is measured on the H200 (docs/explanation/benchmarks.md).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from dataclasses import replace
from pathlib import Path

import pytest

from helpers import process_alive
from pytest_abbench.spawn import precompile
from pytest_abbench.core import envnames
from pytest_abbench.core.cores import worker_share
from pytest_abbench.core.cellconfig import CHILD_MODULE, CellConfig

AUTOTUNED_CAMPAIGN = '''
import torch
import triton
import triton.language as tl
from pytest_abbench import Case, Op, Switch


@triton.autotune(configs=[triton.Config({"BLOCK": 32}, num_warps=1), triton.Config({"BLOCK": 64}, num_warps=2)],
                 key=["n"])
@triton.jit
def scale_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2, mask=mask)


def build(shape, device):
    x = torch.ones(shape["n"], device=device)
    y = torch.empty_like(x)
    grid = lambda meta: (triton.cdiv(shape["n"], meta["BLOCK"]),)
    return Case(run=lambda: scale_kernel[grid](x, y, shape["n"]) or y)


OPS = [Op("scale", build=build, shapes={"core": [{"n": 256}, {"n": 1000}, {"n": 4096}]})]
SWITCH = Switch(env_b={"ABBENCH_TEST_SWITCH": "1"})
'''


def job(tmp_path: Path, campaign: Path, shard: str, cache: Path) -> precompile.Job:
    out = tmp_path / f"share-{shard.replace('/', 'of')}"
    config = CellConfig(campaign=campaign, op="scale", round_no=1, side="A", role="A", out=out, backend="cuda",
                        timer="cudagraph", level="core", ir_target="cuda:90", ir_only=True,
                        autotune_mode="compile-all", shard=shard)
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET",)}
    env["TRITON_CACHE_DIR"] = str(cache)
    return precompile.Job(out.name, [sys.executable, "-m", CHILD_MODULE, *config.to_argv()],
                          precompile.env_for(env), out / "compile.log")


def cubins(cache: Path) -> list[Path]:
    return sorted(cache.rglob("*.cubin"))


@pytest.mark.slow
def test_shares_compile_every_candidate_of_their_own_shapes_into_the_side_cache(tmp_path: Path) -> None:
    campaign = tmp_path / "camp.py"
    campaign.write_text(AUTOTUNED_CAMPAIGN)
    cache = tmp_path / "triton_A"
    # Shapes 0 and 2 (n=256, n=4096) in share 0 of 2, shape 1 (n=1000) in share 1: the key is n, so
    # 3 keys x 2 configs; n=256 and n=4096 specialise alike (both divisible by 16), n=1000 does not.
    result = precompile.run_groups({"scale": [job(tmp_path, campaign, "0/2", cache),
                                              job(tmp_path, campaign, "1/2", cache)]},
                                   parallel=2, timeout_s=600)["scale"]
    assert result.failed == [], result.failed
    assert result.jobs == 2
    compiled = cubins(cache)
    # Two configs x two specialisations of n (divisible by 16 or not); each compiled once, shared by the shares.
    assert len(compiled) == 4, [p.parent.name for p in compiled]
    for share in ("0of2", "1of2"):
        log = (tmp_path / f"share-{share}" / "compile.log").read_text()
        assert "kernel variants" in log, log
    assert "precompiled scale for both sides: 2 compile-only processes" in result.line("scale")
    assert sorted(result.job_seconds) == ["share-0of2", "share-1of2"]
    assert "the shares one after another: " in result.line("scale")


@pytest.mark.slow
def test_forked_from_a_side_server_the_shares_pay_no_imports(tmp_path: Path) -> None:
    """--ab-spawn fork: one job per side, forked from its server, forks its shares (child/measure.py run_shares)."""
    from pytest_abbench.spawn.forkserver import ForkServers

    campaign = tmp_path / "camp.py"
    campaign.write_text(AUTOTUNED_CAMPAIGN)
    cache = tmp_path / "triton_A"
    exec_job = job(tmp_path, campaign, "0/2", cache)
    env = {**exec_job.env, "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[1]),
                                                          os.environ.get("PYTHONPATH", "")])}
    servers = ForkServers(tmp_path / "servers")
    try:
        out = tmp_path / "A"
        config = CellConfig.from_argv(exec_job.argv[3:])
        forked = precompile.Job("A", replace(config, out=out, shard=None, shares=2).module_argv(), env,
                                out / "compile.log", servers.server(sys.executable, env, "side-A"))
        result = precompile.run_groups({"scale": [forked]}, parallel=1, timeout_s=600)["scale"]
    finally:
        servers.close()
    assert result.failed == [], (out / "compile.log").read_text()
    assert sorted(result.job_seconds) == ["A-share-1of2", "A-share-2of2"]
    assert len(cubins(cache)) == 4
    assert "2 shares compiled for cuda:90" in (out / "compile.log").read_text()


def test_a_failing_share_is_named_and_the_rest_still_runs(tmp_path: Path) -> None:
    bad = precompile.Job("B-1of2", [sys.executable, "-c", "import sys; sys.exit(3)"], dict(os.environ),
                         tmp_path / "bad" / "compile.log")
    good = precompile.Job("B-2of2", [sys.executable, "-c", "open(%r, 'w').close()" % str(tmp_path / "ran")],
                          dict(os.environ), tmp_path / "good" / "compile.log")
    slow = precompile.Job("A-1of1", [sys.executable, "-c", "import time; time.sleep(60)"], dict(os.environ),
                          tmp_path / "slow" / "compile.log")
    result = precompile.run_groups({"op": [bad, good, slow]}, parallel=3, timeout_s=5)["op"]
    assert (tmp_path / "ran").exists()
    assert any(f.startswith("B-1of2 rc 3 (log ") for f in result.failed), result.failed
    assert "A-1of1 timed out after 5s" in result.failed
    assert result.seconds < 30
    assert "the cells compile those kernels themselves" in result.line("op")


def test_a_pool_of_several_ops_fills_the_cores_by_processes_and_says_what_its_timeout_cut_short(
        tmp_path: Path) -> None:
    """run_groups: a job of a forked side weighs its shares; the pool starts the next op's job only where its
    processes fit, a job that cannot start fails alone, and a group the timeout cut short says so (its own round 1
    precompiles it again)."""
    def stamp(name: str, seconds: float) -> list[str]:
        stamp_file = str(tmp_path / f"{name}.started")
        code = f"import time; open({stamp_file!r}, 'w').write(repr(time.time())); time.sleep({seconds})"
        return [sys.executable, "-c", code]

    wide = precompile.Job("A", stamp("wide", 2.0), dict(os.environ), tmp_path / "wide" / "compile.log", processes=2)
    narrow = precompile.Job("A", stamp("narrow", 0.0), dict(os.environ), tmp_path / "narrow" / "compile.log")
    other = precompile.Job("B", stamp("other", 0.0), dict(os.environ), tmp_path / "other" / "compile.log")
    unstartable = precompile.Job("B", [str(tmp_path / "no-such-program")], dict(os.environ),
                                 tmp_path / "gone" / "compile.log")
    results = precompile.run_groups({"first": [wide], "next": [narrow, other], "last": [unstartable]}, parallel=2,
                                    timeout_s=60)
    assert all(r.failed == [] and r.cut_by_timeout == 0 for name, r in results.items() if name != "last"), results
    assert results["last"].failed[0].startswith("B not started: ") and results["last"].cut_by_timeout == 0
    started = {name: float((tmp_path / f"{name}.started").read_text()) for name in ("wide", "narrow", "other")}
    assert started["narrow"] - started["wide"] >= 1.9  # two processes' worth: nothing else fit beside it
    assert abs(started["other"] - started["narrow"]) < 1.5  # the next op's two narrow jobs run side by side
    assert results["next"].seconds >= results["first"].seconds

    slow = precompile.Job("A", [sys.executable, "-c", "import time; time.sleep(60)"], dict(os.environ),
                          tmp_path / "slow" / "compile.log", processes=2)
    late = precompile.Job("B", stamp("late", 0.0), dict(os.environ), tmp_path / "late" / "compile.log")
    results = precompile.run_groups({"first": [slow], "later": [late]}, parallel=2, timeout_s=2)
    assert results["first"].failed == ["A timed out after 2s"] and results["first"].cut_by_timeout == 1
    assert results["later"].cut_by_timeout == 1 and results["later"].failed == ["B not started (timeout)"]
    assert not (tmp_path / "late.started").exists()


def test_one_fork_server_runs_a_pools_jobs_side_by_side_and_each_gets_its_own_end(tmp_path: Path) -> None:
    """A pool forks several ops' jobs from one side's server.  The server used to fork one process at a time and
    answer in order: the second job read the first one's status as its own (KeyError 'status'), and every later
    cell of the session was lost.  Now both run at once; the one that ends second, failing, gets its own code."""
    from pytest_abbench.spawn.forkserver import ForkServers

    (tmp_path / "stampmod.py").write_text(
        "import time\n\ndef main(argv):\n    open(argv[0], 'w').write(repr(time.time()))\n"
        "    time.sleep(float(argv[1]))\n    open(argv[0] + '.end', 'w').write(repr(time.time()))\n"
        "    return int(argv[2])\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(Path(__file__).resolve().parents[1]),
                                                        os.environ.get("PYTHONPATH", "")])}
    servers = ForkServers(tmp_path / "servers")
    try:
        server = servers.server(sys.executable, env, "side-A")
        slow = precompile.Job("A", ["stampmod", str(tmp_path / "slow.t"), "1.5", "3"], env,
                              tmp_path / "slow" / "compile.log", server)
        quick = precompile.Job("A", ["stampmod", str(tmp_path / "quick.t"), "0.2", "0"], env,
                               tmp_path / "quick" / "compile.log", server)
        results = precompile.run_groups({"op1": [slow], "op2": [quick]}, parallel=4, timeout_s=60)
        # The server still forks a cell afterwards, and waits on it as before.
        after = server.spawn(["stampmod", str(tmp_path / "after.t"), "0", "0"], env, tmp_path / "after.log")
        assert after.wait(timeout=30) == 0
        # A cell's end that comes before the next spawn's pid is kept for that cell's own wait.
        early = server.spawn(["stampmod", str(tmp_path / "early.t"), "0", "0"], env, tmp_path / "early.log")
        time.sleep(1.0)  # it ends, and the server says so, before the next request
        late = server.spawn(["stampmod", str(tmp_path / "late.t"), "0", "4"], env, tmp_path / "late.log")
        assert early.pid in server.ended
        assert late.wait(timeout=30) == 4 and early.wait(timeout=0) == 0 and server.ended == {}
    finally:
        servers.close()
    assert results["op2"].failed == [], results
    assert len(results["op1"].failed) == 1 and results["op1"].failed[0].startswith("A rc 3 (log "), results
    stamp = {name: float((tmp_path / f"{name}.t").read_text()) for name in ("slow", "quick")}
    assert stamp["quick"] < float((tmp_path / "slow.t.end").read_text())  # beside the slow one, not after it
    assert float((tmp_path / "quick.t.end").read_text()) < float((tmp_path / "slow.t.end").read_text())


def test_shard_values_are_checked() -> None:
    config = CellConfig(campaign=Path("c.py"), op="o", round_no=1, side="A", role="A", out=Path("x"),
                        backend="cuda", timer="cudagraph", level="core", shard="1/3")
    assert config.shard_of() == (1, 3)
    assert CellConfig.from_argv(config.to_argv()) == config
    others = [a for a in config.to_argv() if not a.startswith("--shard")]
    for bad in ("3/3", "x/2", "1"):
        with pytest.raises(SystemExit):
            CellConfig.from_argv([*others, f"--shard={bad}"])


def test_a_bad_compile_job_count_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(envnames.ABBENCH_COMPILE_JOBS, "3")
    assert worker_share() == 3
    for bad in ("0", "two", "-1"):
        monkeypatch.setenv(envnames.ABBENCH_COMPILE_JOBS, bad)
        with pytest.raises(ValueError, match=f"ABBENCH_COMPILE_JOBS={bad!r}: not a whole number >= 1"):
            worker_share()


def test_the_ops_pooled_ahead_are_this_process_round_1_ops_not_finished_before(tmp_path: Path) -> None:
    """``CellRunner.ops_ahead``: the campaign's later ops whose round-1 cells this process will start, in order;
    not one a resumed root finished, not one whose round 1 ended, not one precompiled already."""
    from test_ir_triage import settings

    from pytest_abbench.campaign.loader import load_campaign
    from pytest_abbench.core.layout import CellKey, RootLayout
    from pytest_abbench.spawn.runner import CellRunner

    path = tmp_path / "camp.py"
    path.write_text("from pytest_abbench import Case, Op, Switch\n"
                    "OPS = [Op(n, build=lambda shape, device: Case(run=lambda: None), shapes={'smoke': [{'n': 1}]})"
                    " for n in ('a', 'b', 'c', 'd', 'e')]\nSWITCH = Switch(env_b={'ABBENCH_TEST_SWITCH': '1'})\n")
    campaign = load_campaign(path)
    runner = CellRunner(settings(), RootLayout(tmp_path / "root"), None,
                        finished_before=lambda key: key.op == "b")  # a resumed root finished b's round 1
    runner.plan_cells((campaign, CellKey(n, op, side)) for op in "abcde" for n in (1, 2) for side in "AB")
    runner.precompiled.add("e")
    assert runner.ops_ahead(campaign, "a") == ["c", "d"]
    for side in "AB":
        runner.cell_ended(campaign, CellKey(1, "c", side))
    assert runner.ops_ahead(campaign, "a") == ["d"]
    runner.close()


def test_an_exec_compile_job_dies_with_the_session_that_started_it(tmp_path: Path) -> None:
    """A session killed mid-precompile (SIGKILL: nothing of its own runs) leaves no compile job behind."""
    pid_file = tmp_path / "job.pid"
    session = textwrap.dedent(f'''
        import os, sys, time
        from pathlib import Path
        from pytest_abbench.spawn import precompile
        job = precompile.Job("A-1of1", [sys.executable, "-c", "import os, time; open({str(pid_file)!r}, 'w')"
                                        ".write(str(os.getpid())); time.sleep(60)"],
                             dict(os.environ), Path({str(tmp_path / "job" / "compile.log")!r}))
        job.start()
        while not os.path.exists({str(pid_file)!r}) or not open({str(pid_file)!r}).read():
            time.sleep(0.02)
        os.kill(os.getpid(), 9)
    ''')
    subprocess.run([sys.executable, "-c", session], timeout=60)
    job = int(pid_file.read_text())
    deadline = time.monotonic() + 10
    while process_alive(job) and time.monotonic() < deadline:
        time.sleep(0.05)
    alive = process_alive(job)
    if alive:
        os.kill(job, 9)
    assert not alive, "the compile job outlived the session that started it"
