"""Hand-built kernel ASTs run on CPU (generated C) and PYTHON (the interpreter), checked against numpy.

Every kernel here runs on both devices: PYTHON is the correctness oracle, so CPU and PYTHON must agree with each
other (bit for bit where libm is not involved) and with numpy.
"""

from __future__ import annotations

import math
import struct

import numpy as np
import pytest

from tg.codegen.program import get_program
from tg.codegen.render.cstyle import ClangRenderer
from tg.codegen.render.python import PythonRenderer
from tg.codegen.render.renderer import Renderer
from tg.ir.dtype import DType, dtypes
from tg.ir.ops import AxisType, Ops
from tg.ir.uop import UOp
from tg.runtime.device import Buffer, Device
from tg.runtime.engine import CompiledRunner

DEVICES = ["CPU", "PYTHON"]
NP = {dtypes.float32: np.float32, dtypes.float64: np.float64, dtypes.float16: np.float16, dtypes.int32: np.int32,
      dtypes.int64: np.int64, dtypes.uint32: np.uint32, dtypes.uint64: np.uint64, dtypes.bool: np.bool_,
      dtypes.int8: np.int8, dtypes.uint8: np.uint8, dtypes.int16: np.int16, dtypes.uint16: np.uint16}  # fmt: skip


def run(ast: UOp, device: str, outs: list[tuple[DType, int]], ins: list[np.ndarray | tuple[DType, np.ndarray]],
        var_vals: dict[str, int] | None = None, renderer: Renderer | None = None) -> list[np.ndarray]:  # fmt: skip
    """Compile `ast` for `device` (or with `renderer`), run it on fresh buffers; returns the outputs as numpy."""
    prg = get_program(ast, renderer if renderer is not None else Device[device].renderer)
    runner = CompiledRunner(prg, device)
    # outputs start zeroed (allocators may hand back recycled memory)
    bufs = [Buffer(device, n, dt).ensure_allocated().copyin(bytes(n * dt.itemsize)) for dt, n in outs]
    for x in ins:
        dt, arr = x if isinstance(x, tuple) else (next(k for k, v in NP.items() if v == x.dtype.type), x)
        bufs.append(Buffer(device, arr.size, dt).ensure_allocated().copyin(memoryview(np.ascontiguousarray(arr).data)))
    runner([bufs[s] for s in prg.globals], var_vals or {})
    ret = []
    for b, (dt, _) in zip(bufs, outs, strict=False):
        raw = bytes(b.as_memoryview())
        if dt == dtypes.bfloat16:
            ret.append((np.frombuffer(raw, np.uint16).astype(np.uint32) << 16).view(np.float32))
        elif dt in dtypes.fp8s:
            from tg.ir.floats import fp8_to_float

            ret.append(np.array([fp8_to_float(c, dt) for c in raw], np.float32))
        else:
            ret.append(np.frombuffer(raw, NP[dt]).copy())
    return ret


def elementwise(n: int, dt_out: DType, fn, *in_dts: DType) -> UOp:
    """out[i] = fn(in1[i], in2[i], ...) over one loop of n."""
    r = UOp.range(n, 0)
    loads = [UOp.param(i + 1, dt, n).index(r).load() for i, dt in enumerate(in_dts)]
    return UOp.sink(UOp.param(0, dt_out, n).index(r).store(fn(*loads)).end(r))


def several_outputs(n: int, dt_out: DType, fns: list, *in_dts: DType) -> UOp:
    """out_k[i] = fns[k](in1[i], ...), one loop per output; the inputs follow the outputs in the PARAM slots."""
    stores = []
    for k, fn in enumerate(fns):
        r = UOp.range(n, k)
        loads = [UOp.param(len(fns) + i, dt, n).index(r).load() for i, dt in enumerate(in_dts)]
        stores.append(UOp.param(k, dt_out, n).index(r).store(fn(*loads)).end(r))
    return UOp.sink(*stores)


@pytest.mark.parametrize("device", DEVICES)
def test_elementwise_add_2d(device: str) -> None:
    f = dtypes.float32
    r0, r1 = UOp.range(4, 0), UOp.range(5, 1)
    idx = r0 * 5 + r1
    a, b = UOp.param(1, f, 20), UOp.param(2, f, 20)
    ast = UOp.sink(UOp.param(0, f, 20).index(idx).store(a.index(idx).load() + b.index(idx).load()).end(r0, r1))
    x, y = np.random.default_rng(0).standard_normal((2, 20)).astype(np.float32)
    (out,) = run(ast, device, [(f, 20)], [x, y])
    np.testing.assert_array_equal(out, x + y)


@pytest.mark.parametrize("device", DEVICES)
def test_gated_padded_load(device: str) -> None:
    # out[i] = a[i-2] for 2 <= i < 10, else 0 (a pad of 2 on each side); the gate keeps reads in bounds
    f = dtypes.float32
    r = UOp.range(12, 0)
    valid = (r < 10) & (UOp.const(dtypes.int32, 1) < r)
    val = UOp.param(1, f, 8).index(r + (-2), valid=valid).load()
    ast = UOp.sink(UOp.param(0, f, 12).index(r).store(val).end(r))
    x = np.arange(1, 9, dtype=np.float32)
    (out,) = run(ast, device, [(f, 12)], [x])
    np.testing.assert_array_equal(out, np.pad(x, (2, 2)))


@pytest.mark.parametrize("device", DEVICES)
def test_gated_store(device: str) -> None:
    # only even positions are written; the others keep their (zeroed) contents
    f = dtypes.float32
    r = UOp.range(6, 0)
    val = UOp.param(1, f, 6).index(r).load()
    ast = UOp.sink(UOp.param(0, f, 6).index(r, valid=(r % 2).eq(0)).store(val).end(r))
    x = np.arange(1, 7, dtype=np.float32)
    (out,) = run(ast, device, [(f, 6)], [x])
    np.testing.assert_array_equal(out, np.where(np.arange(6) % 2 == 0, x, 0))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op", [Ops.ADD, Ops.MAX, Ops.MUL])
def test_row_reductions(device: str, op: Ops) -> None:
    f = dtypes.float32
    ro, rr = UOp.range(3, 0), UOp.range(7, 1, AxisType.REDUCE)
    a = UOp.param(1, f, 21)
    ast = UOp.sink(UOp.param(0, f, 3).index(ro).store(a.index(ro * 7 + rr).load().reduce(rr, arg=op)).end(ro))
    x = np.random.default_rng(1).uniform(-2, 1, 21).astype(np.float32)
    (out,) = run(ast, device, [(f, 3)], [x])
    expected = {Ops.ADD: np.sum, Ops.MAX: np.max, Ops.MUL: np.prod}[op](x.reshape(3, 7), axis=1)
    np.testing.assert_allclose(out, expected, rtol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
def test_full_reduction_to_scalar_and_int_max(device: str) -> None:
    # no loop around the store; MAX of ints starts from the dtype minimum
    i32 = dtypes.int32
    rr = UOp.range(10, 0, AxisType.REDUCE)
    a = UOp.param(1, i32, 10)
    ast = UOp.sink(UOp.param(0, i32, 1).index(UOp.const(i32, 0)).store(a.index(rr).load().reduce(rr, arg=Ops.MAX)))
    x = -np.arange(100, 110, dtype=np.int32)
    (out,) = run(ast, device, [(i32, 1)], [x])
    assert out[0] == -100


@pytest.mark.parametrize("device", DEVICES)
def test_reduction_feeding_reduction(device: str) -> None:
    # softmax denominator: sum(exp2(x - max(x))) per row; the second reduce uses the first one's result
    f = dtypes.float32
    ro, r1, r2 = UOp.range(2, 0), UOp.range(6, 1, AxisType.REDUCE), UOp.range(6, 2, AxisType.REDUCE)
    a = UOp.param(1, f, 12)
    mx = a.index(ro * 6 + r1).load().reduce(r1, arg=Ops.MAX)
    s = (a.index(ro * 6 + r2).load() - mx).exp2().reduce(r2, arg=Ops.ADD)
    ast = UOp.sink(UOp.param(0, f, 2).index(ro).store(s).end(ro))
    x = np.random.default_rng(2).standard_normal(12).astype(np.float32)
    (out,) = run(ast, device, [(f, 2)], [x])
    xr = x.reshape(2, 6)
    np.testing.assert_allclose(out, np.exp2(xr - xr.max(1, keepdims=True)).sum(1), rtol=1e-5)


@pytest.mark.parametrize("device", DEVICES)
def test_one_range_reused_by_dependent_reductions(device: str) -> None:
    # both REDUCEs loop over the same RANGE uop and the second needs the first: lowering gives it its own loop
    f = dtypes.float32
    rr = UOp.range(5, 0, AxisType.REDUCE)
    a = UOp.param(1, f, 5).index(rr).load()
    total = a.reduce(rr, arg=Ops.ADD)
    spread = (a - total * UOp.const(f, 0.2)).maximum(UOp.const(f, 0.0)).reduce(rr, arg=Ops.ADD)
    ast = UOp.sink(UOp.param(0, f, 1).index(UOp.const(dtypes.int32, 0)).store(spread))
    x = np.array([1, 2, 3, 4, 10], dtype=np.float32)
    (out,) = run(ast, device, [(f, 1)], [x])
    np.testing.assert_allclose(out[0], np.maximum(x - x.mean(), 0).sum(), rtol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
def test_one_range_reused_in_different_loop_nests(device: str) -> None:
    # sum(x) does not depend on the output loop, sum(y[i, :]) does: one shared RANGE must become two loops
    f = dtypes.float32
    ro, rr = UOp.range(3, 0), UOp.range(4, 1, AxisType.REDUCE)
    total = UOp.param(1, f, 4).index(rr).load().reduce(rr)
    row = UOp.param(2, f, 12).index(ro * 4 + rr).load().reduce(rr)
    ast = UOp.sink(UOp.param(0, f, 3).index(ro).store(total + row).end(ro))
    x, y = np.arange(4, dtype=np.float32), np.arange(12, dtype=np.float32)
    (out,) = run(ast, device, [(f, 3)], [x, y])
    np.testing.assert_array_equal(out, x.sum() + y.reshape(3, 4).sum(1))


@pytest.mark.parametrize("device", DEVICES)
def test_symbolic_range_with_variable(device: str) -> None:
    f = dtypes.float32
    n = UOp.variable("n", 1, 16)
    r = UOp.range(n, 0)
    ast = UOp.sink(UOp.param(0, f, 16).index(r).store(UOp.param(1, f, 16).index(r).load() * UOp.const(f, 3.0)).end(r))
    x = np.arange(16, dtype=np.float32)
    (out,) = run(ast, device, [(f, 16)], [x], var_vals={"n": 5})
    np.testing.assert_array_equal(out, np.concatenate([x[:5] * 3, np.zeros(11, np.float32)]))


CASTS = [
    (dtypes.float32, dtypes.int32, np.array([1.9, -1.9, 0.5, -0.5, 1e6, -7.0], np.float32)),
    (dtypes.float32, dtypes.float16, np.array([1.0, 1 / 3, 65504, 70000, -1e-8, 3e-5], np.float32)),
    (dtypes.float16, dtypes.float32, np.array([1.0, 1 / 3, -2.5, 65504, 6e-8, np.inf], np.float16)),
    (dtypes.int32, dtypes.bool, np.array([0, 1, -1, 7, 0, 2**31 - 1], np.int32)),
    (dtypes.bool, dtypes.float32, np.array([True, False, True], np.bool_)),
    (dtypes.int64, dtypes.int32, np.array([2**40 + 5, -(2**33) - 1, 3], np.int64)),
    (dtypes.int32, dtypes.int64, np.array([-(2**31), 2**31 - 1, -1], np.int32)),
    (dtypes.float32, dtypes.int64, np.array([3e10, -3e10, 0.99], np.float32)),
    (dtypes.float64, dtypes.float32, np.array([0.1, 1e300, -1e-300, 1 / 3], np.float64)),
    (dtypes.int32, dtypes.float16, np.array([1, 2049, -70000, 65519], np.int32)),
    (dtypes.float16, dtypes.int32, np.array([1.5, -2.5, 1000.0], np.float16)),
    (dtypes.uint32, dtypes.float32, np.array([2**32 - 1, 16777217, 3], np.uint32)),
    (dtypes.int32, dtypes.uint8, np.array([300, -1, 255, 256], np.int32)),
]


@pytest.mark.parametrize("device", DEVICES)
def test_casts(device: str) -> None:
    # one kernel, one output per cast (compiling is the slow part on CPU)
    n = max(len(x) for *_, x in CASTS)
    xs = [np.resize(x, n) for *_, x in CASTS]
    stores = []
    for k, (src, dst, _) in enumerate(CASTS):
        r = UOp.range(n, k)
        stores.append(UOp.param(k, dst, n).index(r).store(UOp.param(len(CASTS) + k, src, n).index(r).load().cast(dst)))
        stores[-1] = stores[-1].end(r)
    outs = run(UOp.sink(*stores), device, [(dst, n) for _, dst, _ in CASTS], [(src, x) for (src, _, _), x in
                                                                              zip(CASTS, xs, strict=True)])  # fmt: skip
    for (src, dst, _), x, out in zip(CASTS, xs, outs, strict=True):
        with np.errstate(over="ignore", invalid="ignore"):
            np.testing.assert_array_equal(out, x.astype(NP[dst]), err_msg=f"cast {src} -> {dst}")


@pytest.mark.parametrize("device", DEVICES)
def test_bfloat16_round_trip(device: str) -> None:
    bf = dtypes.bfloat16
    x = np.array([1.0, 1 / 3, -3.1416, 1e30, 65504.0, 2.0**-130], np.float32)
    (out,) = run(elementwise(6, bf, lambda v: v.cast(bf), dtypes.float32), device, [(bf, 6)], [x])
    bits = x.view(np.uint32).astype(np.uint64)
    expected = ((((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16).astype(np.uint32)).view(np.float32)
    np.testing.assert_array_equal(out, expected)


@pytest.mark.parametrize("device", DEVICES)
def test_half_arithmetic_rounds_every_op(device: str) -> None:
    h = dtypes.float16
    x = np.array([1.0, 2048.0, 0.1, 65000.0], np.float16)
    y = np.array([2.0**-11, 1.0, 0.2, 1000.0], np.float16)
    (out,) = run(elementwise(4, h, lambda a, b: a * b + a, h, h), device, [(h, 4)], [x, y])
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(out, (x * y) + x)


@pytest.mark.parametrize("device", DEVICES)
def test_narrow_ints_wrap_every_op(device: str) -> None:
    u8, i8 = dtypes.uint8, dtypes.int8
    x = np.array([200, 255, 17, 128], np.uint8)
    (out,) = run(elementwise(4, u8, lambda a: (a + a) // UOp.const(u8, 3), u8), device, [(u8, 4)], [x])
    np.testing.assert_array_equal(out, (x + x) // 3)
    y = np.array([100, -128, 127, -3], np.int8)
    (out,) = run(elementwise(4, i8, lambda a: (a * a) // UOp.const(i8, 2), i8), device, [(i8, 4)], [y])
    np.testing.assert_array_equal(out, ((y * y).astype(np.int32) / 2).astype(np.int32).astype(np.int8))


def c_div(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return q if (a < 0) == (b < 0) else -q


@pytest.mark.parametrize("device", DEVICES)
def test_idiv_mod_truncate_toward_zero(device: str) -> None:
    i32 = dtypes.int32
    a = np.array([7, -7, 7, -7, 0, 13, -13, 2**31 - 1], np.int32)
    b = np.array([2, 2, -2, -2, 5, 4, 4, -3], np.int32)
    ast = several_outputs(8, i32, [lambda x, y: x // y, lambda x, y: x % y], i32, i32)
    div, mod = run(ast, device, [(i32, 8), (i32, 8)], [a, b])
    expected_div = [c_div(int(x), int(y)) for x, y in zip(a, b, strict=True)]
    np.testing.assert_array_equal(div, expected_div)
    np.testing.assert_array_equal(mod, [int(x) - int(y) * q for x, y, q in zip(a, b, expected_div, strict=True)])


def threefry_reference(x: int, key: int) -> int:
    """Threefry-2x32 with 20 rounds (5 x 4 rotations, a key injection after every 4), from the algorithm."""
    mask = 0xFFFFFFFF
    words = [x & mask, x >> 32]
    k = [key & mask, key >> 32]
    k.append(k[0] ^ k[1] ^ 0x1BD11BDA)
    rot = [[13, 15, 26, 6], [17, 29, 16, 24]]
    words = [(words[0] + k[0]) & mask, (words[1] + k[1]) & mask]
    for block in range(5):
        for r in rot[block % 2]:
            words[0] = (words[0] + words[1]) & mask
            words[1] = (((words[1] << r) | (words[1] >> (32 - r))) & mask) ^ words[0]
        words[0] = (words[0] + k[(block + 1) % 3]) & mask
        words[1] = (words[1] + k[(block + 2) % 3] + block + 1) & mask
    return (words[1] << 32) | words[0]


@pytest.mark.parametrize("device", DEVICES)
def test_threefry_matches_reference(device: str) -> None:
    u64 = dtypes.uint64
    x = np.array([0, 1, 2**32, 2**64 - 1, 0x123456789ABCDEF0], np.uint64)
    key = np.array([0, 0, 7, 2**63 + 5, 0xDEADBEEF00C0FFEE], np.uint64)
    (out,) = run(elementwise(5, u64, lambda a, b: a.alu(Ops.THREEFRY, b), u64, u64), device, [(u64, 5)], [x, key])
    assert [int(v) for v in out] == [threefry_reference(int(a), int(k)) for a, k in zip(x, key, strict=True)]


TRANSCENDENTALS = [
    ("exp2", lambda v: v.exp2(), np.exp2, np.array([0, 1.5, -3.25, 10, 127.9, -149, 200, -200, np.nan], np.float32)),
    ("log2", lambda v: v.log2(), np.log2, np.array([1, 2, 0.3, 1e-40, 3e38, 0, -1, np.inf, np.nan], np.float32)),
    ("sin", lambda v: v.sin(), np.sin, np.array([0, 0.5, -1, 3.14159, 100, -1000.5, 4000, np.inf], np.float32)),
    ("sqrt", lambda v: v.sqrt(), np.sqrt, np.array([0, 1, 2, 1e-40, 3e38, 0.25, -1, np.inf], np.float32)),
]


class PolyClang(ClangRenderer):
    """C without libm transcendentals: lowering uses the polynomial decompositions."""

    math_funcs = {k: v for k, v in ClangRenderer.math_funcs.items() if k not in (Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT)}


class PolyPython(PythonRenderer):
    """The PYTHON renderer without transcendentals (polynomials are interpreted instead)."""

    supported_ops = PythonRenderer.supported_ops - {Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("poly", [False, True], ids=["native", "polynomial"])
@pytest.mark.parametrize(("name", "fn", "ref", "x"), TRANSCENDENTALS, ids=[t[0] for t in TRANSCENDENTALS])
def test_transcendentals_float32(device: str, poly: bool, name: str, fn, ref, x: np.ndarray) -> None:
    f = dtypes.float32
    renderer = (PolyClang() if device == "CPU" else PolyPython()) if poly else None
    (out,) = run(elementwise(len(x), f, fn, f), device, [(f, len(x))], [x], renderer=renderer)
    with np.errstate(all="ignore"):
        expected = ref(x.astype(np.float64)).astype(np.float32)
    np.testing.assert_allclose(out, expected, rtol=3e-6, atol=1e-37 if name != "sin" else 2e-6)


@pytest.mark.parametrize("device", DEVICES)
def test_float64_polynomials(device: str) -> None:
    d = dtypes.float64
    x = np.array([0.5, 3.0, 1e-310, 123.456, 1e300], np.float64)
    renderer = PolyClang() if device == "CPU" else PolyPython()
    fns = [lambda v: v.log2(), lambda v: v.sqrt(), lambda v: (v * UOp.const(d, 1e-300)).exp2(),
           lambda v: (v * UOp.const(d, 1e-297)).sin()]  # fmt: skip
    outs = run(several_outputs(5, d, fns, d), device, [(d, 5)] * 4, [x], renderer=renderer)
    np.testing.assert_allclose(outs[0], np.log2(x), rtol=1e-14)
    np.testing.assert_allclose(outs[1], np.sqrt(x), rtol=1e-15)
    np.testing.assert_allclose(outs[2], np.exp2(x * 1e-300), rtol=1e-14)
    np.testing.assert_allclose(outs[3], np.sin(x * 1e-297), rtol=1e-14, atol=1e-300)


class NoSugarClang(ClangRenderer):
    """C with a minimal op set: SUB, FDIV, CMPEQ, MAX, NEG, TRUNC must be decomposed."""

    code_for_op = {k: v for k, v in ClangRenderer.code_for_op.items()
                   if k not in (Ops.SUB, Ops.FDIV, Ops.CMPEQ, Ops.MAX, Ops.NEG)}  # fmt: skip
    math_funcs = {k: v for k, v in ClangRenderer.math_funcs.items() if k is not Ops.TRUNC}


@pytest.mark.parametrize("device", DEVICES)
def test_decomposed_ops_agree(device: str) -> None:
    f = dtypes.float32
    x = np.array([1.5, -2.25, 3.0, -0.0, 7.75, -1e9], np.float32)
    y = np.array([0.5, 4.0, 3.0, 2.0, -1.25, 3.0], np.float32)

    def fn(a: UOp, b: UOp) -> UOp:
        mixed = a.alu(Ops.SUB, b) + a.alu(Ops.FDIV, b) + a.maximum(b) + a.alu(Ops.NEG) + a.alu(Ops.TRUNC)
        return a.eq(b).where(mixed, -mixed)

    renderer = NoSugarClang() if device == "CPU" else None
    (out,) = run(elementwise(6, f, fn, f, f), device, [(f, 6)], [x, y], renderer=renderer)
    mixed = (x - y) + (x / y) + np.maximum(x, y) + (-x) + np.trunc(x)
    np.testing.assert_allclose(out, np.where(x == y, mixed, -mixed), rtol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
def test_bitcast_and_where(device: str) -> None:
    f, u32 = dtypes.float32, dtypes.uint32
    x = np.array([1.0, -2.0, np.inf, 0.0], np.float32)
    (out,) = run(elementwise(4, u32, lambda a: (a < UOp.const(f, 0.0)).where(UOp.const(u32, 7), a.bitcast(u32)), f),
                 device, [(u32, 4)], [x])  # fmt: skip
    np.testing.assert_array_equal(out, np.where(x < 0, 7, x.view(np.uint32)))


def _c_contracts_fma() -> bool:
    from tg.runtime.c_compiler import CCompiler

    return "-ffp-contract=off" not in CCompiler().flags


@pytest.mark.skipif(_c_contracts_fma(), reason="the C compiler may fuse a*b+c into an FMA (needs -ffp-contract=off)")
def test_cpu_and_python_agree_bit_for_bit() -> None:
    f = dtypes.float32
    x = np.random.default_rng(3).standard_normal(64).astype(np.float32)
    y = np.random.default_rng(4).standard_normal(64).astype(np.float32)

    def fn(a: UOp, b: UOp) -> UOp:
        return (a * b + a / (b * b + UOp.const(f, 1.0))).maximum(a - b) * UOp.const(f, 0.1)

    cpu, py = (run(elementwise(64, f, fn, f, f), d, [(f, 64)], [x, y])[0] for d in DEVICES)
    assert cpu.tobytes() == py.tobytes()


def test_python_device_checks_bounds() -> None:
    f = dtypes.float32
    r = UOp.range(8, 0)
    ast = UOp.sink(UOp.param(0, f, 8).index(r).store(UOp.param(1, f, 4).index(r).load()).end(r))
    with pytest.raises(IndexError, match="out of bounds"):
        run(ast, "PYTHON", [(f, 8)], [np.zeros(4, np.float32)])


def test_python_program_rejects_bad_source() -> None:
    from tg.runtime.backends.python import PythonProgram

    with pytest.raises(ValueError, match="not a PythonRenderer program"):
        PythonProgram("k", b"definitely not a program")


def test_python_device_buffers_round_trip() -> None:
    buf = Buffer("PYTHON", 3, dtypes.float32).ensure_allocated()
    buf.copyin(memoryview(struct.pack("<3f", 1.0, 2.0, math.pi)))
    assert struct.unpack("<3f", buf.as_memoryview()) == pytest.approx((1.0, 2.0, math.pi))
    view = buf.view(2, dtypes.float32, 4)
    assert struct.unpack("<2f", view.as_memoryview()) == pytest.approx((2.0, math.pi))


ALU_OPS = (Ops.ADD, Ops.MUL, Ops.SUB, Ops.MAX, Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ)
INT_OPS = (Ops.XOR, Ops.OR, Ops.AND, Ops.IDIV, Ops.MOD, Ops.SHR)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dt", [dtypes.int8, dtypes.uint8, dtypes.uint32, dtypes.int64, dtypes.float32], ids=repr)
def test_alu_matches_constant_folding(device: str, dt: DType) -> None:
    from tg.ir.alu import exec_alu

    if dtypes.is_float(dt):
        ops, xs, ys = ALU_OPS, [1.5, -2.0, 1e30, np.nan, 0.1, -0.0], [3.25, -2.0, 1e30, 1.0, 0.2, 0.0]
    else:
        lo, hi = int(dt.min), int(dt.max)
        ops = ALU_OPS + INT_OPS if dt != dtypes.int64 else (Ops.XOR, Ops.IDIV, Ops.MOD, Ops.SHR, Ops.CMPLT)
        xs, ys = [lo, hi, 7, -7 if lo < 0 else 9, 100, hi], [3, hi, 2, 2, 7, -1 if lo < 0 else 1]
    x, y = np.array(xs, NP[dt]), np.array(ys, NP[dt])
    # every op gets its own output; comparisons are stored as bool
    out_dts = [dtypes.bool if op in (Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ) else dt for op in ops]
    stores = []
    for k, op in enumerate(ops):
        r = UOp.range(6, k)
        a, b = (UOp.param(len(ops) + i, dt, 6).index(r).load() for i in range(2))
        stores.append(UOp.param(k, out_dts[k], 6).index(r).store(a.alu(op, b if op is not Ops.SHR else b & 3)).end(r))
    outs = run(UOp.sink(*stores), device, [(odt, 6) for odt in out_dts], [x, y])
    for op, odt, out in zip(ops, out_dts, outs, strict=True):
        ys_op = [b & 3 for b in y.tolist()] if op is Ops.SHR else y.tolist()
        expected = [exec_alu(op, odt, (a, b)) for a, b in zip(x.tolist(), ys_op, strict=True)]
        np.testing.assert_array_equal(out, np.array(expected, NP[odt]), err_msg=f"{op} {dt}")


@pytest.mark.parametrize("device", DEVICES)
def test_float_to_int_casts_wrap_and_trunc_keeps_sign(device: str) -> None:
    # C leaves out-of-range float -> int undefined; the renderer goes through long long so it wraps like the IR
    f, u8, i8 = dtypes.float32, dtypes.uint8, dtypes.int8
    x = np.array([-1.0, 300.7, 255.9, -129.5, -0.5, 1e3], np.float32)
    stores = [UOp.param(k, dt, 6).index(r).store(fn(UOp.param(3, f, 6).index(r).load())).end(r)
              for k, dt, fn, r in [(0, u8, lambda v: v.cast(u8), UOp.range(6, 0)),
                                   (1, i8, lambda v: v.cast(i8), UOp.range(6, 1)),
                                   (2, f, lambda v: v.trunc(), UOp.range(6, 2))]]  # fmt: skip
    to_u8, to_i8, trunc = run(UOp.sink(*stores), device, [(u8, 6), (i8, 6), (f, 6)], [x])
    wrapped = [int(v) for v in np.trunc(x.astype(np.float64))]
    assert to_u8.tolist() == [v % 256 for v in wrapped]
    assert to_i8.tolist() == [(v + 128) % 256 - 128 for v in wrapped]
    assert trunc.tobytes() == np.trunc(x).tobytes()  # trunc(-0.5) is -0.0


@pytest.mark.parametrize("device", DEVICES)
def test_decomposed_max_and_trunc_follow_ieee(device: str) -> None:
    f = dtypes.float32
    x = np.array([np.nan, 1.0, -0.5, 2.0], np.float32)
    y = np.array([1.0, np.nan, 3.0, -1.0], np.float32)
    renderer = NoSugarClang() if device == "CPU" else None
    outs = run(several_outputs(4, f, [lambda a, b: a.maximum(b), lambda a, b: a.alu(Ops.TRUNC)], f, f), device,
               [(f, 4), (f, 4)], [x, y], renderer=renderer)  # fmt: skip
    np.testing.assert_array_equal(outs[0], np.maximum(x, y))  # NaN on either side propagates
    assert outs[1].tobytes() == np.trunc(x).tobytes()


def test_bitcast_round_trip_keeps_nan_payloads() -> None:
    i16, h = dtypes.int16, dtypes.float16
    x = np.array([-9, -79, 0x7C01, 1], np.int16)  # NaN patterns when read as float16
    (out,) = run(elementwise(4, i16, lambda v: v.bitcast(h).bitcast(i16), i16), "PYTHON", [(i16, 4)], [x])
    np.testing.assert_array_equal(out, x)


def random_expression(rng: np.random.Generator, leaves: list[UOp], dt: DType, depth: int) -> UOp:
    """A random elementwise expression of dtype `dt` over `leaves` (no transcendentals: libm may differ)."""
    same = [v for v in leaves if v.dtype == dt]
    if depth == 0 or rng.random() < 0.2:
        return same[int(rng.integers(len(same)))] if same else leaves[int(rng.integers(len(leaves)))].cast(dt)
    sub = lambda d=dt: random_expression(rng, leaves, d, depth - 1)
    r = rng.random()
    if r < 0.15:
        return sub(RANDOM_DTYPES[int(rng.integers(len(RANDOM_DTYPES)))]).cast(dt)
    if r < 0.25:
        return sub(dtypes.bool).where(sub(), sub())
    if r < 0.35 and dt == dtypes.bool:
        other = RANDOM_DTYPES[int(rng.integers(len(RANDOM_DTYPES)))]
        return sub(other).alu([Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ][int(rng.integers(3))], sub(other))
    if r < 0.45 and dtypes.is_int(dt):
        divisor = (sub() & UOp.const(dt, 7)) + UOp.const(dt, 1)
        return sub().alu([Ops.IDIV, Ops.MOD][int(rng.integers(2))], divisor)
    if r < 0.5 and dtypes.is_float(dt):
        return sub().alu([Ops.NEG, Ops.SQRT, Ops.RECIPROCAL, Ops.TRUNC][int(rng.integers(4))])
    ops = [Ops.ADD, Ops.MUL, Ops.MAX] + ([Ops.SUB] if dt != dtypes.bool else [])
    ops += [Ops.XOR, Ops.AND, Ops.OR] if not dtypes.is_float(dt) else [Ops.FDIV]
    return sub().alu(ops[int(rng.integers(len(ops)))], sub())


RANDOM_DTYPES = [dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint32, dtypes.int64, dtypes.float16, dtypes.fp8e4m3,
                 dtypes.bfloat16, dtypes.float32, dtypes.float64, dtypes.bool]  # fmt: skip


@pytest.mark.parametrize("seed", range(3))
def test_random_kernels_cpu_matches_python(seed: int) -> None:
    # differential check: random expressions over every dtype give the same bits on CPU and PYTHON
    rng = np.random.default_rng(seed)
    in_dts = [dtypes.float32, dtypes.int8, dtypes.uint8, dtypes.float16, dtypes.int16]
    ins = [rng.uniform(-3, 3, 16).astype(np.float32), rng.integers(-128, 128, 16).astype(np.int8),
           rng.integers(0, 256, 16).astype(np.uint8), rng.uniform(-50, 50, 16).astype(np.float16),
           rng.integers(-300, 300, 16).astype(np.int16)]  # fmt: skip
    out_dts = [RANDOM_DTYPES[int(rng.integers(len(RANDOM_DTYPES)))] for _ in range(4)]
    stores = []
    for k, odt in enumerate(out_dts):
        r = UOp.range(16, k)
        leaves = [UOp.param(len(out_dts) + i, dt, 16).index(r).load() for i, dt in enumerate(in_dts)]
        stores.append(UOp.param(k, odt, 16).index(r).store(random_expression(rng, leaves, odt, 4)).end(r))
    results = [run(UOp.sink(*stores), d, [(dt, 16) for dt in out_dts], list(zip(in_dts, ins, strict=True)))
               for d in DEVICES]  # fmt: skip
    for dt, cpu, py in zip(out_dts, *results, strict=True):
        same = cpu.tobytes() == py.tobytes() or (dtypes.is_float(dt) and np.array_equal(cpu, py, equal_nan=True))
        assert same, f"{dt}: CPU {cpu} vs PYTHON {py}"


@pytest.mark.parametrize("device", DEVICES)
def test_long_chain_of_ops(device: str) -> None:
    # long programs: every instruction gets its own helper names in the PYTHON translation
    f = dtypes.float32
    x = np.linspace(-3, 3, 8, dtype=np.float32)

    def chain(v: UOp) -> UOp:
        for k in range(40):
            v = v / UOp.const(f, 1.25) if k % 2 else v.maximum(UOp.const(f, -1.0)) + UOp.const(f, 0.5)
        return v

    (out,) = run(elementwise(8, f, chain, f), device, [(f, 8)], [x])
    expected = x.copy()
    for k in range(40):
        expected = expected / np.float32(1.25) if k % 2 else np.maximum(expected, np.float32(-1.0)) + np.float32(0.5)
    np.testing.assert_array_equal(out, expected)


@pytest.mark.parametrize("device", DEVICES)
def test_fp8_round_trips_match_tg_ir(device: str) -> None:
    from tg.ir.floats import float_to_fp8, fp8_to_float

    f, u8 = dtypes.float32, dtypes.uint8
    special = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-30, -1e-30, 448.0, 449.0, 464.0, 500.0, 57344.0, 61440.0]
    special += [1e6, 240.0, 0.5, 0.0625, 2.0**-9, 2.0**-10, 1.5 * 2.0**-10, 2.0**-16, 3 * 2.0**-18, -(2.0**-17)]
    special += [1.125, 1.0625]
    x = np.concatenate([np.array(special, np.float32),
                        np.random.default_rng(5).standard_normal(103).astype(np.float32) * 8])  # fmt: skip
    n = len(x)
    stores = []
    for k, fp8 in enumerate(dtypes.fp8s):
        r = UOp.range(n, k)
        code = UOp.param(4, f, n).index(r).load().cast(fp8).bitcast(u8)
        stores.append(UOp.param(k, u8, n).index(r).store(code).end(r))
    codes = run(UOp.sink(*stores), device, [(u8, n)] * 4, [x])
    for fp8, got in zip(dtypes.fp8s, codes, strict=True):
        assert got.tolist() == [float_to_fp8(float(v), fp8) for v in x], fp8
    # and back: every code decodes like tg.ir decodes it (NaN as NaN)
    allcodes = np.arange(256, dtype=np.uint8)
    stores = []
    for k, fp8 in enumerate(dtypes.fp8s):
        r = UOp.range(256, k)
        stores.append(UOp.param(k, f, 256).index(r).store(UOp.param(4, u8, 256).index(r).load().bitcast(fp8).cast(f))
                      .end(r))  # fmt: skip
    values = run(UOp.sink(*stores), device, [(f, 256)] * 4, [allcodes])
    for fp8, got in zip(dtypes.fp8s, values, strict=True):
        expected = np.array([fp8_to_float(c, fp8) for c in range(256)], np.float32)
        np.testing.assert_array_equal(got, expected, err_msg=str(fp8))
