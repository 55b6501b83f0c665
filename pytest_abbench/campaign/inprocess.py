"""Whether both sides of a campaign can be built and timed in one process, and what each side's build sees.

``--ab-reference`` times side A and side B of each op interleaved in one
process, beside the cells' verdict.  That is sound only for a kernel-variant
switch: the two sides run different code on the same inputs, and nothing that
Triton or the compiler reads differs between them.  ``why_not_in_one_process``
is the one place that decides it; ``build_env`` says what a side's build must
see of the switch's variables when both sides share the process.
"""

from __future__ import annotations

from pytest_abbench.campaign import benchmark_tests
from pytest_abbench.campaign.model import SIDES, Campaign, Switch

# Variables Triton reads when it compiles or launches, by prefix, besides its TRITON_* knobs: what a message can
# name as read by Triton rather than only "not declared".
_TRITON_PREFIXES = ("TRITON_", "MLIR_", "LLVM_", "DISABLE_", "ENABLE_", "NVPTX_", "AMDGCN_", "PTXAS_")
OWN_PROCESSES = "the sides need their own processes"


def why_not_in_one_process(campaign: Campaign) -> str | None:
    """None when both sides of ``campaign`` can be built in one process; else why not, in one sentence.

    They can when the sides differ only in code the campaign's builds choose: the providers of a perf_report
    script (``--ab-providers``), or variables of the switch that it declares read only by its builds
    (``Switch.build_only_env``, as ``flaggems.AGAINST_ATEN`` does).  Another interpreter, a setup hook (it edits
    the compiler of its process), per-side measurement options, or a variable Triton may read all need a
    process per side.
    """
    if campaign.adapter is not None and campaign.adapter.partition(":")[0] == benchmark_tests.KIND:
        return ("its cells run each test through pytest (--ab-pytest-benchmark), and a process that builds both "
                f"sides runs without pytest: {OWN_PROCESSES}")
    switch = campaign.switch
    for side in SIDES:
        python = switch.python(side)
        if python:
            return f"side {side} runs another Python ({python}, another Triton build): {OWN_PROCESSES}"
        hook = switch.setup(side)
        if hook is not None:
            return (f"side {side}'s setup {getattr(hook, '__name__', 'hook')}() changes how Triton compiles in its "
                    f"process: {OWN_PROCESSES}")
    declared = set(switch.build_only_env)
    for side in ("B", "A"):
        for name, value in sorted(switch.env(side).items()):
            if name in declared:
                continue
            if name.startswith(_TRITON_PREFIXES):
                return f"side {side}'s {name}={value} is read by Triton when it compiles: {OWN_PROCESSES}"
            return (f"side {side}'s {name}={value} is not declared read only by the campaign's builds "
                    f"(Switch(build_only_env=...)), so Triton or the compiler may read it: {OWN_PROCESSES}")
    return None


def not_applicable_notice(campaign: Campaign) -> str | None:
    """The line the terminal shows, at collection, for a campaign whose switch needs a process per side."""
    reason = why_not_in_one_process(campaign)
    if reason is None:
        return None
    return f"abbench: --ab-reference does not apply to {campaign.path.name}: {reason}"


def build_env(switch: Switch, side: str) -> dict[str, str | None]:
    """What ``side``'s build sees of the switch's variables in a process that builds both sides: its own value,
    or None (unset) for a variable only the other side sets."""
    own = switch.env(side)
    return {name: own.get(name) for name in sorted(set(switch.env_a) | set(switch.env_b))}
