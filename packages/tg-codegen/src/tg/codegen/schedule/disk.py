"""Strided views of DISK buffers: DISK runs no kernels, so a copy reads the span of the file that covers the view
(one contiguous run, no kernel) and the view is finished by a kernel on the destination device."""

from __future__ import annotations

from tg.codegen.schedule import policy
from tg.codegen.schedule.indexing import as_index, flat_index, movement_index
from tg.codegen.schedule.rangeify import contiguous_range
from tg.ir import AxisType, GroupOp, Ops, PatternMatcher, UOp, UPat


def _span_copy(x: UOp, src: UOp) -> UOp | None:
    if contiguous_range(src) is not None:
        return None  # already one run: copied through a BUFFER_VIEW
    chain, base = [], src
    while base.op in GroupOp.Movement or base.op in policy.PASSTHROUGH:
        chain.append(base)
        base = base.src[0]
    if base.op is not Ops.BUFFER or not str(base.device).startswith("DISK") or not chain:
        return None
    if not all(isinstance(s, int) for s in src.shape):
        return None
    memo: dict = {}
    idx = tuple(UOp(Ops.RANGE, as_index(0).dtype, (as_index(s),), (i, AxisType.LOOP)) for i, s in enumerate(src.shape))
    for m in chain:
        idx, _ = movement_index(m, idx, memo) if m.op in GroupOp.Movement else (idx, None)
    flat = flat_index(idx, base.shape).simplify()
    lo, hi = flat.vmin, flat.vmax
    if not isinstance(lo, int) or not isinstance(hi, int):
        return None
    lo, hi = max(lo, 0), min(hi, base.arg - 1)  # padding reads nothing: its loads are gated off
    if (lo, hi) == (0, base.arg - 1):  # the span is the whole file
        out = base.copy_to_device(x.src[1].arg)
    else:
        out = base.shrink(((lo, hi + 1),)).copy_to_device(x.src[1].arg).pad(((lo, base.arg - hi - 1),))
    for m in reversed(chain):
        out = m.replace(src=(out, *m.src[1:]))
    return out


# a COPY of a strided view of a DISK buffer -> the view over a copy of the covering span
pm_disk_strided_copy = PatternMatcher([
    (UPat(Ops.COPY, name="x", src=(UPat.var("src"), UPat(Ops.DEVICE))), _span_copy),
])  # fmt: skip
