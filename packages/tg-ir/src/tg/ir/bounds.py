"""Value bounds (vmin, vmax) of integer and boolean UOps, the facts the symbolic rules rely on."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tg.ir.alu import cdiv
from tg.ir.dtype import ConstType, dtypes
from tg.ir.ops import Ops

if TYPE_CHECKING:
    from tg.ir.uop import UOp


def _mod_bounds(a0: int, a1: int, b0: int, b1: int) -> tuple[int, int] | None:
    """Bounds of C-style a % b for a in [a0, a1], b in [b0, b1] not containing 0."""
    if b0 <= 0 <= b1:
        return None
    m = max(abs(b0), abs(b1)) - 1
    if b0 == b1 and a0 >= 0 and a1 - a0 < abs(b0) and a0 % abs(b0) <= a1 % abs(b0):
        return a0 % abs(b0), a1 % abs(b0)
    if b0 == b1 and a1 <= 0 and a1 - a0 < abs(b0) and (-a1) % abs(b0) <= (-a0) % abs(b0):
        return -((-a0) % abs(b0)), -((-a1) % abs(b0))
    lo = 0 if a0 >= 0 else max(a0, -m)
    hi = 0 if a1 <= 0 else min(a1, m)
    return lo, hi


def min_max(u: UOp) -> tuple[ConstType, ConstType]:
    """(vmin, vmax) of `u`; falls back to the dtype's range when nothing better is known or the value may wrap."""
    lo, hi = _min_max(u)
    dt = u.dtype
    if dtypes.is_int(dt) and dt.count == 1 and (lo < dt.min or hi > dt.max):
        return dt.min, dt.max  # the computation may overflow and wrap: only the dtype's range is certain
    return lo, hi


def _min_max(u: UOp) -> tuple[ConstType, ConstType]:
    op, src = u.op, u.src
    dt = u.dtype
    if op is Ops.CONST:
        return u.arg, u.arg
    if op is Ops.VCONST:
        return min(u.arg), max(u.arg)
    if op is Ops.DEFINE_VAR:
        return u.arg[1], u.arg[2]
    if op is Ops.BIND:
        return src[0]._min_max
    if op in (Ops.RANGE, Ops.SPECIAL):
        return 0, (src[0].vmax - 1) if dtypes.is_int(src[0].dtype) else dt.max
    if dt.count > 1 or not (dtypes.is_int(dt) or dtypes.is_bool(dt)):
        if op is Ops.GEP or op is Ops.VECTORIZE:
            lo = [s.vmin for s in src]
            hi = [s.vmax for s in src]
            return min(lo), max(hi)
        return dt.min, dt.max
    if len(src) >= 1:
        s0 = src[0]
        a0, a1 = s0.vmin, s0.vmax
    if len(src) >= 2:
        b0, b1 = src[1].vmin, src[1].vmax
    if op is Ops.ADD:
        return a0 + b0, a1 + b1
    if op is Ops.SUB:
        return a0 - b1, a1 - b0
    if op is Ops.MUL:
        vals = (a0 * b0, a0 * b1, a1 * b0, a1 * b1)
        return min(vals), max(vals)
    if op is Ops.NEG:
        return -a1, -a0
    if op is Ops.MAX:
        return max(a0, b0), max(a1, b1)
    if op is Ops.IDIV and dtypes.is_int(dt):
        if not b0 <= 0 <= b1:
            qs = [cdiv(int(x), int(y)) for x in (a0, a1) for y in (b0, b1)]
            return min(qs), max(qs)
    if op is Ops.MOD and dtypes.is_int(dt):
        if (r := _mod_bounds(int(a0), int(a1), int(b0), int(b1))) is not None:
            return r
    if op is Ops.SHL and src[1].op is Ops.CONST and a0 >= 0:
        return a0 << src[1].arg, a1 << src[1].arg
    if op is Ops.SHR and src[1].op is Ops.CONST and a0 >= 0:
        return a0 >> src[1].arg, a1 >> src[1].arg
    if op is Ops.AND and dtypes.is_int(dt) and b0 == b1 and b0 >= 0:
        return 0, b1 if a0 < 0 else min(a1, b1)
    if op is Ops.CMPLT:
        return a1 < b0, a0 < b1
    if op is Ops.CMPNE:
        return (a1 < b0 or b1 < a0), not (a0 == a1 == b0 == b1)
    if op is Ops.CMPEQ:
        return (a0 == a1 == b0 == b1), not (a1 < b0 or b1 < a0)
    if dt is dtypes.bool:
        if op is Ops.AND:
            return bool(a0 and b0), bool(a1 and b1)
        if op is Ops.OR:
            return bool(a0 or b0), bool(a1 or b1)
        if op is Ops.XOR and a0 == a1 and b0 == b1:
            return a0 != b0, a0 != b0
    if op is Ops.WHERE:
        c0, c1 = a0, a1
        t0, t1, f0, f1 = src[1].vmin, src[1].vmax, src[2].vmin, src[2].vmax
        if c0 == c1:
            return (t0, t1) if c0 else (f0, f1)
        return min(t0, f0), max(t1, f1)
    if op is Ops.CAST and (dtypes.is_int(s0.dtype) or dtypes.is_bool(s0.dtype)) and s0.dtype.count == 1:
        if dt.min <= a0 and a1 <= dt.max:
            return (bool(a0), bool(a1)) if dt is dtypes.bool else (int(a0), int(a1))
        if dt is dtypes.bool:
            return False, True
    return dt.min, dt.max
