"""Optimised kernels give the unoptimised kernel's results, on CPU (vector C, threads) and PYTHON (the oracle).

Random legal opt sequences (from the BEAM action list) on matmuls, reductions over each axis, max reductions, int
kernels, broadcasting elementwise kernels, gated loads and a softmax-like double reduce, with odd sizes that need
PADTO or gates. Same opts: CPU == PYTHON bit for bit; optimised vs unoptimised: bit for bit except float reductions
whose order UNROLL/GROUP_REDUCE change (then within 1e-5 relative).
"""

from __future__ import annotations

import random
import subprocess
from collections.abc import Callable

import numpy as np
import pytest

from tg.codegen.opt import KernelOptError, Opt, OptKernel, OptOps, apply_opts, split
from tg.codegen.opt.actions import legal_children
from tg.codegen.program import get_program
from tg.codegen.render.cstyle import ClangRenderer
from tg.codegen.render.python import PythonRenderer
from tg.codegen.render.renderer import Renderer
from tg.ir.dtype import DType, dtypes
from tg.ir.ops import AxisType, KernelInfo, Ops
from tg.ir.uop import UOp
from tg.runtime.c_compiler import CCompiler
from tg.runtime.device import Buffer, Device
from tg.runtime.engine import CompiledRunner

f32, i32 = dtypes.float32, dtypes.int32
NP = {f32: np.float32, i32: np.int32, dtypes.float64: np.float64, dtypes.float16: np.float16}


def cpu_renderer(threads: int = 3) -> ClangRenderer:
    ren = Device["CPU"].renderer
    return ClangRenderer(ren.vector_bytes, threads, ren.has_fma)


def run(ast: UOp, device: str, renderer: Renderer, opts: list[Opt] | None, out: tuple[DType, int],
        ins: list[np.ndarray]) -> np.ndarray:  # fmt: skip
    prg = get_program(ast, renderer, opts)
    runner = CompiledRunner(prg, device)
    dt, n = out
    bufs = [Buffer(device, n, dt).ensure_allocated().copyin(bytes(n * dt.itemsize))]
    for arr in ins:
        adt = next(k for k, v in NP.items() if v == arr.dtype.type)
        bufs.append(Buffer(device, arr.size, adt).ensure_allocated().copyin(memoryview(np.ascontiguousarray(arr).data)))
    runner(bufs, {})
    return np.frombuffer(bytes(bufs[0].as_memoryview()), dtype=NP[dt]).copy()


# *** kernels: (ast, output (dtype, size), inputs) ***


def matmul(m: int, n: int, k: int, dt: DType = f32) -> tuple[UOp, tuple[DType, int], list[np.ndarray]]:
    r0, r1, r2 = UOp.range(m, 0), UOp.range(n, 1), UOp.range(k, 2, AxisType.REDUCE)
    a, b, c = UOp.param(1, dt, m * k), UOp.param(2, dt, k * n), UOp.param(0, dt, m * n)
    v = (a.index(r0 * k + r2).load() * b.index(r2 * n + r1).load()).reduce(r2)
    rng = np.random.default_rng(m * 10000 + n * 100 + k)
    ins = [rng.integers(-5, 5, (m * k,)).astype(NP[dt]), rng.integers(-5, 5, (k * n,)).astype(NP[dt])]
    if dt is f32:
        ins = [rng.standard_normal(m * k).astype(np.float32), rng.standard_normal(k * n).astype(np.float32)]
    return UOp.sink(c.index(r0 * n + r1).store(v).end(r0, r1)), (dt, m * n), ins


def matmul_half_a(m: int, n: int, k: int) -> tuple[UOp, tuple[DType, int], list[np.ndarray]]:
    """A float16 matrix (an LLM's F16 weights) widened to float32 in a matmul: its loads may be float16 vectors."""
    r0, r1, r2 = UOp.range(m, 0), UOp.range(n, 1), UOp.range(k, 2, AxisType.REDUCE)
    a, b, c = UOp.param(1, dtypes.float16, m * k), UOp.param(2, f32, k * n), UOp.param(0, f32, m * n)
    v = (a.index(r0 * k + r2).load().cast(f32) * b.index(r2 * n + r1).load()).reduce(r2)
    rng = np.random.default_rng(m * 10000 + n * 100 + k)
    ins: list[np.ndarray] = [
        rng.standard_normal(m * k).astype(np.float16),
        rng.standard_normal(k * n).astype(np.float32),
    ]
    return UOp.sink(c.index(r0 * n + r1).store(v).end(r0, r1)), (f32, m * n), ins


def reduce2d(rows: int, cols: int, axis: int, op: Ops = Ops.ADD, dt: DType = f32):
    r0, r1 = UOp.range(rows if axis == 1 else cols, 0), UOp.range(cols if axis == 1 else rows, 1, AxisType.REDUCE)
    a, out = UOp.param(1, dt, rows * cols), UOp.param(0, dt, rows if axis == 1 else cols)
    idx = r0 * cols + r1 if axis == 1 else r1 * cols + r0
    v = a.index(idx).load().reduce(r1, arg=op)
    rng = np.random.default_rng(rows * 1000 + cols)
    x = rng.standard_normal(rows * cols).astype(np.float32) if dt is f32 else rng.integers(-99, 99, rows * cols).astype(
        NP[dt])  # fmt: skip
    return UOp.sink(out.index(r0).store(v).end(r0)), (dt, rows if axis == 1 else cols), [x]


def broadcast_ew(rows: int, cols: int):
    r0, r1 = UOp.range(rows, 0), UOp.range(cols, 1)
    a, b, out = UOp.param(1, f32, rows * cols), UOp.param(2, f32, cols), UOp.param(0, f32, rows * cols)
    v = a.index(r0 * cols + r1).load() * b.index(r1).load() + UOp.const(f32, 1.0)
    v = (v < UOp.const(f32, 0.5)).where(v, v * UOp.const(f32, 3.0))
    rng = np.random.default_rng(rows + cols)
    ins = [rng.standard_normal(rows * cols).astype(np.float32), rng.standard_normal(cols).astype(np.float32)]
    return UOp.sink(out.index(r0 * cols + r1).store(v).end(r0, r1)), (f32, rows * cols), ins


def gated(n: int):
    r0 = UOp.range(n, 0)
    a, out = UOp.param(1, f32, n), UOp.param(0, f32, n)
    v = a.index(r0, valid=r0 < max(n // 2, 1)).load() + UOp.const(f32, 2.0)
    return UOp.sink(out.index(r0).store(v).end(r0)), (f32, n), [np.arange(n, dtype=np.float32)]


def softmax_like(rows: int, cols: int):
    r0, r1, r2 = UOp.range(rows, 0), UOp.range(cols, 1), UOp.range(cols, 2, AxisType.REDUCE)
    a, out = UOp.param(1, f32, rows * cols), UOp.param(0, f32, rows * cols)
    mx = a.index(r0 * cols + r2).load().reduce(r2, arg=Ops.MAX)
    v = a.index(r0 * cols + r1).load() - mx
    rng = np.random.default_rng(rows * cols)
    return UOp.sink(out.index(r0 * cols + r1).store(v).end(r0, r1)), (f32, rows * cols), [
        rng.standard_normal(rows * cols).astype(np.float32)]  # fmt: skip


SIZES = (1, 2, 3, 7, 16, 17, 31, 33, 64)
KERNELS: dict[str, Callable[[random.Random], tuple[UOp, tuple[DType, int], list[np.ndarray]]]] = {
    "matmul": lambda rnd: matmul(rnd.choice(SIZES), rnd.choice((*SIZES, 48, 100)), rnd.choice(SIZES)),
    "matmul_half_a": lambda rnd: matmul_half_a(rnd.choice(SIZES), rnd.choice(SIZES), rnd.choice((*SIZES, 48))),
    "matmul_int": lambda rnd: matmul(rnd.choice(SIZES), rnd.choice(SIZES), rnd.choice(SIZES), i32),
    "sum_rows": lambda rnd: reduce2d(rnd.choice(SIZES), rnd.choice((*SIZES, 129, 1000)), 1),
    "sum_cols": lambda rnd: reduce2d(rnd.choice(SIZES), rnd.choice((*SIZES, 129)), 0),
    "max_rows": lambda rnd: reduce2d(rnd.choice(SIZES), rnd.choice((*SIZES, 127)), 1, Ops.MAX),
    "int_sum": lambda rnd: reduce2d(rnd.choice(SIZES), rnd.choice(SIZES), 1, Ops.ADD, i32),
    "broadcast": lambda rnd: broadcast_ew(rnd.choice(SIZES), rnd.choice((*SIZES, 100))),
    "gated": lambda rnd: gated(rnd.choice((*SIZES, 100, 1000))),
    "softmax_like": lambda rnd: softmax_like(rnd.choice(SIZES), rnd.choice(SIZES)),
}


def random_opts(ast: UOp, renderer: Renderer, rnd: random.Random, steps: int) -> list[Opt]:
    k = OptKernel(ast, renderer)
    for _ in range(steps):
        children = legal_children(k)
        if not children:
            break
        k = rnd.choice(children)
    return list(k.applied)


# two random opt sequences per kernel by default (each kernel and its opts compiled three times: ~1 CPU-s a case),
# six in the slow run
@pytest.mark.parametrize("seed", [0, 1, *(pytest.param(seed, marks=pytest.mark.slow) for seed in range(2, 6))])
@pytest.mark.parametrize("name", list(KERNELS))
def test_random_opts_keep_results(name: str, seed: int) -> None:
    rnd = random.Random(f"{name}{seed}")
    ast, out, ins = KERNELS[name](rnd)
    cpu = cpu_renderer()
    py = PythonRenderer(cpu.vector_bytes, 3, cpu.has_fma)
    opts = random_opts(ast, cpu, rnd, rnd.randint(1, 4))
    base = run(ast, "CPU", cpu, [], out, ins)
    got_cpu = run(ast, "CPU", cpu, opts, out, ins)
    got_py = run(ast, "PYTHON", py, opts, out, ins)
    np.testing.assert_array_equal(got_cpu, got_py, err_msg=f"CPU != PYTHON with {[str(o) for o in opts]}")
    reorders = any(o.op is OptOps.SPLIT and o.arg[1] in (AxisType.UNROLL, AxisType.GROUP_REDUCE) for o in opts) or \
        any(o.op is OptOps.PADTO for o in opts)  # fmt: skip
    if out[0] is f32 and reorders:
        np.testing.assert_allclose(got_cpu, base, rtol=1e-5, atol=1e-5, err_msg=str([str(o) for o in opts]))
    else:
        np.testing.assert_array_equal(got_cpu, base, err_msg=str([str(o) for o in opts]))


@pytest.mark.parametrize("name", list(KERNELS))
def test_heuristic_opts_keep_results(name: str) -> None:
    rnd = random.Random(name)
    for _ in range(3):
        ast, out, ins = KERNELS[name](rnd)
        cpu = cpu_renderer(2)
        opts = list(apply_opts(ast, cpu)[1])
        base = run(ast, "CPU", cpu, [], out, ins)
        np.testing.assert_allclose(run(ast, "CPU", cpu, opts, out, ins), base, rtol=1e-5, atol=1e-5)
        py = PythonRenderer(cpu.vector_bytes, 2, cpu.has_fma)
        np.testing.assert_array_equal(run(ast, "PYTHON", py, opts, out, ins), run(ast, "CPU", cpu, opts, out, ins))


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_threads_give_identical_results(threads: int) -> None:
    ast, out, ins = matmul(48, 32, 17)
    ren = cpu_renderer(3)
    base = run(ast, "CPU", ren, [], out, ins)
    opts = [split(1, 16, AxisType.UPCAST)] + ([split(0, threads, AxisType.THREAD, True)] if threads > 1 else [])
    for _ in range(20):  # many small launches reuse the pool
        np.testing.assert_array_equal(run(ast, "CPU", ren, opts, out, ins), base)
    np.testing.assert_array_equal(
        run(ast, "PYTHON", PythonRenderer(ren.vector_bytes, 3, ren.has_fma), opts, out, ins), base
    )


def test_matmul_tile_matches_numpy() -> None:
    ast, out, (a, b) = matmul(64, 64, 64)
    ren = cpu_renderer(2)
    columns = 2 * max(1, ren.vector_bytes // 4)  # two float32 vectors of this CPU (8 on SSE/NEON, 32 on AVX-512)
    opts = [split(1, columns, AxisType.UPCAST), split(0, 8, AxisType.UPCAST), split(4, 4, AxisType.UNROLL),
            split(0, 2, AxisType.THREAD, True)]  # fmt: skip
    got = run(ast, "CPU", ren, opts, out, [a, b]).reshape(64, 64)
    np.testing.assert_allclose(got, a.reshape(64, 64) @ b.reshape(64, 64), rtol=1e-4, atol=1e-4)


def test_replayed_opts_render_the_same_source() -> None:
    ast, _, _ = matmul(64, 48, 32)
    ren = cpu_renderer(2)
    p = get_program(ast, ren)
    assert p.applied_opts, "the heuristic should optimise a 64x48x32 matmul"
    replay = get_program(ast.replace(arg=KernelInfo(opts_to_apply=tuple(p.applied_opts))), ren)
    assert replay.src == p.src
    assert replay.applied_opts == p.applied_opts


def test_illegal_explicit_opt_raises() -> None:
    ast, _, _ = matmul(16, 16, 16)
    with pytest.raises(KernelOptError, match=r"L16 L16 R16.*factor 5 must be >= 2 and divide"):
        get_program(ast, cpu_renderer(), [split(0, 5, AxisType.UPCAST)])


# one shape's tile variants by default (every variant compiled for CPU and run on PYTHON), the others in the slow run
@pytest.mark.parametrize(
    "shape", [(48, 64, 16), *(pytest.param(shape, marks=pytest.mark.slow) for shape in [(96, 96, 24), (24, 128, 8)])]
)
def test_beam_tile_variants_keep_results(shape: tuple[int, int, int]) -> None:
    from tg.codegen.opt.heuristic import matmul_tile_variants

    ast, out, ins = matmul(*shape)
    cpu = cpu_renderer(2)
    if not cpu.vector_bytes:
        pytest.skip("register tiles need a compiler target with vectors")
    py = PythonRenderer(cpu.vector_bytes, 2, cpu.has_fma)
    variants = matmul_tile_variants(OptKernel(ast, cpu))
    assert variants, f"a {shape} matmul should have other register tiles to try"
    base = run(ast, "CPU", cpu, [], out, ins)
    for v in variants:
        opts = list(v.applied)
        got = run(ast, "CPU", cpu, opts, out, ins)
        np.testing.assert_allclose(got, base, rtol=1e-5, atol=1e-5, err_msg=str([str(o) for o in opts]))
        np.testing.assert_array_equal(run(ast, "PYTHON", py, opts, out, ins), got, err_msg=str([str(o) for o in opts]))


def test_thread_ids_are_limited_per_core() -> None:
    ast, out, ins = matmul(48, 32, 8)
    ren = cpu_renderer(2)
    base = run(ast, "CPU", ren, [], out, ins)
    np.testing.assert_array_equal(run(ast, "CPU", ren, [split(0, 16, AxisType.THREAD, True)], out, ins), base)
    with pytest.raises(KernelOptError, match=r"THREAD factor 24 > 8 x thread_max = 16"):
        get_program(ast, ren, [split(0, 24, AxisType.THREAD, True)])


def test_heuristic_threads_an_axis_no_multiple_of_the_cores_divides() -> None:
    """125 row blocks (a matmul of 125 register tiles of rows) on 2 cores: 5 thread blocks, not one thread."""
    ren = cpu_renderer(2)
    # the rows of a register tile depend on the CPU's vector width (8 with AVX2 or AVX-512, 4 with SSE): ask the
    # heuristic, then make the matrix exactly 125 tiles tall
    probe = list(apply_opts(matmul(1000, 40, 128)[0], ren)[1])
    rows = next(o.arg[0] for o in probe if o.axis == 0 and o.arg[1] is AxisType.UPCAST)
    m = 125 * rows  # >= 500 rows x 40 x 128: over the 2^20 iterations from which the heuristic threads a kernel
    ast, out, (a, b) = matmul(m, 40, 128)
    opts = list(apply_opts(ast, ren)[1])
    assert split(0, 5, AxisType.THREAD, True) in opts, [str(o) for o in opts]
    got = run(ast, "CPU", ren, opts, out, [a, b]).reshape(m, 40)
    np.testing.assert_allclose(got, a.reshape(m, 128) @ b.reshape(128, 40), rtol=1e-4, atol=1e-4)


def test_split_axis_finds_the_range_by_id_and_never_raises() -> None:
    ast, _, _ = matmul(16, 8, 12)
    k = OptKernel(ast, cpu_renderer())
    red = next(r for r in k.ranges if r.axis_type is AxisType.REDUCE)
    unrolled = k.split_axis(red.axis_id, (AxisType.REDUCE,), 4, AxisType.UNROLL)
    assert unrolled.applied == (split(k.ranges.index(red), 4, AxisType.UNROLL),)
    assert sorted(r.range_size for r in unrolled.ranges if r.axis_type is AxisType.UNROLL) == [4]
    # no range of that id and type, a factor below 2, an illegal split: the kernel comes back unchanged
    assert k.split_axis(red.axis_id, (AxisType.LOOP,), 4, AxisType.UPCAST) is k
    assert k.split_axis(red.axis_id, (AxisType.REDUCE,), 1, AxisType.UNROLL) is k
    assert k.split_axis(red.axis_id, (AxisType.REDUCE,), 5, AxisType.UNROLL) is k  # 12 % 5
    with pytest.raises(KernelOptError):
        k.apply(split(k.ranges.index(red), 5, AxisType.UNROLL))
    assert k.try_apply(split(k.ranges.index(red), 5, AxisType.UNROLL)) is k


def heuristic_vector_opts(ast: UOp, uses: AxisType, avoids: AxisType | None = None) -> tuple[ClangRenderer, list[Opt]]:
    """The CPU heuristic's opts for `ast` on a 2-thread vector target (the test is skipped without vectors), checked
    to split an axis as `uses` and none as `avoids`."""
    ren = cpu_renderer(2)
    if not ren.vector_bytes:
        pytest.skip("needs a compiler target with vectors")
    opts = list(apply_opts(ast, ren)[1])
    assert any(o.arg[1] is uses for o in opts), [str(o) for o in opts]
    assert not any(o.arg[1] is avoids for o in opts), [str(o) for o in opts]
    return ren, opts


def test_heuristic_vectorises_the_reduce_loop_of_a_matrix_vector_product() -> None:
    """W (n, k) @ x (k,) with W read along k (an LLM decode step's x @ W.T): the reduce loop is vectorised
    (GROUP_REDUCE over contiguous W and x), not a register tile of strided W rows."""
    n, k = 64, 256
    r0, r1 = UOp.range(n, 0), UOp.range(k, 1, AxisType.REDUCE)
    w, x, out = UOp.param(1, f32, n * k), UOp.param(2, f32, k), UOp.param(0, f32, n)
    ast = UOp.sink(out.index(r0).store((w.index(r0 * k + r1).load() * x.index(r1).load()).reduce(r1)).end(r0))
    ren, opts = heuristic_vector_opts(ast, AxisType.GROUP_REDUCE, avoids=AxisType.UPCAST)
    rng = np.random.default_rng(0)
    wn, xn = rng.standard_normal(n * k).astype(np.float32), rng.standard_normal(k).astype(np.float32)
    got = run(ast, "CPU", ren, opts, (f32, n), [wn, xn])
    np.testing.assert_allclose(got, wn.reshape(n, k) @ xn, rtol=1e-5, atol=1e-5)


def test_heuristic_unrolls_the_blocks_of_a_block_scaled_matrix_vector_product() -> None:
    """out[n] = sum_b s[n, b] * sum_w W[n, b, w] x[8b + w] (a Q8_0 decode matvec: 8-wide blocks, one scale per
    block): the short word axis is one vector (GROUP_REDUCE) and the block loop is UNROLLed, not the output axis
    UPCAST (which gathered the matrix's words and scales lane by lane from 4 rows)."""
    n, nb, bw = 32, 16, 8
    r0, rb, rw = UOp.range(n, 0), UOp.range(nb, 1, AxisType.REDUCE), UOp.range(bw, 2, AxisType.REDUCE)
    w, x = UOp.param(1, f32, n * nb * bw), UOp.param(2, f32, nb * bw)
    sc, out = UOp.param(3, f32, n * nb), UOp.param(0, f32, n)
    dot = w.index(r0 * (nb * bw) + rb * bw + rw).load() * x.index(rb * bw + rw).load()
    ast = UOp.sink(out.index(r0).store((dot * sc.index(r0 * nb + rb).load()).reduce(rb, rw)).end(r0))
    ren = cpu_renderer(2)
    if ren.vector_bytes < 32:
        pytest.skip("needs 8-lane float32 vectors")
    opts = list(apply_opts(ast, ren)[1])
    kinds = [o.arg[1] for o in opts]
    assert AxisType.GROUP_REDUCE in kinds and AxisType.UNROLL in kinds and AxisType.UPCAST not in kinds, opts
    rng = np.random.default_rng(0)
    wn, xn = rng.standard_normal(n * nb * bw).astype(np.float32), rng.standard_normal(nb * bw).astype(np.float32)
    sn = rng.standard_normal(n * nb).astype(np.float32)
    got = run(ast, "CPU", ren, opts, (f32, n), [wn, xn, sn])
    ref = ((wn.reshape(n, nb, bw) * xn.reshape(nb, bw)).sum(-1) * sn.reshape(n, nb)).sum(-1)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)


def test_float16_matrix_vector_product_loads_vectors_and_converts_exactly() -> None:
    """W (n, k) float16 @ x (k,) float32, W read along k (an F16 model's decode step): the reduce loop is vectorised
    with float16 vector loads widened by one conversion per vector (F16C's vcvtph2ps on x86), and every float16
    value (subnormals, infinities, NaN, -0) converts as the scalar path does: the PYTHON device gives the same bits."""
    n, k = 16, 256
    r0, r1 = UOp.range(n, 0), UOp.range(k, 1, AxisType.REDUCE)
    w, x, out = UOp.param(1, dtypes.float16, n * k), UOp.param(2, f32, k), UOp.param(0, f32, n)
    ast = UOp.sink(out.index(r0).store((w.index(r0 * k + r1).load().cast(f32) * x.index(r1).load()).reduce(r1))
                   .end(r0))  # fmt: skip
    ren, opts = heuristic_vector_opts(ast, AxisType.GROUP_REDUCE)
    assert "tg_h2f_tg_f32x" in get_program(ast, ren, opts).src
    rng = np.random.default_rng(0)
    bits = rng.integers(0, 1 << 16, n * k).astype(np.uint16)
    bits[(bits & 0x7C00) == 0x7C00] = 0x3C00  # finite rows except the first
    bits[:8] = [0x0001, 0x83FF, 0x7C00, 0xFC00, 0x7E00, 0x8000, 0x0000, 0x7BFF]
    wn, xn = bits.view(np.float16), rng.standard_normal(k).astype(np.float32)
    got = run(ast, "CPU", ren, opts, (f32, n), [wn, xn])
    assert np.isnan(got[0])
    ref = wn.reshape(n, k)[1:].astype(np.float64) @ xn
    np.testing.assert_allclose(got[1:], ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())
    py = run(ast, "PYTHON", PythonRenderer(ren.vector_bytes, 2, ren.has_fma), opts, (f32, n), [wn, xn])
    np.testing.assert_array_equal(got[1:], py[1:])
    # a cast stored as it is keeps every bit pattern, signalling NaNs included
    r = UOp.range(n * k, 0)
    h, o = UOp.param(1, dtypes.float16, n * k), UOp.param(0, f32, n * k)
    cast = UOp.sink(o.index(r).store(h.index(r).load().cast(f32)).end(r))
    every = np.arange(n * k, dtype=np.uint16) * 16 + 15
    for opts in ([], [split(0, 8, AxisType.UPCAST)], [split(0, 16, AxisType.UPCAST)], [split(0, 4, AxisType.UPCAST)]):
        got = run(cast, "CPU", ren, opts, (f32, n * k), [every.view(np.float16)])
        np.testing.assert_array_equal(got.view(np.uint32), every.view(np.float16).astype(np.float32).view(np.uint32))


def test_float16_vector_conversion_compiles_to_vector_instructions() -> None:
    """On a target with F16C the float16 matrix-vector product's inner loop is vector code: one vcvtph2ps per 8
    weights and no scalar float compare. (The signalling-NaN fix of `half_helper` once tested `r != r` on the
    converted floats; clang folds that into a float16 compare, which x86 only has as scalars, so every lane was
    converted and compared on its own and the kernel ran 5x slower than the uint32 words it was to replace.)"""
    compiler = Device["CPU"].compiler
    if not isinstance(compiler, CCompiler) or not compiler.has_half_conversions:
        pytest.skip("needs a C compiler targeting F16C")
    assert isinstance(compiler, CCompiler)
    n, k = 16, 256
    r0, r1 = UOp.range(n, 0), UOp.range(k, 1, AxisType.REDUCE)
    w, x, out = UOp.param(1, dtypes.float16, n * k), UOp.param(2, f32, k), UOp.param(0, f32, n)
    ast = UOp.sink(out.index(r0).store((w.index(r0 * k + r1).load().cast(f32) * x.index(r1).load()).reduce(r1))
                   .end(r0))  # fmt: skip
    ren = cpu_renderer(2)
    prg = get_program(ast, ren, list(apply_opts(ast, ren)[1]))
    flags = [f for f in compiler.flags if f != "-shared"]
    res = subprocess.run([compiler.cc, *flags, "-S", "-o", "-", "-x", "c", "-"], input=prg.src, capture_output=True,
                         text=True, check=True)  # fmt: skip
    asm = res.stdout.lower()
    assert "ucomis" not in asm and "pinsrw" not in asm, "scalar float16 compares in the kernel"
    conversions = [line for line in asm.splitlines() if "vcvtph2ps" in line]
    assert conversions and all("%ymm" in line or "ymm" in line.split(",")[-1] for line in conversions), conversions


def test_heuristic_vectorises_the_output_axis_of_an_embedding_gradient() -> None:
    """out[v, d] = sum_r (ids[r] == v) * g[r, d] (an embedding's weight gradient): the token ids run along the reduce
    loop but the gradient rows along the output; vectorising the reduce would load g lane by lane, so the heuristic
    UPCASTs the contiguous output axis instead (the char GPT's embedding gradient: 7.6 -> 3.5 ms, one thread)."""
    v_n, d_n, r_n = 16, 32, 64
    r0, r1, r2 = UOp.range(v_n, 0), UOp.range(d_n, 1), UOp.range(r_n, 2, AxisType.REDUCE)
    ids, g, out = UOp.param(1, i32, r_n), UOp.param(2, f32, r_n * d_n), UOp.param(0, f32, v_n * d_n)
    rows = g.index(r2 * d_n + r1).load()
    picked = ids.index(r2).load().eq(r0.cast(i32)).where(rows, rows.const_like(0.0))
    ast = UOp.sink(out.index(r0 * d_n + r1).store(picked.reduce(r2)).end(r0, r1))
    ren, opts = heuristic_vector_opts(ast, AxisType.UPCAST, avoids=AxisType.GROUP_REDUCE)
    rng = np.random.default_rng(0)
    idn, gn = rng.integers(0, v_n, r_n).astype(np.int32), rng.standard_normal(r_n * d_n).astype(np.float32)
    got = run(ast, "CPU", ren, opts, (f32, v_n * d_n), [idn, gn])
    want = np.zeros((v_n, d_n), np.float32)
    np.add.at(want, idn, gn.reshape(r_n, d_n))
    np.testing.assert_allclose(got, want.ravel(), rtol=1e-5, atol=1e-5)
