"""Memory planning over a schedule: intermediate buffers whose lifetimes do not overlap share memory.

A buffer is plannable when the scheduler created it (it is not an input, an output or an assign target: those are
`held`) and its device supports views (`PLANNABLE_DEVICES`; never DISK). Its lifetime is [first, last] index of
the CALLs that use it. Buffers are packed best-fit, 256-byte aligned, into one uint8 arena per device, and each
is replaced by `BUFFER_VIEW(arena, (size, byte offset))`. Invariants (tested): buffers with overlapping
lifetimes never overlap in bytes, the arena is no bigger than the sum of the buffers, held buffers are untouched.
`NO_MEMORY_PLANNER=1` turns it off. Cost: O(calls x args + B log B).
"""

from __future__ import annotations

from tg.ir import Ops, UOp, dtypes, round_up
from tg.ir.helpers import NO_MEMORY_PLANNER  # 1: every intermediate gets its own buffer

ALIGN = 256
# devices whose allocators hand out views into one allocation (tg.runtime's CPU, PYTHON and NULL backends)
PLANNABLE_DEVICES = frozenset({"CPU", "PYTHON", "NULL"})


def _plannable(buf: UOp) -> bool:
    dev = buf.device
    return isinstance(dev, str) and dev.split(":")[0] in PLANNABLE_DEVICES


def _best_fit(free: list[tuple[int, int]], size: int) -> int | None:
    """Index of the smallest free block (offset, size) that fits `size`."""
    best = None
    for i, (_, sz) in enumerate(free):
        if sz >= size and (best is None or sz < free[best][1]):
            best = i
    return best


def _release(free: list[tuple[int, int]], off: int, size: int) -> None:
    """Return a block to the free list, merging it with its neighbours."""
    free.append((off, size))
    free.sort()
    merged: list[tuple[int, int]] = []
    for o, s in free:
        if merged and merged[-1][0] + merged[-1][1] == o:
            merged[-1] = (merged[-1][0], merged[-1][1] + s)
        else:
            merged.append((o, s))
    free[:] = merged


def plan_offsets(lifetimes: dict[UOp, tuple[int, int]], sizes: dict[UOp, int]) -> tuple[dict[UOp, int], int]:
    """Byte offsets for buffers with [first, last] lifetimes so that live buffers never overlap; and arena size."""
    starts: dict[int, list[UOp]] = {}
    ends: dict[int, list[UOp]] = {}
    for b, (first, last) in lifetimes.items():
        starts.setdefault(first, []).append(b)
        ends.setdefault(last, []).append(b)
    free: list[tuple[int, int]] = []
    top, offsets = 0, {}
    for step in sorted(set(starts) | set(ends)):
        for b in sorted(starts.get(step, []), key=lambda b: -sizes[b]):
            size = sizes[b]
            if (i := _best_fit(free, size)) is not None:
                off, sz = free.pop(i)
                if sz > size:
                    _release(free, off + size, sz - size)
            else:
                off, top = top, top + size
            offsets[b] = off
        for b in ends.get(step, []):
            _release(free, offsets[b], sizes[b])
    return offsets, top


def plan_memory(linear: UOp, held: set[UOp]) -> UOp:
    """`linear` with every plannable intermediate BUFFER replaced by a view into a per-device arena."""
    if NO_MEMORY_PLANNER.value:
        return linear
    lifetimes: dict[UOp, tuple[int, int]] = {}
    for i, call in enumerate(linear.src):
        for b in call.src[1:]:
            if b.op is Ops.BUFFER and b not in held and _plannable(b):
                lifetimes[b] = (lifetimes[b][0], i) if b in lifetimes else (i, i)
    if len(lifetimes) < 2:
        return linear
    replace: dict[UOp, UOp] = {}
    for device in sorted({str(b.device) for b in lifetimes}):
        group = {b: lt for b, lt in lifetimes.items() if str(b.device) == device}
        sizes = {b: round_up(max(b.arg * b.dtype.itemsize, 1), ALIGN) for b in group}
        offsets, total = plan_offsets(group, sizes)
        arena = UOp.new_buffer(device, total, dtypes.uint8)
        for b, off in offsets.items():
            replace[b] = UOp(Ops.BUFFER_VIEW, b.dtype, (arena,), (b.arg, off))
    calls = [c if not any(b in replace for b in c.src[1:]) else
             c.replace(src=(c.src[0], *(replace.get(b, b) for b in c.src[1:]))) for c in linear.src]  # fmt: skip
    return linear.replace(src=tuple(calls))
