"""GPU heuristics (renderers with local ids: OpenCL, CUDA): the opts a kernel gets without search.

The launch grid and the default work-group come from lowering (`lower/gpudims.py`); here only what needs an opt:
- on renderers with tensor cores (CUDA sm_80+), a matmul of float16/bfloat16 loads summed in float32 whose sizes
  are multiples of the instruction's tile (16 x 8 x 16) runs on them (the `TC` opt: one warp per 16 x 8 block);
- matmul-like kernels (a REDUCE ADD of a product of two loads, each missing a different output axis) get a
  register tile per work-item: UPCAST 4 of the contiguous output axis (float4 loads of the column operand and
  float4 stores) and UPCAST 4 of a row axis, then LOCAL work-groups of up to 16 x 16 work-items over the two
  output axes (each work-group computes a 64 x 64 block), and the reduce axis UNROLLed by 4;
- a reduction with few outputs (<= 2048) over a long axis (>= 256) would leave most of the GPU idle with one
  work-item per output, so its reduce axis is split into a GROUP_REDUCE of up to `max_local_threads` (256)
  work-items that combine their partial results in local memory; the split is inner (element i goes to work-item
  i % f), so neighbouring work-items read neighbouring elements (coalesced loads);
- large elementwise kernels UPCAST their contiguous output axis by the vector width (4 floats: float4 loads and
  stores, one 16-byte access per work-item and buffer).
Every step is skipped when it is not legal (KernelOptError); the heuristic never raises.
"""

from __future__ import annotations

from tg.codegen.lower.expand import VECTOR_DTYPES
from tg.codegen.opt.kernel import OptKernel, const_size, index_stride, vector_lanes
from tg.codegen.opt.opts import KernelOptError, Opt, OptOps, split
from tg.ir.ops import AxisType, Ops
from tg.ir.uop import UOp

FEW_OUTPUTS = 2048
LONG_REDUCE = 256
VECTOR_ELEMENTWISE_MIN = 1 << 14  # outputs below which an elementwise kernel keeps one element per work-item
MATMUL_TILE = 4  # register tile rows and columns per work-item
MATMUL_LOCAL = 16  # work-items per work-group along each output axis
_OUT_TYPES = (AxisType.LOOP, AxisType.GLOBAL)
_SPLIT_TYPES = (*_OUT_TYPES, AxisType.REDUCE)  # the ranges the heuristic splits


def _load_of(x: UOp) -> UOp | None:
    while x.op is Ops.CAST:
        x = x.src[0]
    return x if x.op is Ops.LOAD else None


def gpu_opts(k: OptKernel) -> OptKernel:
    """Heuristic opts for a GPU renderer (see the module doc)."""
    topo = list(k.ast.toposort())
    stores = [u for u in topo if u.op is Ops.STORE]
    reduces = [u for u in topo if u.op is Ops.REDUCE]
    out_axes = [r for r in k.ranges if r.axis_type in _OUT_TYPES]
    if any(not isinstance(r.range_size, int) for r in out_axes) or not stores:
        return k
    if not reduces:
        return _vector_elementwise(k, topo, stores, out_axes)
    if len(reduces) != 1 or len(reduces[0].src) != 2:
        return k
    red_r = reduces[0].src[1]
    if k.renderer.tensor_cores and red_r in k.ranges:  # half/bfloat16 matmuls on tensor cores when they qualify
        try:
            return k.apply(Opt(OptOps.TC, k.ranges.index(red_r)))
        except KernelOptError:
            pass
    if (tiled := _matmul_tile(k, reduces[0], stores, out_axes)) is not None:
        return tiled
    outputs = 1
    for r in out_axes:
        outputs *= const_size(r)
    size = red_r.src[0].arg if red_r.src[0].op is Ops.CONST else 0
    if outputs > FEW_OUTPUTS or size < LONG_REDUCE or red_r not in k.ranges:
        return k
    axis = k.ranges.index(red_r)
    for f in (256, 128, 64, 32, 16, 8):
        if f <= k.renderer.max_local_threads and size % f == 0 and size // f >= 2:
            try:
                return k.apply(split(axis, f, AxisType.GROUP_REDUCE))
            except KernelOptError:
                continue
    return k


def _vector_elementwise(k: OptKernel, topo: list[UOp], stores: list[UOp], out_axes: list[UOp]) -> OptKernel:
    """UPCAST the store's contiguous axis by the vector width (float4 accesses) for large elementwise kernels."""
    if len(stores) != 1 or any(u.dtype.scalar() not in VECTOR_DTYPES for u in topo if u.op is Ops.LOAD):
        return k
    if stores[0].src[1].dtype.scalar() not in VECTOR_DTYPES:
        return k
    lanes = vector_lanes(k.renderer, k.dtype_itemsize)
    outputs = 1
    for r in out_axes:
        outputs *= const_size(r)
    idx = stores[0].src[0].src[1]
    axis = next((r for r in out_axes if index_stride(idx, r) == 1), None)
    if lanes < 2 or outputs < VECTOR_ELEMENTWISE_MIN or axis is None or const_size(axis) % lanes:
        return k
    return k.split_axis(axis.axis_id, _SPLIT_TYPES, lanes, AxisType.UPCAST)


def _matmul_tile(k: OptKernel, red: UOp, stores: list[UOp], out_axes: list[UOp]) -> OptKernel | None:
    """The register tile + LOCAL work-groups of a matmul-like kernel (None when the kernel is not one)."""
    v = red.src[0]
    while v.op is Ops.CAST:
        v = v.src[0]
    if red.arg is not Ops.ADD or v.op is not Ops.MUL or len(stores) != 1:
        return None
    a, b = _load_of(v.src[0]), _load_of(v.src[1])
    if a is None or b is None:
        return None
    store_idx = stores[0].src[0].src[1]
    n_axis = next((r for r in out_axes if index_stride(store_idx, r) == 1 and const_size(r) > 1), None)
    if n_axis is None:
        return None
    if n_axis in a.src[0].src[1].toposort():
        a, b = b, a
    if n_axis in a.src[0].src[1].toposort() or n_axis not in b.src[0].src[1].toposort():
        return None  # both operands use the column axis: not a matmul
    b_idx, a_idx = b.src[0].src[1], a.src[0].src[1]
    m_axis = next((r for r in out_axes if r is not n_axis and r not in b_idx.toposort() and r in a_idx.toposort()
                   and const_size(r) > 1), None)  # fmt: skip
    if m_axis is None:
        return None
    vectorizable = all(x.dtype.scalar() in VECTOR_DTYPES for x in (a, b, red))
    tile = MATMUL_TILE if vectorizable else 2
    for rid, size in ((n_axis.axis_id, const_size(n_axis)), (m_axis.axis_id, const_size(m_axis))):
        if size % tile == 0 and size > tile:
            k = k.split_axis(rid, _SPLIT_TYPES, tile, AxisType.UPCAST)
    # the column axis's LOCAL is made last: the newest LOCAL range becomes local dimension 0 (the fastest-varying
    # work-item id), so neighbouring work-items read neighbouring float4s of the column operand (coalesced)
    budget = k.renderer.max_local_threads
    for rid in (m_axis.axis_id, n_axis.axis_id):
        rest = next((const_size(r) for r in k.ranges if r.axis_id == rid and r.axis_type in _OUT_TYPES), 0)
        for f in (MATMUL_LOCAL, 8, 4, 2):
            if f <= budget and rest % f == 0 and rest >= f:
                k = k.split_axis(rid, _SPLIT_TYPES, f, AxisType.LOCAL)
                budget //= f
                break
    ksize = const_size(red.src[1])
    for u in (4, 2):
        if ksize % u == 0 and ksize > u:
            return k.split_axis(red.src[1].axis_id, _SPLIT_TYPES, u, AxisType.UNROLL)
    return k
