"""FlagGems adapter: FlagGems operators as campaign ops, called through FlagGems, checked against torch.

    from pytest_abbench.campaign.flaggems import GemsOp, gems_ops, unavailable_reason
    SKIP = unavailable_reason()
    OPS = gems_ops([GemsOp("mm", inputs=..., call=lambda ops, a, b: ops.mm(a, b), reference=torch_mm, ...)])

The op's timed call goes to ``flag_gems.ops.<op>`` directly (not through
torch's dispatcher, so torch's own kernel can never be what is timed), and
the reference is computed by torch.  Each cell's LibTuner cache is pinned by
the plugin (``pytest_abbench.core.tunercache``).  Collection imports nothing heavy.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from pytest_abbench.campaign.model import Case, Op, Shape
from pytest_abbench.core.settings import detect_backend

INSTALL_HINT = "pip install -e '.[flaggems]'"


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


def _builder(spec: GemsOp) -> Callable[[Shape, str], Case]:
    def build(shape: Shape, device: str) -> Case:
        import flag_gems.ops as gems  # only inside the cell, on a GPU

        args = tuple(spec.inputs(shape, device))
        return Case(run=lambda: spec.call(gems, *args), expected=lambda: spec.reference(*args),
                    atol=spec.atol, rtol=spec.rtol, check=spec.check)

    build.__name__ = f"build_{spec.name}"
    return build


def gems_ops(specs: Sequence[GemsOp]) -> list[Op]:
    return [Op(spec.name, build=_builder(spec), shapes=dict(spec.shapes)) for spec in specs]
