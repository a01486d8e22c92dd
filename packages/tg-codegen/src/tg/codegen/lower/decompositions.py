"""Rewrite rules that replace ops and dtypes a renderer lacks by ones it has.

Every rule group is built for a renderer's declared capabilities (`supported_ops`, `native_float_dtypes`), so a
target that has an op never sees its decomposition.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from tg.ir.dtype import DType, dtypes
from tg.ir.ops import Ops
from tg.ir.pattern import PatternMatcher, UPat
from tg.ir.uop import UOp

# *** gates: afterwards a gated INDEX appears only as LOAD(INDEX(buf, idx), alt, gate) / STORE(INDEX, value, gate),
# and no BIND remains ***


def _gate_load(load: UOp) -> UOp | None:
    idx = load.src[0]
    if idx.op is not Ops.INDEX or len(idx.src) != 3 or len(load.src) != 1:
        return None
    valid = idx.src[2]
    if valid.dtype != dtypes.bool:
        raise TypeError(f"INDEX gate must be bool, got {valid.dtype}")
    plain = idx.replace(src=idx.src[:2])
    return UOp(Ops.LOAD, load.dtype, (plain, UOp.const(load.dtype, 0), valid), load.arg)


def _gate_store(store: UOp) -> UOp | None:
    idx = store.src[0]
    if idx.op is not Ops.INDEX or len(idx.src) != 3 or len(store.src) != 2:
        return None
    return UOp(Ops.STORE, dtypes.void, (idx.replace(src=idx.src[:2]), store.src[1], idx.src[2]), store.arg)


pm_gates = PatternMatcher([
    (UPat(Ops.LOAD, name="load"), _gate_load),
    (UPat(Ops.STORE, name="store"), _gate_store),
    # a bound variable is passed at run time like any other: the kernel only sees the DEFINE_VAR
    (UPat(Ops.BIND, name="b"), lambda b: b.src[0]),
])  # fmt: skip


# *** threefry: afterwards THREEFRY(x: uint64, key: uint64) is uint32 adds, xors and rotates ***

_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
_KEY_PARITY = 0x1BD11BDA


def threefry2x32(x: UOp, key: UOp) -> UOp:
    """Threefry-2x32, 20 rounds, on the 32-bit halves of `x` keyed by the halves of `key` (result: hi << 32 | lo)."""
    u32, u64 = dtypes.uint32, dtypes.uint64
    x0, x1 = x.cast(u32), (x >> UOp.const(u64, 32)).cast(u32)
    k0, k1 = key.cast(u32), (key >> UOp.const(u64, 32)).cast(u32)
    schedule = (k0, k1, k0 ^ k1 ^ UOp.const(u32, _KEY_PARITY))

    def c(v: int) -> UOp:
        return UOp.const(u32, v)

    x0, x1 = x0 + schedule[0], x1 + schedule[1]
    for i in range(5):
        for r in _ROTATIONS[i % 2]:
            x0 = x0 + x1
            x1 = ((x1 << c(r)) | (x1 >> c(32 - r))) ^ x0
        x0 = x0 + schedule[(i + 1) % 3]
        x1 = x1 + schedule[(i + 2) % 3] + c(i + 1)
    return (x1.cast(u64) << UOp.const(u64, 32)) | x0.cast(u64)


# *** integer division guards: afterwards no integer IDIV/MOD can trap (x / 0 and INT_MIN / -1 are SIGFPE on x86) ***
# Defined results, as numpy gives them: x // 0 == 0, x % 0 == 0, INT_MIN // -1 == INT_MIN (wraps), INT_MIN % -1 == 0.
# A divisor that is guarded is WHERE(bad, 1, b): the rule skips it, and divisors whose bounds exclude 0 (and -1
# next to a dividend that may be INT_MIN) are left alone, so index arithmetic keeps its plain `/` and `%`.


def _is_guarded(d: UOp) -> bool:
    return d.op is Ops.WHERE and d.src[1].op is Ops.CONST and d.src[1].arg == 1


def _guard_int_div(x: UOp) -> UOp | None:
    a, b = x.src
    dt = x.dtype
    if not dtypes.is_int(dt) or dt.count > 1 or _is_guarded(b):
        return None
    zero, one = UOp.const(dt, 0), UOp.const(dt, 1)
    may_be_zero = b.vmin <= 0 <= b.vmax
    may_overflow = not dtypes.is_unsigned(dt) and b.vmin <= -1 <= b.vmax and a.vmin <= dt.min
    if not (may_be_zero or may_overflow):
        return None
    is_zero = b.alu(Ops.CMPEQ, zero) if may_be_zero else None
    overflow = (a.alu(Ops.CMPEQ, UOp.const(dt, dt.min)) & b.alu(Ops.CMPEQ, UOp.const(dt, -1))) if may_overflow else None
    bad = is_zero | overflow if is_zero is not None and overflow is not None else (is_zero if is_zero is not None
                                                                                  else overflow)  # fmt: skip
    assert bad is not None
    q = UOp(x.op, dt, (a, UOp(Ops.WHERE, dt, (bad, one, b))))  # a / 1 == a: INT_MIN / -1 wraps to INT_MIN
    if x.op is Ops.MOD or is_zero is None:
        return q  # a % 1 == 0 covers both the zero divisor and INT_MIN % -1
    return UOp(Ops.WHERE, dt, (is_zero, zero, q))


pm_int_div_guards = PatternMatcher([
    # integer quotient and remainder by a value that may be 0 (or -1 of INT_MIN) get a divisor that cannot trap
    (UPat((Ops.IDIV, Ops.MOD), name="x"), _guard_int_div),
])  # fmt: skip


# *** op decompositions: afterwards only ops in the renderer's supported set remain ***


def _neg(x: UOp) -> UOp:
    return x.ne(True) if x.dtype == dtypes.bool else UOp(Ops.MUL, x.dtype, (x, UOp.const(x.dtype, -1)))


def _trunc(x: UOp) -> UOp:
    # floats at or beyond 2**mantissa_bits are integers already (as are inf and nan, which stay as they are);
    # below it a round trip through an int truncates, and a zero result takes x's sign (trunc(-0.5) is -0.0)
    mantissa = dtypes.finfo(x.dtype)[1]
    it = dtypes.int64 if x.dtype.itemsize > 4 else dtypes.int32
    small = UOp(Ops.CMPLT, dtypes.bool, (_fabs(x), UOp.const(x.dtype, 2.0**mantissa)))
    t = x.cast(it).cast(x.dtype)
    t = UOp(Ops.WHERE, x.dtype, (t.ne(UOp.const(x.dtype, 0.0)), t, x * UOp.const(x.dtype, 0.0)))
    return UOp(Ops.WHERE, x.dtype, (small, t, x))


def _fabs(x: UOp) -> UOp:
    return UOp(Ops.WHERE, x.dtype, (UOp(Ops.CMPLT, dtypes.bool, (x, UOp.const(x.dtype, 0.0))), _neg(x), x))


def _max(x: UOp) -> UOp:
    # b when a < b or b is NaN, else a: a NaN on either side comes out, like the MAX of tg.ir's constant folding
    a, b = x.src
    pick_b = a < b
    if dtypes.is_float(x.dtype):
        pick_b = pick_b | b.ne(b)
    return pick_b.where(b, a)


def op_decompositions(supported: frozenset[Ops]) -> PatternMatcher:
    """Rules that rewrite each ALU op missing from `supported` in terms of present ones."""
    rules: list[tuple[UPat, Callable[..., Any]]] = []

    def add(op: Ops, fn: Callable[[UOp], UOp | None]) -> None:
        if op not in supported:
            rules.append((UPat(op, name="x"), fn))

    add(Ops.THREEFRY, lambda x: threefry2x32(x.src[0], x.src[1]))
    add(Ops.MULACC, lambda x: x.src[0] * x.src[1] + x.src[2])
    add(Ops.SUB, lambda x: x.src[0] + (x.src[1].alu(Ops.NEG) if Ops.NEG in supported else _neg(x.src[1])))
    add(Ops.NEG, lambda x: _neg(x.src[0]))
    add(Ops.FDIV, lambda x: x.src[0] * x.src[1].alu(Ops.RECIPROCAL) if Ops.RECIPROCAL in supported else None)
    add(Ops.RECIPROCAL, lambda x: UOp.const(x.dtype, 1.0).alu(Ops.FDIV, x.src[0]) if Ops.FDIV in supported else None)
    add(Ops.CMPEQ, lambda x: x.src[0].ne(x.src[1]).ne(True))
    add(Ops.MAX, _max)
    add(Ops.TRUNC, lambda x: _trunc(x.src[0]) if dtypes.is_float(x.dtype) else x.src[0])
    return PatternMatcher(rules)


# *** narrow floats: afterwards a dtype the target can't compute in is only loaded, stored, selected and cast to
# or from float32; its arithmetic happens in float32 and is rounded back after every op ***

_FLOAT_MATH = frozenset(
    {
        Ops.ADD,
        Ops.SUB,
        Ops.MUL,
        Ops.FDIV,
        Ops.MAX,
        Ops.MULACC,
        Ops.NEG,
        Ops.RECIPROCAL,
        Ops.SQRT,
        Ops.EXP2,
        Ops.LOG2,
        Ops.SIN,
        Ops.TRUNC,
        Ops.POW,
        Ops.IDIV,
        Ops.MOD,
    }
)


def float_emulation(native: frozenset[DType]) -> PatternMatcher:
    """Rules that compute float dtypes not in `native` (float16, bfloat16, fp8) in float32."""
    f32 = dtypes.float32

    def emulated(dt: DType) -> bool:
        return dtypes.is_float(dt) and dt.scalar() not in native and dt.scalar() is not f32

    def math_in_f32(x: UOp) -> UOp | None:
        if not emulated(x.dtype):
            return None
        return UOp(x.op, f32, tuple(s.cast(f32) for s in x.src), x.arg).cast(x.dtype)

    def compare_in_f32(x: UOp) -> UOp | None:
        if not emulated(x.src[0].dtype):
            return None
        return UOp(x.op, dtypes.bool, tuple(s.cast(f32) for s in x.src), x.arg)

    def cast_via_f32(x: UOp) -> UOp | None:
        src_dt = x.src[0].dtype
        if src_dt.scalar() is f32 or x.dtype.scalar() is f32 or not (emulated(x.dtype) or emulated(src_dt)):
            return None
        return x.src[0].cast(f32).cast(x.dtype)

    return PatternMatcher([
        (UPat(tuple(_FLOAT_MATH), name="x"), math_in_f32),
        (UPat((Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ), name="x"), compare_in_f32),
        (UPat(Ops.CAST, name="x"), cast_via_f32),
    ])  # fmt: skip


# *** readable forms (exact rewrites): afterwards x + y*-1 is x - y, y*-1 is -y, x + (-c) is x - c, and a WHERE that
# repeats the gate of the load in it is gone ***


def _is_const(u: UOp, v: float) -> bool:
    return u.op is Ops.CONST and u.arg == v and not isinstance(u.arg, bool)


def _negated(u: UOp) -> UOp | None:
    """y if u is -y or y*-1 (either order), else None."""
    if u.op is Ops.NEG:
        return u.src[0]
    if u.op is Ops.MUL and not dtypes.is_unsigned(u.dtype):
        for a, b in (u.src, u.src[::-1]):
            if _is_const(b, -1):
                return a
    return None


def _add_to_sub(x: UOp) -> UOp | None:
    a, b = x.src
    if (y := _negated(b)) is not None:
        return UOp(Ops.SUB, x.dtype, (a, y))
    if (y := _negated(a)) is not None:
        return UOp(Ops.SUB, x.dtype, (b, y))
    if b.op is Ops.CONST and not dtypes.is_unsigned(x.dtype) and x.dtype != dtypes.bool and b.arg < 0 and \
            b.arg != x.dtype.min and not (isinstance(b.arg, float) and math.isinf(b.arg)):  # fmt: skip
        return UOp(Ops.SUB, x.dtype, (a, UOp.const(x.dtype, -b.arg)))
    return None


def _where_of_gated_load(x: UOp) -> UOp | None:
    gate, val, other = x.src
    if val.op is Ops.LOAD and len(val.src) == 3 and val.src[2] is gate and val.src[1] is other:
        return val
    return None


def readable_forms(supported: frozenset[Ops]) -> PatternMatcher:
    """Exact rewrites that read better in source (only for targets that have SUB/NEG)."""
    rules: list[tuple[UPat, Callable[..., Any]]] = [(UPat(Ops.WHERE, name="x"), _where_of_gated_load)]
    if Ops.SUB in supported:
        rules.append((UPat(Ops.ADD, name="x"), _add_to_sub))
    if Ops.NEG in supported:
        rules.append((UPat(Ops.MUL, name="x"), lambda x: None if (y := _negated(x)) is None else y.alu(Ops.NEG)))
    # NEG(y) may have been made from y*-1 before the ADD above it was visited
    return PatternMatcher(rules)


# *** cleanups: afterwards no CAST is to its own dtype and no BITCAST is of a BITCAST ***

pm_cleanups = PatternMatcher([
    (UPat(Ops.CAST, name="x"), lambda x: x.src[0] if x.src[0].dtype is x.dtype else None),
    # reinterpreting twice is reinterpreting once (and never passes the bits through a float register)
    (UPat(Ops.BITCAST, name="x"), lambda x: x.src[0].src[0].bitcast(x.dtype) if x.src[0].op is Ops.BITCAST else None),
])  # fmt: skip
