"""FlagGems adapter: FlagGems operators as campaign ops, called through FlagGems, checked against torch.

    from pytest_abbench.campaign.flaggems import GemsOp, gems_ops, unavailable_reason
    SKIP = unavailable_reason()
    OPS = gems_ops([GemsOp("mm", inputs=..., call=lambda ops, a, b: ops.mm(a, b), reference=torch_mm, ...)])

The op's timed call goes to ``flag_gems.ops.<op>`` directly (not through
torch's dispatcher, so torch's own kernel can never be what is timed), and
the reference is computed by torch.  Each cell's LibTuner cache is pinned by
the plugin (``pytest_abbench.core.tunercache``).  Collection imports nothing heavy.

FlagGems against ATen (a kernel-variant switch): ``gems_ops(specs, against_aten=True)``
with ``SWITCH = AGAINST_ATEN``: side A times each spec's ``aten`` call (torch's own
kernel) and never imports FlagGems, side B times FlagGems' kernel on the same inputs.
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from pytest_abbench.campaign.model import Case, Op, Shape, Switch
from pytest_abbench.core.settings import detect_backend

INSTALL_HINT = "pip install -e '.[flaggems]'"
# The variable that makes a side of a FlagGems-against-ATen campaign call FlagGems (value GEMS); unset: ATen.
IMPL_VARIABLE = "ABBENCH_GEMS_IMPL"
GEMS = "flag_gems"
# Only the builds below read the variable (at build time): both sides can be built in one process (--ab-reference).
AGAINST_ATEN = Switch(env_b={IMPL_VARIABLE: GEMS}, build_only_env=(IMPL_VARIABLE,))


def unavailable_reason() -> str | None:
    """Why FlagGems ops cannot run here, or None.  Cheap: no import of torch or flag_gems."""
    if importlib.util.find_spec("flag_gems") is None:
        return f"FlagGems is not installed ({INSTALL_HINT})"
    if detect_backend("auto") != "cuda":
        return "no GPU: FlagGems loads only on a GPU, and Triton's interpreter cannot run it"
    return None


@dataclass
class GemsOp:
    """One FlagGems operator: how to make its inputs, call it, and compute the torch reference."""

    name: str
    inputs: Callable[[Shape, str], Sequence[Any]]
    call: Callable[..., Any]  # (flag_gems.ops module, *inputs) -> result
    reference: Callable[..., Any]  # (*inputs) -> torch's result
    shapes: Mapping[str, Sequence[Mapping[str, Any]]] = field(default_factory=dict)
    atol: float = 1e-5
    rtol: float = 1.3e-6
    check: Callable[[Any, Any], None] | None = None
    aten: Callable[..., Any] | None = None  # (*inputs) -> torch's own operator, timed on side A against ATen


def _builder(spec: GemsOp, against_aten: bool) -> Callable[[Shape, str], Case]:
    def build(shape: Shape, device: str) -> Case:
        args = tuple(spec.inputs(shape, device))
        if against_aten and os.environ.get(IMPL_VARIABLE) != GEMS:
            aten = spec.aten
            assert aten is not None  # gems_ops refused a spec without one
            run: Callable[[], Any] = lambda: aten(*args)  # noqa: E731
        else:
            import flag_gems.ops as gems  # only inside the cell, on a GPU

            run = lambda: spec.call(gems, *args)  # noqa: E731
        return Case(run=run, expected=lambda: spec.reference(*args), atol=spec.atol, rtol=spec.rtol,
                    check=spec.check)

    build.__name__ = f"build_{spec.name}"
    return build


def gems_ops(specs: Sequence[GemsOp], against_aten: bool = False) -> list[Op]:
    """The specs as campaign ops; ``against_aten``: side A calls each spec's ``aten`` (switch: AGAINST_ATEN)."""
    lacking = [spec.name for spec in specs if against_aten and spec.aten is None]
    if lacking:
        raise ValueError(f"FlagGems against ATen: {', '.join(lacking)} has no aten call (GemsOp(aten=...))")
    return [Op(spec.name, build=_builder(spec, against_aten), shapes=dict(spec.shapes)) for spec in specs]
