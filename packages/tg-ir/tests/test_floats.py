"""Bit-exact float conversions, checked against references built here from first principles (exact Fractions)."""

import functools
import itertools
import math
import struct
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tg.ir import (
    DType,
    bf16_bits_to_float,
    bitcast_scalar,
    dtypes,
    f32_to_bf16_bits,
    float_to_bf16,
    float_to_fp8,
    float_to_fp16,
    fp8_to_float,
    truncate,
)

# (exponent bits, mantissa bits, bias, kind): kind "fn" (e4m3: no inf, S.1111.111 is NaN), "ieee" (e5m2: inf and
# NaNs at the top exponent), "fnuz" (0x80 is the only NaN, no -0, no inf)
FORMATS = {
    dtypes.fp8e4m3: (4, 3, 7, "fn"),
    dtypes.fp8e5m2: (5, 2, 15, "ieee"),
    dtypes.fp8e4m3fnuz: (4, 3, 8, "fnuz"),
    dtypes.fp8e5m2fnuz: (5, 2, 16, "fnuz"),
}
FP8 = list(FORMATS)


def ref_decode(code: int, dt: DType) -> Fraction | str:
    """Decode from the bit fields: a Fraction, or "nan" / "inf" / "-inf" / "-0"."""
    e, m, bias, kind = FORMATS[dt]
    sign = -1 if code >> 7 else 1
    exp, mant = (code >> m) & ((1 << e) - 1), code & ((1 << m) - 1)
    if kind == "fnuz" and code == 0x80:
        return "nan"
    if kind == "ieee" and exp == (1 << e) - 1:
        return ("inf" if sign > 0 else "-inf") if mant == 0 else "nan"
    if kind == "fn" and exp == (1 << e) - 1 and mant == (1 << m) - 1:
        return "nan"
    if exp == 0 and mant == 0 and sign < 0:
        return "-0"
    frac = Fraction(mant, 1 << m) + (1 if exp else 0)
    return sign * frac * Fraction(2) ** ((exp if exp else 1) - bias)


@functools.cache
def finite_codes(dt: DType) -> dict[int, Fraction]:
    return {c: v for c in range(256) if isinstance(v := ref_decode(c, dt), Fraction)}


def ref_encode(x: float, dt: DType) -> int:
    """Nearest finite code by brute force over all codes; ties go to the even code; saturate beyond max."""
    codes = finite_codes(dt)
    fx = Fraction(x)
    best = min(codes, key=lambda c: (abs(codes[c] - fx), codes[c] * 0 + (c & 1), c))
    if fx == 0 or (codes[best] == 0 and FORMATS[dt][3] != "fnuz"):
        return 0x80 if math.copysign(1, x) < 0 and FORMATS[dt][3] != "fnuz" else 0
    return best


KNOWN = [
    (dtypes.fp8e4m3, 0x7E, 448.0), (dtypes.fp8e4m3, 0x08, 2.0**-6), (dtypes.fp8e4m3, 0x01, 2.0**-9),
    (dtypes.fp8e4m3, 0x38, 1.0), (dtypes.fp8e4m3, 0xC0, -2.0),
    (dtypes.fp8e5m2, 0x7B, 57344.0), (dtypes.fp8e5m2, 0x01, 2.0**-16), (dtypes.fp8e5m2, 0x3C, 1.0),
    (dtypes.fp8e4m3fnuz, 0x7F, 240.0), (dtypes.fp8e4m3fnuz, 0x01, 2.0**-10), (dtypes.fp8e4m3fnuz, 0x40, 1.0),
    (dtypes.fp8e5m2fnuz, 0x7F, 57344.0), (dtypes.fp8e5m2fnuz, 0x01, 2.0**-17), (dtypes.fp8e5m2fnuz, 0x40, 1.0),
]  # fmt: skip


@pytest.mark.parametrize("dt,code,val", KNOWN, ids=lambda v: repr(v))
def test_known_values(dt: DType, code: int, val: float) -> None:
    assert fp8_to_float(code, dt) == val
    assert float_to_fp8(val, dt) == code


@pytest.mark.parametrize("dt", FP8, ids=repr)
def test_decode_all_256_codes_and_reencode(dt: DType) -> None:
    for code in range(256):
        want = ref_decode(code, dt)
        got = fp8_to_float(code, dt)
        if want == "nan":
            assert math.isnan(got)
            assert math.isnan(fp8_to_float(float_to_fp8(got, dt), dt))  # NaN stays NaN (canonical code)
            continue
        if want == "-0":
            assert got == 0 and math.copysign(1, got) < 0
        elif want in ("inf", "-inf"):
            assert got == float(want)
        else:
            assert Fraction(got) == want, (hex(code), got, want)
        assert float_to_fp8(got, dt) == code, f"{dt} code {code:#x} -> {got} -> {float_to_fp8(got, dt):#x}"


@pytest.mark.parametrize("dt", FP8, ids=repr)
def test_rounding_midpoints_ties_to_even(dt: DType) -> None:
    codes = sorted(finite_codes(dt).items(), key=lambda kv: kv[1])
    for (c0, v0), (c1, v1) in itertools.pairwise(codes):
        if v0 < 0 or v1 <= v0:
            continue
        mid = (v0 + v1) / 2
        even = c0 if c0 % 2 == 0 else c1
        assert float_to_fp8(float(mid), dt) == even, (dt, float(mid))
        eps = (v1 - v0) / 64
        assert float_to_fp8(float(mid - eps), dt) == c0 and float_to_fp8(float(mid + eps), dt) == c1


@pytest.mark.parametrize("dt", FP8, ids=repr)
@settings(deadline=None, max_examples=60)
@given(x=st.floats(allow_nan=False, allow_infinity=False, min_value=-1e6, max_value=1e6))
def test_encode_matches_brute_force(dt: DType, x: float) -> None:
    assert float_to_fp8(x, dt) == ref_encode(x, dt)


def test_special_values_and_saturation() -> None:
    inf, nan = math.inf, math.nan
    assert float_to_fp8(inf, dtypes.fp8e5m2) == 0x7C and float_to_fp8(-inf, dtypes.fp8e5m2) == 0xFC
    assert float_to_fp8(inf, dtypes.fp8e4m3) == 0x7F and float_to_fp8(-inf, dtypes.fp8e4m3) == 0xFF
    assert float_to_fp8(inf, dtypes.fp8e4m3fnuz) == 0x80 and float_to_fp8(nan, dtypes.fp8e5m2fnuz) == 0x80
    assert float_to_fp8(1e9, dtypes.fp8e4m3) == 0x7E and float_to_fp8(-1e9, dtypes.fp8e5m2) == 0xFB
    assert float_to_fp8(460.0, dtypes.fp8e4m3) == 0x7E and float_to_fp8(1000.0, dtypes.fp8e4m3fnuz) == 0x7F
    assert float_to_fp8(-0.0, dtypes.fp8e4m3) == 0x80 and float_to_fp8(-0.0, dtypes.fp8e4m3fnuz) == 0x00
    assert float_to_fp8(-1e-30, dtypes.fp8e5m2fnuz) == 0x00
    with pytest.raises(TypeError):
        float_to_fp8(1.0, dtypes.float16)
    with pytest.raises(ValueError):
        fp8_to_float(256, dtypes.fp8e4m3)


def _f32_bits(x: float) -> int:
    return int(struct.unpack("<I", struct.pack("<f", x))[0])


def _bits_f32(b: int) -> float:
    return float(struct.unpack("<f", struct.pack("<I", b))[0])


def ref_bf16(bits32: int) -> int:
    """bfloat16 bits nearest to a float32 bit pattern, ties to even, by comparing both candidates exactly."""
    x = _bits_f32(bits32)
    if math.isnan(x):
        return ((bits32 >> 16) & 0x8000) | 0x7FC0
    lo = bits32 >> 16
    cands = [lo, lo + 1]

    def val(c: int) -> Fraction | None:
        v = _bits_f32((c & 0xFFFF) << 16)
        return None if math.isinf(v) or math.isnan(v) else Fraction(v)

    if math.isinf(x):
        return lo
    fx = Fraction(x)
    scored = []
    for c in cands:
        v = val(c)
        if v is None:  # rounding up into the infinity encoding (IEEE overflow)
            v = Fraction(2) ** 128 * (1 if c & 0x8000 == 0 else -1)
        scored.append((abs(v - fx), c & 1, c))
    return min(scored)[2] & 0xFFFF


@settings(deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_bf16_round_to_nearest_even(bits: int) -> None:
    assert f32_to_bf16_bits(_bits_f32(bits)) == ref_bf16(bits)


def test_bf16_roundtrip_all_codes() -> None:
    for code in range(0x10000):
        v = bf16_bits_to_float(code)
        if math.isnan(v):
            assert math.isnan(bf16_bits_to_float(f32_to_bf16_bits(v)))
        else:
            assert f32_to_bf16_bits(v) == code
    assert float_to_bf16(1.0 + 2**-8) == 1.0 and float_to_bf16(1.0 + 3 * 2**-8) == 1.0 + 2**-6
    assert float_to_bf16(3.4e38) == math.inf


def test_fp16_and_truncate() -> None:
    assert float_to_fp16(65504.0) == 65504.0 and float_to_fp16(1e6) == math.inf and float_to_fp16(-1e6) == -math.inf
    assert float_to_fp16(1.0 + 2**-11) == 1.0
    assert truncate[dtypes.int8](200) == -56 and truncate[dtypes.uint8](-1) == 255 and truncate[dtypes.bool](2) is True
    assert truncate[dtypes.float32](0.1) == _bits_f32(_f32_bits(0.1))
    assert truncate[dtypes.fp8e4m3](1000.0) == 448.0


def test_bitcast_scalar() -> None:
    assert bitcast_scalar(1.0, dtypes.float32, dtypes.uint32) == 0x3F800000
    assert bitcast_scalar(0x3F80, dtypes.uint16, dtypes.bfloat16) == 1.0
    assert bitcast_scalar(-1, dtypes.int8, dtypes.uint8) == 255
    assert bitcast_scalar(0x38, dtypes.uint8, dtypes.fp8e4m3) == 1.0
    with pytest.raises(ValueError, match="itemsize"):
        bitcast_scalar(1.0, dtypes.float32, dtypes.float16)


@settings(deadline=None)
@given(st.floats(allow_nan=False, width=64))
def test_fp16_fp32_match_numpy(x: float) -> None:
    np = pytest.importorskip("numpy")
    with np.errstate(over="ignore"):
        assert float_to_fp16(x) == float(np.float16(x))
        assert truncate[dtypes.float32](x) == float(np.float32(x))


def test_int_wrapping_matches_numpy() -> None:
    np = pytest.importorskip("numpy")
    from tg.ir import Ops, exec_alu

    for dt, npdt in [(dtypes.int8, np.int8), (dtypes.uint16, np.uint16), (dtypes.int32, np.int32)]:
        for a, b in [(100, 100), (-128, -1), (2**15, 3), (7, -9)]:
            want = (np.array([a]).astype(npdt) * np.array([b]).astype(npdt))[0]
            assert exec_alu(Ops.MUL, dt, (truncate[dt](a), truncate[dt](b))) == int(want)
