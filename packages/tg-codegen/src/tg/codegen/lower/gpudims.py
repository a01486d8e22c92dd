"""GPU launch dimensions: the output loops of a kernel become work-item ids (SPECIAL) for renderers with a grid.

A renderer with `global_max` set (OpenCL, CUDA) runs one work-item per point of the output loops instead of
looping. `add_gpudims` replaces those RANGEs by expressions over SPECIALs named `gidx<d>` (work-group index in
dimension d) and `lidx<d>` (index inside the work-group) and drops them from their ENDs:

- GLOBAL/LOOP ranges that close every store become the grid; LOCAL ranges (made by opts) become the work-group.
  Ranges are mapped innermost (highest axis id) to dimension 0; more than three, or a dimension over the
  renderer's `global_max`, are merged into fewer dimensions and recovered with `//` and `%`.
- Without LOCAL ranges, each dimension of constant size gets a work-group of the largest power of two that
  divides it, up to `max_local_threads` threads in all (the default local-size heuristic): range = gidx*l + lidx.
  When that power of two is small (odd sizes like 1000 or 1023), the grid is padded up to a multiple of a larger
  work-group (at most 1/8 of the work-items wasted) and every load and store that depends on the range is gated
  with `gidx*l + lidx < size`, so the padded work-items touch no memory.
- A kernel whose stores close different loops (several outputs of different shapes) keeps its loops and runs as
  a single work-item: correct, but slow; the scheduler rarely makes such kernels.
"""

from __future__ import annotations

import math

from tg.codegen.render.renderer import Renderer
from tg.ir.dtype import AddrSpace, dtypes
from tg.ir.ops import AxisType, Ops
from tg.ir.pattern import PatternMatcher, UPat, graph_rewrite
from tg.ir.uop import UOp, sint

_GRID_TYPES = (AxisType.GLOBAL, AxisType.LOOP)


def _closed_ranges(store_root: UOp) -> set[UOp]:
    """The ranges closed by the chain of ENDs on top of one SINK source."""
    closed: set[UOp] = set()
    while store_root.op is Ops.END:
        closed.update(store_root.src[1:])
        store_root = store_root.src[0]
    return closed


def _prod(xs: list[sint]) -> sint:
    ret: sint = 1
    for x in xs:
        ret = ret * x
    return ret


def _pow2_divisor(size: sint, limit: int) -> int:
    """The largest power of two <= limit dividing a constant size (1 for symbolic sizes)."""
    if not isinstance(size, int) or size <= 0 or limit < 1:
        return 1
    return math.gcd(size, 1 << int(math.log2(limit)))


def _work_group(size: sint, limit: int) -> tuple[int, bool]:
    """(work-group size, padded) for one launch dimension of the default heuristic.

    The largest power of two <= limit that divides `size`; when that is small (an odd size like 1000 or 1023), a
    larger power of two with the grid rounded up to a multiple of it, if that wastes at most 1/8 of the work-items
    (`padded`: the extra work-items must be gated off)."""
    exact = _pow2_divisor(size, limit)
    if not isinstance(size, int) or limit < 2:
        return exact, False
    lsize = 1 << int(math.log2(min(limit, size)))
    while lsize > max(exact, 16):
        if -(-size // lsize) * lsize - size <= size // 8:
            return lsize, True
        lsize //= 2
    return exact, False


def _gate_indices(sink: UOp, group: list[UOp], valid: UOp) -> UOp:
    """Add `valid` to the gate of every INDEX whose address depends on a range of `group` (before they are
    replaced by work-item ids): a gated load reads 0, a gated store does not happen."""
    rngs = set(group)
    memo: dict[UOp, UOp] = {}
    for u in sink.toposort():
        src = tuple(memo[x] for x in u.src)
        v = u if src == u.src else u.replace(src=src)
        if v.op is Ops.INDEX and any(rngs & set(x.toposort()) for x in u.src[1:2]):
            v = v.replace(src=(v.src[0], v.src[1], valid if len(v.src) < 3 else (v.src[2] & valid)))
        memo[u] = v
    return memo[sink]


def _group_dims(ranges: list[UOp], limits: tuple[int, ...]) -> list[list[UOp]]:
    """Ranges (outermost first) grouped into at most len(limits) dimensions, innermost group first."""
    ndims = min(len(limits), 3)
    if len(ranges) <= ndims:
        groups = [[r] for r in ranges[::-1]]
    else:  # the innermost ndims-1 ranges keep their own dimension, the outer rest share the last one
        groups = [[r] for r in ranges[::-1][: ndims - 1]] + [ranges[: len(ranges) - (ndims - 1)]]
    for d, g in enumerate(groups):
        size = _prod([r.range_size for r in g])
        if isinstance(size, int) and size > limits[d]:
            return [ranges]  # too big for its dimension: everything in dimension 0 (the largest)
    return groups


def _decompose(idx: UOp, group: list[UOp]) -> dict[UOp, UOp]:
    """Index expressions for ranges (outermost first) that share one dimension whose flat index is `idx`."""
    if len(group) == 1:
        return {group[0]: idx}
    ret = {}
    stride: sint = 1
    for r in group[::-1]:
        q = idx if isinstance(stride, int) and stride == 1 else idx // stride
        ret[r] = q if r is group[0] else q % r.range_size
        stride = stride * r.range_size
    return ret


def _flat(ranges: list[UOp]) -> UOp:
    """The row-major flat index of ranges (outermost first)."""
    ret = ranges[0]
    for r in ranges[1:]:
        ret = ret * r.range_size + r
    return ret


def _group_reduce(sink: UOp, local: list[UOp], groups: list[UOp]) -> UOp:
    """REDUCEs over GROUP_REDUCE ranges: each work-item reduces its share, the partials meet in local memory.

    REDUCE(v, *R, *G) -> every thread computes p = REDUCE(v, *R) and stores it at its own slot of a DEFINE_LOCAL
    (slot = local id * |G| + group id), a BARRIER, then every thread reduces the |G| partials of its LOCAL
    coordinates in a new loop; all of them store the same value (the G ranges become local ids).
    """
    size_g = _prod([r.range_size for r in groups])
    size_l = _prod([r.range_size for r in local])
    if not isinstance(size_g, int) or not isinstance(size_l, int):
        raise ValueError("GROUP_REDUCE and LOCAL ranges need constant sizes")
    flat_g = _flat(groups)
    next_id = 1 + max(u.axis_id for u in sink.toposort() if u.op is Ops.RANGE)
    subs: dict[UOp, UOp] = {}
    for red in (u for u in sink.toposort() if u.op is Ops.REDUCE and set(groups) & set(u.src[1:])):
        if not set(groups) <= set(red.src[1:]):
            raise ValueError("a REDUCE over some GROUP_REDUCE ranges must reduce over all of them")
        rest = tuple(r for r in red.src[1:] if r not in groups)
        partial = red.replace(src=(red.src[0], *rest)) if rest else red.src[0]
        smem = UOp(Ops.DEFINE_LOCAL, red.dtype.ptr(size_l * size_g, AddrSpace.LOCAL), (), f"temp{next_id}")
        # UPCAST lanes of the partial (expanded later) each get their own slots: the store loops over them
        upcast = {r for r in red.src[0].toposort() if r.op is Ops.RANGE and r.axis_type is AxisType.UPCAST}
        lanes = sorted(upcast, key=lambda r: r.axis_id)
        size_u = _prod([r.range_size for r in lanes])
        if not isinstance(size_u, int):
            raise ValueError("UPCAST ranges need constant sizes")
        smem = smem.replace(dtype=red.dtype.ptr(size_l * size_u * size_g, AddrSpace.LOCAL))
        rg = UOp.range(size_g, next_id, AxisType.REDUCE)
        next_id += 1
        rows = ([_flat(local) * size_u] if local else []) + ([_flat(lanes)] if lanes else [])
        row = None if not rows else rows[0] if len(rows) == 1 else rows[0] + rows[1]
        mine, others = (flat_g, rg) if row is None else (row * size_g + flat_g, row * size_g + rg)
        store = smem.index(mine).store(partial)
        barrier = (store.end(*lanes) if lanes else store).barrier()
        subs[red] = smem.after(barrier).index(others).load().reduce(rg, arg=red.arg)
    return sink.substitute(subs)


def add_gpudims(sink: UOp, renderer: Renderer) -> UOp:
    """Replace a kernel's grid ranges by SPECIAL work-item ids for `renderer` (unchanged if it has no grid)."""
    if renderer.global_max is None:
        return sink
    ranges = {u for u in sink.toposort() if u.op is Ops.RANGE}
    grid = {r for r in ranges if r.axis_type in _GRID_TYPES}
    local = sorted((r for r in ranges if r.axis_type is AxisType.LOCAL), key=lambda r: r.axis_id)
    warps = [r for r in ranges if r.axis_type is AxisType.WARP]
    local += warps
    if groups := sorted((r for r in ranges if r.axis_type is AxisType.GROUP_REDUCE), key=lambda r: r.axis_id):
        if not renderer.has_shared:
            raise ValueError(f"{type(renderer).__name__} has no shared memory for GROUP_REDUCE")
        sink = _group_reduce(sink, local, groups)
        threads = _prod([r.range_size for r in local + groups])
        if isinstance(threads, int) and threads > renderer.max_local_threads:
            raise ValueError(f"LOCAL x GROUP_REDUCE sizes make {threads} threads per work-group, more than "
                             f"{type(renderer).__name__}'s {renderer.max_local_threads}")  # fmt: skip
    if not grid and not local and not groups:
        return sink
    for root in sink.src:  # every store must run over the same grid, or the kernel keeps its loops
        if not grid | set(local) <= _closed_ranges(root):
            if local or groups:
                raise ValueError("a kernel with LOCAL ranges must close them (and its grid ranges) on every store")
            return sink
    # a WARP range (TC opt) goes last, so it is local dimension 0: its 32 work-items are one hardware warp
    local = [r for r in local if r not in warps] + groups + warps
    subs: dict[UOp, UOp] = {}
    dt = dtypes.int32
    global_groups = _group_dims(sorted(grid, key=lambda r: r.axis_id), renderer.global_max) if grid else []
    if local:
        local_max = renderer.local_max or (1,)
        for d, group in enumerate(_group_dims(local, local_max)):
            subs.update(_decompose(UOp.special(_prod([r.range_size for r in group]), f"lidx{d}", dt), group))
        for d, group in enumerate(global_groups):
            subs.update(_decompose(UOp.special(_prod([r.range_size for r in group]), f"gidx{d}", dt), group))
    else:
        budget = renderer.max_local_threads
        local_max = renderer.local_max or (1, 1, 1)
        for d, group in enumerate(global_groups):
            size = _prod([r.range_size for r in group])
            lsize, padded = _work_group(size, min(budget, local_max[d] if d < len(local_max) else 1))
            budget //= lsize
            gid = UOp.special(-(-size // lsize) if lsize > 1 else size, f"gidx{d}", dt)
            idx = gid if lsize == 1 else gid * lsize + UOp.special(lsize, f"lidx{d}", dt)
            if padded and isinstance(size, int):  # the work-items past the end are gated off every load and store
                sink = _gate_indices(sink, group, UOp(Ops.CMPLT, dtypes.bool, (idx, UOp.const(dt, size))))
            subs.update(_decompose(idx, group))
    return graph_rewrite(sink, pm_grid_ids, ctx=subs, bottom_up=True, name="gpudims")


def _strip_end(ctx: dict[UOp, UOp], e: UOp) -> UOp | None:
    """`e` without the replaced ranges among those it closes (None when it closes none of them)."""
    keep = tuple(r for r in e.src[1:] if r not in ctx)
    if len(keep) == len(e.src) - 1:
        return None
    return e.src[0] if not keep else e.replace(src=(e.src[0], *keep))


# The grid ranges become work-item ids (ctx: range -> its expression over SPECIALs). Applied top of the graph first,
# so an END is seen before the ranges it closes are replaced.
pm_grid_ids = PatternMatcher(
    [
        # an END stops closing the replaced ranges (a work-item runs one point of them); it goes if it closed only those
        (UPat(Ops.END, name="e"), _strip_end),
        # a replaced range is its work-item expression
        (UPat(Ops.RANGE, name="r"), lambda ctx, r: ctx.get(r)),
    ]
)


def launch_dims(uops: list[UOp]) -> tuple[tuple[sint, ...], tuple[int, ...]] | None:
    """(work-groups per dimension, work-group size) from a linear program's SPECIALs; None if it has none."""
    specials = {str(u.arg): u for u in uops if u.op is Ops.SPECIAL}
    if not specials:
        return None
    ndims = 1 + max(int(name.lstrip("gilxd")) for name in specials)
    groups: list[sint] = [1] * ndims
    local: list[int] = [1] * ndims
    for name, u in specials.items():
        d = int(name.lstrip("gilxd"))
        end = u.src[0]
        size: sint = end.arg if end.op is Ops.CONST else end
        if name.startswith("gidx"):
            groups[d] = size
        elif name.startswith("lidx"):
            if not isinstance(size, int):
                raise ValueError(f"work-group size {name} must be a constant, got {size}")
            local[d] = size
    return tuple(groups), tuple(local)
