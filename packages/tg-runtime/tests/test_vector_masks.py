"""Vector C on the CPU: comparisons into lane masks, WHERE, bitwise ops, shifts, trunc, numeric casts and bitcasts.

Each kernel is elementwise over values where these ops break (NaN, +-inf, -0.0, the 2^23/2^52 integrality
thresholds, INT_MIN/INT_MAX, unsigned values above 2^31, out-of-range float -> int conversions) and runs three
ways: upcast to native vectors on the CPU, unoptimised on the CPU (scalar C), and upcast on the PYTHON device (the
oracle). All three must agree bit for bit, and the vectorised C source must really use the vector path.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from tg.codegen.opt import split
from tg.codegen.program import get_program
from tg.codegen.render.cstyle import ClangRenderer
from tg.codegen.render.python import PythonRenderer
from tg.ir.dtype import DType, dtypes
from tg.ir.ops import AxisType
from tg.ir.uop import UOp
from tg.runtime.device import Buffer, Device
from tg.runtime.engine import CompiledRunner

f32, f64, i32, u32, i64, u64, b = (dtypes.float32, dtypes.float64, dtypes.int32, dtypes.uint32, dtypes.int64,
                                   dtypes.uint64, dtypes.bool)  # fmt: skip
NP = {f32: np.float32, f64: np.float64, i32: np.int32, u32: np.uint32, i64: np.int64, u64: np.uint64, b: np.bool_}
N = 64  # elements: 4 vectors of 16 floats (or 8 of 8 doubles)

# special values of each input dtype, then random ones up to N
_FLOATS = [np.nan, np.inf, -np.inf, 0.0, -0.0, 0.5, -0.5, 1.5, -1.5, 2.5, -2.49, 8388607.5, -8388607.5, 8388608.0,
           16777217.0, 4503599627370495.5, 1e30, -1e30, 3e9, -3e9, 1e10, 1e-40, -1e-40, 2147483647.0, -2147483648.0,
           4294967295.0]  # fmt: skip
_INTS = {i32: [0, 1, -1, 2**31 - 1, -(2**31), 31, 32, 7, -7], u32: [0, 1, 2**31, 2**32 - 1, 2**31 - 1, 31, 7],
         i64: [0, 1, -1, 2**63 - 1, -(2**63), 2**53 + 1, 63], u64: [0, 1, 2**63, 2**64 - 1, 2**53 + 1]}  # fmt: skip


def values(dt: DType, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if dt is b:
        return rng.integers(0, 2, N).astype(np.bool_)
    if dtypes.is_float(dt):
        with np.errstate(over="ignore"):
            special = np.array(_FLOATS, dtype=NP[dt])
        rand = (rng.standard_normal(N) * 10.0 ** rng.integers(-3, 12, N)).astype(NP[dt])
    else:
        special = np.array(_INTS[dt], dtype=NP[dt])
        info = np.iinfo(NP[dt])
        rand = rng.integers(info.min, info.max, N, dtype=NP[dt], endpoint=True)
    return np.concatenate([special, rand[: N - len(special)]])


def kernel(fn: Callable[..., UOp], ins: list[DType], out: DType) -> UOp:
    r = UOp.range(N, 0)
    loads = [UOp.param(i + 1, dt, N).index(r).load() for i, dt in enumerate(ins)]
    return UOp.sink(UOp.param(0, out, N).index(r).store(fn(*loads)).end(r))


def run(ast: UOp, device: str, renderer: ClangRenderer | PythonRenderer, upcast: int, out: DType,
        ins: list[np.ndarray]) -> tuple[np.ndarray, str]:  # fmt: skip
    prg = get_program(ast, renderer, [split(0, upcast, AxisType.UPCAST)] if upcast > 1 else [])
    runner = CompiledRunner(prg, device)
    bufs = [Buffer(device, N, out).ensure_allocated().copyin(bytes(N * out.itemsize))]
    dts = {v: k for k, v in NP.items()}
    for arr in ins:
        data = memoryview(np.ascontiguousarray(arr).data).cast("B")
        bufs.append(Buffer(device, N, dts[arr.dtype.type]).ensure_allocated().copyin(data))
    runner(bufs, {})
    return np.frombuffer(bytes(bufs[0].as_memoryview()), dtype=NP[out]).copy(), prg.src


def c(dt: DType, v: float | int) -> UOp:
    return UOp.const(dt, v)


# name: (function of the loads, input dtypes, output dtype, text the vector C must contain)
CASES: dict[str, tuple[Callable[..., UOp], list[DType], DType, str]] = {
    "where_lt_f32": (lambda x, y: (x < y).where(x, y), [f32, f32], f32, "tg_where_tg_f32x"),
    "where_nan_or_neg": (
        lambda x: (x.ne(x) | (x < c(f32, 0.0))).where(x * c(f32, -1.0), x * c(f32, 2.0)),
        [f32],
        f32,
        "tg_where_tg_f32x",
    ),
    "where_eq_f64": (lambda x, y: x.eq(y).where(y, x + c(f64, 1.0)), [f64, f64], f64, "tg_where_tg_f64x"),
    "where_i64": (lambda x, y: (x < y).where(x, y), [i64, i64], i64, "tg_where_tg_i64x"),
    "where_u32_unsigned_order": (lambda x, y: (x < y).where(y, x), [u32, u32], u32, "tg_where_tg_u32x"),
    "where_int_cond_float_value": (
        lambda k, x: (k < c(i32, 0)).where(x, c(f32, 7.0)),
        [i32, f32],
        f32,
        "tg_where_tg_f32x",
    ),
    "where_long_cond_float_value": (
        lambda k, x: (k < c(i64, 0)).where(x, c(f32, 7.0)),
        [i64, f32],
        f32,
        "tg_where_tg_f32x",
    ),
    "mask_xor_and": (
        lambda x, y: (((x < y) ^ (y < c(f32, 1.0))) & x.ne(y)).where(x, y),
        [f32, f32],
        f32,
        "tg_where_tg_f32x",
    ),
    "mask_ne_masks": (
        lambda x, y: ((x < c(f32, 0.0)).ne(y < c(f32, 0.0))).where(x, y),
        [f32, f32],
        f32,
        "tg_where_tg_f32x",
    ),
    "mask_to_float": (lambda x, y: (x < y).cast(f32) + x, [f32, f32], f32, "tg_f32x"),
    "bool_load_where": (lambda m, x: m.where(x, x * c(f32, 3.0)), [b, f32], f32, "tg_where_tg_f32x"),
    "trunc_f32": (lambda x: x.trunc(), [f32], f32, "tg_trunc_tg_f32x"),
    "trunc_f64": (lambda x: x.trunc(), [f64], f64, "tg_trunc_tg_f64x"),
    "cast_f32_i32": (lambda x: x.cast(i32), [f32], i32, "__builtin_convertvector"),
    "cast_f32_u32": (lambda x: x.cast(u32), [f32], u32, "__builtin_convertvector"),
    "cast_f64_i32": (lambda x: x.cast(i32), [f64], i32, "__builtin_convertvector"),
    "cast_f32_i64": (lambda x: x.cast(i64), [f32], i64, "__builtin_convertvector"),
    "cast_i32_f32": (lambda k: k.cast(f32), [i32], f32, "__builtin_convertvector"),
    "cast_u32_f32": (lambda k: k.cast(f32), [u32], f32, "__builtin_convertvector"),
    "cast_u32_f64": (lambda k: k.cast(f64), [u32], f64, "__builtin_convertvector"),
    "cast_i64_f64": (lambda k: k.cast(f64), [i64], f64, "__builtin_convertvector"),
    "cast_u64_f32": (lambda k: k.cast(f32), [u64], f32, "__builtin_convertvector"),
    "cast_i32_i64": (lambda k: k.cast(i64), [i32], i64, "__builtin_convertvector"),
    "cast_i64_u32": (lambda k: k.cast(u32), [i64], u32, "__builtin_convertvector"),
    "cast_f64_f32": (lambda x: x.cast(f32), [f64], f32, "__builtin_convertvector"),
    "bitcast_f32_i32": (lambda x: x.bitcast(i32) ^ c(i32, -(2**31)), [f32], i32, "tg_i32x"),
    "bitcast_i64_f64": (lambda k: (k & c(i64, 0x7FFFFFFFFFFFFFFF)).bitcast(f64), [i64], f64, "tg_f64x"),
    "shifts_i32": (lambda k: (k << c(i32, 3)) ^ (k >> c(i32, 5)), [i32], i32, "tg_i32x"),
    "shifts_u32": (lambda k: (k >> c(u32, 7)) | (k << c(u32, 1)), [u32], u32, "tg_u32x"),
    "bitwise_i64": (lambda k, m: (k & m) ^ (k | c(i64, 12345)), [i64, i64], i64, "tg_i64x"),
}


@pytest.mark.parametrize("name", list(CASES))
def test_vector_ops_agree_with_scalar_c_and_python(name: str) -> None:
    fn, in_dts, out, marker = CASES[name]
    ast = kernel(fn, in_dts, out)
    ins = [values(dt, i) for i, dt in enumerate(in_dts)]
    ren = Device["CPU"].renderer
    if not ren.vector_bytes:
        pytest.skip("the host C compiler has no vector registers")
    cpu = ClangRenderer(ren.vector_bytes, 1, ren.has_fma)
    lanes = max(2, cpu.vector_bytes // max(dt.itemsize for dt in [*in_dts, out] if dt is not b))
    vector, src = run(ast, "CPU", cpu, lanes, out, ins)
    scalar, _ = run(ast, "CPU", cpu, 1, out, ins)
    oracle, _ = run(ast, "PYTHON", PythonRenderer(cpu.vector_bytes, 1, cpu.has_fma), lanes, out, ins)
    assert marker in src, f"the vectorised kernel did not take the vector path:\n{src}"
    np.testing.assert_array_equal(vector.view(np.uint8), scalar.view(np.uint8), err_msg="vector C != scalar C")
    # the PYTHON device's NaNs are Python's (the sign of a negated NaN may differ): equal as values there
    np.testing.assert_array_equal(vector, oracle, err_msg="vector C != PYTHON")


def test_vector_trunc_matches_numpy_at_the_edges() -> None:
    ast = kernel(lambda x: x.trunc(), [f32], f32)
    x = values(f32, 3)
    ren = Device["CPU"].renderer
    if not (lanes := ren.vector_bytes // f32.itemsize):
        pytest.skip("the host C compiler has no vector registers")
    got, src = run(ast, "CPU", ClangRenderer(ren.vector_bytes, 1, ren.has_fma), lanes, f32, [x])
    assert f"tg_trunc_tg_f32x{lanes}" in src  # the widest float32 vector of this CPU (16 lanes on AVX-512, 4 on NEON)
    np.testing.assert_array_equal(got.view(np.uint32), np.trunc(x).view(np.uint32))  # -0.0 and NaN bits included


def test_bool_vectors_never_touch_memory_as_masks() -> None:
    from tg.codegen.render.cvector import vector_name

    ren = ClangRenderer(64, 1, True)
    assert vector_name(dtypes.bool.vec(16)) == "tg_bx16"
    with pytest.raises(NotImplementedError, match="lane masks"):
        ren.render_vector_load("&data0[0]", dtypes.bool.vec(16))
