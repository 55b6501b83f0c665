"""Stand-in random inputs for a compile-only process: one small draw, tiled to the size asked for.

A compile-only process (IR triage, the precompile) launches no kernel, so no
kernel reads its inputs' values: the compiler sees their shapes, dtypes,
strides and addresses.  Drawing them cost most of such a process at LLM
sizes (a 4096 x 128256 bf16 logits tensor: 2.8 s on a 2-core CPU, 0.23 s
tiled; ``benchmarks/input_cost.py --device cpu --stand-in``).  So in such a process a large
CPU draw from ``torch.randn``, ``torch.rand`` or ``torch.randint`` draws its
first ``BLOCK`` values from torch (the same generator, dtype and bounds) and
repeats them: the tensor a campaign gets has the shape, dtype, device and
distribution it asked for, and Python that reads values before a launch (a
count of ignored targets, a maximum) sees what it would see on a real draw,
within the block's sampling.  ``ABBENCH_EXACT_DRAWS=1`` keeps torch's own
draws, for a campaign whose compiled code depends on exact input values.
Cells that time anything never install this.
"""

from __future__ import annotations

import contextlib
import functools
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

BLOCK = 1 << 20  # values drawn for real per stand-in: a draw of at most 4 blocks is left to torch
_SMALLEST = 4 * BLOCK
_PASSED_TO_TORCH = frozenset({"out", "layout", "pin_memory", "names", "memory_format"})  # not stood in


@dataclass
class StandInCount:
    """What this process stood in: draws and values (for its log line)."""

    draws: int = 0
    values: int = 0

    def summary(self) -> str:
        if not self.draws:
            return ""
        draws = "1 input draw" if self.draws == 1 else f"{self.draws} input draws"
        return f"{draws} ({self.values:,} values) tiled from {BLOCK:,}-value draws"


COUNT = StandInCount()


def _split_size(args: tuple[Any, ...], kwargs: dict[str, Any],
                ints_are_size: bool) -> tuple[tuple[Any, ...], tuple[int, ...]] | None:
    """(the arguments before the size, the size) of a ``randn``/``rand``/``randint`` call; None: not one we read."""
    if "size" in kwargs:
        size, leading = kwargs["size"], args
    elif args and isinstance(args[-1], (tuple, list)):  # torch.Size is a tuple
        size, leading = args[-1], args[:-1]
    elif ints_are_size and args and all(type(a) is int for a in args):
        size, leading = args, ()  # randn(2, 3)
    else:
        return None
    if not all(type(n) is int and n >= 0 for n in size):
        return None
    return leading, tuple(size)


def _tiled(block: Any, size: Sequence[int]) -> Any:
    """A tensor of ``size`` whose values are ``block`` repeated, in one copy."""
    import torch

    out = torch.empty(tuple(size), dtype=block.dtype, device=block.device)
    flat, width = out.view(-1), block.numel()
    whole = flat.numel() // width
    flat[:whole * width].view(whole, width).copy_(block.expand(whole, width))
    flat[whole * width:].copy_(block[:flat.numel() - whole * width])
    return out


def _stand_in(draw: Callable[..., Any], ints_are_size: bool) -> Callable[..., Any]:
    """``draw`` (a torch factory), made to tile a large CPU draw from one ``BLOCK``-value draw of its own."""

    @functools.wraps(draw)
    def stood_in(*args: Any, **kwargs: Any) -> Any:
        if _PASSED_TO_TORCH & kwargs.keys():
            return draw(*args, **kwargs)
        split = _split_size(args, kwargs, ints_are_size)
        if split is None:
            return draw(*args, **kwargs)
        leading, size = split
        numel = 1
        for n in size:
            numel *= n
        if numel <= _SMALLEST:
            return draw(*args, **kwargs)
        rest = {k: v for k, v in kwargs.items() if k not in ("size", "requires_grad")}
        block = draw(*leading, size=(BLOCK,), **rest)
        if block.device.type != "cpu":
            return draw(*args, **kwargs)
        out = _tiled(block, size)
        COUNT.draws += 1
        COUNT.values += numel
        return out.requires_grad_(bool(kwargs.get("requires_grad", False)))

    return stood_in


def install() -> Callable[[], None]:
    """Stand in for this process's large CPU draws; returns what puts torch's own back."""
    import torch

    originals = {name: getattr(torch, name) for name in ("randn", "rand", "randint")}
    torch.randn = _stand_in(originals["randn"], ints_are_size=True)
    torch.rand = _stand_in(originals["rand"], ints_are_size=True)
    torch.randint = _stand_in(originals["randint"], ints_are_size=False)  # randint(0, 9) has no size

    def restore() -> None:
        for name, original in originals.items():
            setattr(torch, name, original)

    return restore


@contextlib.contextmanager
def stood_in() -> Iterator[StandInCount]:
    """``install`` for a ``with`` block (tests, benchmarks); yields the count, reset at entry."""
    COUNT.draws = COUNT.values = 0
    restore = install()
    try:
        yield COUNT
    finally:
        restore()
