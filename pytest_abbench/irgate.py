"""The IR gate: did the switch change any generated code for this op?

After both round-1 cells of an op finish, each side's captured TTGIR is
fingerprinted.  Equal fingerprints mean the remaining rounds would measure
noise and report it as "no difference", so they are skipped
(``SWITCH_NO_IR_DIFF``).  The decision is saved to ``<root>/irgate/<op>.json``
so the report, a resumed session and ``abbench summary`` read the same answer.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pytest_abbench.fileio import CorruptFileError, read_json, write_json_atomic
from pytest_abbench.layout import RootLayout
from pytest_abbench.outcome import NO_IR_DIFF as NO_IR_DIFF  # the status word callers name through the gate

# The ops a compiler engineer reads first, as they appear in TTGIR.
WATCHED_OPS = (
    "ttg.convert_layout", "tt.dot", "ttng.warp_group_dot", "ttg.local_alloc", "ttg.local_load",
    "ttg.async_copy_global_to_local", "ttng.async_tma_copy_global_to_local", "tt.reduce", "tt.load", "tt.store",
)


def _strip_locations(line: str) -> str:
    """Remove every ``loc(...)`` attribute (balanced parentheses) from one line."""
    out: list[str] = []
    i = 0
    n = len(line)
    while i < n:
        j = line.find("loc(", i)
        if j < 0:
            out.append(line[i:])
            break
        # "local_alloc(" also contains "loc(": only a token that starts at "loc" counts.
        if j > 0 and (line[j - 1].isalnum() or line[j - 1] in "_.#"):
            out.append(line[i:j + 4])
            i = j + 4
            continue
        out.append(line[i:j])
        depth = 0
        k = j + 3
        while k < n:
            if line[k] == "(":
                depth += 1
            elif line[k] == ")":
                depth -= 1
                if depth == 0:
                    break
            elif line[k] == '"':  # skip quoted paths, which may hold parentheses
                k = line.find('"', k + 1)
                if k < 0:
                    k = n
                    break
            k += 1
        i = k + 1
    return "".join(out).rstrip()


def normalize_ttgir(text: str) -> str:
    """TTGIR with MLIR location info removed (``#loc`` lines, ``loc(...)`` attributes), nothing else.

    Locations embed absolute source paths, so two identical compilations from
    two folders differ only there.
    """
    lines = []
    for line in text.splitlines():
        if re.match(r"^\s*#loc\d*\s*=", line):
            continue
        lines.append(_strip_locations(line))
    return "\n".join(lines) + "\n"


def ttgir_files(ir_dir: Path) -> list[Path]:
    return sorted(ir_dir.rglob("*.ttgir")) if ir_dir.is_dir() else []


def _meta(path: Path) -> dict[str, Any]:
    meta_path = path.with_name(path.name[: -len(".ttgir")] + ".meta.json")
    if not meta_path.exists():
        return {}
    try:
        data = json.loads(meta_path.read_text())
    except ValueError:
        return {"error": f"{meta_path}: unreadable"}
    return data if isinstance(data, dict) else {}


def gated_files(ir_dir: Path, other_dir: Path) -> list[Path]:
    """The variants that are the op's code: all, except autotune candidates the other side never compiled.

    Round 1 side A benchmarks every autotune config (each compiled, each
    captured); side B replays A's choice and compiles only that.  A candidate
    counts when the other side has a variant of the same name (same kernel,
    same specialization and options), so the chosen code is still compared.
    """
    other = {p.relative_to(other_dir).as_posix() for p in ttgir_files(other_dir)}
    return [p for p in ttgir_files(ir_dir)
            if not _meta(p).get("autotune_candidate") or p.relative_to(ir_dir).as_posix() in other]


def fingerprint_ttgir(ir_dir: Path, files: list[Path] | None = None) -> str | None:
    """sha256 over the sorted (relative path, normalized content) pairs; None when there is no TTGIR."""
    files = ttgir_files(ir_dir) if files is None else sorted(files)
    if not files:
        return None
    digest = hashlib.sha256()
    for path in files:
        rel = path.relative_to(ir_dir).as_posix()
        digest.update(rel.encode() + b"\0")
        digest.update(normalize_ttgir(path.read_text(errors="replace")).encode() + b"\0")
    return digest.hexdigest()


def count_watched_ops(text: str) -> Counter[str]:
    counts: Counter[str] = Counter()
    for op in WATCHED_OPS:
        counts[op] = len(re.findall(rf"(?<![\w.]){re.escape(op)}\b", text))
    return counts


@dataclass
class KernelDiff:
    kernel: str
    state: str  # added | removed | changed | same
    ops_a: dict[str, int] = field(default_factory=dict)
    ops_b: dict[str, int] = field(default_factory=dict)
    meta_a: dict[str, Any] = field(default_factory=dict)
    meta_b: dict[str, Any] = field(default_factory=dict)


def _per_kernel(ir_dir: Path, files: list[Path]) -> dict[str, tuple[str, Counter[str], dict[str, Any]]]:
    """kernel -> (normalized text of all its variants, op counts, metadata of its first variant)."""
    grouped: dict[str, list[Path]] = {}
    for path in sorted(files):
        grouped.setdefault(path.relative_to(ir_dir).parts[0], []).append(path)
    result = {}
    for kernel, paths in grouped.items():
        raw = [p.read_text(errors="replace") for p in paths]
        texts = [f"{p.name}\n{normalize_ttgir(text)}" for p, text in zip(paths, raw)]
        counts: Counter[str] = Counter()
        for text in raw:
            counts += count_watched_ops(text)
        meta = _meta(paths[0])
        meta.pop("autotune_candidate", None)
        result[kernel] = ("".join(texts), counts, {"variants": len(paths), **meta})
    return result


def diff_kernels(ir_a: Path, ir_b: Path, files_a: list[Path], files_b: list[Path]) -> list[KernelDiff]:
    """Per kernel: added, removed, changed or same, with watched op counts; over the gated files of each side."""
    a, b = _per_kernel(ir_a, files_a), _per_kernel(ir_b, files_b)
    diffs = []
    for kernel in sorted(set(a) | set(b)):
        if kernel not in b:
            diffs.append(KernelDiff(kernel, "removed", dict(a[kernel][1]), {}, a[kernel][2], {}))
        elif kernel not in a:
            diffs.append(KernelDiff(kernel, "added", {}, dict(b[kernel][1]), {}, b[kernel][2]))
        else:
            state = "same" if a[kernel][0] == b[kernel][0] else "changed"
            diffs.append(KernelDiff(kernel, state, dict(a[kernel][1]), dict(b[kernel][1]), a[kernel][2], b[kernel][2]))
    return diffs


@dataclass
class GateDecision:
    op: str
    state: str  # no_diff | diff | unavailable
    reason: str
    fingerprint_a: str | None = None
    fingerprint_b: str | None = None
    kernels: list[KernelDiff] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "GateDecision":
        kernels = [KernelDiff(**k) for k in data.get("kernels", [])]
        return cls(data["op"], data["state"], data["reason"], data.get("fingerprint_a"), data.get("fingerprint_b"),
                   kernels)

    def headline(self) -> list[str]:
        """Lines like ``convert_layout 41 -> 9 (-32)`` for the kernels that changed."""
        lines = []
        for k in self.kernels:
            if k.state == "same":
                continue
            if k.state in ("added", "removed"):
                lines.append(f"{k.kernel}: {k.state}")
                continue
            moved = [f"{op.split('.')[-1]} {k.ops_a.get(op, 0)} -> {k.ops_b.get(op, 0)} "
                     f"({k.ops_b.get(op, 0) - k.ops_a.get(op, 0):+d})"
                     for op in WATCHED_OPS if k.ops_a.get(op, 0) != k.ops_b.get(op, 0)]
            for meta in ("shared", "num_warps", "variants"):
                va, vb = k.meta_a.get(meta), k.meta_b.get(meta)
                if va != vb:
                    moved.append(f"{meta} {va} -> {vb}")
            lines.append(f"{k.kernel}: " + (", ".join(moved) if moved else "changed (no watched op count moved)"))
        return lines


def decide(op: str, ir_a: Path, ir_b: Path) -> GateDecision:
    """Compare round 1's two sides.  Never 'no_diff' without TTGIR on both sides."""
    files_a, files_b = gated_files(ir_a, ir_b), gated_files(ir_b, ir_a)
    fa, fb = fingerprint_ttgir(ir_a, files_a), fingerprint_ttgir(ir_b, files_b)
    if fa is None or fb is None:
        missing = " and ".join(str(d) for d, f in ((ir_a, fa), (ir_b, fb)) if f is None)
        return GateDecision(op, "unavailable", f"no TTGIR captured in {missing}", fa, fb)
    kernels = diff_kernels(ir_a, ir_b, files_a, files_b)
    if fa == fb:
        return GateDecision(op, "no_diff", "switch changed no generated code", fa, fb, kernels)
    return GateDecision(op, "diff", "switch changed generated code", fa, fb, kernels)


def save_decision(root: Path, decision: GateDecision) -> None:
    write_json_atomic(RootLayout(root).gate_decision(decision.op), decision.to_json())


def load_decision(root: Path, op: str) -> GateDecision | None:
    path = RootLayout(root).gate_decision(op)
    if not path.exists():
        return None
    try:
        return GateDecision.from_json(read_json(path))
    except (CorruptFileError, KeyError, TypeError) as exc:
        return GateDecision(op, "unavailable", f"{path}: unreadable gate decision ({exc})")
