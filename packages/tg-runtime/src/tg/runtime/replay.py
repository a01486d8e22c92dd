"""`Replay`: a schedule ready to run again over other buffers (captured program + buffer slots + variables +
launcher).

Every repeated run in tg is the same thing: a LINEAR of CALLs whose buffers change between runs, run again without
the scheduler. A :class:`Replay` holds

- the *slotted* program: every buffer argument a slot PARAM (`tg.runtime.hcq.prepare.slot_linear`; views keep their
  byte offsets), so it is one hash-consed key for every run of that structure;
- per slot, where its buffer comes from: *given* per run (the k-th buffer the caller passes: JIT inputs and outputs,
  the buffers of an eager realize) or *fixed* (a Buffer the replay keeps: weights, arenas, constants);
- fixed variable values (a run's own values override them);
- the launcher that runs it: the HCQ launcher (compiled to queue programs, linked once, an execution patches slot
  addresses and variables) when a call touches an HCQ device, else the ExecItem launcher (lowered runners called one
  by one).

`HCQGraphExecutor` wraps one per JIT batch and a realize plan (tg.tensor.plans) one per graph structure of an eager
realize (every buffer given: the graph's inputs and the buffers the run makes); `tg.runtime.hcq.run` runs eager HCQ
schedules on the same HCQ launcher.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tg.ir import Ops, UOp
from tg.runtime.device import Buffer
from tg.runtime.engine import ExecItemLauncher, buffer_for

__all__ = ["Replay"]


class Replay:
    """A slotted schedule and how to run it (see the module docstring).

    ``linear`` is a LINEAR of CALLs over BUFFER / BUFFER_VIEW / PARAM uops. A PARAM ``(k, size)`` argument is given per
    run (``buffers[k]``); a BUFFER is fixed (its Buffer is kept). ``var_vals`` are fixed variable values.
    """

    def __init__(self, linear: UOp, var_vals: dict[str, int] | None = None) -> None:
        from tg.runtime.hcq.prepare import slot_linear

        if linear.op is not Ops.LINEAR:
            raise TypeError(f"Replay needs a LINEAR of CALLs, got {linear.op}")
        self.slotted, bases = slot_linear(linear)
        self.slot_count = len(bases)
        self.given: list[tuple[int, int]] = []  # (slot, index into the run's buffers)
        self.fixed: list[Buffer | None] = []
        for i, b in enumerate(bases):
            if b.op is Ops.PARAM:
                self.given.append((i, int(b.arg[0])))
                self.fixed.append(None)
            else:
                self.fixed.append(buffer_for(b))
        self.var_vals = dict(var_vals or {})
        self.launcher = _launcher(self)

    def buffers(self, given: Sequence[Buffer]) -> list[Buffer]:
        """The Buffer of every slot for a run over ``given``."""
        out = list(self.fixed)
        for slot, k in self.given:
            out[slot] = given[k]
        return out  # type: ignore[return-value]

    def __call__(self, given: Sequence[Buffer] = (), var_vals: dict[str, int] | None = None,
                 wait: bool = False) -> float | None:  # fmt: skip
        """Run once over ``given`` with ``var_vals`` (merged over the fixed values); seconds when ``wait``."""
        vals = {**self.var_vals, **var_vals} if self.var_vals and var_vals else (var_vals or self.var_vals)
        return self.launcher(self.buffers(given), vals, wait)


def _touches_hcq(slotted: UOp) -> bool:
    from tg.runtime.device import Device
    from tg.runtime.hcq.ir import base_of

    for call in slotted.src:
        for a in call.src[1:]:
            b = base_of(a)
            if b.op is Ops.PARAM and Device[str(b.src[0].arg)].is_hcq:
                return True
    return False


def _launcher(r: Replay) -> Any:
    if _touches_hcq(r.slotted):
        from tg.runtime.hcq.run import HCQLauncher

        return HCQLauncher(r.slotted, r.slot_count)
    return ExecItemLauncher(r.slotted)


def slot_param_like(buf: Buffer, k: int) -> UOp:
    """A PARAM standing for the k-th given buffer (what a caller puts into a LINEAR for ``Replay``)."""
    return UOp(Ops.PARAM, buf.dtype, (UOp(Ops.DEVICE, arg=buf.device),), (k, buf.size))
