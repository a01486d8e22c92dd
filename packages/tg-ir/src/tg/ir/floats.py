"""Bit-exact conversions between Python floats and the narrow float formats (float16, bfloat16, fp8).

Rounding is round-to-nearest-even everywhere. Overflow rules (documented choices):
- float16, bfloat16: IEEE behaviour, values that round past the largest finite number become +-inf.
- fp8 (all four formats): saturating, like tinygrad and CUDA's `__NV_SATFINITE`: finite values beyond the largest
  finite fp8 value become that value (448 for e4m3, 57344 for e5m2, 240 for e4m3fnuz, 57344 for e5m2fnuz).
- fp8 infinities: e5m2 keeps +-inf; e4m3 (no inf) gives NaN (0x7f / 0xff); the fnuz formats give their only NaN (0x80).
- NaN: e4m3 -> 0x7f|sign, e5m2 -> 0x7f|sign, fnuz -> 0x80; float16/bfloat16 -> a quiet NaN with the sign kept.
- fnuz formats have no negative zero: -0.0 and negative values that round to zero encode as 0x00.
"""

from __future__ import annotations

import ctypes
import math
import struct
from collections.abc import Callable
from typing import Any

from tg.ir.dtype import ConstType, DType, dtypes

# (exponent bits, mantissa bits, bias, has_inf_and_ieee_nan, fnuz)
_FP8_FORMATS: dict[DType, tuple[int, int, int, bool, bool]] = {
    dtypes.fp8e4m3: (4, 3, 7, False, False),
    dtypes.fp8e5m2: (5, 2, 15, True, False),
    dtypes.fp8e4m3fnuz: (4, 3, 8, False, True),
    dtypes.fp8e5m2fnuz: (5, 2, 16, False, True),
}


def _check_fp8(dtype: DType) -> tuple[int, int, int, bool, bool]:
    if dtype not in _FP8_FORMATS:
        raise TypeError(f"{dtype} is not an fp8 dtype (expected one of {list(_FP8_FORMATS)})")
    return _FP8_FORMATS[dtype]


def fp8_max(dtype: DType) -> float:
    """The largest finite value of an fp8 dtype."""
    ebits, mbits, bias, ieee, fnuz = _check_fp8(dtype)
    emax = (1 << ebits) - 1 - (1 if ieee else 0)
    mmax = (1 << mbits) - 1 - (0 if (ieee or fnuz) else 1)  # e4m3fn reserves S.1111.111 for NaN
    return (1 + mmax / (1 << mbits)) * 2.0 ** (emax - bias)


def fp8_to_float(code: int, dtype: DType) -> float:
    """Decode an 8-bit code of fp8 `dtype` to a Python float."""
    ebits, mbits, bias, ieee, fnuz = _check_fp8(dtype)
    if not 0 <= code <= 0xFF:
        raise ValueError(f"fp8 code must be in [0, 255], got {code}")
    sign = -1.0 if code & 0x80 else 1.0
    exp = (code >> mbits) & ((1 << ebits) - 1)
    mant = code & ((1 << mbits) - 1)
    if fnuz and code == 0x80:
        return math.nan
    if ieee and exp == (1 << ebits) - 1:
        return sign * math.inf if mant == 0 else math.copysign(math.nan, sign)
    if not ieee and not fnuz and exp == (1 << ebits) - 1 and mant == (1 << mbits) - 1:
        return math.copysign(math.nan, sign)
    if exp == 0:
        return sign * math.ldexp(mant, 1 - bias - mbits)
    return sign * math.ldexp((1 << mbits) | mant, exp - bias - mbits)


def float_to_fp8(x: float, dtype: DType) -> int:
    """Encode a Python float as the 8-bit code of fp8 `dtype` (round to nearest even, saturating; see module doc)."""
    _, mbits, bias, ieee, fnuz = _check_fp8(dtype)
    x = float(x)
    neg = math.copysign(1.0, x) < 0
    sign = 0x80 if neg else 0
    if math.isnan(x):
        return 0x80 if fnuz else (sign | 0x7F)
    if math.isinf(x):
        if fnuz:
            return 0x80
        return sign | (0x7C if ieee else 0x7F)
    ax = abs(x)
    max_code = 0x7F if fnuz else (0x7B if ieee else 0x7E)
    if ax == 0.0:
        return 0 if fnuz else sign
    # exponent of the leading bit, clamped to the subnormal range
    e = max(math.frexp(ax)[1] - 1, 1 - bias)
    n = round(math.ldexp(ax, mbits - e))  # exact scaling, then round-half-even on the integer significand
    if n >= (2 << mbits):  # rounding carried into the next binade
        n >>= 1
        e += 1
    if n == 0:
        return 0 if fnuz else sign
    if n < (1 << mbits):  # subnormal
        code = n
    else:
        code = ((e + bias) << mbits) | (n - (1 << mbits))
    if code > max_code:
        code = max_code
    return sign | code


def float_to_fp16(x: float) -> float:
    """Round a Python float to the nearest float16 value (overflow gives +-inf)."""
    try:
        return float(struct.unpack("<e", struct.pack("<e", float(x)))[0])
    except OverflowError:
        return math.copysign(math.inf, x)


def float_to_fp32(x: float) -> float:
    """Round a Python float to the nearest float32 value (overflow gives +-inf)."""
    return float(ctypes.c_float(float(x)).value)


def f32_to_bf16_bits(x: float) -> int:
    """The 16-bit pattern of bfloat16 nearest to the float32 value of `x` (round to nearest even, IEEE overflow)."""
    u = struct.unpack("<I", struct.pack("<f", float_to_fp32(x)))[0]
    if (u & 0x7F800000) == 0x7F800000 and (u & 0x007FFFFF):  # NaN: keep sign, make it quiet
        return ((u >> 16) & 0x8000) | 0x7FC0
    u += 0x7FFF + ((u >> 16) & 1)
    return (u >> 16) & 0xFFFF


def bf16_bits_to_float(bits: int) -> float:
    """Decode a 16-bit bfloat16 pattern to a Python float."""
    if not 0 <= bits <= 0xFFFF:
        raise ValueError(f"bfloat16 bits must be in [0, 65535], got {bits}")
    return float(struct.unpack("<f", struct.pack("<I", bits << 16))[0])


def float_to_bf16(x: float) -> float:
    """Round a Python float to the nearest bfloat16 value (via float32, as hardware converts)."""
    return bf16_bits_to_float(f32_to_bf16_bits(x))


def _int_wrap(bits: int, signed: bool) -> Callable[[Any], int]:
    mask, half = (1 << bits) - 1, 1 << (bits - 1)

    def wrap(x: Any) -> int:
        v = int(x) & mask
        return v - (1 << bits) if signed and v >= half else v

    return wrap


def _fp8_round(dt: DType) -> Callable[[Any], float]:
    return lambda x: fp8_to_float(float_to_fp8(float(x), dt), dt)


# truncate[dtype](python value) -> the value the dtype actually holds (wrapping ints, rounding floats).
truncate: dict[DType, Callable[[Any], ConstType]] = {
    dtypes.bool: bool,
    dtypes.float16: float_to_fp16,
    dtypes.bfloat16: float_to_bf16,
    dtypes.float32: float_to_fp32,
    dtypes.float64: float,
    **{fp8: _fp8_round(fp8) for fp8 in dtypes.fp8s},
    **{dt: _int_wrap(8 * dt.itemsize, dt in dtypes.sints) for dt in dtypes.ints},
}


def storage_fmt(dtype: DType) -> str:
    """The struct format of a dtype's storage ('H' for bfloat16, 'B' for fp8)."""
    if dtype == dtypes.bfloat16:
        return "H"
    if dtype in dtypes.fp8s:
        return "B"
    if dtype.fmt is None:
        raise TypeError(f"{dtype} has no struct format")
    return dtype.fmt


def to_storage_scalar(x: ConstType, dtype: DType) -> ConstType:
    """Python value -> the scalar that `struct.pack(storage_fmt(dtype))` stores."""
    if dtype == dtypes.bfloat16:
        return f32_to_bf16_bits(float(x))
    if dtype in dtypes.fp8s:
        return float_to_fp8(float(x), dtype)
    if dtype == dtypes.float16:
        return float_to_fp16(float(x))
    return truncate[dtype](x)


def from_storage_scalar(x: ConstType, dtype: DType) -> ConstType:
    """Inverse of to_storage_scalar."""
    if dtype == dtypes.bfloat16:
        return bf16_bits_to_float(int(x))
    if dtype in dtypes.fp8s:
        return fp8_to_float(int(x), dtype)
    return x


def bitcast_scalar(x: ConstType, in_dtype: DType, out_dtype: DType) -> ConstType:
    """Reinterpret the bits of scalar `x` of `in_dtype` as `out_dtype` (same itemsize)."""
    if in_dtype.itemsize != out_dtype.itemsize:
        raise ValueError(f"bitcast needs equal itemsizes, got {in_dtype} ({in_dtype.itemsize}) -> {out_dtype}")
    packed = struct.pack("<" + storage_fmt(in_dtype), to_storage_scalar(x, in_dtype))
    return from_storage_scalar(struct.unpack("<" + storage_fmt(out_dtype), packed)[0], out_dtype)
