"""Shared helpers for the project's tests: fake-free campaigns written into a pytester folder."""

from __future__ import annotations

import textwrap

import pytest

# A campaign of pure-torch ops: each op's build misbehaves in one documented
# way inside the real cell child (a real subprocess, real signals).
FAULT_CAMPAIGN = '''
import os, signal, subprocess, sys, time, ctypes
from pytest_abbench import Case, Op, Switch

def ok(shape, device):
    import torch
    x = torch.ones(shape["n"])
    return Case(run=lambda: x * 2, expected=lambda: torch.full((shape["n"],), 2.0))

def exit3(shape, device):
    sys.stdout.flush()
    os._exit(3)

def hang(shape, device):
    # A grandchild in the same process group: the timeout must kill it too.
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    with open(os.environ["HANG_PIDFILE"], "w") as f:
        f.write(f"{os.getpid()} {child.pid}")
    time.sleep(600)

def killself(shape, device):
    os.kill(os.getpid(), signal.SIGKILL)

def segv(shape, device):
    ctypes.string_at(0)

def markers(shape, device):
    print("AUTOTUNE_REPLAY_FALLBACK kernel=k key=[1]")
    print("AUTOTUNE_REPLAY_FALLBACK kernel=k key=[2]")
    print("BENCHMARK_DIRECT_NO_CUDAGRAPH op=markers shape=n=4 reason=test")
    return ok(shape, device)

def wrong(shape, device):
    import torch
    return Case(run=lambda: torch.zeros(2), expected=lambda: torch.ones(2))

SHAPES = {"smoke": [{"n": 4}]}
OPS = [Op(name, build=fn, shapes=SHAPES) for name, fn in [
    ("ok", ok), ("exit3", exit3), ("hang", hang), ("killself", killself), ("segv", segv),
    ("markers", markers), ("wrong", wrong)]]
SWITCH = Switch(env_b={"ABBENCH_TEST_SWITCH": "1"})
'''


def simple_campaign(ops: str = '"one", "two"', switch: str = 'Switch(env_b={"ABBENCH_TEST_SWITCH": "1"})',
                    extra: str = "") -> str:
    return textwrap.dedent(f'''
        from pytest_abbench import Case, Op, Switch

        def build(shape, device):
            import torch
            x = torch.arange(shape["n"], dtype=torch.float32)
            return Case(run=lambda: x + 1, expected=lambda: x + 1)
        {extra}
        OPS = [Op(name, build=build, shapes={{"smoke": [{{"n": 8}}, {{"n": 16}}]}}) for name in ({ops},)]
        SWITCH = {switch}
    ''')


@pytest.fixture
def campaign_dir(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeini("[pytest]\n")
    return pytester
