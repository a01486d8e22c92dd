"""What the scheduler hands to the runtime: `ScheduleItem` (one kernel or one copy)."""

from __future__ import annotations

from dataclasses import dataclass

from tg.ir import UOp

__all__ = ["ScheduleItem"]


@dataclass(frozen=True)
class ScheduleItem:
    """One step of a schedule: a kernel AST (a SINK of stores) or a COPY, and the buffers it touches.

    `bufs` are tensor-level BUFFER uops in PARAM slot order (outputs first); for a COPY item they are
    `(destination, source)`.
    """

    ast: UOp
    bufs: tuple[UOp, ...]

    @property
    def outputs(self) -> tuple[UOp, ...]:
        """The buffers this item writes (slot 0 of a kernel, the destination of a copy)."""
        return self.bufs[:1]

    @property
    def inputs(self) -> tuple[UOp, ...]:
        """The buffers this item only reads."""
        return self.bufs[1:]
