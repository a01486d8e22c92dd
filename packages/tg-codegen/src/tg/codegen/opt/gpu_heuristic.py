"""GPU heuristics (renderers with local ids: OpenCL, CUDA): the opts a kernel gets without search.

The launch grid and the default work-group come from lowering (`lower/gpudims.py`); here only what needs an opt:
- a reduction with few outputs (<= 2048) over a long axis (>= 256) would leave most of the GPU idle with one
  work-item per output, so its reduce axis is split into a GROUP_REDUCE of up to `max_local_threads` (256)
  work-items that combine their partial results in local memory; the split is inner (element i goes to work-item
  i % f), so neighbouring work-items read neighbouring elements (coalesced loads).
Every step is skipped when it is not legal (KernelOptError); the heuristic never raises.
"""

from __future__ import annotations

from tg.codegen.opt.kernel import OptKernel, axis_type
from tg.codegen.opt.opts import KernelOptError, split
from tg.ir.ops import AxisType, Ops

FEW_OUTPUTS = 2048
LONG_REDUCE = 256


def gpu_opts(k: OptKernel) -> OptKernel:
    """Heuristic opts for a GPU renderer (see the module doc)."""
    reduces = [u for u in k.ast.toposort() if u.op is Ops.REDUCE]
    if len(reduces) != 1 or len(reduces[0].src) != 2:
        return k
    outputs = 1
    for r in k.ranges:
        if axis_type(r) in (AxisType.LOOP, AxisType.GLOBAL):
            size = r.src[0].arg if r.src[0].op is Ops.CONST else None
            if size is None:
                return k
            outputs *= size
    red_r = reduces[0].src[1]
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
