"""Copies out of DISK: DISK runs no kernels, so a copy of anything but one contiguous run of a DISK buffer is moved
to the destination device. Each view of a DISK buffer in the copied graph becomes a copy of the span of the file
that covers it (one contiguous run, read without a kernel), viewed again on the destination; whatever computation
sits on top (a bitcast of bytes, a cast) runs there too."""

from __future__ import annotations

from typing import Any

from tg.codegen.schedule import policy
from tg.codegen.schedule.indexing import as_index, flat_index, movement_index
from tg.codegen.schedule.rangeify import contiguous_range
from tg.ir import AxisType, GroupOp, Ops, PatternMatcher, UOp, UPat


def _disk_base(n: UOp) -> UOp | None:
    """The DISK BUFFER under `n` when `n` is only movement ops (and pass-through markers) over it."""
    while n.op in GroupOp.Movement or n.op in policy.PASSTHROUGH:
        n = n.src[0]
    return n if n.op is Ops.BUFFER and str(n.device).startswith("DISK") else None


def _span_view(view: UOp, base: UOp, device: Any) -> UOp:
    """`view` (movement ops over DISK buffer `base`) on `device`: a copy of the span of `base` the view reads,
    padded back to the buffer's extent (never read outside the span) with the view's movement ops replayed."""
    chain, n = [], view
    while n is not base:
        chain.append(n)
        n = n.src[0]
    lo, hi = 0, base.arg - 1
    if all(isinstance(s, int) for s in view.shape) and view.shape:
        memo: dict = {}
        shape = view.shape
        idx = tuple(UOp(Ops.RANGE, as_index(0).dtype, (as_index(s),), (i, AxisType.LOOP)) for i, s in enumerate(shape))
        for m in chain:
            if m.op in GroupOp.Movement:
                idx, _ = movement_index(m, idx, memo)
        flat = flat_index(idx, base.shape).simplify()
        if isinstance(flat.vmin, int) and isinstance(flat.vmax, int):
            lo, hi = max(flat.vmin, 0), min(flat.vmax, base.arg - 1)  # padding reads nothing: its loads are gated
    if (lo, hi) == (0, base.arg - 1):
        out = base.copy_to_device(device)
    else:
        out = base.shrink(((lo, hi + 1),)).copy_to_device(device).pad(((lo, base.arg - hi - 1),))
    for m in reversed(chain):
        out = m.replace(src=(out, *m.src[1:]))
    return out


def _copy_out_of_disk(x: UOp, src: UOp) -> UOp | None:
    if not str(src.device).startswith("DISK") or contiguous_range(src) is not None:
        return None  # not DISK, or one run: copied through a BUFFER_VIEW
    device = x.src[1].arg
    if (base := _disk_base(src)) is not None:
        return _span_view(src, base, device)
    mapped: dict[UOp, UOp] = {}

    def new(s: UOp) -> UOp:
        if s not in mapped:  # a view of a DISK buffer (the walk below stops at them)
            base = _disk_base(s)
            assert base is not None
            mapped[s] = _span_view(s, base, device)
        return mapped[s]

    for u in src.toposort(gate=lambda u: _disk_base(u) is None):
        if u.op is Ops.DEVICE:
            mapped[u] = UOp(Ops.DEVICE, arg=device) if str(u.arg).startswith("DISK") else u
        else:
            mapped[u] = u.replace(src=tuple(new(s) for s in u.src))
    return mapped[src]


# a COPY out of DISK of anything but one contiguous run -> spans of the file copied, the rest on the destination
pm_disk_strided_copy = PatternMatcher([
    (UPat(Ops.COPY, name="x", src=(UPat.var("src"), UPat(Ops.DEVICE))), _copy_out_of_disk),
])  # fmt: skip
