"""Test helpers that are not fixtures, imported with ``from helpers import ...``.

Campaign sources written into a pytester folder (FAULT_CAMPAIGN, IR_CAMPAIGN,
simple_campaign: fake-free, run by the real cell child) and synthetic_root, a
campaign root written exactly as cells write it, for the report and summary;
parse, an HTML page read back as a tree of Nodes.
They live here, not in conftest.py: pytest may import a conftest under another
module name, so importing from it is fragile.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import sys
import textwrap
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from types import ModuleType
from typing import Callable, Iterator

from pytest_abbench.core.regimes import NOT_CHECKED
from pytest_abbench.core.results import GpuReading, GpuState, TimedWindow
from pytest_abbench.core.status import StatusRow, append_status_row

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


# A tl.dot of one NxN tile: a Hopper warpgroup MMA for cuda:90 at N=64 unless DISABLE_MMA_V3=1;
# at N=16 no wgmma on either side.  Campaign sources add their OPS and SWITCH lines.
DOT_SOURCE = '''
import triton
import triton.language as tl
from pytest_abbench import Case, Op, Switch


@triton.jit
def dot_kernel(a_ptr, b_ptr, c_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    a = tl.load(a_ptr + offs[:, None] * N + offs[None, :])
    b = tl.load(b_ptr + offs[:, None] * N + offs[None, :])
    tl.store(c_ptr + offs[:, None] * N + offs[None, :], tl.dot(a, b))
'''

# An element-wise add (no dot: no switch of the MMA path changes it); triton and tl imported before it.
ADD_KERNEL_SOURCE = '''

@triton.jit
def add_kernel(x_ptr, y_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs) + 1)
'''

BUILD_DOT_SOURCE = '''

def build_dot(shape, device):
    import torch
    n = shape["n"]
    a = torch.randn(n, n, device=device, dtype=torch.float16)
    b = torch.randn(n, n, device=device, dtype=torch.float16)
    c = torch.empty(n, n, device=device, dtype=torch.float32)
    return Case(run=lambda: (dot_kernel[(1,)](a, b, c, N=n), c)[1], expected=lambda: a.float() @ b.float(),
                atol=1e-2, rtol=1e-2)
'''


# Real Triton kernels at the smallest sizes that prove the IR gate: a 64x64
# tl.dot (a Hopper warpgroup MMA for cuda:90 unless DISABLE_MMA_V3=1), an
# element-wise add (no dot: the switch cannot change it), and a torch-only op
# (no Triton kernel: the gate has nothing to compare).
IR_CAMPAIGN = DOT_SOURCE + ADD_KERNEL_SOURCE + BUILD_DOT_SOURCE + '''

def build_add(shape, device):
    import torch
    x = torch.arange(shape["n"], device=device, dtype=torch.float32)
    y = torch.empty_like(x)
    return Case(run=lambda: (add_kernel[(1,)](x, y, N=shape["n"]), y)[1], expected=lambda: x + 1)


def build_torch(shape, device):
    import torch
    x = torch.ones(shape["n"], device=device)
    return Case(run=lambda: x * 2, expected=lambda: torch.full((shape["n"],), 2.0))


OPS = [Op("dot", build=build_dot, shapes={"smoke": [{"n": 64}]}),
       Op("add", build=build_add, shapes={"smoke": [{"n": 16}]}),
       Op("torchonly", build=build_torch, shapes={"smoke": [{"n": 4}]})]
SWITCH = Switch(env_b={"DISABLE_MMA_V3": "1"})
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


def other_shapes_campaign(ops: str = '"one"', extra: str = "") -> str:
    """A campaign whose side B measures one shape more (a caliber mismatch, axis shape_mode): side B's environment
    reaches the campaign's import in its cells, and the shapes read it."""
    return (simple_campaign(ops, switch='Switch(env_b={"ABBENCH_TEST_WIDE": "1"})', extra=extra)
            + 'import os\nif os.environ.get("ABBENCH_TEST_WIDE"):\n    OPS[0].shapes["smoke"].append({"n": 32})\n')


def synthetic_root(root: Path, deltas: dict[str, list[float]], failed: tuple[int, str] | None = None,
                   control: dict[str, list[float]] | None = None, op: str = "op", switch: str = "X=1") -> None:
    """One op, one shape per entry: per round A = 1.0 ms, B = 1 + delta (and A2 = 1 + control delta).

    Identities are equal; results.jsonl, run_identity.json and status.tsv
    are written exactly as cells write them (they are the interface).
    """
    rounds = len(next(iter(deltas.values())))
    for rnd in range(1, rounds + 1):
        for side in ("A", "B", "A2") if control else ("A", "B"):
            cell = root / f"r{rnd}_{side}" / op
            cell.mkdir(parents=True)
            identity = {"backend": "cuda", "device": "H200", "timer": "cudagraph", "bench_level": "core",
                        "shape_mode": "h", "tuner_cache": "per-cell", "direct_repeat": "r", "side": side[0],
                        "autotune_mode": "record" if (rnd, side) == (1, "A") else "replay",
                        "autotune_record": f"/r/autotune/{op}.json", "autotune_record_hash": "x"}
            (cell / "run_identity.json").write_text(json.dumps(identity))
            lines = []
            for shape, ds in deltas.items():
                extra = {"A": 0.0, "B": ds[rnd - 1], "A2": (control or {}).get(shape, [0.0] * rounds)[rnd - 1]}
                ms = 1.0 + extra[side]
                lines.append(json.dumps({"shape": shape, "status": "ok", "timer": "cudagraph", "median_ms": ms,
                                         "samples_ms": [ms] * 5}))
            (cell / "results.jsonl").write_text("\n".join(lines) + "\n")
            status = "TIMEOUT" if failed == (rnd, side) else "ok"
            append_status_row(root, StatusRow(rnd, op, side, switch, 124 if status != "ok" else 0, status, 1.0,
                                              len(deltas), 0))


# -- pages read back with an HTML parser (report.html, abbench history --html) ----------------
VOID = {"meta", "link", "br", "img", "hr", "input", "source", "area", "base", "col", "embed", "wbr"}


@dataclass
class Node:
    tag: str
    attrs: dict[str, str]
    children: list[Node] = field(default_factory=list)
    text: list[str] = field(default_factory=list)  # direct text, in order

    def walk(self) -> Iterator[Node]:
        yield self
        for child in self.children:
            yield from child.walk()

    def find(self, tag: str, css: str | None = None) -> list[Node]:
        return [n for n in self.walk() if n.tag == tag and (css is None or css in n.attrs.get("class", "").split())]

    def all_text(self) -> str:
        return "".join(self.text) + "".join(c.all_text() for c in self.children)


class TreeBuilder(HTMLParser):
    """The document as a tree of Nodes; unbalanced end tags fail the test (the page must be well formed)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Node("#document", {})
        self.stack = [self.root]

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        node = Node(tag, {k: v or "" for k, v in attrs})
        self.stack[-1].children.append(node)
        if tag not in VOID:
            self.stack.append(node)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.stack[-1].children.append(Node(tag, {k: v or "" for k, v in attrs}))

    def handle_endtag(self, tag: str) -> None:
        assert self.stack[-1].tag == tag, f"</{tag}> closes <{self.stack[-1].tag}>"
        self.stack.pop()

    def handle_data(self, data: str) -> None:
        self.stack[-1].text.append(data)


def parse(text: str) -> Node:
    builder = TreeBuilder()
    builder.feed(text)
    builder.close()
    assert builder.stack == [builder.root], "unclosed elements"
    return builder.root


def parse_self_contained(text: str) -> Node:
    """``parse(text)``, first checking that the page loads nothing: no script, link, image, frame or object, no
    attribute that fetches or runs anything, no URL, no CSS import or font."""
    doc = parse(text)
    tags = {n.tag for n in doc.walk()}
    assert not tags & {"script", "link", "img", "iframe", "object", "embed", "image", "use", "foreignobject"}
    for node in doc.walk():
        assert not {"src", "href", "xlink:href", "srcset", "action"} & set(node.attrs), node
        assert not any(k.startswith("on") for k in node.attrs), node
    assert not re.search(r"https?:|//[a-z]|url\(|@import|@font-face", text, re.I)
    return doc


def with_gpu_state(root: Path, state: Callable[[int, str, str], GpuState | None]) -> None:
    """Give every record of a synthetic root one timed window with the GPU state ``state(round, side, shape)``
    (None: the record keeps no window)."""
    for results in root.glob("r*_*/*/results.jsonl"):
        rnd, side = int(results.parts[-3].split("_")[0][1:]), results.parts[-3].split("_")[1]
        records = [json.loads(line) for line in results.read_text().splitlines()]
        for record in records:
            found = state(rnd, side, record["shape"])
            if found is not None:
                record["windows"] = [TimedWindow(NOT_CHECKED, 0.0, 0, len(record.get("samples_ms", [])),
                                                 found).to_json()]
        results.write_text("".join(json.dumps(r) + "\n" for r in records))


def capped_gpu_state(rnd: int, side: str, shape: str) -> GpuState:
    """The H200's mm at its power cap (docs' power-regime table): A at 1508 MHz, B at 1395 MHz."""
    before = GpuReading(1980.0, 3201.0, 100.0, 40.0, 1000.0, 0x1, ["gpu_idle"])
    after = GpuReading(1508.0 if side == "A" else 1395.0, 3201.0, 690.0, 50.0, 1500.0, 0x4, ["sw_power_cap"])
    return GpuState(before, after, 0.5, 500.0, ["sw_power_cap"] if side == "B" or rnd == 1 else [])


def as_both_regimes(burst: Path, steady: Path) -> None:
    """Make the synthetic root ``burst`` one timed under --ab-regime both: its records as burst ones, the same
    cells' records of the synthetic root ``steady`` as steady ones, as cells write them."""
    for results in burst.glob("r*_*/*/results.jsonl"):
        other = steady / results.relative_to(burst)
        lines = [{**json.loads(line), "regime": "burst"} for line in results.read_text().splitlines()]
        lines += [{**json.loads(line), "regime": "steady"} for line in other.read_text().splitlines()]
        results.write_text("".join(json.dumps(line) + "\n" for line in lines))
        identity = results.parent / "run_identity.json"
        identity.write_text(json.dumps({**json.loads(identity.read_text()), "regime": "both"}))


def process_alive(pid: int) -> bool:
    """True while ``pid`` runs; a zombie awaiting its reaper counts as dead."""
    try:
        os.kill(pid, 0)
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except (ProcessLookupError, OSError):
        return False


CAMPAIGNS = Path(__file__).resolve().parents[1] / "campaigns"

# One 16x16 tile summed along rows: the reduction's sliced layout differs from
# the store's, so the pass has conversions to remove.
ROWSUM_LAYOUT_CAMPAIGN = f'''
import sys
sys.path.insert(0, {str(CAMPAIGNS)!r})
import triton
import triton.language as tl
from pytest_abbench import Case, Op, Switch
from _kernels.switches import skip_remove_layout_conversions


@triton.jit
def rowsum_kernel(x_ptr, y_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    x = tl.load(x_ptr + offs[:, None] * N + offs[None, :])
    tl.store(y_ptr + offs, tl.sum(x, axis=1))


def build_rowsum(shape, device):
    import torch
    n = shape["n"]
    x = torch.ones(n, n, device=device)
    y = torch.empty(n, device=device)
    return Case(run=lambda: (rowsum_kernel[(1,)](x, y, N=n), y)[1], expected=lambda: x.sum(dim=1))


OPS = [Op("rowsum", build=build_rowsum, shapes={{"smoke": [{{"n": 16}}]}})]
SWITCH = Switch(setup_b=skip_remove_layout_conversions)
'''


def convert_layouts(captured: Path) -> int:
    """``ttg.convert_layout`` ops in every TTGIR file an IR-only cell captured (at least one file)."""
    from pytest_abbench.checks import irgate

    files = irgate.ttgir_files(captured)
    assert files, f"no TTGIR captured in {captured}"
    return sum(irgate.count_watched_ops(f.read_text())["ttg.convert_layout"] for f in files)


# simple_campaign plus an op whose build deletes the root named by $DOOMED_ROOT while its cell runs.
VANISHING_ROOT_CAMPAIGN = simple_campaign('"one"', extra='''
        def vanish(shape, device):
            import os, shutil
            shutil.rmtree(os.environ["DOOMED_ROOT"])
            return build(shape, device)
        ''') + 'OPS.append(Op("vanish", build=vanish, shapes={"smoke": [{"n": 8}]}))\n'


BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def load_benchmark(name: str) -> ModuleType:
    """``benchmarks/<room>/<name>.py`` imported as module ``name`` (the scripts are no package)."""
    (path,) = BENCHMARKS.glob(f"*/{name}.py")  # one script of that name across the rooms
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module
