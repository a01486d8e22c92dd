"""GPU-style kernels on OpenCL (PoCL runs them on the CPU) give the same results as the CPU device.

Skipped where no OpenCL device opens. Work-item ids, merged launch dimensions, default and explicit work-groups
(LOCAL ranges) are compared bit for bit against the CPU device running the same kernel AST as loops.
"""

from __future__ import annotations

import numpy as np
import pytest

from tg.codegen.opt.opts import Opt, split
from tg.codegen.program import get_program
from tg.ir.dtype import dtypes
from tg.ir.ops import AxisType, Ops
from tg.ir.uop import UOp
from tg.runtime.device import Buffer, Device, DeviceUnavailable
from tg.tensor import Tensor


@pytest.fixture(scope="module")
def cl() -> str:
    try:
        Device["CL"]
    except DeviceUnavailable as e:
        pytest.skip(f"no OpenCL device: {e}")
    return "CL"


def _run(ast: UOp, device: str, inputs: list[np.ndarray], out: np.ndarray, opts: list[Opt] | None = None) -> np.ndarray:
    dev = Device[device]
    p = get_program(ast, dev.renderer, opts)
    prg = dev.runtime(p.name, dev.compiler.compile_cached(p.src))
    arrays = [out.copy(), *inputs]
    bufs = [Buffer(device, a.size, dtypes.float32).copyin(memoryview(np.ascontiguousarray(a))) for a in arrays]
    prg(*[bufs[slot]._buf for slot in p.globals], global_size=p.global_size, local_size=p.local_size, wait=True)
    result = np.empty_like(out)
    bufs[0].copyout(memoryview(result))
    return result


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
