"""Captured programs: the schedule (``LINEAR`` of ``CALL``s) a function ran, replayable with new slot buffers.

A :class:`CapturedProgram` is built from the LINEARs the engine ran while a function was captured
(``engine.capturing``: ``run_linear`` hands each LINEAR to the recorder). Every buffer of the calls gets a role:

- *slot*: handed in per replay (the function's inputs, then its produced outputs): ``PARAM(slot)`` in the program,
  ``BUFFER_VIEW(PARAM)`` where a call uses a view of it;
- *state*: weights (existing before the capture or outliving it) and random-number inputs: read and written in
  place, held by the program through BUFFER uops of its own;
- *constant*: created during the capture and written by no kept call (uploads, results of pruned calls): held;
- *intermediate*: everything else: packed into one arena per device by the scheduler's memory planner.

Pruning drops the calls whose result cannot change between replays: a call is kept when it touches a slot or a
state buffer, reads a Variable, or touches a buffer a kept call writes. The pruned calls ran once during the capture.

A replay substitutes this call's slot buffers: ``instantiate_linear`` gives the LINEAR over new BUFFER uops (for
``run_linear``); ``replay`` runs pre-lowered ExecItems through executors (``tg.runtime.graph``: the CPU batch
runner makes one native call for a run of CPU kernels and copies) with the slot addresses patched in. The runtime
never imports Tensor: the Tensor-facing ``TinyJit`` lives in ``tg.tensor.jit``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from tg.ir import Ops, UOp, dtypes
from tg.ir.helpers import DEBUG, JIT
from tg.runtime.device import Buffer
from tg.runtime.engine import BufferCopy, CompiledRunner, ExecItem, _update_stats, bind_buffer

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
    """A captured schedule: the ``LINEAR`` of ``CALL``s a function ran, with its buffers sorted into roles.

    Built from ``linear`` (the concatenation of every LINEAR the engine ran during the capture, over tensor-level
    BUFFER / BUFFER_VIEW uops, not memory-planned), ``slots`` (the BUFFER uops handed in per replay: inputs, then
    produced outputs) and ``persistent`` (the BUFFER uops that are state: weights that existed before the capture or
    outlive it, random-number inputs rewritten per replay). Every other buffer was created during the capture and is
    a *constant* (written by no kept call: uploads, results of pruned calls) or an *intermediate* (written by a kept
    call): intermediates are packed into one arena per device by the scheduler's memory planner.

    ``self.linear`` is the program: slot arguments are ``PARAM(slot)`` (views of a slot: ``BUFFER_VIEW(PARAM)``),
    fixed buffers are BUFFER uops the program owns (bound to the weights' and constants' Buffers, so the tensors
    that owned them can die and be detected), intermediates are views of the arenas. ``var_vals`` are the variable
    values bound inside the function (fixed); a replay's own values override them. ``initial`` holds the contents,
    before the capture's first call used them, of buffers the capture uploaded (e.g. ``Tensor([1., 2.])`` in the
    body): one that kept calls read and then update in place is restored from a snapshot at the start of each replay.
    """

    def __init__(
        self,
        linear: UOp,
        slots: Sequence[UOp],
        persistent: Iterable[UOp] = (),
        var_vals: dict[str, int] | None = None,
        prune: bool = True,
        initial: dict[UOp, bytes] | None = None,
    ) -> None:
        from tg.codegen.schedule.kernels import copy_body
        from tg.codegen.schedule.linear import replace_buffers
        from tg.codegen.schedule.memory import plan_memory
        from tg.runtime.engine import buffer_for

        if linear.op is not Ops.LINEAR:
            raise TypeError(f"CapturedProgram needs a LINEAR of CALLs, got {linear.op}")
        calls = list(linear.src)
        self.slot_count = len(slots)
        self.slot_buffers = [buffer_for(s) for s in slots]
        slot_of = {id(b): i for i, b in enumerate(self.slot_buffers)}
        state = {id(buffer_for(_base_of(u))) for u in persistent}
        # every base buffer of the calls, by Buffer (several uops may stand for one Buffer)
        bases: dict[int, Buffer] = {}
        uop_buffer: dict[UOp, int] = {}
        touches: list[set[int]] = []
        writes: list[set[int]] = []
        reads: list[set[int]] = []
        varying: list[bool] = []  # the call reads a Variable: never pruned (its value changes per replay)
        for call in calls:
            ids = []
            for a in call.src[1:]:
                base = _base_of(a)
                if (buf_id := uop_buffer.get(base)) is None:
                    buf = buffer_for(base)
                    buf_id = uop_buffer[base] = id(buf)
                    bases.setdefault(buf_id, buf)
                ids.append(buf_id)
            touches.append(set(ids))
            written, read, uses_vars = _call_access(call)
            writes.append({ids[i] for i in written})
            reads.append({ids[i] for i in read})
            varying.append(uses_vars)
        keep = _kept_calls(touches, writes, set(slot_of) | state, varying) if prune else [True] * len(calls)
        self.pruned_count = keep.count(False)
        kept = [c for c, k in zip(calls, keep, strict=True) if k]
        kept_writes = set().union(*(w for w, k in zip(writes, keep, strict=True) if k))
        first_is_read = _read_first([r for r, k in zip(reads, keep, strict=True) if k],
                                    [w for w, k in zip(writes, keep, strict=True) if k])  # fmt: skip
        # the program's own uops: slots become PARAMs, everything else a fresh BUFFER (bound below or planned)
        new_of: dict[int, UOp] = {}
        self.fixed: dict[UOp, Buffer] = {}
        intermediates: set[UOp] = set()
        for buf_id, buf in bases.items():
            if (slot := slot_of.get(buf_id)) is not None:
                new = UOp(Ops.PARAM, buf.dtype, (UOp(Ops.DEVICE, arg=buf.device),), (slot, buf.size))
            else:
                new = UOp.new_buffer(buf.device, buf.size, buf.dtype)
                if buf_id in kept_writes and buf_id not in state and buf_id not in first_is_read:
                    intermediates.add(new)
                else:
                    self.fixed[new] = buf
                    bind_buffer(new, buf)
            new_of[buf_id] = new
        subs = {u: new_of[buf_id] for u, buf_id in uop_buffer.items()}
        program = replace_buffers(UOp(Ops.LINEAR, dtypes.void, tuple(kept)), subs)
        # uploads made during the capture that kept calls then update in place: each replay starts them from their
        # captured contents again (a copy from a snapshot), as the function does when it runs
        restores = []
        for u, data in (initial or {}).items():
            if (buf_id := uop_buffer.get(u)) is None or buf_id in state or buf_id in slot_of:
                continue
            if buf_id in first_is_read and buf_id in kept_writes:
                target = new_of[buf_id]
                snapshot = UOp.new_buffer(str(target.device), int(target.arg), target.dtype)
                buffer_for(snapshot).copyin(memoryview(data))
                self.fixed[snapshot] = buffer_for(snapshot)
                restores.append(UOp(Ops.CALL, dtypes.void, (copy_body(target.dtype, target.device), target, snapshot)))
        if restores:
            program = program.replace(src=(*restores, *program.src))
        held = {u for c in program.src for a in c.src[1:] if (u := _base_of(a)) not in intermediates}
        self.linear = plan_memory(program, held)
        # arenas (and unplanned intermediates) are the program's too
        for c in self.linear.src:
            for a in c.src[1:]:
                if (u := _base_of(a)).op is Ops.BUFFER and u not in self.fixed:
                    self.fixed[u] = buffer_for(u)
        self.var_vals = dict(var_vals or {})
        self.items, self.uses = self._lower()
        # the buffers the kept items write, for callers that must settle pending readers first
        self.written: list[Buffer] = list(
            {id(ei.bufs[p].base): ei.bufs[p].base for ei in self.items for p in written_positions(ei)}.values()
        )
        self.written_slots = sorted({slot for slot, uses in enumerate(self.uses) for u in uses
                                     if u.pos in written_positions(self.items[u.item])})  # fmt: skip
        self.kernel_count = len(self.items)
        self._executors: list[tuple[Any, list[int]]] | None = None

    def _lower(self) -> tuple[list[ExecItem], list[list[SlotUse]]]:
        """ExecItems of the program with the capture-time slot buffers, and where each slot is used in them."""
        from tg.codegen.schedule.linear import replace_buffers
        from tg.runtime.engine import lower_schedule_item

        stand_ins: dict[UOp, UOp] = {}
        for c in self.linear.src:
            for a in c.src[1:]:
                if (p := _base_of(a)).op is Ops.PARAM and p not in stand_ins:
                    buf = self.slot_buffers[p.arg[0]]
                    stand_ins[p] = UOp.new_buffer(buf.device, buf.size, buf.dtype)
                    bind_buffer(stand_ins[p], buf)
        items = [lower_schedule_item(c) for c in replace_buffers(self.linear, stand_ins).src]
        uses: list[list[SlotUse]] = [[] for _ in range(self.slot_count)]
        for i, (call, ei) in enumerate(zip(self.linear.src, items, strict=True)):
            for b in ei.bufs:
                b.ensure_allocated()
            order = ei.runner.p.globals if isinstance(ei.runner, CompiledRunner) else range(len(ei.bufs))
            for pos, arg_index in enumerate(order):
                arg = call.src[1 + arg_index]
                if (p := _base_of(arg)).op is Ops.PARAM:
                    offset = int(arg.arg[1]) * p.dtype.itemsize if arg.op is Ops.BUFFER_VIEW else 0
                    uses[p.arg[0]].append(SlotUse(i, pos, offset))
        return items, uses

    def instantiate_linear(self, slots: Sequence[UOp]) -> UOp:
        """The program as a schedule over ``slots`` (BUFFER uops, one per slot): ``run_linear`` runs it (an outer
        capture records it)."""
        from tg.codegen.schedule.linear import replace_buffers

        params = {p: slots[p.arg[0]] for c in self.linear.src for a in c.src[1:] if (p := _base_of(a)).op is Ops.PARAM}
        return replace_buffers(self.linear, params)

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
        """Split the items into batches of the registered graph executors (tg.runtime.graph.EXECUTORS: the first
        class whose ``supports`` takes an item; consecutive items of one class form a batch) and single ExecItems
        (JIT=2 or DEBUG>=2: all single)."""
        from tg.runtime.graph import executor_classes

        plan: list[tuple[Any, list[int]]] = []
        batch: list[int] = []
        current: Any = None

        def flush() -> None:
            if len(batch) > 1:
                plan.append((current.build(self, batch), list(batch)))
            elif batch:
                plan.append((None, list(batch)))
            batch.clear()

        classes = executor_classes() if JIT.value == 1 and DEBUG.value < 2 else []
        for i, ei in enumerate(self.items):
            cls = next((c for c in classes if c.supports(ei)), None)
            if cls is not current:
                flush()
                current = cls
            if cls is None:
                plan.append((None, [i]))
            else:
                batch.append(i)
        flush()
        return plan

    def replay(self, slots: Sequence[Buffer], var_vals: dict[str, int] | None = None) -> None:
        """Run the program once with ``slots`` (one buffer per slot, base buffers of the capture's sizes)."""
        if len(slots) != self.slot_count:
            raise ValueError(f"replay needs {self.slot_count} slot buffers, got {len(slots)}")
        vals = {**self.var_vals, **var_vals} if self.var_vals and var_vals else (var_vals or self.var_vals)
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

    def __getstate__(self) -> dict[str, Any]:
        """Pickles the program, its items' runners (program + binary) and buffers (with contents); executors are
        rebuilt."""
        return {**self.__dict__, "_executors": None}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        for uop, buf in self.fixed.items():  # loaded uops carry fresh UNIQUEs: bind them to the loaded buffers
            bind_buffer(uop, buf)

    def free_executors(self) -> None:
        """Drop the built executors (they are rebuilt on the next replay)."""
        self._executors = None


# ---- helpers ------------------------------------------------------------------------------------------------------


def _base_of(arg: UOp) -> UOp:
    """The BUFFER (or PARAM) under a call argument (a BUFFER_VIEW's source)."""
    return arg.src[0] if arg.op is Ops.BUFFER_VIEW else arg


def _call_access(call: UOp) -> tuple[tuple[int, ...], tuple[int, ...], bool]:
    """(written, read) argument indices of a CALL (a copy writes its destination; a kernel its program's outputs),
    and whether it reads a Variable (its result changes between replays even without inputs)."""
    from tg.runtime.engine import buffer_for, get_runner

    body = call.src[0]
    if body.op is not Ops.SINK:
        return (0,), (1,), False
    p = get_runner(buffer_for(_base_of(call.src[1])).device, body).p  # compiled when it ran: a cache hit
    return tuple(p.outs), tuple(p.ins), bool(p.vars)


def _kept_calls(
    touches: list[set[int]], writes: list[set[int]], roots: set[int], varying: list[bool] | None = None
) -> list[bool]:
    """Fixed point: keep a call if it touches a root (slot or state buffer), reads a Variable (`varying`), or touches
    any buffer a kept call writes (reading it, or writing into it: a skipped write there could be clobbered by a
    kept call between replays)."""
    keep = [bool(t & roots) or bool(varying and varying[i]) for i, t in enumerate(touches)]
    changed = True
    while changed:
        changed = False
        kept_writes = set().union(*(w for w, k in zip(writes, keep, strict=True) if k))
        for i, t in enumerate(touches):
            if not keep[i] and t & kept_writes:
                keep[i] = changed = True
    return keep


def _read_first(reads: list[set[int]], writes: list[set[int]]) -> set[int]:
    """Buffers whose first use in the program reads them: they carry values in (an upload the body then updates)
    and must not be planned into shared memory."""
    seen: set[int] = set()
    out: set[int] = set()
    for r, w in zip(reads, writes, strict=True):
        out |= r - seen
        seen |= r | w
    return out


def copy_count(items: Sequence[ExecItem]) -> int:
    """How many of ``items`` are buffer copies."""
    return sum(isinstance(ei.runner, BufferCopy) for ei in items)


def account(items: Sequence[ExecItem], var_vals: dict[str, int]) -> None:
    """Add items to GlobalCounters as if each had run (executors that run a batch natively call this)."""
    for ei in items:
        _update_stats(ei.runner, len(ei.bufs), var_vals, None)
