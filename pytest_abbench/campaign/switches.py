"""Compiler-pass switches for campaigns: setup functions that edit Triton's pipeline in a cell process.

``without_pass("remove_layout_conversions")`` is a setup function for
``Switch(setup_b=...)``: side B compiles with that pass left out.
``stages_hook(fn, name=...)`` turns a function that edits the compile stages
into Triton's ``knobs.runtime.add_stages_inspection_hook``, answering both of
the ways Triton calls it (``tritoncompat`` has the versions), and
``install_stages_hook`` sets it.  Nothing here imports torch or triton until
a setup function runs.

Pass names are the pass binding's name without ``add_``:
``"remove_layout_conversions"`` is ``triton._C.libtriton.passes.ttgpuir.add_remove_layout_conversions``.
A name found in more than one group of bindings needs its group:
``"ttgpuir.accelerate_matmul"`` (``passes.ttgpuir``), ``"amd.ttgpuir.accelerate_matmul"``
(``amd.passes.ttgpuir``), ``"nvidia.ttnvgpuir.plan_cta"``.
"""

from __future__ import annotations

import difflib
import hashlib
import os
from typing import Any, Callable

from pytest_abbench.campaign.model import SIDES, Switch
from pytest_abbench.core import envnames, tritoncompat
from pytest_abbench.core.tritoncompat import StagesCall

StagesEdit = Callable[[StagesCall], None]
KEY_PREFIX = "pytest-abbench:"


class StagesHook:
    """Triton's stages hook for one edit: ``()`` -> ``(key, hash)`` (3.7+), the backend's call -> the edit.

    ``key`` goes into Triton 3.7+'s kernel cache keys, so a kernel compiled
    through this hook never shares a cache entry with one compiled without it
    or through another hook (3.6 leaves hooks out of the key: give each side
    its own TRITON_CACHE_DIR, as the plugin does).
    """

    def __init__(self, edit: StagesEdit, key: str) -> None:
        self.edit = edit
        self.key = key
        self.hash = hashlib.sha256(key.encode()).hexdigest()

    def __call__(self, *args: Any) -> tuple[str, str] | None:
        call = tritoncompat.stages_hook_call(args)
        if call is None:
            return self.key, self.hash
        self.edit(call)
        return None

    def __repr__(self) -> str:
        return f"StagesHook({self.key!r})"


def stages_hook(edit: StagesEdit, *, name: str, version: int | str = 1) -> StagesHook:
    """A hook for ``knobs.runtime.add_stages_inspection_hook`` that runs ``edit(call)`` at each compile.

    ``edit`` gets a ``tritoncompat.StagesCall`` (``stages``, ``options``,
    ``language``, ``capability``, ``backend``) and replaces entries of
    ``call.stages`` in place.  ``name`` and ``version`` make its cache key
    (``pytest-abbench:<name>:v<version>``): give every edit its own name, and
    bump the version when the edit changes, so old cache entries stop matching.
    """
    if not name or not str(version):
        raise ValueError(f"stages_hook: a hook needs a name and a version (got name={name!r}, version={version!r})")
    return StagesHook(edit, f"{KEY_PREFIX}{name}:v{version}")


def install_stages_hook(hook: StagesHook, who: str | None = None) -> None:
    """Set ``hook`` as this process's stages hook; an error where Triton has no such knob or another hook is set.

    One hook per process: Triton has one slot, and a second switch would
    silently replace the first.
    """
    who = who or hook.key
    runtime = tritoncompat.runtime_knobs_with_stages_hook(who)
    current = runtime.add_stages_inspection_hook
    if current is not None and getattr(current, "key", None) != hook.key:
        raise RuntimeError(f"{who}: a stages hook is already installed ({current!r}); "
                           "Triton takes one: make one hook that does both edits")
    runtime.add_stages_inspection_hook = hook


def resolve_pass(pass_name: str, who: str) -> tuple[str, str, Any]:
    """``(group, binding name, module)`` of a pass spelled as in this module's docstring.

    An unknown name is a RuntimeError naming the pass, the Triton version and
    where it looked, with close names when there are any.
    """
    groups = tritoncompat.pass_groups()
    version = tritoncompat.triton_version()
    group, _, bare = pass_name.rpartition(".")
    binding = "add_" + bare.removeprefix("add_")
    if group:
        if group not in groups:
            raise RuntimeError(f"{who}: Triton {version} has no pass group {group!r} for pass {pass_name!r} "
                               f"(groups: {', '.join(sorted(groups))})")
        found = [group] if callable(getattr(groups[group], binding, None)) else []
        where = f"{tritoncompat.pass_module_path(group)}.{binding}"
    else:
        found = sorted(g for g, m in groups.items() if callable(getattr(m, binding, None)))
        where = f"{binding} in any group of triton._C.libtriton[.<backend>].passes: {', '.join(sorted(groups))}"
    if not found:
        known = sorted({f"{g}.{n[4:]}" for g, m in groups.items() for n in dir(m) if n.startswith("add_")})
        close = difflib.get_close_matches(pass_name, known + [k.rpartition(".")[2] for k in known], n=3)
        raise RuntimeError(f"{who}: Triton {version} has no pass {pass_name!r} (no {where})"
                           + (f"; close: {', '.join(dict.fromkeys(close))}" if close else ""))
    if len(found) > 1:
        raise RuntimeError(f"{who}: pass {pass_name!r} is in several groups of Triton {version}: "
                           f"{', '.join(f'{g}.{bare}' for g in found)}; name one")
    return found[0], binding, groups[found[0]]


def without_pass(pass_name: str, stage: str = "ttgir") -> Callable[[], None]:
    """A switch setup function: compile ``stage`` with the pass ``pass_name`` replaced by a no-op.

    The setup resolves the name (an unknown one is an error naming the pass
    and the Triton version, before any kernel compiles) and installs a stages
    hook that runs ``stage`` with the binding patched on its module.  A
    Triton-language kernel whose ``stage`` never called the pass there is an
    error too: the switch would change nothing.
    """
    if not pass_name or not stage:
        raise ValueError(f"without_pass: a pass name and a stage are needed (got {pass_name!r}, {stage!r})")
    who = f"without_pass({pass_name!r}, stage={stage!r})"

    def setup() -> None:
        group, binding, module = resolve_pass(pass_name, who)
        where = f"{tritoncompat.pass_module_path(group)}.{binding}"

        def edit(call: StagesCall) -> None:
            run_stage = call.stages.get(stage)
            if run_stage is None:
                raise RuntimeError(f"{who}: Triton {tritoncompat.triton_version()} gave the stages hook no "
                                   f"{stage!r} stage (stages: {sorted(call.stages)})")
            expect_call = call.is_triton_language  # Gluon kernels run their own pipeline

            def stage_without_pass(src: Any, metadata: Any) -> Any:
                calls = [0]
                saved = getattr(module, binding)
                setattr(module, binding, tritoncompat.no_op_pass(calls))
                try:
                    result = run_stage(src, metadata)
                finally:
                    setattr(module, binding, saved)
                if expect_call and calls[0] == 0:
                    # The pipeline does not look the pass up where it is patched: the switch would change nothing.
                    raise RuntimeError(f"{who}: Triton {tritoncompat.triton_version()}'s {stage} stage never "
                                       f"called {where}; the switch would leave the {stage} unchanged")
                return result

            call.stages[stage] = stage_without_pass

        install_stages_hook(stages_hook(edit, name=f"without_pass:{stage}:{group}.{binding[4:]}"), who)

    setup.__name__ = setup.__qualname__ = f"without_{pass_name.removeprefix('add_')}" + (
        f"_in_{stage}" if stage != "ttgir" else "")
    setup.__doc__ = f"Compile {stage} without the pass {pass_name!r} (pytest_abbench.campaign.switches.without_pass)."
    return setup


def source_trees(switch: Switch) -> dict[str, list[str]]:
    """Side -> the source folders its switch puts first on the import path (``PYTHONPATH`` in ``env_a``/``env_b``).

    A side's tree is how a switch runs other code on one side (another checkout of a kernel library, a
    commit of it under ``abbench bisect``); the history records each tree's git commit.
    """
    trees: dict[str, list[str]] = {}
    for side in SIDES:
        entries = [p for p in switch.env(side).get(envnames.PYTHONPATH, "").split(os.pathsep) if p]
        if entries:
            trees[side] = entries
    return trees
