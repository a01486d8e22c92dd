"""`HCQGraphExecutor`: TinyJit on HCQ devices replays a linked program with patched inputs and variables (hcq.md 7).

A batch of a captured program's calls (kernels and copies on HCQ devices) is already a LINEAR over JIT slots and
fixed buffers; it is compiled through stages S0-S5 and linked once (``HCQ_LINK_COPIES`` copies). A replay writes the
input table (this call's slot buffers and the fixed ones), runs the submitter once with the variables' values, and
returns: nothing is rebuilt for new buffers or new variable values (launch dimensions and kernel int arguments are
value patches).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from tg.ir import Ops, UOp, dtypes
from tg.runtime.device import Buffer
from tg.runtime.engine import BufferCopy, CompiledRunner, ExecItem
from tg.runtime.hcq.device import HCQDevice
from tg.runtime.hcq.run import HCQLauncher

if TYPE_CHECKING:
    from tg.runtime.jit import CapturedProgram


def _hcq_device(name: str) -> HCQDevice | None:
    from tg.runtime.device import Device

    dev = Device[name]
    return dev if isinstance(dev, HCQDevice) else None


class HCQGraphExecutor:
    """Runs items ``indices`` of a captured program (kernels and copies on HCQ devices) as one linked HCQ program."""

    @staticmethod
    def supports(ei: ExecItem) -> bool:
        """A kernel on an HCQ device, or a copy between HCQ devices."""
        runner = ei.runner
        if isinstance(runner, CompiledRunner):
            return _hcq_device(runner.device) is not None
        if isinstance(runner, BufferCopy):
            return len(ei.bufs) == 2 and all(_hcq_device(b.device) is not None for b in ei.bufs)
        return False

    @classmethod
    def build(cls, program: CapturedProgram, indices: Sequence[int]) -> HCQGraphExecutor:
        """The executor of ``program``'s calls ``indices`` (consecutive, all supported)."""
        return cls(program, indices)

    def __init__(self, program: CapturedProgram, indices: Sequence[int]) -> None:
        from tg.runtime.replay import Replay

        self.items = [program.items[i] for i in indices]
        # the batch's calls over JIT slots (given per replay) and fixed buffers (kept by the replay)
        self.replay = Replay(UOp(Ops.LINEAR, dtypes.void, tuple(program.linear.src[i] for i in indices)))
        if not isinstance(self.replay.launcher, HCQLauncher) or not all(
            isinstance(s, tuple) for s in self.replay.launcher.steps
        ):
            raise RuntimeError("HCQGraphExecutor got calls that cannot all run on the queues")  # fmt: skip

    def __call__(self, slots: Sequence[Buffer], var_vals: dict[str, int], wait: bool = False) -> float | None:
        """Replay with this call's slot buffers and variable values (GlobalCounters are updated per batch)."""
        return self.replay.launcher(self.replay.buffers(slots), var_vals, wait)
