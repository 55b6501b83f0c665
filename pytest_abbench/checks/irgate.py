"""The IR gate: did the switch change any generated code for this op?

After both round-1 cells of an op finish, each side's captured TTGIR is
fingerprinted.  Equal fingerprints mean the remaining rounds would measure
noise and report it as "no difference", so they are skipped
(``SWITCH_NO_IR_DIFF``).  The decision is saved to ``<root>/irgate/<op>.json``
so the report, a resumed session and ``abbench summary`` read the same answer.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import re
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Mapping

from pytest_abbench.core.cellfiles import cell_kernel_counts
from pytest_abbench.core.fileio import SCHEMA_FIELD, CorruptFileError, Fields, read_object, write_json_atomic
from pytest_abbench.core.layout import RootLayout
from pytest_abbench.core.outcome import NO_IR_DIFF as NO_IR_DIFF  # the status word callers name through the gate

# The ops a compiler engineer reads first, as they appear in TTGIR.
WATCHED_OPS = (
    "ttg.convert_layout", "tt.dot", "ttng.warp_group_dot", "ttg.local_alloc", "ttg.local_load",
    "ttg.async_copy_global_to_local", "ttng.async_tma_copy_global_to_local", "tt.reduce", "tt.load", "tt.store",
)


def strip_locations(line: str) -> str:
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


# Each round-1 cell fingerprints every stage of every kernel it loads, and one kernel's stages can run to
# megabytes: the common forms go in one pass over the whole text, and only what is left goes line by line.
_LOC_DEFINITION = re.compile(r"\s*#loc\d*\s*=")
_PLAIN_LOC = re.compile(r" loc\(#loc\d*\)")  # the usual attribute: a reference to a #loc line
_DBG_ATTACHMENT = re.compile(r",? !dbg !\d+")
_DBG_LINE = re.compile(r"\s*#dbg_\w+\(|!\d+ = (distinct )?!DI\w+\(")
_DEBUG_SECTION = re.compile(r"^[ \t]*\.section[ \t]+\.debug", re.MULTILINE)
_LOC_FILE_LINE = re.compile(r"^[ \t]*\.(?:loc|file)[ \t][^\n]*\n?", re.MULTILINE)


def normalize_ttgir(text: str) -> str:
    """TTGIR with MLIR location info removed (``#loc`` lines, ``loc(...)`` attributes), nothing else.

    Locations embed absolute source paths, so two identical compilations from
    two folders differ only there.
    """
    lines = []
    for line in _PLAIN_LOC.sub(" ", text).splitlines():
        if "#loc" in line and _LOC_DEFINITION.match(line):
            continue
        lines.append(strip_locations(line) if "loc(" in line else line.rstrip())
    return "\n".join(lines) + "\n"


def normalize_llir(text: str) -> str:
    """LLVM IR without debug info (``!dbg`` attachments, ``!DI...`` nodes, debug records): it names the source."""
    lines = [line.rstrip() for line in _DBG_ATTACHMENT.sub("", text).splitlines()
             if not (("#dbg_" in line or "!DI" in line) and _DBG_LINE.match(line))]
    return "\n".join(lines) + "\n"


def normalize_asm(text: str) -> str:
    """PTX or AMDGCN without ``.file``/``.loc`` lines and the debug sections at the end (they name the source)."""
    debug = _DEBUG_SECTION.search(text)
    kept = _LOC_FILE_LINE.sub("", text if debug is None else text[:debug.start()])
    return "\n".join(line.rstrip() for line in kept.splitlines()) + "\n"


# Triton's compile stages in the order they run, as named in a kernel's ``asm``:
# ``source`` is the front end's TTIR before any pass; ``ttir`` is after its passes.
STAGES = ("source", "ttir", "ttgir", "llir", "ptx", "amdgcn")
PASSES_SUFFIX = ".passes.json"


def stage_order(asm: Mapping[str, Any]) -> list[str]:
    """A kernel's ``asm`` keys in compile order (unknown ones after, by name)."""
    return [s for s in STAGES if s in asm] + sorted(k for k in asm if k not in STAGES)


def stage_fingerprint(stage: str, text: str) -> str:
    """A short hash of one stage's text with its source locations removed (MLIR, LLVM IR or assembly)."""
    normalize = {"llir": normalize_llir, "ptx": normalize_asm, "amdgcn": normalize_asm}.get(stage, normalize_ttgir)
    return hashlib.sha256(normalize(text).encode()).hexdigest()[:16]


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
    first_diff: str = ""  # "first differs at ttgir (ttir identical), after <pass>" for a changed kernel


def _stem(path: Path) -> str:
    return path.name[: -len(".ttgir")]


def _passes(path: Path) -> list[list[str]] | None:
    passes_path = path.with_name(_stem(path) + PASSES_SUFFIX)
    try:
        data = json.loads(passes_path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, list) else None


def first_pass_difference(a: list[list[str]], b: list[list[str]]) -> str | None:
    """Which pass first made the two sides' IR differ, from their ``[pass, argument, IR fingerprint]`` lists.

    Each entry is the IR *before* a pass.  The lists are aligned by pass
    argument (pipelines differ where a switch removes a pass, and between
    Triton versions).  The answer is the first aligned pass whose IR differs
    after an aligned pass whose IR was equal: the last pass both ran before it,
    or a pass only one side ran since, made the difference.  IR that differs
    from the first dump on (the front end's output) and is never equal again
    says so; IR that differs there and is equal after the TTIR passes is no
    pass's doing (None), nor is IR equal throughout.
    """
    matcher = difflib.SequenceMatcher(None, [p[1] or p[0] for p in a], [p[1] or p[0] for p in b], autojunk=False)
    last: str | None = None  # the last pass both ran whose IR before it was equal
    only: dict[str, list[str]] = {"A": [], "B": []}
    front_differs = False
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag != "equal":
            only["A"] += [p[0] for p in a[i1:i2]]
            only["B"] += [p[0] for p in b[j1:j2]]
            continue
        for pa, pb in zip(a[i1:i2], b[j1:j2]):
            if pa[2] == pb[2]:
                last, only = pa[0], {"A": [], "B": []}
                continue
            if last is None:
                front_differs = True  # still the front end's difference: look for where the passes make it equal
                only = {"A": [], "B": []}
                continue
            extra = "; ".join(f"only side {side} runs {', '.join(names)}" for side, names in only.items() if names)
            return f"after {last} ({extra})" if extra else f"after {last}"
    return "before the first pass (the front end's output differs)" if front_differs and last is None else None


# Stages that are the kernel's source or its front end's IR, not yet its generated code.
BEFORE_CODE = ("source", "ttir")


def explain_variant(path_a: Path, path_b: Path) -> tuple[int, str, bool] | None:
    """``(first differing stage's index, its description, whether code after TTGIR differs)`` for two variants.

    The description reads ``first differs at ttgir (ttir identical), after
    <pass>``, or, where a later stage is equal again, ``first differs at
    source; ttir identical; differs at ttgir, llir, ptx; after <pass>``.  None
    when the stage fingerprints are equal or were not captured (older IR).
    """
    stages_a, stages_b = _meta(path_a).get("stages") or {}, _meta(path_b).get("stages") or {}
    common = [s for s in stage_order(stages_a) if s in stages_b]
    differing = [i for i, s in enumerate(common) if stages_a[s] != stages_b[s]]
    if not differing:
        return None
    first = differing[0]
    text = f"first differs at {common[first]}"
    if first:
        text += f" ({common[first - 1]} identical)"
    same_after = [i for i in range(first + 1, len(common)) if i not in differing]
    if same_after:  # e.g. two front ends' outputs that the TTIR passes make equal again
        text += f"; {', '.join(common[i] for i in same_after)} identical"
        again = [common[i] for i in differing if i > same_after[0]]
        if again:
            text += f"; differs at {', '.join(again)}"
    passes_a, passes_b = _passes(path_a), _passes(path_b)  # the TTIR and TTGIR passes (not the LLVM lowering)
    if passes_a and passes_b:
        where = first_pass_difference(passes_a, passes_b)
        if where:
            text += f"; {where}" if same_after else f", {where}"
    return first, text, any(common[i] not in (*BEFORE_CODE, "ttgir") for i in differing)


def explain_kernel(ir_a: Path, ir_b: Path, paths_a: list[Path], paths_b: list[Path]) -> tuple[str, bool]:
    """The earliest stage difference among the variants both sides compiled (paired by name, or the only one),
    and whether any pair's code after TTGIR (LLVM IR, assembly) differs."""
    by_name_b = {p.relative_to(ir_b).as_posix(): p for p in paths_b}
    pairs = [(p, by_name_b[p.relative_to(ir_a).as_posix()]) for p in paths_a
             if p.relative_to(ir_a).as_posix() in by_name_b]
    if not pairs and len(paths_a) == len(paths_b) == 1:
        pairs = [(paths_a[0], paths_b[0])]
    found = [e for e in (explain_variant(pa, pb) for pa, pb in pairs) if e is not None]
    if not found:
        return "", False
    return min(found, key=lambda e: e[0])[1], any(e[2] for e in found)


def _per_kernel(ir_dir: Path, files: list[Path]) -> dict[str, tuple[str, Counter[str], dict[str, Any], list[Path]]]:
    """kernel -> (normalized text of all its variants, op counts, metadata of its first variant, variant files)."""
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
        for detail in ("autotune_candidate", "stages"):  # per variant; the stages are compared in explain_kernel
            meta.pop(detail, None)
        result[kernel] = ("".join(texts), counts, {"variants": len(paths), **meta}, paths)
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
            # Equal TTGIR is not equal code when LLVM IR or assembly differ (two Triton builds, an LLVM switch).
            where, code_after_ttgir = explain_kernel(ir_a, ir_b, a[kernel][3], b[kernel][3])
            state = "same" if a[kernel][0] == b[kernel][0] and not code_after_ttgir else "changed"
            where = where if state == "changed" else ""
            diffs.append(KernelDiff(kernel, state, dict(a[kernel][1]), dict(b[kernel][1]), a[kernel][2], b[kernel][2],
                                    where))
    return diffs


# What a changed kernel's line compares of its first variant's metadata (child/ircapture.py writes it): registers and
# spills from its cubin, shared memory, launch shape, the MMA its TTGIR lays out; then its variants and Triton.
RESOURCE_FIELDS = ("registers", "spills", "shared", "num_warps", "num_stages", "num_ctas", "mma", "variants", "triton")
RESOURCE_LABELS = {"registers": "regs"}

GATE_SCHEMA = 1  # the version of ``irgate/<op>.json`` and of the decision a test report carries


@dataclass
class GateDecision:
    op: str
    state: str  # no_diff | diff | unavailable
    reason: str
    fingerprint_a: str | None = None
    fingerprint_b: str | None = None
    kernels: list[KernelDiff] = field(default_factory=list)
    basis: str = ""  # what round 1 compiled, e.g. "core for cuda:90" (core.settings.Settings.ir_basis)

    def to_json(self) -> dict[str, Any]:
        return {SCHEMA_FIELD: GATE_SCHEMA, **asdict(self)}

    @classmethod
    def from_json(cls, data: dict[str, Any] | Fields, where: str = "IR-gate decision") -> "GateDecision":
        """The decision ``to_json`` wrote; a FormatError names ``where``, the field and what it expected."""
        f = data if isinstance(data, Fields) else Fields(where, data)
        f.version(GATE_SCHEMA)
        kernels = [KernelDiff(k.text("kernel"), k.text("state"), dict(k.whole_map("ops_a", {})),
                              dict(k.whole_map("ops_b", {})), dict(k.mapping("meta_a", {})),
                              dict(k.mapping("meta_b", {})), k.text("first_diff", ""))
                   for k in f.objects("kernels", [])]
        return cls(f.text("op"), f.text("state"), f.text("reason"), f.text_or_none("fingerprint_a"),
                   f.text_or_none("fingerprint_b"), kernels, f.text("basis", ""))

    def headline(self) -> list[str]:
        """Lines like ``convert_layout 41 -> 9 (-32)`` for the kernels that changed; the reason where a side ran
        no Triton kernel (there is nothing to compare kernel by kernel)."""
        if self.state == "diff" and not self.kernels:
            return [self.reason]
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
            for meta in RESOURCE_FIELDS:
                va, vb = k.meta_a.get(meta), k.meta_b.get(meta)
                if va != vb:
                    moved.append(f"{RESOURCE_LABELS.get(meta, meta)} {va} -> {vb}")
            line = f"{k.kernel}: " + (", ".join(moved) if moved else "changed (no watched op count moved)")
            lines.append(f"{line}; {k.first_diff}" if k.first_diff else line)
        return lines if lines or self.state != "diff" else [self.reason]


def decide(op: str, ir_a: Path, ir_b: Path, basis: str = "", variants: tuple[str, str] | None = None
           ) -> GateDecision:
    """Compare round 1's two sides: TTGIR, and the stages after it where captured.

    Never 'no_diff' without TTGIR on both sides, nor where the sides run different code (``variants``, the
    switch's ``variant_a`` and ``variant_b`` where they differ: a perf_report script's providers): the Triton
    kernels both capture (one launched at import by both, say) are then not all each side runs.  ``basis`` says
    what was compiled (shape level and target), for the report's line.
    """
    decision = _decide(op, ir_a, ir_b)
    if decision.state == "no_diff" and variants is not None:
        decision.state = "diff"
        decision.reason = (f"the sides run different code ({variants[0]} -> {variants[1]}): the Triton kernels both "
                           f"captured are the same, which says nothing of the rest")
    decision.basis = basis
    return decision


def _decide(op: str, ir_a: Path, ir_b: Path) -> GateDecision:
    other_code = _runs_other_code(op, ir_a, ir_b)
    if other_code is not None:
        return other_code
    files_a, files_b = gated_files(ir_a, ir_b), gated_files(ir_b, ir_a)
    fa, fb = fingerprint_ttgir(ir_a, files_a), fingerprint_ttgir(ir_b, files_b)
    if fa is None or fb is None:
        missing = " and ".join(str(d) for d, f in ((ir_a, fa), (ir_b, fb)) if f is None)
        return GateDecision(op, "unavailable", f"no TTGIR captured in {missing}", fa, fb)
    kernels = diff_kernels(ir_a, ir_b, files_a, files_b)
    if fa == fb and all(k.state == "same" for k in kernels):
        return GateDecision(op, "no_diff", "switch changed no generated code", fa, fb, kernels)
    if fa == fb:
        return GateDecision(op, "diff", "switch changed generated code (TTGIR identical, LLVM IR or assembly not)",
                            fa, fb, kernels)
    return GateDecision(op, "diff", "switch changed generated code", fa, fb, kernels)


def _runs_other_code(op: str, ir_a: Path, ir_b: Path) -> GateDecision | None:
    """A 'diff' where one side compiled and loaded no Triton kernel and the other captured TTGIR (a kernel-variant
    switch), else None.  Every variant the other side captured counts, autotune candidates included: with no
    kernel of its own the empty side recorded no choice, so the other side tuned its own keys (its side record)
    and each variant it captured is a candidate, yet all of it is code the empty side does not run."""
    dirs = {"A": ir_a, "B": ir_b}
    files = {side: ttgir_files(ir_dir) for side, ir_dir in dirs.items()}
    for empty, other in (("A", "B"), ("B", "A")):
        if files[other] and not files[empty] and ran_no_triton_kernel(dirs[empty]):
            names = sorted({p.relative_to(dirs[other]).parts[0] for p in files[other]})
            return GateDecision(op, "diff", f"side {empty} ran no Triton kernel, side {other} compiled "
                                f"{', '.join(names)}: the switch runs other code",
                                fingerprint_ttgir(ir_a, files["A"]), fingerprint_ttgir(ir_b, files["B"]))
    return None


def ran_no_triton_kernel(ir_dir: Path) -> bool:
    """The cell whose IR folder this is compiled and loaded no Triton kernel, by its own count: no TTGIR there is
    then what the side ran (ATen, a library's CUDA kernel), not a capture that failed."""
    counts = cell_kernel_counts(ir_dir.parent)
    return counts is not None and counts["compiled"] == 0 and counts["loaded"] == 0


def save_decision(root: Path, decision: GateDecision) -> None:
    write_json_atomic(RootLayout(root).gate_decision(decision.op), decision.to_json())


def load_decision(root: Path, op: str) -> GateDecision | None:
    path = RootLayout(root).gate_decision(op)
    if not path.exists():
        return None
    try:
        return GateDecision.from_json(read_object(path))
    except CorruptFileError as exc:  # not JSON, a newer version, or a field that is not what it should be
        return GateDecision(op, "unavailable", f"unreadable gate decision: {exc}")  # exc names the file
