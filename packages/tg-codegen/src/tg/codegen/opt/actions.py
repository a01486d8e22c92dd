"""The opts BEAM search tries (shared/specs/optimizer.md §7), filtered to the ones legal on a kernel.

On GPU renderers (`has_local`) the list also splits output axes into LOCAL work-groups of 2..32, and on renderers
with tensor cores it puts each reduce axis on them (`TC`)."""

from __future__ import annotations

from tg.codegen.opt.kernel import OptKernel, vector_lanes
from tg.codegen.opt.opts import KernelOptError, Opt, OptOps, split
from tg.ir.ops import AxisType


def candidate_opts(k: OptKernel) -> list[Opt]:
    """Every opt of the action list for `k`'s axes (legal or not: `legal_children` filters)."""
    w = vector_lanes(k.renderer, k.dtype_itemsize)
    upcasts = sorted({2, 3, 4, 6, 8, 12, 16, 2 * w, 4 * w})
    t = getattr(k.renderer, "thread_max", 1)
    ret: list[Opt] = []
    for i, (_, at, _) in enumerate(k.axes()):
        if at in (AxisType.LOOP, AxisType.GLOBAL):
            ret += [split(i, f, AxisType.UPCAST) for f in upcasts]
            if k.renderer.has_local:  # GPUs: work-groups along each output axis
                ret += [split(i, f, AxisType.LOCAL) for f in (2, 4, 8, 16, 32)]
            ret += [split(i, n, AxisType.THREAD, True) for n in sorted({t // 2, t, 2 * t, 4 * t}) if n >= 2]
            ret += [Opt(OptOps.SWAP, i, j) for j in range(i + 1, len(k.ranges)) if k.ranges[j].axis_type is at]
        if at in (AxisType.REDUCE, AxisType.GROUP_REDUCE):
            ret += [split(i, f, AxisType.UNROLL) for f in (2, 4, 8)]
        if at is AxisType.REDUCE and k.renderer.tensor_cores:  # legal only as the first opt (tensor_cores.py)
            ret.append(Opt(OptOps.TC, i))
        if at is AxisType.REDUCE:
            ret += [split(i, f, AxisType.GROUP_REDUCE) for f in sorted({w, 2 * w, 4 * w, 8 * w}) if f >= 2]
        if at in (AxisType.LOOP, AxisType.GLOBAL, AxisType.REDUCE) and w > 1:
            ret += [Opt(OptOps.PADTO, i, m) for m in sorted({w, 2 * w})]
    return ret


def legal_children(k: OptKernel) -> list[OptKernel]:
    """`k` with each candidate opt applied, the illegal ones dropped."""
    ret = []
    for o in candidate_opts(k):
        try:
            ret.append(k.apply(o))
        except KernelOptError:
            pass
    return ret
