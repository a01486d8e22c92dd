"""`hand_coded_opts`: the opts a kernel gets without search (shared/specs/optimizer.md §6).

From the renderer: W = lanes of its widest vector for the kernel's dtype, R = vector registers, T = threads.
- matmul-like (a REDUCE ADD of a product of two loads, each missing a different output axis): a register tile
  of MR rows x NR columns (UPCAST on both output axes, NR a multiple of W, up to R accumulators) and the reduce axis
  UNROLLed by 4 (by 2 when the accumulators fill the registers); when the operand that moves with the contiguous
  output axis reads it strided (`x @ W.T`), a dot-product tile along the reduce axis instead (below);
- matmul-like with the reduce axis contiguous in both operands and no output axis a vector width divides (a
  convolution's weight gradient, (Cout, Cin, 3, 3)): GROUP_REDUCE the reduce axis by W and UPCAST an output axis of
  each operand, MR x NR independent accumulators, times a short output axis along which one operand's loads move by
  one element (the kernel column kw) when the registers hold them;
- other reductions over a contiguous axis (when vectorising it gathers no more loads lane by lane than vectorising
  the contiguous output axis would): GROUP_REDUCE the reduce axis by 4W (4 vector accumulators; a short nested
  reduce that allows fewer also UPCASTs an output axis some load does not use);
  over a strided axis: UPCAST the contiguous output axis by W and UNROLL the reduce by 4;
- elementwise: UPCAST the contiguous output axis by W (2W when large);
- THREAD last: the outermost output axis split over the T threads, only for kernels big enough to pay for it.
Every step is skipped when it is not legal (KernelOptError); the heuristic never raises.
"""

from __future__ import annotations

from tg.codegen.lower.expand import VECTOR_DTYPES, gathered_loads, widened_half_loads
from tg.codegen.opt.gpu_heuristic import gpu_opts
from tg.codegen.opt.kernel import THREAD_IDS_PER_CORE, OptKernel, const_size, index_stride, vector_lanes
from tg.codegen.opt.opts import split
from tg.ir.ops import AxisType, GroupOp, Ops
from tg.ir.uop import UOp

THREAD_MIN_WORK = 1 << 20  # loop iterations (elements x reduce length) below which a kernel stays on one thread
MAX_TILE_ACCUMULATORS = 24
# A register tile may fill the whole register file with accumulators (AVX2: 8 rows x 2 vectors = 16 of its 16
# registers); the column vectors and broadcasts of each K step then come from L1 (memory operands, a few spills), and
# K is unrolled by 2 only. The larger tile reads each operand half as often, which is what the big reductions are
# short of. Measured on the 2-core AVX2 box, one thread, thread CPU time (minimum of 2-5 runs, load 6-12), 4x16 K-unroll
# 4 -> 8x16 K-unroll 2: (256x1024)@(1024x1024) with A stored transposed (a weight gradient) 10-12 -> 21-25 GFLOP/s,
# 1024^3 18-19 -> 29-35, (1024x1024)@(1024x256) 28-30 -> 39-42, 256^3 32-36 -> 44-50.
SPILLING_TILE_UNROLLS = (2,)
THREAD_BLOCKS_PER_CORE = 4  # most THREAD blocks per core the heuristic makes (the legal limit is THREAD_IDS_PER_CORE)


def _matmul_operands(k: OptKernel, red: UOp) -> tuple[UOp, UOp] | None:
    """The two operands of a matmul-like reduce value: a REDUCE ADD of a product (through casts) whose factors are
    elementwise expressions of loads (a load, or a cheap producer fused into it: a scale, a cast), or None."""
    v = red.src[0]
    while v.op is Ops.CAST:
        v = v.src[0]
    if red.arg is not Ops.ADD or v.op is not Ops.MUL:
        return None
    for s in v.src:
        nodes = s.toposort()
        if not any(u.op is Ops.LOAD for u in nodes) or any(u.op in (Ops.REDUCE, Ops.DEFINE_REG) for u in nodes):
            return None
    return v.src[0], v.src[1]


def _ranges(x: UOp) -> set[UOp]:
    """The RANGEs an operand expression depends on."""
    return {u for u in x.toposort() if u.op is Ops.RANGE}


def _matmul_parts(k: OptKernel) -> tuple[UOp, tuple[UOp, UOp], UOp, list[UOp], int, int] | None:
    """(reduce, operand loads, contiguous output axis, output axes, vector lanes, work) of a matmul-like CPU kernel
    that vectorises, or None."""
    if k.renderer.has_local:
        return None
    topo = list(k.ast.toposort())
    stores = [u for u in topo if u.op is Ops.STORE]
    reduces = [u for u in topo if u.op is Ops.REDUCE]
    if not stores or not k.ranges or len(reduces) != 1 or len(reduces[0].src) < 2:
        return None
    if (ops := _matmul_operands(k, reduces[0])) is None:
        return None
    lanes = _lanes(k, topo, stores)
    out_axes = [r for r in k.ranges if r.axis_type in (AxisType.LOOP, AxisType.GLOBAL)]
    store_idx = stores[0].src[0].src[1]
    contiguous_out = next((r for r in out_axes if index_stride(store_idx, r) == 1 and const_size(r) > 1), None)
    if contiguous_out is None or lanes < 2 or _is_matvec(reduces[0], _operand_loads(ops), contiguous_out, out_axes):
        return None
    return reduces[0], ops, contiguous_out, out_axes, lanes, _work(k)


def _is_matvec(red: UOp, loads: list[UOp], n_axis: UOp, out_axes: list[UOp]) -> bool:
    """A matrix-vector product `W @ x` with W read along the reduce axis (an LLM decode step's `x @ W.T`; `loads`:
    those of the reduced expression): one output axis, every load that moves with it strided, a load contiguous in
    the innermost reduce loop. A register tile would UPCAST the output axis over strided (gathered) matrix loads;
    the reduction rules vectorise the contiguous reduce loop instead (GROUP_REDUCE: vector loads of W and x, vector
    accumulators)."""
    if any(r is not n_axis and const_size(r) > 1 for r in out_axes):
        return False
    moving = [ld for ld in loads if n_axis in _ranges(ld.src[0].src[1])]
    if not moving or any(index_stride(ld.src[0].src[1], n_axis) == 1 for ld in moving):
        return False
    return any(index_stride(ld.src[0].src[1], red.src[-1]) == 1 for ld in loads)


def _columns_gathered(ops: tuple[UOp, UOp], n_axis: UOp) -> bool:
    """True when the operand that moves with the contiguous output axis reads it strided (`x @ W.T`: W is (N, K),
    contiguous along K): vector columns of a register tile would load it lane by lane, so a dot-product tile along
    the reduce axis (contiguous in both operands) replaces it. Measured on the 2-core AVX2 box, one thread, thread CPU
    time: (1024x1024)@(1024x256)^T 13 -> 41 GFLOP/s, (512x64)@(64x256)^T 11 -> 39-51."""
    return gathered_loads(_operand_loads(ops), n_axis) > 0


def _operand_loads(ops: tuple[UOp, UOp]) -> list[UOp]:
    """The LOADs the two operands of a matmul-like reduction read."""
    return [u for op in ops for u in op.toposort() if u.op is Ops.LOAD]


def _lanes(k: OptKernel, topo: list[UOp], stores: list[UOp]) -> int:
    wide = widened_half_loads(topo, k.renderer)  # float16 matrices widened to float32 by vector conversions
    vectorizable = all(u.dtype.scalar() in VECTOR_DTYPES or u in wide for u in topo
                       if u.op in (Ops.LOAD, Ops.REDUCE)) and all(
        s.src[1].dtype.scalar() in VECTOR_DTYPES for s in stores)  # fmt: skip
    return vector_lanes(k.renderer, k.dtype_itemsize) if vectorizable and k.renderer.vector_bytes else 1


def _work(k: OptKernel) -> int:
    work = 1
    for r in k.ranges:
        work *= max(const_size(r), 1)
    return work


def hand_coded_opts(k: OptKernel) -> OptKernel:
    """The heuristic opts for `k` (never raises: each step is skipped when illegal)."""
    ren = k.renderer
    if ren.has_local:  # GPUs: their own rules (opt/gpu_heuristic.py)
        return gpu_opts(k)
    topo = list(k.ast.toposort())
    stores = [u for u in topo if u.op is Ops.STORE]
    if not stores or not k.ranges:
        return k
    if (mm := _matmul_parts(k)) is not None:
        red, ops, n_axis, out_axes, lanes, work = mm
        if _columns_gathered(ops, n_axis):  # a reduce that no vector width divides keeps the gathering tile
            for width in (lanes, lanes // 2):
                if width >= 2 and (dot := _dot_tile(k, red, out_axes, width)) is not None:
                    return _threads(dot, work)
        tiled = _matmul_tile(k, red, ops, n_axis, out_axes, lanes)
        if tiled.applied:  # else (no vector width divides the contiguous output axis) the reduction rules below
            return _threads(tiled, work)
    lanes = _lanes(k, topo, stores)
    out_axes = [r for r in k.ranges if r.axis_type in (AxisType.LOOP, AxisType.GLOBAL)]
    store_idx = stores[0].src[0].src[1]
    contiguous_out = next((r for r in out_axes if index_stride(store_idx, r) == 1 and const_size(r) > 1), None)
    reduces = [u for u in topo if u.op is Ops.REDUCE]
    work = _work(k)
    loop_t = (AxisType.LOOP, AxisType.GLOBAL)
    if len(reduces) == 1 and lanes > 1 and len(reduces[0].src) >= 2:
        red_r = reduces[0].src[-1]  # the innermost reduce loop (convolutions reduce over several axes)
        nested = len(reduces[0].src) > 2  # the outer reduce loops make up the length: one vector of lanes is enough
        loads = [u for u in reduces[0].src[0].toposort() if u.op is Ops.LOAD]

        # vectorise the reduce loop unless that gathers more loads than vectorising the contiguous output axis (an
        # embedding's gradient: the token ids run along the reduce, the gradient rows along the output)
        along_reduce = any(index_stride(ld.src[0].src[1], red_r) == 1 for ld in loads)
        if along_reduce and (
            contiguous_out is None or gathered_loads(loads, red_r) <= gathered_loads(loads, contiguous_out)
        ):
            size = const_size(red_r)
            if (dot := _dot_tile(k, reduces[0], out_axes, lanes)) is not None:
                return _threads(dot, work)
            for f in (4 * lanes, 2 * lanes, lanes):
                if size >= (f if nested else 4 * f) and size % f == 0:
                    k = k.split_axis(red_r.axis_id, (AxisType.REDUCE,), f, AxisType.GROUP_REDUCE)
                    if f < 4 * lanes and nested:
                        k = _more_accumulators(k, reduces[0], loads, out_axes, 4 * lanes // f)
                    break
        elif contiguous_out is not None:
            size = const_size(contiguous_out)
            for f in (2 * lanes, lanes):
                if size % f == 0:
                    k = k.split_axis(contiguous_out.axis_id, loop_t, f, AxisType.UPCAST)
                    break
            size = const_size(red_r)
            for f in (4, 2):
                if size % f == 0:
                    k = k.split_axis(red_r.axis_id, (AxisType.REDUCE,), f, AxisType.UNROLL)
                    break
    elif not reduces and contiguous_out is not None and lanes > 1:
        size = const_size(contiguous_out)
        for f in (2 * lanes, lanes) if work >= 64 * lanes else (lanes,):
            if size % f == 0 and size >= f:
                k = k.split_axis(contiguous_out.axis_id, loop_t, f, AxisType.UPCAST)
                break
    return _threads(k, work)


def _dot_tile(k: OptKernel, red: UOp, out_axes: list[UOp], lanes: int) -> OptKernel | None:
    """A register tile of dot products for a matmul-like kernel whose reduce axis is contiguous in both operands but
    whose output has no vector-wide contiguous axis (a convolution's weight gradient: output (Cout, Cin, 3, 3), the
    reduce over the batch and the output positions): GROUP_REDUCE the reduce axis by one vector and UPCAST an output
    axis of each operand (MR x NR accumulators), so each loaded vector feeds several FMAs and the FMA chains are
    independent; None when the kernel is not of that shape."""
    if (ops := _matmul_operands(k, red)) is None:
        return None
    red_r = red.src[-1]
    a_loads, b_loads = ([u for u in op.toposort() if u.op is Ops.LOAD] for op in ops)
    if not all(any(index_stride(ld.src[0].src[1], red_r) == 1 for ld in side) for side in (a_loads, b_loads)):
        return None
    if const_size(red_r) % lanes:
        return None
    a_ranges, b_ranges = _ranges(ops[0]), _ranges(ops[1])

    def widest(own: set[UOp], other: set[UOp]) -> UOp | None:
        axes = [r for r in out_axes if r in own and r not in other and const_size(r) % 2 == 0]
        return max(axes, key=lambda r: (const_size(r) % 4 == 0, const_size(r)), default=None)

    m_axis, n_axis = widest(a_ranges, b_ranges), widest(b_ranges, a_ranges)
    if m_axis is None or n_axis is None:
        return None
    regs = max(getattr(k.renderer, "vector_registers", 16), 8)
    m_size, n_size = const_size(m_axis), const_size(n_axis)
    col = _neighbour_axis(out_axes, (m_axis, n_axis), (a_loads, a_ranges), (b_loads, b_ranges))
    col_sizes = (1,) if col is None else (1, const_size(col))
    tiles = [(mr, nr, c) for mr in (4, 3, 2) for nr in (4, 3, 2) for c in col_sizes
             if m_size % mr == 0 and n_size % nr == 0 and mr * nr * c + mr + nr <= regs
             and mr * nr * c <= MAX_TILE_ACCUMULATORS]  # fmt: skip
    if not tiles:
        return None
    mr, nr, c = max(tiles, key=lambda t: (t[0] * t[1] * t[2], -abs(t[0] - t[1])))
    t = k.split_axis(red_r.axis_id, (AxisType.REDUCE,), lanes, AxisType.GROUP_REDUCE)
    if col is not None and c > 1:  # first: the kernel column is the innermost of the unrolled loads
        t = t.split_axis(col.axis_id, (AxisType.LOOP, AxisType.GLOBAL), c, AxisType.UPCAST)
    t = t.split_axis(m_axis.axis_id, (AxisType.LOOP, AxisType.GLOBAL), mr, AxisType.UPCAST)
    t = t.split_axis(n_axis.axis_id, (AxisType.LOOP, AxisType.GLOBAL), nr, AxisType.UPCAST)
    return t if len(t.applied) == len(k.applied) + 3 + (c > 1) else None


def _neighbour_axis(out_axes: list[UOp], taken: tuple[UOp, UOp], *sides: tuple[list[UOp], set[UOp]]) -> UOp | None:
    """A short output axis (2-4) of a dot tile that only one operand uses and along which that operand's loads move
    by one element (a convolution's kernel column kw: the vectors x[.., w+kw : w+kw+W] share their cache lines), or
    None. UPCASTing it as well makes each vector of the other operand (the output gradient) feed that many more
    FMAs: the weight gradient streams both operands once per tile, so fewer, larger tiles stream them fewer times
    (ResNet block 16 ch 32x32: 5.0-5.2 -> 4.4 ms per weight gradient, one thread)."""
    for r in out_axes:
        if r in taken or not 2 <= const_size(r) <= 4:
            continue
        users = [(loads, ranges) for loads, ranges in sides if r in ranges]
        if len(users) != 1:
            continue
        moving = [ld for ld in users[0][0] if r in _ranges(ld.src[0].src[1])]
        if moving and all(index_stride(ld.src[0].src[1], r) == 1 for ld in moving):
            return r
    return None


def _more_accumulators(k: OptKernel, red: UOp, loads: list[UOp], out_axes: list[UOp], want: int) -> OptKernel:
    """More work per iteration of a short vectorised inner reduce nested in outer ones. A matrix-vector product read
    along its reduce axes (a block-quantised weight: Q8_0's (block, word) reduce of 8-word blocks; `_is_matvec`)
    UNROLLs the outer reduce loop: upcasting its output axis would gather the matrix's words and scales lane by
    lane from several rows (the 4096x1024 Q8_0 matvec: 4 scalar loads and inserts per vector of words). That holds
    whatever the reduced expression is, a product or a sum of scaled group dot products (Q4_K, Q6_K). Other kernels
    get independent accumulators (`_independent_accumulators`)."""
    n_axes = [r for r in out_axes if const_size(r) > 1]
    if len(n_axes) == 1 and _is_matvec(red, loads, n_axes[0], out_axes):
        outer = red.src[-2]
        size = const_size(outer)
        for f in (want, want // 2):
            if f >= 2 and size % f == 0 and size > f:
                split_k = k.split_axis(outer.axis_id, (AxisType.REDUCE,), f, AxisType.UNROLL)
                if split_k is not k:
                    return split_k
        return k
    return _independent_accumulators(k, loads, out_axes, want)


def _independent_accumulators(k: OptKernel, loads: list[UOp], out_axes: list[UOp], want: int) -> OptKernel:
    """UPCAST an output axis by up to `want` so a short contiguous reduce (a convolution's weight gradient: 8 output
    columns per row, the rows an outer reduce loop) keeps several vector accumulators in flight instead of one FMA
    chain waiting on its own latency; the axis is one that some load does not use, so that load is shared."""
    for r in reversed(out_axes):
        size = const_size(r)
        if size < 2 or not any(r not in _ranges(ld) for ld in loads):
            continue
        for f in (want, want // 2):
            if f >= 2 and size % f == 0:
                split_k = k.split_axis(r.axis_id, (AxisType.LOOP, AxisType.GLOBAL), f, AxisType.UPCAST)
                if split_k is not k:
                    return split_k
    return k


# other register tiles BEAM starts from: (vectors per row, rows, K unroll)
TILE_VARIANTS = ((1, 8, 4), (1, 16, 4), (2, 6, 4), (2, 12, 4), (2, 8, 8), (2, 8, 2), (3, 6, 4), (3, 8, 4),
                 (4, 4, 4), (4, 6, 4))  # fmt: skip


def matmul_tile_variants(k: OptKernel) -> list[OptKernel]:
    """Other register tiles for a matmul-like kernel, each with the heuristic's THREAD split: starting points for
    BEAM, which otherwise could only add opts to the heuristic's tile. Empty for other kernels."""
    if (mm := _matmul_parts(k)) is None:
        return []
    red, ops, n_axis, out_axes, lanes, work = mm
    ret = []
    for vecs, rows, unroll in TILE_VARIANTS:
        t = _matmul_tile(k, red, ops, n_axis, out_axes, lanes, (vecs * lanes,), (rows,), (unroll,))
        if len(t.applied) == 3:  # all three splits were legal
            ret.append(_threads(t, work))
    return ret


def _matmul_tile(k: OptKernel, red: UOp, ops: tuple[UOp, UOp], n_axis: UOp, out_axes: list[UOp], lanes: int,
                 widths: tuple[int, ...] | None = None, rows: tuple[int, ...] = (8, 12, 6, 4, 3, 2),
                 unrolls: tuple[int, ...] | None = None) -> OptKernel:  # fmt: skip
    """A register tile: UPCAST NR (vector) columns of the contiguous output axis, MR rows of another output axis
    that the column operand does not use, UNROLL the reduce axis; the first legal entry of `widths` (default 2W, W,
    W/2), of `rows` (up to R accumulators) and of `unrolls` (default 4, 2; SPILLING_TILE_UNROLLS when the accumulators
    fill the registers) is taken."""
    a, b = ops
    a_ranges, b_ranges = _ranges(a), _ranges(b)
    if n_axis not in b_ranges:
        a, b, a_ranges, b_ranges = b, a, b_ranges, a_ranges
    k_axis = red.src[-1]  # the innermost reduce loop
    regs = max(getattr(k.renderer, "vector_registers", 16), 8)
    n = const_size(n_axis)
    widths = (2 * lanes, lanes, lanes // 2) if widths is None else widths
    nr = next((f for f in widths if f >= 2 and n % f == 0), 0)
    if not nr:
        return k
    m_axis = next((r for r in out_axes if r is not n_axis and r not in b_ranges and r in a_ranges
                   and const_size(r) > 1), None)  # fmt: skip
    k = k.split_axis(n_axis.axis_id, (AxisType.LOOP, AxisType.GLOBAL), nr, AxisType.UPCAST)
    if m_axis is not None:
        vecs = max(nr // lanes, 1)
        # a row operand computed from loads that are strided along the rows (a fused gradient sum, g @ W with g = a + b
        # summed by autograd) is computed row by row in scalar registers, which share the register file: no spilling
        # (the transformer's fc2 input gradient: 65 ms with 8 rows, 30 with 4). Contiguous along the rows (g.T @ x,
        # the weight gradient) it is computed a vector at a time and the large tile pays (55-67 -> 22-26 ms).
        # Nor does a reduce over several loops, or one that the short unroll does not divide (a 3x3 convolution's
        # (ci, kh, kw): ResNet block conv forward 2.6-2.7 ms with 4 rows, 3.8-3.9 with 8 and no K unroll).
        a_loads = [u for u in a.toposort() if u.op is Ops.LOAD]
        fused_rows = _computed(a) and gathered_loads(a_loads, m_axis) > 0
        long_reduce = len(red.src) == 2 and const_size(k_axis) % min(SPILLING_TILE_UNROLLS) == 0
        budget = regs if long_reduce and not fused_rows else regs - vecs - 1
        for mr in rows:
            if const_size(m_axis) % mr == 0 and mr * vecs <= min(budget, MAX_TILE_ACCUMULATORS):
                k = k.split_axis(m_axis.axis_id, (AxisType.LOOP, AxisType.GLOBAL), mr, AxisType.UPCAST)
                if unrolls is None and mr * vecs + vecs + 1 > regs:  # accumulators fill the registers
                    unrolls = SPILLING_TILE_UNROLLS
                break
    ksize = const_size(k_axis)
    for u in (4, 2) if unrolls is None else unrolls:
        if ksize % u == 0 and ksize > u:
            k = k.split_axis(k_axis.axis_id, (AxisType.REDUCE,), u, AxisType.UNROLL)
            break
    return k


def _computed(operand: UOp) -> bool:
    """True when a matmul operand's value is computed from its loads (ALU ops outside the loads' index math), not a
    load (or a cast of one)."""
    stack, seen = [operand], set()
    while stack:
        u = stack.pop()
        if u in seen or u.op is Ops.LOAD:
            continue
        seen.add(u)
        if u.op in GroupOp.ALU:
            return True
        stack.extend(u.src)
    return False


def _threads(k: OptKernel, work: int) -> OptKernel:
    """Split the outermost output axis over the renderer's threads when the kernel is big enough: into T blocks, or
    up to THREAD_BLOCKS_PER_CORE x T while each keeps THREAD_MIN_WORK/4 iterations (the CPU pool hands the blocks
    out one at a time, so a core taken by another process for a while does not leave the kernel waiting for it).
    An axis that no multiple of T divides gets another block count above T (125 row blocks of a 1000^3 matmul: 5)."""
    t = getattr(k.renderer, "thread_max", 1)
    if not getattr(k.renderer, "has_threads", False) or t < 2 or work < THREAD_MIN_WORK:
        return k
    big = [n for n in range(THREAD_IDS_PER_CORE * t, t, -1) if work // n >= THREAD_MIN_WORK // 4]
    multiples = [n for n in big if n % t == 0 and n <= THREAD_BLOCKS_PER_CORE * t]
    for i, r in enumerate(k.ranges):
        if r.axis_type not in (AxisType.LOOP, AxisType.GLOBAL):
            continue
        size = const_size(r)
        for n in [*multiples, t, *(n for n in big if n not in multiples), *range(t - 1, 1, -1)]:
            if size % n == 0 and size >= n:
                return k.try_apply(split(i, n, AxisType.THREAD, True))
    return k
