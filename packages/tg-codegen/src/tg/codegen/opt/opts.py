"""The opt vocabulary: `OptOps`, `Opt` and `KernelOptError` (see shared/specs/optimizer.md §2).

`Opt(OptOps.SPLIT, axis, (factor, AxisType, top))` splits optimisable axis `axis` into the old range (size S/f) and
a new range of size `factor` and type `AxisType`; `top=False` makes the new axis the fast-varying part
(r -> r'*f + n), `top=True` the slow part (r -> n*q + r'). `factor=0` means the whole axis.
`Opt(OptOps.PADTO, axis, m)` rounds the axis up to a multiple of m (masked); `Opt(OptOps.SWAP, axis, other)`
exchanges the loop order of two axes; `Opt(OptOps.TC, ...)` is a tensor-core rewrite (no CPU target has one).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum, auto
from typing import Any

from tg.ir.ops import AxisType, NamedEnum


class OptOps(NamedEnum, Enum):
    """Kernel optimisations."""

    SPLIT = auto()
    PADTO = auto()
    SWAP = auto()
    TC = auto()


class KernelOptError(ValueError):
    """An opt that is not legal for this kernel and renderer; the message names the opt, the axes and the rule."""


@dataclass(frozen=True, order=False)
class Opt:
    """One optimisation: `op` on optimisable axis number `axis` with `arg` (see the module docstring)."""

    op: OptOps
    axis: int
    arg: Any = None

    def __post_init__(self) -> None:
        if not isinstance(self.op, OptOps):
            raise TypeError(f"Opt.op must be an OptOps, got {self.op!r}")
        if not isinstance(self.axis, int) or isinstance(self.axis, bool):
            raise TypeError(f"Opt.axis must be an int, got {self.axis!r}")
        if self.op is OptOps.SPLIT:
            arg = self.arg
            ok = isinstance(arg, tuple) and len(arg) in (2, 3) and isinstance(arg[0], int) and arg[0] >= 0 \
                and isinstance(arg[1], AxisType) and (len(arg) == 2 or isinstance(arg[2], bool))  # fmt: skip
            if not ok:
                raise TypeError(f"SPLIT arg must be (factor >= 0, AxisType[, top: bool]), got {arg!r}")
            if len(arg) == 2:
                object.__setattr__(self, "arg", (arg[0], arg[1], False))
        elif self.op in (OptOps.PADTO, OptOps.SWAP) and not (isinstance(self.arg, int) and self.arg >= 0):
            raise TypeError(f"{self.op.name} arg must be a non-negative int, got {self.arg!r}")

    def __str__(self) -> str:
        if self.op is OptOps.SPLIT:
            f, t, top = self.arg
            return f"SPLIT({self.axis},{f},{t.name}{',top' if top else ''})"
        return f"{self.op.name}({self.axis},{self.arg})"


def split(axis: int, factor: int, target: AxisType, top: bool = False) -> Opt:
    """Shorthand for `Opt(OptOps.SPLIT, axis, (factor, target, top))`."""
    return Opt(OptOps.SPLIT, axis, (factor, target, top))
