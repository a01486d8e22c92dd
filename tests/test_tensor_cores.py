"""The TC opt (tensor cores) without a GPU: the PYTHON device emulates mma.m16n8k16 warp-wide from every lane's
fragment, so TC kernels are checked against numpy here; the fragment layout is checked against the PTX ISA's
tables; illegal uses raise KernelOptError naming the reason. (CUDA compilation: tests/test_cuda_codegen.py.)"""

from __future__ import annotations

import math

import numpy as np
import pytest

from tg.codegen.opt.kernel import OptKernel
from tg.codegen.opt.opts import KernelOptError, Opt, OptOps, split
from tg.codegen.program import get_program
from tg.codegen.render.cuda import CUDARenderer
from tg.codegen.render.opencl import OpenCLRenderer
from tg.codegen.render.renderer import MMA_F16
from tg.ir.dtype import DType, dtypes
from tg.ir.ops import AxisType, Ops
from tg.ir.uop import UOp
from tg.runtime.device import Buffer, Device
from tg.tensor.data import from_numpy_dtype


def _matmul(m: int, n: int, k: int, dt: DType = dtypes.float16, out: DType = dtypes.float32) -> UOp:
    """out[i, j] = sum_r a[i, r] * b[r, j] with the products in `dt` and the sum in float32 (as Tensor's matmul)."""
    i, j, r = UOp.range(m, 0), UOp.range(n, 1), UOp.range(k, 2, AxisType.REDUCE)
    a = UOp.param(1, dt, m * k).index(i * k + r).load()
    b = UOp.param(2, dt, k * n).index(r * n + j).load()
    red = (a * b).cast(dtypes.float32).reduce(r, arg=Ops.ADD)
    return UOp.sink(
        UOp.param(0, out, m * n).index(i * n + j).store(red.cast(out) if out != red.dtype else red).end(i, j)
    )


def _run_python(ast: UOp, opts: list[Opt], a: np.ndarray, b: np.ndarray, out_dt: type = np.float32) -> np.ndarray:
    dev = Device["PYTHON"]
    p = get_program(ast, dev.renderer, opts)
    assert any(u.op is Ops.WMMA for u in p.uops)
    prg = dev.runtime(p.name, dev.compiler.compile_cached(p.src))
    m, n = a.shape[0], b.shape[1]
    out = Buffer("PYTHON", m * n, from_numpy_dtype(np.dtype(out_dt))).allocate()
    ins = [Buffer("PYTHON", x.size, dtypes.float16 if x.dtype == np.float16 else dtypes.bfloat16).copyin(
        memoryview(np.ascontiguousarray(x).view(np.uint16).ravel())) for x in (a, b)]  # fmt: skip
    bufs = [out, *ins]
    prg(*[bufs[s]._buf for s in p.globals], wait=True)
    got = np.empty(m * n, out_dt)
    out.copyout(memoryview(got))
    return got.reshape(m, n)


def _bf16(x: np.ndarray) -> np.ndarray:
    """float32 values (exact in bfloat16) as bfloat16 bit patterns, viewed as uint16 with a float32 twin."""
    return (x.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)


def test_fragment_layout_matches_the_ptx_isa_tables() -> None:
    # lane 5: groupID 1, threadID_in_group 1 (PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating point type")
    assert [MMA_F16.a_elem(5, j) for j in range(8)] == [(1, 2), (1, 3), (9, 2), (9, 3), (1, 10), (1, 11), (9, 10),
                                                         (9, 11)]  # fmt: skip
    assert [MMA_F16.b_elem(5, j) for j in range(4)] == [(2, 1), (3, 1), (10, 1), (11, 1)]
    assert [MMA_F16.d_elem(5, j) for j in range(4)] == [(1, 2), (1, 3), (9, 2), (9, 3)]
    # every element of A (16x16), B (16x8) and D (16x8) is held by exactly one (lane, j)
    for elem, count, shape in (
        (MMA_F16.a_elem, 8, (16, 16)),
        (MMA_F16.b_elem, 4, (16, 8)),
        (MMA_F16.d_elem, 4, (16, 8)),
    ):
        seen = sorted(elem(lane, j) for lane in range(32) for j in range(count))
        assert seen == sorted((r, c) for r in range(shape[0]) for c in range(shape[1]))


@pytest.mark.parametrize("shape", [(16, 8, 16), (32, 16, 48), (48, 24, 32)])
def test_tc_matmul_on_the_emulated_tensor_cores_equals_numpy(shape: tuple[int, int, int]) -> None:
    m, n, k = shape
    rng = np.random.default_rng(0)
    a, b = rng.integers(-8, 9, (m, k)).astype(np.float16), rng.integers(-8, 9, (k, n)).astype(np.float16)
    got = _run_python(_matmul(m, n, k), [Opt(OptOps.TC, 2)], a, b)
    np.testing.assert_array_equal(got, a.astype(np.float32) @ b.astype(np.float32))


def test_tc_products_are_exact_and_the_sum_rounds_once() -> None:
    # 1 + 2**-11 is not a float16 product of the inputs' halves: exact products, one float32 rounding per WMMA
    a = np.full((16, 16), 1 + 2**-10, np.float16)
    b = np.full((16, 8), 1 + 2**-10, np.float16)
    got = _run_python(_matmul(16, 8, 16), [Opt(OptOps.TC, 2)], a, b)
    np.testing.assert_array_equal(got, np.float32(16 * (1 + 2**-10) ** 2))


@pytest.mark.slow  # emulated warp-wide on PYTHON; the other TC tests run by default
def test_tc_bfloat16_half_output_padto_and_upcast() -> None:
    rng = np.random.default_rng(1)
    a32, b32 = rng.integers(-8, 9, (24, 32)).astype(np.float32), rng.integers(-8, 9, (32, 16)).astype(np.float32)
    # bfloat16 inputs, M = 24 padded to 32 (the padded rows are gated off), a second tile per warp (UPCAST)
    opts = [Opt(OptOps.PADTO, 0, 16), Opt(OptOps.TC, 2), split(1, 2, AxisType.UPCAST)]
    got = _run_python(
        _matmul(24, 16, 32, dtypes.bfloat16), opts, _bf16(a32).view(np.float16), _bf16(b32).view(np.float16)
    )
    np.testing.assert_array_equal(got, a32 @ b32)
    a, b = a32.astype(np.float16), b32.astype(np.float16)
    got16 = _run_python(_matmul(24, 16, 32, out=dtypes.float16), opts[:2], a, b, np.float16)
    np.testing.assert_array_equal(got16, (a32 @ b32).astype(np.float16))


def test_tc_legality_errors_name_the_reason() -> None:
    cuda = CUDARenderer("sm_90")
    with pytest.raises(KernelOptError, match="OpenCLRenderer has no tensor cores"):
        OptKernel(_matmul(16, 8, 16), OpenCLRenderer()).apply(Opt(OptOps.TC, 2))
    with pytest.raises(KernelOptError, match="CUDARenderer has no tensor cores"):
        OptKernel(_matmul(16, 8, 16), CUDARenderer("sm_75")).apply(Opt(OptOps.TC, 2))
    with pytest.raises(KernelOptError, match=r"no tensor core for float32 x float32 -> float32 \(has: float16 inputs"):
        OptKernel(_matmul(16, 8, 16, dtypes.float32), cuda).apply(Opt(OptOps.TC, 2))
    with pytest.raises(KernelOptError, match=r"axis M of size 24 is not a multiple of 16 \(PADTO it first"):
        OptKernel(_matmul(24, 8, 16), cuda).apply(Opt(OptOps.TC, 2))
    with pytest.raises(KernelOptError, match=r"axis K of size 8 is not a multiple of 16 \(the reduce axis cannot"):
        OptKernel(_matmul(16, 8, 8), cuda).apply(Opt(OptOps.TC, 2))
    with pytest.raises(KernelOptError, match="TC needs the number of a REDUCE axis"):
        OptKernel(_matmul(16, 8, 16), cuda).apply(Opt(OptOps.TC, 0))
    with pytest.raises(KernelOptError, match="TC must come before every opt but PADTO"):
        OptKernel(_matmul(32, 8, 16), cuda).apply(split(0, 2, AxisType.UPCAST)).apply(Opt(OptOps.TC, 2))


def test_cuda_heuristic_puts_half_matmuls_on_tensor_cores() -> None:
    p = get_program(_matmul(64, 64, 64), CUDARenderer("sm_90"))
    assert p.applied_opts == (Opt(OptOps.TC, 2),) and p.local_size == (32, 1) and p.global_size == (8, 4)
    assert (
        "tg_mma_m16n8k16_f16_f32(make_uint4(" in p.src and "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" in p.src
    )
    assert not any(o.op is OptOps.TC for o in get_program(_matmul(64, 64, 64), CUDARenderer("sm_75")).applied_opts)
    assert not any(
        o.op is OptOps.TC for o in get_program(_matmul(64, 64, 64, dtypes.float32), CUDARenderer()).applied_opts
    )


def test_beam_actions_include_tensor_cores_where_they_apply() -> None:
    from tg.codegen.opt.actions import legal_children

    k = OptKernel(_matmul(64, 64, 64), CUDARenderer("sm_90"))
    assert any(child.applied == (Opt(OptOps.TC, 2),) for child in legal_children(k))
    later = k.apply(split(0, 2, AxisType.UPCAST))  # TC comes first or not at all
    assert not any(o.op is OptOps.TC for child in legal_children(later) for o in child.applied)
    assert not any(o.op is OptOps.TC for child in legal_children(OptKernel(_matmul(64, 64, 64), OpenCLRenderer()))
                   for o in child.applied)  # fmt: skip


def test_tc_batched_matmul_keeps_the_batch_axis_as_a_grid_axis() -> None:
    nb, m, n, k = 3, 32, 8, 16
    bb, i, j, r = UOp.range(nb, 3), UOp.range(m, 0), UOp.range(n, 1), UOp.range(k, 2, AxisType.REDUCE)
    a = UOp.param(1, dtypes.float16, nb * m * k).index(bb * m * k + i * k + r).load()
    b = UOp.param(2, dtypes.float16, nb * k * n).index(bb * k * n + r * n + j).load()
    red = (a * b).cast(dtypes.float32).reduce(r, arg=Ops.ADD)
    ast = UOp.sink(UOp.param(0, dtypes.float32, nb * m * n).index(bb * m * n + i * n + j).store(red).end(bb, i, j))
    tc = Opt(OptOps.TC, [t for _, t, _ in OptKernel(ast, Device["PYTHON"].renderer).axes()].index(AxisType.REDUCE))
    rng = np.random.default_rng(2)
    x, y = rng.integers(-4, 5, (nb, m, k)).astype(np.float16), rng.integers(-4, 5, (nb, k, n)).astype(np.float16)
    got = _run_python(ast, [tc], x.reshape(nb * m, k), y.reshape(nb * k, n))  # flat buffers: shapes only size them
    np.testing.assert_array_equal(got.reshape(nb, m, n), x.astype(np.float32) @ y.astype(np.float32))
    p = get_program(ast, CUDARenderer(), [tc])
    assert p.global_size is not None and math.prod(p.global_size) == nb * (m // 16) * (n // 8)  # type: ignore[arg-type]
    assert p.local_size is not None and p.local_size[0] == 32
