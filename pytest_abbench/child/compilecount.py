"""Count, in a cell's process, the kernels Triton loaded from its cache and those it compiled.

Triton calls ``knobs.compilation.listener`` at the end of each ``compile``
with ``cache_hit`` (3.6 through 3.9 at least): True where the kernel came
from ``TRITON_CACHE_DIR``, False where it was compiled and stored there.  A
kernel met again in the same process is not compiled again and not counted.
A listener the campaign set is kept and still called.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pytest_abbench.core.cellfiles import KernelCounts, write_kernel_counts


class CompileCounter:
    """The listener: ``loaded`` and ``compiled`` so far; ``available`` False where this Triton has no listener."""

    def __init__(self) -> None:
        self.loaded = 0
        self.compiled = 0
        self.available = False
        self._previous: Any = None

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        if kwargs.get("cache_hit"):
            self.loaded += 1
        else:
            self.compiled += 1
        if self._previous is not None:
            self._previous(*args, **kwargs)

    def install(self) -> "CompileCounter":
        try:
            from triton import knobs
        except ImportError:
            return self
        compilation = getattr(knobs, "compilation", None)
        if compilation is None or not hasattr(type(compilation), "listener"):
            return self
        self._previous = compilation.listener
        compilation.listener = self
        self.available = True
        return self

    def moved_to_compiled(self, n: int) -> None:
        """``n`` kernels a fork of this process compiled, which this process then loaded from the cache."""
        self.compiled += n
        self.loaded = max(0, self.loaded - n)

    @staticmethod
    def active() -> "CompileCounter | None":
        """The counter this process installed as Triton's compilation listener, if any."""
        try:
            from triton import knobs
        except ImportError:
            return None
        listener = getattr(getattr(knobs, "compilation", None), "listener", None)
        return listener if isinstance(listener, CompileCounter) else None

    def counts(self) -> KernelCounts:
        return KernelCounts(loaded=self.loaded, compiled=self.compiled)

    def write(self, folder: Path) -> None:
        """This process's counts in ``folder`` (an IR-only process's; a timed cell keeps its own in its timing)."""
        if self.available:
            write_kernel_counts(folder, self.counts())

