"""Tensor cores: the `TC` opt rewrites a matmul-like kernel into warp-wide matrix multiply-accumulate ops (WMMA).

One `TensorCore` (target data in tg.codegen.render.renderer, where renderers declare theirs) describes a warp-level
instruction `D (M x N, float32) = A (M x K) @ B (K x N)` with half or bfloat16 inputs, and which elements of A, B
and D each of the warp's 32 threads holds (its fragment). For NVIDIA's
`mma.sync.aligned.m16n8k16` (sm_80+, PTX ISA "Matrix Fragments for mma.m16n8k16"), with g = lane // 4 and
t = lane % 4:
- A (16 x 16, row-major), 8 elements j: row g + 8*((j >> 1) & 1), column 2t + (j & 1) + 8*(j >> 2);
- B (16 x 8, column-major), 4 elements j: row 2t + (j & 1) + 8*(j >> 1), column g;
- D (16 x 8), 4 elements j: row g + 8*(j >> 1), column 2t + (j & 1).

`apply_tc` turns `out[m, n] = sum_k a[m, k] * b[k, n]` (loads of float16/bfloat16, a float32 sum) into: output
ranges m -> (m_o, 16), n -> (n_o, 8), reduce k -> (k_o, 16) and a WARP range `lane` of 32; each thread loads its A
and B fragments (VECTORIZE of 8 and 4 loads at the indices above), sums `WMMA(A, B)` (4 float32 values: its D
fragment) over k_o, and stores its 4 outputs. GPU renderers run the WARP range as the 32 threads of a warp (local
dimension 0); the PYTHON device expands it and runs each WMMA for the whole warp at once (`emulate`), so the
fragment index math is checked against numpy without a GPU.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tg.codegen.opt.opts import OptOps
from tg.codegen.render.renderer import WARP_SIZE, TensorCore
from tg.ir.dtype import DType
from tg.ir.ops import AxisType, Ops
from tg.ir.uop import UOp

if TYPE_CHECKING:
    from tg.codegen.opt.kernel import OptKernel
    from tg.codegen.opt.opts import Opt


def _name(dt: DType) -> str:
    return repr(dt).removeprefix("dtypes.")


def _strip_casts(x: UOp) -> UOp:
    while x.op is Ops.CAST:
        x = x.src[0]
    return x


def _matmul_parts(k: OptKernel, red: UOp) -> tuple[UOp, UOp] | None:
    """The two input loads of `sum_k a*b` (through casts), or None."""
    v = _strip_casts(red.src[0])
    if red.arg is not Ops.ADD or v.op is not Ops.MUL:
        return None
    a, b = _strip_casts(v.src[0]), _strip_casts(v.src[1])
    return (a, b) if a.op is Ops.LOAD and b.op is Ops.LOAD else None


def apply_tc(k: OptKernel, opt: Opt) -> UOp:
    """The kernel AST of `k` with its reduce axis number `opt.axis` on tensor cores (see the module doc); raises
    KernelOptError (through `k.fail`) naming why when the kernel or renderer does not qualify."""
    tcs: tuple[TensorCore, ...] = getattr(k.renderer, "tensor_cores", ())
    if not tcs:
        raise k.fail(opt, f"{type(k.renderer).__name__} has no tensor cores")
    if any(o.op is not OptOps.PADTO for o in k.applied):
        raise k.fail(opt, "TC must come before every opt but PADTO (it reshapes the output and reduce axes)")
    if not 0 <= opt.axis < len(k.ranges) or (kr := k.ranges[opt.axis]).axis_type is not AxisType.REDUCE:
        raise k.fail(opt, f"TC needs the number of a REDUCE axis, got {opt.axis}")
    reduces = [u for u in k.ast.toposort() if u.op is Ops.REDUCE]
    if len(reduces) != 1 or reduces[0].src[1:] != (kr,) or (parts := _matmul_parts(k, reduces[0])) is None:
        raise k.fail(opt, "TC needs one sum over this axis of a product of two loads (a matmul)")
    red = reduces[0]
    a, b = parts
    tc = next((t for t in tcs if a.dtype == b.dtype == t.dtype_in and red.dtype == t.dtype_out), None)
    if tc is None:
        have = ", ".join(f"{_name(t.dtype_in)} inputs with a {_name(t.dtype_out)} sum" for t in tcs)
        raise k.fail(opt, f"no tensor core for {_name(a.dtype)} x {_name(b.dtype)} -> {_name(red.dtype)} (has: {have})")
    out = [r for r in k.ranges if r.axis_type in (AxisType.LOOP, AxisType.GLOBAL)]
    a_idx, b_idx = a.src[0].src[1].toposort(), b.src[0].src[1].toposort()
    m_axis = next((r for r in out if r in a_idx and r not in b_idx), None)
    n_axis = next((r for r in out if r in b_idx and r not in a_idx), None)
    if m_axis is None or n_axis is None or kr not in a_idx or kr not in b_idx:
        raise k.fail(opt, "TC needs an output axis that only A uses and one that only B uses (a matmul)")
    tm, tn, tk = tc.dims
    for r, size, name in ((m_axis, tm, "M"), (n_axis, tn, "N"), (kr, tk, "K")):
        s = r.src[0].arg if r.src[0].op is Ops.CONST else None
        if s is None or s % size:
            fix = "PADTO it first" if name != "K" else "the reduce axis cannot be padded"
            raise k.fail(opt, f"TC {tc.name}: axis {name} of size {s if s is not None else 'symbolic'} is not a "
                              f"multiple of {size} ({fix})")  # fmt: skip
    nid = k.next_id
    m_o = UOp.range(m_axis.src[0].arg // tm, m_axis.axis_id, AxisType.GLOBAL)
    n_o = UOp.range(n_axis.src[0].arg // tn, n_axis.axis_id, AxisType.GLOBAL)
    k_o = UOp.range(kr.src[0].arg // tk, kr.axis_id, AxisType.REDUCE)
    lane = UOp.range(WARP_SIZE, nid, AxisType.WARP)

    def at(x: UOp, m: int | UOp, kk: int | UOp, n: int | UOp) -> UOp:
        return x.substitute({m_axis: m_o * tm + m, kr: k_o * tk + kk, n_axis: n_o * tn + n})

    a_frag = [at(a, row, col, 0) for row, col in (tc.a_elem(lane, j) for j in range(8))]
    b_frag = [at(b, 0, row, col) for row, col in (tc.b_elem(lane, j) for j in range(4))]
    frags = (
        UOp(Ops.VECTORIZE, tc.dtype_in.vec(8), tuple(a_frag)),
        UOp(Ops.VECTORIZE, tc.dtype_in.vec(4), tuple(b_frag)),
    )
    wmma = UOp(Ops.WMMA, tc.dtype_out.vec(4), frags, tc.name)
    acc = wmma.reduce(k_o, arg=Ops.ADD)
    roots = []
    others = [r for r in k.ranges if r not in (m_axis, n_axis, kr)]
    for j in range(4):
        row, col = tc.d_elem(lane, j)
        copy = k.ast.substitute({red: acc.gep(j), m_axis: m_o * tm + row, n_axis: n_o * tn + col})
        for root in copy.src:
            store = root
            while store.op is Ops.END:
                store = store.src[0]
            roots.append(store.end(*[r for r in others if r in store.toposort()], m_o, n_o, lane))
    return k.ast.replace(src=tuple(roots))
