"""Conversions between float32 and the storage-only float dtypes (float16, bfloat16, fp8) as integer bit operations.

For targets that have no conversion instruction or helper function (the LLVM renderers never call a library
function): after `float_emulation` the only operations on these dtypes are loads, stores, selects and casts to or
from float32, and these rules turn the casts into shifts, masks and selects on the bit patterns. The results are the
ones tg.ir.floats computes (round to nearest even, fp8 saturating as `float_to_fp8`), bit for bit; an fp8 value is
reinterpreted as uint8 and a 16-bit one as uint16 with BITCAST, which costs nothing (same bits, same width).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tg.ir.dtype import DType, dtypes
from tg.ir.ops import Ops
from tg.ir.pattern import PatternMatcher, UPat
from tg.ir.uop import UOp

# (mantissa bits, exponent bits, bias, IEEE inf/nan, fnuz) of each fp8 format (as the C helpers of render/cstyle)
FP8_FORMATS = {dtypes.fp8e4m3: (3, 4, 7, False, False), dtypes.fp8e5m2: (2, 5, 15, True, False),
               dtypes.fp8e4m3fnuz: (3, 4, 8, False, True), dtypes.fp8e5m2fnuz: (2, 5, 16, False, True)}  # fmt: skip

_U32, _F32 = dtypes.uint32, dtypes.float32


def _u(v: int) -> UOp:
    return UOp.const(_U32, v)


def _eq(a: UOp, v: int) -> UOp:
    return a.alu(Ops.CMPEQ, _u(v))


def _lt(a: UOp, b: UOp | int) -> UOp:
    return UOp(Ops.CMPLT, dtypes.bool, (a, _u(b) if isinstance(b, int) else b))


def _sel(c: UOp, a: UOp | int, b: UOp | int) -> UOp:
    a, b = (_u(a) if isinstance(a, int) else a), (_u(b) if isinstance(b, int) else b)
    return UOp(Ops.WHERE, a.dtype, (c, a, b))


def _bits(x: UOp, dt: DType) -> UOp:
    """The bit pattern of storage-dtype value `x` as uint32."""
    return x.bitcast(dt).cast(_U32)


def _round_shift(m: UOp, shift: UOp) -> UOp:
    """m >> shift rounded to nearest even (shift in [1, 31])."""
    q, rem, half = m >> shift, m & ((_u(1) << shift) - _u(1)), _u(1) << (shift - _u(1))
    up = _lt(half, rem) | (rem.alu(Ops.CMPEQ, half) & _eq(q & _u(1), 1))
    return _sel(up, q + _u(1), q)


def half_to_f32(x: UOp) -> UOp:
    """float16 -> float32 (exact)."""
    h = _bits(x, dtypes.uint16)
    sign, e, m = (h & _u(0x8000)) << _u(16), (h >> _u(10)) & _u(0x1F), h & _u(0x3FF)
    normal = ((e + _u(112)) << _u(23)) | (m << _u(13))
    special = _u(0x7F800000) | (m << _u(13))
    tiny = (m.cast(_F32) * UOp.const(_F32, 2.0**-24)).bitcast(_U32)  # zero and subnormals: exact in float32
    return (_sel(_eq(e, 0), tiny, _sel(_eq(e, 31), special, normal)) | sign).bitcast(_F32)


def f32_to_half(x: UOp) -> UOp:
    """float32 -> float16, rounded to nearest even; NaN stays NaN, overflow gives inf."""
    u = x.bitcast(_U32)
    sign, a = (u >> _u(16)) & _u(0x8000), u & _u(0x7FFFFFFF)
    nan_or_inf = _u(0x7C00) | _sel(_lt(_u(0x7F800000), a), 0x200, 0)
    e = a >> _u(23)
    shift = _sel(_lt(e, 103), 24, _u(126) - e)  # subnormal results: e in [103, 112]; smaller ones give 0 below
    subnormal = _round_shift((a & _u(0x7FFFFF)) | _u(0x800000), shift)
    r = a - _u(0x38000000)
    normal = (r + _u(0xFFF) + ((r >> _u(13)) & _u(1))) >> _u(13)
    out = _sel(_lt(a, 0x38800000), _sel(_lt(a, 0x33000001), 0, subnormal), normal)
    out = _sel(_lt(a, 0x477FF000), out, 0x7C00)
    out = _sel(_lt(a, 0x7F800000), out, nan_or_inf)
    return (out | sign).cast(dtypes.uint16).bitcast(dtypes.float16)


def bf16_to_f32(x: UOp) -> UOp:
    """bfloat16 -> float32 (exact: the high half of the bits)."""
    return (_bits(x, dtypes.uint16) << _u(16)).bitcast(_F32)


def f32_to_bf16(x: UOp) -> UOp:
    """float32 -> bfloat16, rounded to nearest even; NaN becomes the quiet NaN with x's sign."""
    u = x.bitcast(_U32)
    nan = ((u >> _u(16)) & _u(0x8000)) | _u(0x7FC0)
    rounded = (u + _u(0x7FFF) + ((u >> _u(16)) & _u(1))) >> _u(16)
    return _sel(_lt(_u(0x7F800000), u & _u(0x7FFFFFFF)), nan, rounded).cast(dtypes.uint16).bitcast(dtypes.bfloat16)


def fp8_to_f32(x: UOp) -> UOp:
    """fp8 (any of the four formats) -> float32 (exact)."""
    mb, eb, bias, ieee, fnuz = FP8_FORMATS[x.dtype]
    c = _bits(x, dtypes.uint8)
    sign, e, m = (c >> _u(7)) << _u(31), (c >> _u(mb)) & _u((1 << eb) - 1), c & _u((1 << mb) - 1)
    normal = ((e + _u(127 - bias)) << _u(23)) | (m << _u(23 - mb))
    tiny = (m.cast(_F32) * UOp.const(_F32, 2.0 ** (1 - bias - mb))).bitcast(_U32)
    mag = _sel(_eq(e, 0), tiny, normal)
    top_e, top_m = (1 << eb) - 1, (1 << mb) - 1
    if ieee:
        mag = _sel(_eq(e, top_e), _sel(_eq(m, 0), 0x7F800000, 0x7FC00000), mag)
    elif not fnuz:
        mag = _sel(_eq(e, top_e) & _eq(m, top_m), 0x7FC00000, mag)
    out = mag | sign
    if fnuz:
        out = _sel(_eq(c, 0x80), 0x7FC00000, out)
    return out.bitcast(_F32)


def f32_to_fp8(x: UOp, dt: DType) -> UOp:
    """float32 -> fp8 format `dt`, rounded to nearest even and saturated to the largest finite value."""
    mb, _, bias, ieee, fnuz = FP8_FORMATS[dt]
    u = x.bitcast(_U32)
    sign, a = (u >> _u(24)) & _u(0x80), u & _u(0x7FFFFFFF)
    zero = _u(0) if fnuz else sign
    maxc = 0x7F if fnuz else (0x7B if ieee else 0x7E)
    ae = (a >> _u(23)).cast(dtypes.int32) - UOp.const(dtypes.int32, 127)
    lo = UOp.const(dtypes.int32, 1 - bias)
    e = UOp(Ops.WHERE, dtypes.int32, (UOp(Ops.CMPLT, dtypes.bool, (ae, lo)), lo, ae))
    shift = (UOp.const(dtypes.int32, 23 - mb) + e - ae).cast(_U32)  # >= 20; >= 32 leaves nothing
    m = (a & _u(0x7FFFFF)) | _u(0x800000)
    n = _sel(_lt(shift, 32), _round_shift(m, _sel(_lt(shift, 32), shift, 31)), 0)
    carry = _lt(_u((2 << mb) - 1), n)
    n = _sel(carry, n >> _u(1), n)
    ebits = (e + UOp.const(dtypes.int32, bias)).cast(_U32) + _sel(carry, 1, 0)
    code = _sel(_lt(n, 1 << mb), n, (ebits << _u(mb)) | (n - _u(1 << mb)))
    out = sign | _sel(_lt(_u(maxc), code), maxc, code)
    out = _sel(_eq(n, 0), zero, out)
    out = _sel(_eq(a >> _u(23), 0), zero, out)  # zero and float32 subnormals
    out = _sel(_eq(a, 0x7F800000), _u(0x80) if fnuz else sign | _u(0x7C if ieee else 0x7F), out)
    out = _sel(_lt(_u(0x7F800000), a), _u(0x80) if fnuz else sign | _u(0x7F), out)
    return out.cast(dtypes.uint8).bitcast(dt)


def _to_f32(fn: Callable[[UOp], UOp]) -> Callable[..., Any]:
    return lambda x: fn(x.src[0]) if x.dtype is _F32 and x.src[0].dtype.count == 1 else None


def _from_f32(fn: Callable[[UOp], UOp]) -> Callable[..., Any]:
    return lambda x: fn(x.src[0]) if x.src[0].dtype is _F32 and x.dtype.count == 1 else None


def _encoder(fp8: DType) -> Callable[[UOp], UOp]:
    return lambda v: f32_to_fp8(v, fp8)


def float_bits_rules(half: bool = True) -> PatternMatcher:
    """Rules turning CASTs between float32 and bfloat16/fp8 (and float16 when `half`) into integer bit operations."""
    rules: list[tuple[UPat, Callable[..., Any]]] = [
        (UPat(Ops.CAST, dtype=_F32, src=(UPat(dtype=dtypes.bfloat16),), name="x"), _to_f32(bf16_to_f32)),
        (UPat(Ops.CAST, dtype=dtypes.bfloat16, src=(UPat(dtype=_F32),), name="x"), _from_f32(f32_to_bf16)),
        (UPat(Ops.CAST, dtype=_F32, src=(UPat(dtype=tuple(FP8_FORMATS)),), name="x"), _to_f32(fp8_to_f32)),
        *[(UPat(Ops.CAST, dtype=fp8, src=(UPat(dtype=_F32),), name="x"), _from_f32(_encoder(fp8)))
          for fp8 in FP8_FORMATS],
    ]  # fmt: skip
    if half:
        rules += [
            (UPat(Ops.CAST, dtype=_F32, src=(UPat(dtype=dtypes.float16),), name="x"), _to_f32(half_to_f32)),
            (UPat(Ops.CAST, dtype=dtypes.float16, src=(UPat(dtype=_F32),), name="x"), _from_f32(f32_to_half)),
        ]
    return PatternMatcher(rules)
