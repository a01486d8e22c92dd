"""Python reference semantics of every ALU op, used for constant folding and by the PYTHON backend.

Integer division and remainder are C-style: IDIV truncates toward zero, MOD takes the sign of the dividend
(`-7 // 2 == -3`, `-7 % 2 == -1`). Division and remainder by zero yield 0 for ints (numpy's choice; the lowering
guards generated code the same way, see tg.codegen's `pm_int_div_guards`), and so do a shift by a negative count and
a left shift by 64 or more (C leaves these undefined; we pick values so folding never raises or builds huge ints).
Integer powers are computed modulo 2**64, so huge exponents fold quickly. Results are truncated to the output
dtype (ints wrap, floats round).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from tg.ir.dtype import ConstType, DType, dtypes
from tg.ir.floats import truncate
from tg.ir.ops import Ops


def cdiv(x: int, y: int) -> int:
    """C division: truncates toward zero; 0 when y == 0."""
    if y == 0:
        return 0
    q = abs(x) // abs(y)
    return -q if (x < 0) != (y < 0) else q


def cmod(x: int, y: int) -> int:
    """C remainder: x - y * cdiv(x, y), sign of x; 0 when y == 0."""
    return x - y * cdiv(x, y) if y != 0 else 0


def _safe_exp2(x: float) -> float:
    try:
        return 2.0**x
    except OverflowError:
        return math.inf


def _safe_log2(x: float) -> float:
    if x > 0:
        return math.log2(x)
    return -math.inf if x == 0 else math.nan


def _safe_sqrt(x: float) -> float:
    return math.sqrt(x) if x >= 0 else math.nan


def _safe_sin(x: float) -> float:
    return math.sin(x) if math.isfinite(x) else math.nan


def _recip(x: float) -> float:
    if x == 0:
        return math.copysign(math.inf, x)
    return 1.0 / x


def _fdiv(x: float, y: float) -> float:
    if y == 0:
        if x == 0 or math.isnan(x):
            return math.nan
        return math.copysign(math.inf, x) * math.copysign(1.0, y)
    return x / y


def _idiv(x: Any, y: Any) -> Any:
    if isinstance(x, float) or isinstance(y, float):
        return math.trunc(_fdiv(x, y)) if y != 0 else 0
    return cdiv(x, y)


def _mod(x: Any, y: Any) -> Any:
    if isinstance(x, float) or isinstance(y, float):
        return math.fmod(x, y) if y != 0 else math.nan
    return cmod(x, y)


def _shl(x: Any, y: Any) -> Any:
    # a count of 64 or more leaves no bits in any dtype once the result wraps; Python would build a huge int
    return x << y if 0 <= y < 64 else 0


def _shr(x: Any, y: Any) -> Any:
    return x >> y if y >= 0 else 0


def _pow(x: Any, y: Any) -> Any:
    if isinstance(x, int) and isinstance(y, int) and y >= 0:
        # results wrap to at most 64 bits, so modular exponentiation gives the same low bits without the huge int
        return pow(x, y, 1 << 64)
    odd = isinstance(y, (int, float)) and math.isfinite(y) and float(y).is_integer() and int(y) % 2 == 1
    try:
        r = x**y
        return r if not isinstance(r, complex) else math.nan
    except ZeroDivisionError:  # 0 ** negative: inf, signed like C's pow for -0.0 and an odd exponent
        return math.copysign(math.inf, x) if odd else math.inf
    except OverflowError:
        return -math.inf if x < 0 and odd else math.inf


def _threefry(x: int, key: int) -> int:
    """Threefry-2x32 with 20 rounds on the two 32-bit halves of x (key: two 32-bit halves)."""
    rotations = ((13, 15, 26, 6), (17, 29, 16, 24))
    m = 0xFFFFFFFF
    x0, x1 = x & m, (x >> 32) & m
    k0, k1 = key & m, (key >> 32) & m
    ks = (k0, k1, (k0 ^ k1 ^ 0x1BD11BDA) & m)
    x0, x1 = (x0 + ks[0]) & m, (x1 + ks[1]) & m
    for i in range(5):
        for r in rotations[i % 2]:
            x0 = (x0 + x1) & m
            x1 = ((x1 << r) | (x1 >> (32 - r))) & m
            x1 ^= x0
        x0 = (x0 + ks[(i + 1) % 3]) & m
        x1 = (x1 + ks[(i + 2) % 3] + i + 1) & m
    return (x1 << 32) | x0


python_alu: dict[Ops, Callable[..., Any]] = {
    Ops.LOG2: _safe_log2,
    Ops.EXP2: _safe_exp2,
    Ops.SQRT: _safe_sqrt,
    Ops.RECIPROCAL: _recip,
    Ops.SIN: _safe_sin,
    # copysign keeps the sign of zero: trunc(-0.5) is -0.0, as in C
    Ops.TRUNC: lambda x: x if isinstance(x, int) or not math.isfinite(x) else math.copysign(float(math.trunc(x)), x),
    Ops.NEG: lambda x: (not x) if isinstance(x, bool) else -x,
    Ops.SHR: _shr,
    Ops.SHL: _shl,
    Ops.MUL: lambda x, y: x * y,
    Ops.ADD: lambda x, y: x + y,
    Ops.SUB: lambda x, y: x - y,
    Ops.XOR: lambda x, y: x ^ y,
    Ops.MAX: lambda x, y: x if x >= y or math.isnan(x) else y,
    Ops.CMPNE: lambda x, y: x != y,
    Ops.CMPEQ: lambda x, y: x == y,
    Ops.CMPLT: lambda x, y: x < y,
    Ops.OR: lambda x, y: x | y,
    Ops.AND: lambda x, y: x & y,
    Ops.MOD: _mod,
    Ops.IDIV: _idiv,
    Ops.FDIV: _fdiv,
    Ops.POW: _pow,
    Ops.MULACC: lambda x, y, z: (x * y) + z,
    Ops.WHERE: lambda x, y, z: y if x else z,
    Ops.THREEFRY: _threefry,
}


def exec_alu(op: Ops, dtype: DType, operands: tuple[ConstType, ...] | list[ConstType], truncate_output: bool = True
             ) -> ConstType:  # fmt: skip
    """Compute `op` on Python scalars (or tuples for vector dtypes) and truncate to `dtype`."""
    if dtype.count > 1:
        lanes = [
            exec_alu(op, dtype.scalar(), [x[i] if isinstance(x, tuple) else x for x in operands], truncate_output)
            for i in range(dtype.count)
        ]
        return tuple(lanes)  # type: ignore[return-value]
    if op not in python_alu:
        raise NotImplementedError(f"no Python semantics for {op}")
    ret = python_alu[op](*operands)
    if not truncate_output or dtype == dtypes.void:
        return ret
    if dtypes.is_int(dtype) and isinstance(ret, float):
        ret = int(ret) if math.isfinite(ret) else 0
    return truncate.get(dtype, lambda x: x)(ret)
