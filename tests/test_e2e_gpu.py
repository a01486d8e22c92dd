"""GPU-style kernels on OpenCL (PoCL runs them on the CPU) give the same results as the CPU device.

Skipped where no OpenCL device opens. Work-item ids, merged launch dimensions, default and explicit work-groups
(LOCAL ranges) are compared bit for bit against the CPU device running the same kernel AST as loops; float4
accesses, padded (gated) odd sizes, half conversions, the GPU matmul heuristic and BEAM are checked too. `_run`
puts sentinel elements after every buffer: a store past the end fails the test.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from tg.codegen.opt.opts import Opt, OptOps, split
from tg.codegen.program import get_program
from tg.ir.dtype import DType, dtypes
from tg.ir.ops import AxisType, Ops
from tg.ir.uop import UOp
from tg.runtime.device import Buffer, Device, DeviceUnavailable
from tg.tensor import Tensor
from tg.tensor.data import from_numpy_dtype


@pytest.fixture(scope="module")
def cl() -> str:
    try:
        Device["CL"]
    except DeviceUnavailable as e:
        pytest.skip(f"no OpenCL device: {e}")
    return "CL"


GUARD = 64  # elements after the end of every buffer in `_run`, filled with a sentinel that must survive the kernel


def _run(ast: UOp, device: str, inputs: list[np.ndarray], out: np.ndarray, opts: list[Opt] | None = None) -> np.ndarray:
    """Run kernel `ast` with buffers [out, *inputs] (each followed by GUARD sentinel elements that no store may
    touch; the inputs' guards are NaN, which a read past the end would carry into the result)."""
    dev = Device[device]
    p = get_program(ast, dev.renderer, opts)
    prg = dev.runtime(p.name, dev.compiler.compile_cached(p.src))
    bufs, guarded = [], []
    for i, a in enumerate([out, *inputs]):
        sentinel = 0x5A if a.dtype.kind in "iub" else (np.float32(-7.25) if i == 0 else np.nan)
        g = np.concatenate([a.ravel(), np.full(GUARD, sentinel, a.dtype)])
        guarded.append(g)
        bufs.append(Buffer(device, g.size, from_numpy_dtype(g.dtype)).copyin(memoryview(g)))
    prg(*[bufs[slot]._buf for slot in p.globals], global_size=p.global_size, local_size=p.local_size, wait=True)
    for buf, g in zip(bufs, guarded, strict=True):
        after = np.empty_like(g)
        buf.copyout(memoryview(after))
        np.testing.assert_array_equal(after[g.size - GUARD :], g[g.size - GUARD :], err_msg="a store went past the end")
    result = np.empty_like(g := guarded[0])
    bufs[0].copyout(memoryview(result))
    return result[: out.size].reshape(out.shape)


def _split_sum_kernel(n_out: int, n_red: int, out_types: tuple[AxisType, AxisType]) -> UOp:
    """out[g*L + l] = sum_r inp[(g*L + l)*n_red + r] with the output axis split into (g, l) of the given types."""
    lsize = 8
    g, lo = UOp.range(n_out // lsize, 0, out_types[0]), UOp.range(lsize, 1, out_types[1])
    r = UOp.range(n_red, 2, AxisType.REDUCE)
    i = g * lsize + lo
    red = UOp.param(1, dtypes.float32, n_out * n_red).index(i * n_red + r).load().reduce(r, arg=Ops.ADD)
    return UOp.sink(UOp.param(0, dtypes.float32, n_out).index(i).store(red).end(g, lo))


@pytest.mark.parametrize("types", [(AxisType.LOOP, AxisType.LOOP), (AxisType.GLOBAL, AxisType.LOCAL)])
def test_local_work_groups_match_cpu(cl: str, types: tuple[AxisType, AxisType]) -> None:
    rng = np.random.default_rng(0)
    inp = rng.standard_normal(64 * 33).astype(np.float32)
    ast = _split_sum_kernel(64, 33, types)
    got = _run(ast, cl, [inp], np.zeros(64, np.float32))
    want = _run(ast, "CPU", [inp], np.zeros(64, np.float32))
    np.testing.assert_array_equal(got, want)
    np.testing.assert_allclose(got, inp.reshape(64, 33).sum(1), rtol=1e-5)


@pytest.mark.parametrize("shape", [(1,), (31,), (4096,), (6, 1024), (2, 3, 5, 7), (3, 1, 4, 1, 5, 9)])
def test_elementwise_and_reductions_match_cpu(cl: str, shape: tuple[int, ...]) -> None:
    rng = np.random.default_rng(1)
    a = rng.standard_normal(shape).astype(np.float32)
    b = rng.standard_normal(shape).astype(np.float32)
    for fn in (lambda x, y: x * y + 1, lambda x, y: (x - y).relu().sum(axis=-1), lambda x, y: x.max() + y.sum()):
        got = fn(Tensor(a, device=cl), Tensor(b, device=cl)).numpy()
        want = fn(Tensor(a, device="CPU"), Tensor(b, device="CPU")).numpy()
        # the CPU heuristics sum in vector accumulators (another order than the GPU's): equal up to rounding
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def _sum_rows_kernel(n_out: int, n_red: int) -> UOp:
    o, r = UOp.range(n_out, 0), UOp.range(n_red, 1, AxisType.REDUCE)
    red = UOp.param(1, dtypes.float32, n_out * n_red).index(o * n_red + r).load().reduce(r, arg=Ops.ADD)
    return UOp.sink(UOp.param(0, dtypes.float32, n_out).index(o).store(red).end(o))


def _matmul_kernel(m: int, n: int, k: int) -> UOp:
    i, j, r = UOp.range(m, 0), UOp.range(n, 1), UOp.range(k, 2, AxisType.REDUCE)
    a = UOp.param(1, dtypes.float32, m * k).index(i * k + r).load()
    b = UOp.param(2, dtypes.float32, k * n).index(r * n + j).load()
    return UOp.sink(
        UOp.param(0, dtypes.float32, m * n).index(i * n + j).store((a * b).reduce(r, arg=Ops.ADD)).end(i, j)
    )


# (kernel, opts): LOCAL work-groups, GROUP_REDUCE (inner and top) through local memory, UPCAST, UNROLL, mixed
OPT_VARIANTS = {
    "group_reduce": (_sum_rows_kernel(8, 512), [split(1, 64, AxisType.GROUP_REDUCE)]),
    "group_reduce_top": (_sum_rows_kernel(8, 512), [split(1, 16, AxisType.GROUP_REDUCE, top=True)]),
    "local_and_group": (_sum_rows_kernel(64, 256), [split(0, 4, AxisType.LOCAL), split(2, 32, AxisType.GROUP_REDUCE)]),
    "group_unroll": (_sum_rows_kernel(4, 1024), [split(1, 32, AxisType.GROUP_REDUCE), split(2, 4, AxisType.UNROLL)]),
    "matmul_local": (_matmul_kernel(32, 32, 64), [split(0, 8, AxisType.LOCAL), split(1, 8, AxisType.LOCAL)]),
    "matmul_upcast": (_matmul_kernel(32, 32, 64), [split(1, 4, AxisType.UPCAST), split(0, 2, AxisType.UPCAST)]),
    "upcast_group": (_sum_rows_kernel(8, 256), [split(0, 4, AxisType.UPCAST), split(2, 16, AxisType.GROUP_REDUCE)]),
    "matmul_group": (_matmul_kernel(8, 8, 256), [split(2, 16, AxisType.GROUP_REDUCE), split(0, 2, AxisType.LOCAL)]),
}


@pytest.mark.parametrize("variant", list(OPT_VARIANTS))
def test_opt_variants_identical_on_cl_and_cpu(cl: str, variant: str) -> None:
    # small integers in float32: every summation order gives the exact result, so CL and CPU must agree bit for bit
    ast, opts = OPT_VARIANTS[variant]
    params = sorted((u for u in ast.toposort() if u.op is Ops.PARAM), key=lambda u: u.arg)
    rng = np.random.default_rng(3)
    inputs = [rng.integers(-8, 9, p.dtype.size).astype(np.float32) for p in params[1:]]  # type: ignore[attr-defined]
    out = np.zeros(params[0].dtype.size, np.float32)  # type: ignore[attr-defined]
    plain = _run(ast, "CPU", inputs, out, [])
    np.testing.assert_array_equal(_run(ast, cl, inputs, out, opts), plain)
    if not any(o.arg[1] is AxisType.LOCAL for o in opts):  # the CPU has no work-groups; the rest it runs too
        np.testing.assert_array_equal(_run(ast, "CPU", inputs, out, opts), plain)
    p = get_program(ast, Device[cl].renderer, opts)
    if any(o.arg[1] is AxisType.GROUP_REDUCE for o in opts):
        assert "__local float" in p.src and "barrier(CLK_LOCAL_MEM_FENCE);" in p.src
    if any(o.arg[1] is AxisType.LOCAL for o in opts):
        assert "get_local_id" in p.src


def test_heuristic_group_reduce_for_a_long_sum(cl: str) -> None:
    p = get_program(_sum_rows_kernel(1, 1 << 16), Device[cl].renderer)
    assert any(o.arg[1] is AxisType.GROUP_REDUCE for o in p.applied_opts) and p.local_size == (256,)
    x = np.random.default_rng(4).integers(-100, 100, 1 << 16).astype(np.float32)
    np.testing.assert_array_equal(Tensor(x, device=cl).sum().numpy(), np.float32(x.astype(np.int64).sum()))


def test_matmul_and_transcendentals_match_cpu(cl: str) -> None:
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal((33, 65)).astype(np.float32), rng.standard_normal((65, 17)).astype(np.float32)
    got = (Tensor(a, device=cl) @ Tensor(b, device=cl)).numpy()
    # the CPU accumulates with fused multiply-adds (one rounding per step): equal up to rounding
    np.testing.assert_allclose(got, (Tensor(a, device="CPU") @ Tensor(b, device="CPU")).numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got, a @ b, rtol=1e-4, atol=1e-4)
    x = Tensor(a, device=cl)
    np.testing.assert_allclose(x.exp().numpy(), np.exp(a), rtol=1e-6)
    np.testing.assert_allclose(x.sin().numpy(), np.sin(a), rtol=1e-5, atol=1e-6)


def test_int_and_bool_semantics_match_cpu(cl: str) -> None:
    vals = np.array([0, 1, -1, 2**31 - 1, -(2**31), 7, -7, 255], np.int32)
    for fn in (lambda t: t // 3, lambda t: t % 3, lambda t: (t > 0).where(t, -t), lambda t: t.cast(dtypes.uint8)):
        got = fn(Tensor(vals, device=cl)).numpy()
        np.testing.assert_array_equal(got, fn(Tensor(vals, device="CPU")).numpy())
    f = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 3.5], np.float32)
    got = (Tensor(f, device=cl) != 0).numpy()
    np.testing.assert_array_equal(got, (Tensor(f, device="CPU") != 0).numpy())


def test_large_elementwise_uses_work_groups(cl: str) -> None:
    n = 1 << 22
    x = Tensor.arange(n, device=cl).cast(dtypes.float32)
    out = (x * 2).numpy()
    np.testing.assert_array_equal(out, np.arange(n, dtype=np.float32) * 2)


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.int64, np.float16])
def test_long_reductions_use_local_memory_and_match_numpy(cl: str, dtype: type) -> None:
    rng = np.random.default_rng(5)
    x = rng.integers(-50, 50, (3, 4096)).astype(dtype)
    t = Tensor(x, device=cl)
    np.testing.assert_array_equal(t.sum(axis=1).numpy(), x.sum(axis=1, dtype=dtype))
    np.testing.assert_array_equal(t.max(axis=1).numpy(), x.max(axis=1))
    np.testing.assert_array_equal(t.min().numpy(), x.min())
    np.testing.assert_array_equal(t.argmax(axis=1).numpy(), x.argmax(axis=1))
    np.testing.assert_array_equal((t > 40).any(axis=1).numpy(), (x > 40).any(axis=1))


def test_long_max_propagates_nan(cl: str) -> None:
    x = np.arange(8192, dtype=np.float32)
    x[5000] = np.nan
    assert np.isnan(Tensor(x, device=cl).max().numpy())
    x[5000] = np.inf
    assert Tensor(x, device=cl).max().numpy() == np.inf


def test_beam_search_times_whole_grids_on_cl(cl: str, tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    from tg.runtime import search

    monkeypatch.setenv("TG_CACHE_DIR", str(tmp_path))
    launches: list[tuple] = []  # type: ignore[type-arg]
    dev = Device[cl]
    real_runtime = dev.runtime

    def spy_runtime(name: str, lib: bytes):  # type: ignore[no-untyped-def]
        prg = real_runtime(name, lib)

        def call(*args, **kw):  # type: ignore[no-untyped-def]
            launches.append((kw.get("global_size"), kw.get("local_size")))
            return prg(*args, **kw)

        return call

    monkeypatch.setattr(dev, "runtime", spy_runtime)
    ast = _sum_rows_kernel(16, 1024)
    opts = search.beam_search(ast, dev.renderer, 2, time_limit=3.0)
    assert launches and all(g is not None and loc is not None for g, loc in launches)
    monkeypatch.setattr(dev, "runtime", real_runtime)
    x = np.random.default_rng(6).integers(-9, 10, 16 * 1024).astype(np.float32)
    got = _run(ast, cl, [x], np.zeros(16, np.float32), opts)
    np.testing.assert_array_equal(got, x.reshape(16, 1024).sum(1))


def test_beam_on_cl_tries_work_groups_and_finds_a_correct_matmul(
    cl: str, tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    from tg.codegen.opt.actions import candidate_opts
    from tg.codegen.opt.kernel import OptKernel
    from tg.codegen.opt.opts import KernelOptError
    from tg.runtime import search

    monkeypatch.setenv("TG_CACHE_DIR", str(tmp_path))
    ast, ren = _matmul_kernel(64, 64, 32), Device[cl].renderer
    assert any(o.op is OptOps.SPLIT and o.arg[1] is AxisType.LOCAL for o in candidate_opts(OptKernel(ast, ren)))
    with pytest.raises(KernelOptError, match="work-items per work-group"):
        OptKernel(ast, ren).apply(split(0, 32, AxisType.LOCAL)).apply(split(1, 32, AxisType.LOCAL))
    opts = search.beam_search(ast, ren, 2, time_limit=3.0)
    rng = np.random.default_rng(13)
    a, b = rng.integers(-8, 9, 64 * 32).astype(np.float32), rng.integers(-8, 9, 32 * 64).astype(np.float32)
    got = _run(ast, cl, [a, b], np.zeros(64 * 64, np.float32), opts)
    np.testing.assert_array_equal(got, (a.reshape(64, 32) @ b.reshape(32, 64)).ravel())


# *** float4: vector loads and stores along an UPCAST axis ***


def _copy_kernel(n: int, dtype: DType = dtypes.float32, shift: int = 0) -> UOp:
    """out[i] = in[i + shift] * 3 (shift moves the input's vector accesses off 16-byte boundaries)."""
    i = UOp.range(n, 0)
    val = UOp.param(1, dtype, n + shift).index(i + shift).load() * UOp.const(dtype, 3)
    return UOp.sink(UOp.param(0, dtype, n).index(i).store(val).end(i))


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.int64, np.float64])
@pytest.mark.parametrize("shift", [0, 1])
def test_float4_loads_and_stores_match_cpu(cl: str, dtype: type, shift: int) -> None:
    n = 1 << 12
    ast = _copy_kernel(n, from_numpy_dtype(np.dtype(dtype)), shift)
    x = np.random.default_rng(7).integers(-1000, 1000, n + shift).astype(dtype)
    opts = [split(0, 16 // np.dtype(dtype).itemsize, AxisType.UPCAST)]
    src = get_program(ast, Device[cl].renderer, opts).src
    lanes = 16 // np.dtype(dtype).itemsize
    assert f"vload{lanes}(0, &data1[" in src and f"vstore{lanes}(" in src
    got = _run(ast, cl, [x], np.zeros(n, dtype), opts)
    np.testing.assert_array_equal(got, x[shift:] * 3)
    np.testing.assert_array_equal(got, _run(ast, "CPU", [x], np.zeros(n, dtype), opts))


def test_heuristic_vectorizes_large_elementwise_and_matmul(cl: str) -> None:
    ren = Device[cl].renderer
    p = get_program(_copy_kernel(1 << 16), ren)
    assert p.applied_opts == (split(0, 4, AxisType.UPCAST),) and "vload4" in p.src and "vstore4" in p.src
    p = get_program(_matmul_kernel(256, 256, 64), ren)
    kinds = [o.arg[1] for o in p.applied_opts]
    assert kinds.count(AxisType.UPCAST) == 2 and kinds.count(AxisType.LOCAL) == 2 and AxisType.UNROLL in kinds
    assert p.local_size == (16, 16) and "vload4(0, &data2[" in p.src and "vstore4(" in p.src
    rng = np.random.default_rng(8)
    a, b = rng.integers(-8, 9, 256 * 64).astype(np.float32), rng.integers(-8, 9, 64 * 256).astype(np.float32)
    got = _run(_matmul_kernel(256, 256, 64), cl, [a, b], np.zeros(256 * 256, np.float32))
    np.testing.assert_array_equal(got, (a.reshape(256, 64) @ b.reshape(64, 256)).ravel())


def test_matmul_on_cl_matches_cpu_and_numpy_for_odd_shapes(cl: str) -> None:
    rng = np.random.default_rng(9)
    for m, k, n in ((1, 7, 1), (64, 128, 64), (100, 33, 260), (256, 64, 1024)):
        a, b = rng.integers(-4, 5, (m, k)).astype(np.float32), rng.integers(-4, 5, (k, n)).astype(np.float32)
        got = (Tensor(a, device=cl) @ Tensor(b, device=cl)).numpy()
        np.testing.assert_array_equal(got, a @ b)  # small integers: exact in any summation order
        np.testing.assert_array_equal(got, (Tensor(a, device="CPU") @ Tensor(b, device="CPU")).numpy())


# *** gating: padded work-items and lanes touch no memory ***


def _unguarded_accesses(ast: UOp, renderer: object, opts: list[Opt] | None) -> list[str]:
    """Loads/stores of kernel buffers that are not gated and whose address range can leave the buffer."""
    from tg.codegen.program import indexed_buffer

    bad = []
    for u in get_program(ast, renderer, opts).uops:  # type: ignore[arg-type]
        if u.op not in (Ops.LOAD, Ops.STORE) or u.src[0].op is not Ops.INDEX or len(u.src) == 3:
            continue
        idx, buf = u.src[0], indexed_buffer(u.src[0])
        lanes = (u.dtype if u.op is Ops.LOAD else u.src[1].dtype).count
        if buf.op is Ops.PARAM and (idx.src[1].vmin < 0 or idx.src[1].vmax + lanes > buf.dtype.size):  # type: ignore[attr-defined, operator]
            bad.append(f"{u.op} {idx.src[1].render()}")
    return bad


@pytest.mark.parametrize("n", [1000, 1023, 4097])
@pytest.mark.parametrize(
    "opts",
    [
        None,  # the default work-group, padded past the end
        [Opt(OptOps.PADTO, 0, 32), split(0, 32, AxisType.LOCAL)],
        [Opt(OptOps.PADTO, 0, 64), split(0, 4, AxisType.UPCAST), split(0, 16, AxisType.LOCAL)],
    ],
    ids=["default", "padto_local32", "padto_upcast4_local16"],
)
def test_padded_work_items_are_gated(cl: str, n: int, opts: list[Opt] | None) -> None:
    ast = _copy_kernel(n)
    ren = Device[cl].renderer
    p = get_program(ast, ren, opts)
    assert p.global_size is not None and p.local_size is not None
    launched = math.prod(int(g) * lsz for g, lsz in zip(p.global_size, p.local_size, strict=True))
    upcast = 4 if opts and len(opts) == 3 else 1
    assert launched * upcast > n, "the launch should cover more work-items than elements (padded)"
    assert p.local_size[0] >= 16, "an odd size should still get a real work-group"
    assert not _unguarded_accesses(ast, ren, opts)
    x = np.random.default_rng(10).standard_normal(n).astype(np.float32)
    got = _run(ast, cl, [x], np.zeros(n, np.float32), opts)  # checks the guard elements after every buffer
    np.testing.assert_array_equal(got, x * 3)


def test_padded_reductions_are_gated(cl: str) -> None:
    # 1023 rows of a sum: padded to 1024 work-items; the padded one must neither read row 1023 nor store
    ast = _sum_rows_kernel(1023, 33)
    ren = Device[cl].renderer
    assert not _unguarded_accesses(ast, ren, None)
    x = np.random.default_rng(11).integers(-9, 10, 1023 * 33).astype(np.float32)
    got = _run(ast, cl, [x], np.zeros(1023, np.float32))
    np.testing.assert_array_equal(got, x.reshape(1023, 33).sum(1))
    for shape in ((1000,), (1023, 3), (7, 1023)):
        a = np.arange(math.prod(shape), dtype=np.float32).reshape(shape)
        np.testing.assert_array_equal((Tensor(a, device=cl) + 1).numpy(), a + 1)


# *** half precision: float16 storage, float32 compute, hardware conversions ***


def test_half_conversions_are_hardware_ones_and_match_numpy(cl: str) -> None:
    x = np.array([0.1, -2.5, 65504, 65520, 1e-7, 6e-8, 3e-8, np.inf, -np.inf, np.nan, -0.0, 3.14159], np.float32)
    with np.errstate(over="ignore"):
        want = x.astype(np.float16)
    t = Tensor(x, device=cl).cast(dtypes.float16)
    np.testing.assert_array_equal(t.numpy(), want)
    np.testing.assert_array_equal(np.signbit(t.numpy()), np.signbit(want))
    np.testing.assert_array_equal(t.cast(dtypes.float32).numpy(), want.astype(np.float32))
    h = np.random.default_rng(12).standard_normal(4096).astype(np.float16)
    got = (Tensor(h, device=cl) * 3 + 1).numpy()
    np.testing.assert_array_equal(got, (Tensor(h, device="CPU") * 3 + 1).numpy())
    np.testing.assert_array_equal(got, h * np.float16(3) + np.float16(1))  # each op in float32, rounded to half
    src = get_program(_copy_kernel(64, dtypes.float16), Device[cl].renderer).src
    native = Device[cl].renderer.has_half  # type: ignore[attr-defined]
    assert ("convert_half_rte" in src) if native else ("vload_half" in src and "vstore_half_rte" in src)
