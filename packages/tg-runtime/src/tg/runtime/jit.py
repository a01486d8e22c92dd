"""Captured programs: the kernels and copies a function ran, replayable with new buffers in some argument places.

A :class:`CapturedProgram` is built from the :class:`ExecItem` s recorded while a function ran (``engine.capturing``).
Every buffer the items touch falls in one class:

- *slot*: the buffers handed in per replay (the function's inputs, then its produced outputs); each use is an
  (item, argument position, byte offset) triple, so views of a slot buffer follow the new buffer;
- *fixed*: everything else (weights that existed before the capture or outlive it, constants uploaded during it,
  intermediates): held by the program and used in place at every replay.

Pruning drops the kernels whose result cannot change between replays: a kernel is kept when it touches a slot or a
*persistent* buffer (one that existed before the capture or outlives it: a weight, written or read in place), or reads
a buffer a kept kernel writes. The pruned kernels ran once during the capture; their outputs stay as constants.

Replays go through executors (``tg.runtime.graph``): the CPU batch runner makes one native call for a run of CPU
kernels and copies; anything else runs as ExecItems. The runtime never imports Tensor: the Tensor-facing
``TinyJit`` lives in ``tg.tensor.jit``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tg.ir.helpers import DEBUG, JIT
from tg.runtime.device import Buffer
from tg.runtime.engine import BufferCopy, CompiledRunner, ExecItem, _update_stats

__all__ = ["CapturedProgram", "JitError", "SlotUse", "written_positions"]


class JitError(RuntimeError):
    """A TinyJit was called in a way its capture cannot replay correctly; the message says what changed."""


@dataclass(frozen=True)
class SlotUse:
    """One place a slot buffer is used: argument ``pos`` of item ``item``, ``byte_offset`` into the slot buffer."""

    item: int
    pos: int
    byte_offset: int


def written_positions(ei: ExecItem) -> tuple[int, ...]:
    """The argument positions an ExecItem writes (a kernel's outputs, a copy's destination)."""
    runner = ei.runner
    if isinstance(runner, CompiledRunner):
        outs = set(runner.p.outs)
        return tuple(i for i, slot in enumerate(runner.p.globals) if slot in outs)
    return (0,)


class CapturedProgram:
    """Recorded ExecItems with slot buffers substituted per replay (see the module docstring).

    ``slot_buffers`` are the capture-time buffers of each slot (base buffers); ``persistent`` the ids of base
    buffers that must be treated as weights (existing before the capture or alive after it).
    """

    def __init__(
        self,
        items: Sequence[ExecItem],
        slot_buffers: Sequence[Buffer],
        persistent: set[int],
        prune: bool = True,
    ) -> None:
        self.slot_count = len(slot_buffers)
        slot_of = {id(b): i for i, b in enumerate(slot_buffers)}
        self.slot_buffers = list(slot_buffers)
        keep = self._kept_items(items, slot_of, persistent) if prune else [True] * len(items)
        self.pruned_count = keep.count(False)
        self.items: list[ExecItem] = [ei for ei, k in zip(items, keep, strict=True) if k]
        self.uses: list[list[SlotUse]] = [[] for _ in slot_buffers]
        for i, ei in enumerate(self.items):
            for pos, b in enumerate(ei.bufs):
                if (slot := slot_of.get(id(b.base))) is not None:
                    self.uses[slot].append(SlotUse(i, pos, b.offset))
        # the buffers the kept items write, for callers that must settle pending readers first
        self.written: list[Buffer] = list(
            {id(ei.bufs[p].base): ei.bufs[p].base for ei in self.items for p in written_positions(ei)}.values()
        )
        self.written_slots = sorted({u_slot for u_slot, uses in enumerate(self.uses) for u in uses
                                     if u.pos in written_positions(self.items[u.item])})  # fmt: skip
        self.kernel_count = len(self.items)
        self._executors: list[tuple[Any, list[int]]] | None = None

    @staticmethod
    def _kept_items(items: Sequence[ExecItem], slot_of: dict[int, int], persistent: set[int]) -> list[bool]:
        """Fixed point: keep an item if it touches a slot or a persistent buffer, or any buffer a kept item writes
        (reading it, or writing into it: memory planning puts several values in one arena buffer, and a skipped
        write there could be clobbered by a kept item between replays)."""
        keep = [any(id(b.base) in slot_of or id(b.base) in persistent for b in ei.bufs) for ei in items]
        writes = [{id(ei.bufs[p].base) for p in written_positions(ei)} for ei in items]
        touches = [{id(b.base) for b in ei.bufs} for ei in items]
        changed = True
        while changed:
            changed = False
            kept_writes = set().union(*(w for w, k in zip(writes, keep, strict=True) if k))
            for i in range(len(items)):
                if not keep[i] and touches[i] & kept_writes:
                    keep[i] = changed = True
        return keep

    # ---- replay ---------------------------------------------------------------------------------------------

    def instantiate(self, slots: Sequence[Buffer]) -> list[ExecItem]:
        """ExecItems with the slot buffers of this call substituted (views of a slot follow their new base)."""
        bufs = [list(ei.bufs) for ei in self.items]
        for slot, uses in enumerate(self.uses):
            new = slots[slot]
            for u in uses:
                old = bufs[u.item][u.pos]
                bufs[u.item][u.pos] = new if old.base is old else new.view(old.size, old.dtype, u.byte_offset)
        return [ExecItem(ei.runner, b, ei.fixedvars) for ei, b in zip(self.items, bufs, strict=True)]

    def _build_executors(self) -> list[tuple[Any, list[int]]]:
        """Split the items into batches the CPU batch runner takes and single ExecItems (JIT=2: all single)."""
        from tg.runtime.graph.cpu_batch import CPUBatchExecutor

        plan: list[tuple[Any, list[int]]] = []
        batch: list[int] = []

        def flush() -> None:
            if len(batch) > 1:
                plan.append((CPUBatchExecutor(self.items, batch, self.uses), list(batch)))
            elif batch:
                plan.append((None, list(batch)))
            batch.clear()

        use_batches = JIT.value == 1 and DEBUG.value < 2
        for i, ei in enumerate(self.items):
            if use_batches and CPUBatchExecutor.supports(ei):
                batch.append(i)
            else:
                flush()
                plan.append((None, [i]))
        flush()
        return plan

    def replay(self, slots: Sequence[Buffer], var_vals: dict[str, int] | None = None) -> None:
        """Run the program once with ``slots`` (one buffer per slot, base buffers of the capture's sizes)."""
        if len(slots) != self.slot_count:
            raise ValueError(f"replay needs {self.slot_count} slot buffers, got {len(slots)}")
        vals = var_vals or {}
        if self._executors is None:
            self._executors = self._build_executors()
        single: list[ExecItem] | None = None
        for executor, indices in self._executors:
            if executor is not None:
                executor(slots, vals)
                continue
            if single is None:
                single = self.instantiate(slots)
            for i in indices:
                single[i]._run(vals)

    def replay_captured(self, slots: Sequence[Buffer], sink: Any, var_vals: dict[str, int] | None = None) -> None:
        """Run the items as ExecItems, handing each to ``sink.add`` (an outer capture records this replay)."""
        vals = var_vals or {}
        for ei in self.instantiate(slots):
            sink.add(ei)
            ei._run(vals)

    def __getstate__(self) -> dict[str, Any]:
        """Pickles items, runners (program + binary) and buffers (with contents); executors are rebuilt."""
        return {**self.__dict__, "_executors": None}

    def free_executors(self) -> None:
        """Drop the built executors (they are rebuilt on the next replay)."""
        self._executors = None


def copy_count(items: Sequence[ExecItem]) -> int:
    """How many of ``items`` are buffer copies."""
    return sum(isinstance(ei.runner, BufferCopy) for ei in items)


def account(items: Sequence[ExecItem], var_vals: dict[str, int]) -> None:
    """Add items to GlobalCounters as if each had run (executors that run a batch natively call this)."""
    for ei in items:
        _update_stats(ei.runner, len(ei.bufs), var_vals, None)
