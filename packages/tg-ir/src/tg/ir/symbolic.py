"""Symbolic algebra: rewrite rules that simplify integer index math using value bounds.

Division semantics: IDIV and MOD are C-style (truncate toward zero, remainder has the dividend's sign), matching
the C renderer and `exec_alu`. Most div/mod rules need a non-negative numerator (where C and floor semantics
agree); negative numerators are first flipped (`x // c -> -((-x) // c)` when x <= 0) or left alone.

Matchers (compose with `+`):
- `symbolic_simple`: constant folding and identities that are valid for every dtype.
- `symbolic`: symbolic_simple plus int-only algebra: like-term combining, div/mod folding, comparison folding,
  where folding, bounds-based pruning. `UOp.simplify()` runs it to a fixed point.
"""

from __future__ import annotations

import math
from typing import Any

from tg.ir.alu import exec_alu
from tg.ir.bounds import _min_max
from tg.ir.dtype import can_lossless_cast, dtypes
from tg.ir.floats import bitcast_scalar
from tg.ir.ops import GroupOp, Ops
from tg.ir.pattern import PatternMatcher, UPat, graph_rewrite
from tg.ir.uop import UOp

INTS = dtypes.ints
INTS_BOOL = (*dtypes.ints, dtypes.bool)
_MAX_TERMS = 64


def _fold_const(a: UOp) -> UOp | None:
    return a.const_like(exec_alu(a.op, a.dtype, [s.arg for s in a.src]))


def _fold_cast(root: UOp, c: UOp) -> UOp | None:
    if root.dtype.count != 1 or c.dtype.count != 1 or root.dtype is dtypes.void:
        return None
    return root.const_like(exec_alu(Ops.ADD, root.dtype, (c.arg, False if root.dtype is dtypes.bool else 0)))


def _fold_bitcast(root: UOp, c: UOp) -> UOp | None:
    if root.dtype.count != 1 or c.dtype.count != 1 or root.dtype.itemsize != c.dtype.itemsize:
        return None
    try:
        return root.const_like(bitcast_scalar(c.arg, c.dtype, root.dtype))
    except (TypeError, ValueError, OverflowError):
        return None


def _bounds_const(x: UOp) -> UOp | None:
    """An int/bool ALU node whose bounds pin it to one value becomes that constant."""
    if x.dtype.count == 1 and x.vmin == x.vmax and x.dtype in INTS_BOOL:
        return x.const_like(x.vmin)
    return None


# ---- symbolic_simple: identities and constant folding valid for every dtype ---------------------------------------

symbolic_simple = PatternMatcher([
    # self folding
    (UPat.var("x") + 0, lambda x: x),
    (UPat.var("x") * 1, lambda x: x),
    (UPat((Ops.XOR, Ops.OR), src=[UPat.var("x", INTS_BOOL), UPat.const(None, 0)]), lambda x: x),
    (UPat((Ops.SHL, Ops.SHR), src=(UPat.var("x"), UPat.const(None, 0))), lambda x: x),
    (UPat.var("x", INTS) // 1, lambda x: x),
    (UPat.var("x", INTS) // -1, lambda x: -x),
    (UPat.var("x", INTS) // UPat.var("x"), lambda x: x.const_like(1)),
    (UPat.var("x", INTS) % UPat.var("x"), lambda x: x.const_like(0)),
    (UPat.var("x", INTS) % 1, lambda x: x.const_like(0)),
    (UPat(GroupOp.Idempotent, src=(UPat.var("x"), UPat.var("x"))), lambda x: x),
    (UPat.var("x", INTS) ^ UPat.var("x"), lambda x: x.const_like(0)),
    # zero folding (ints only: 0*inf is nan for floats)
    (UPat.var("x", INTS_BOOL) * 0, lambda x: x.const_like(0)),
    (UPat.var("x", INTS) & 0, lambda x: x.const_like(0)),
    (UPat.var("x", INTS) < UPat.var("x"), lambda x: UOp.const(dtypes.bool.vec(x.dtype.count), False)),
    (UPat.var("x", INTS_BOOL).ne(UPat.var("x")), lambda x: UOp.const(dtypes.bool.vec(x.dtype.count), False)),
    (UPat.var("x", INTS_BOOL).eq(UPat.var("x")), lambda x: UOp.const(dtypes.bool.vec(x.dtype.count), True)),
    # boolean logic
    (UPat.var("x", dtypes.bool) & UPat.cvar("c", vec=False), lambda x, c: x if c.arg else c),
    (UPat.var("x", dtypes.bool) | UPat.cvar("c", vec=False), lambda x, c: c if c.arg else x),
    (UPat.var("x", dtypes.bool).ne(False), lambda x: x),
    (UPat.var("x", dtypes.bool).ne(True).ne(True), lambda x: x),
    (UPat.var("x", dtypes.bool).where(UPat.const(dtypes.bool, True), UPat.const(dtypes.bool, False)), lambda x: x),
    (UPat.var("x", dtypes.bool).where(UPat.const(dtypes.bool, False), UPat.const(dtypes.bool, True)),
     lambda x: x.logical_not()),
    (UPat.var("x", dtypes.bool) * UPat.var("y", dtypes.bool), lambda x, y: x & y),
    (UPat.var("x", dtypes.bool) + UPat.var("y", dtypes.bool), lambda x, y: x | y),
    (UPat.var("x", INTS_BOOL).trunc(), lambda x: x),
    # constant folding
    (UPat(GroupOp.Unary, src=(UPat(Ops.CONST),), name="a"), _fold_const),
    (UPat(GroupOp.Binary - {Ops.THREEFRY}, src=(UPat(Ops.CONST), UPat(Ops.CONST)), name="a"), _fold_const),
    (UPat(GroupOp.Ternary, src=(UPat(Ops.CONST), UPat(Ops.CONST), UPat(Ops.CONST)), name="a"), _fold_const),
    (UPat(Ops.CAST, name="root", src=(UPat.cvar("c", vec=False),)), _fold_cast),
    (UPat(Ops.BITCAST, name="root", src=(UPat.cvar("c", vec=False),)), _fold_bitcast),
    # casts
    (UPat((Ops.CAST, Ops.BITCAST), name="root"), lambda root: root.src[0] if root.dtype is root.src[0].dtype else None),
    (UPat.var("x").cast(name="a").cast(name="b"),
     lambda x, a, b: x if x.dtype is b.dtype and can_lossless_cast(b.dtype, a.dtype) else None),
    (UPat(Ops.BITCAST, name="b", src=(UPat(Ops.BITCAST, src=(UPat.var("x"),)),)), lambda x, b: x.bitcast(b.dtype)),
    # where
    (UPat.var().where(UPat.var("val"), UPat.var("val")), lambda val: val),
    (UPat.cvar("gate", vec=False).where(UPat.var("c0"), UPat.var("c1")), lambda gate, c0, c1: c0 if gate.arg else c1),
    # a condition re-tested inside its own branch is already decided there
    (UPat.var("c", dtypes.bool).where(UPat.var("c").where(UPat.var("a"), UPat.var()), UPat.var("d")),
     lambda c, a, d: c.where(a, d)),
    (UPat.var("c", dtypes.bool).where(UPat.var("a"), UPat.var("c").where(UPat.var(), UPat.var("d"))),
     lambda c, a, d: c.where(a, d)),
])  # fmt: skip


# ---- int algebra ---------------------------------------------------------------------------------------------------


def no_wrap(x: UOp) -> bool:
    """True if the int node `x` never wraps: its exact value (from its sources' values) always fits its dtype.

    Rules that split a sum into terms or move constants across a comparison reason about the exact value; an
    unsigned sum that may wrap still has non-negative bounds, so checking vmin >= 0 alone isn't enough."""
    lo, hi = _min_max(x)
    return x.dtype.min <= lo and hi <= x.dtype.max


def _in_range(x: UOp, v: int) -> bool:
    return x.dtype.min <= v <= x.dtype.max


def split_add(x: UOp, limit: int = _MAX_TERMS) -> list[UOp] | None:
    """The terms of a chain of ADDs, left to right (None if there are more than `limit`)."""
    out: list[UOp] = []
    stack = [x]
    while stack:
        u = stack.pop()
        if u.op is Ops.ADD:
            stack.append(u.src[1])
            stack.append(u.src[0])
        else:
            out.append(u)
            if len(out) > limit:
                return None
    return out


def _term(u: UOp) -> tuple[UOp, int]:
    """A sum term as (base, coefficient)."""
    if u.op is Ops.MUL and u.src[1].op is Ops.CONST:
        return u.src[0], u.src[1].arg
    return u, 1


def _usum(dtype_like: UOp, terms: list[UOp], const: int) -> UOp:
    ret: UOp | None = None
    for t in terms:
        ret = t if ret is None else ret + t
    if ret is None:
        return dtype_like.const_like(const)
    return ret + const if const else ret


def fold_like_terms(x: UOp) -> UOp | None:
    """Combine like terms of an int sum: x*2 + y + x*3 + 1 + 2 -> x*5 + y + 3."""
    terms = split_add(x, 16)
    if terms is None or len(terms) < 3:
        return None  # two-term sums are handled by the direct rules
    coef: dict[UOp, int] = {}
    const, nconst = 0, 0
    for t in terms:
        if t.op is Ops.CONST:
            const, nconst = const + t.arg, nconst + 1
            continue
        base, c = _term(t)
        coef[base] = coef.get(base, 0) + c
    recombined = _recombine_terms(coef)
    if not recombined and len(coef) + nconst == len(terms) and (nconst == 0 or terms[-1].op is Ops.CONST) \
            and nconst <= 1:  # fmt: skip
        return None
    return _usum(x, [b * c if c != 1 else b for b, c in coef.items() if c != 0], const)


def _recombine_terms(coef: dict[UOp, int]) -> bool:
    """In place: m*(y % c) + m*c*(y // c) -> m*y. Returns True if anything changed."""
    changed = False
    for base in list(coef):
        if base not in coef or base.op is not Ops.MOD or base.src[1].op is not Ops.CONST:
            continue
        y, cu = base.src
        q = UOp(Ops.IDIV, y.dtype, (y, cu))
        m = coef[base]
        if q in coef and coef[q] == m * cu.arg:
            del coef[base], coef[q]
            coef[y] = coef.get(y, 0) + m
            changed = True
    return changed


def fold_divmod(x: UOp, c: UOp, d: UOp) -> UOp | None:
    """Simplify x // c or x % c for int c != 0 (d is the IDIV/MOD node)."""
    cv = c.arg
    if cv < 0:  # C semantics: x // -c == -(x // c), x % -c == x % c
        return -(x // -cv) if d.op is Ops.IDIV else x % -cv
    if cv == 0 or not no_wrap(x):
        return None
    if x.vmax <= 0 and x.vmin < 0 and x.op is not Ops.CONST:  # flip a non-positive numerator
        nx = (-x).simplify()
        return -(nx // cv) if d.op is Ops.IDIV else -(nx % cv)
    if x.vmin < 0:
        return None
    if d.op is Ops.MOD and x.vmax < cv:
        return x
    terms = split_add(x)
    if terms is None:
        return None
    quo: list[UOp] = []
    rem: list[UOp] = []
    qconst, rconst = 0, 0
    for t in terms:
        if t.op is Ops.CONST:
            qconst, rconst = qconst + t.arg // cv, rconst + t.arg % cv
        elif (q := t.divides(cv)) is not None:
            quo.append(q)
        elif (f := t.const_factor()) > cv and (base := t.divides(f)) is not None:
            # base*f = base*(f // c)*c + base*(f % c): e.g. (i*11 + j) % 10 -> (i + j) % 10 (a window index)
            quo.append(base * (f // cv))
            rem.append(base * (f % cv))
        else:
            rem.append(t)
    r = _usum(x, rem, rconst)
    if r.vmin < 0:
        return None
    if quo or qconst:
        if r.vmax < cv:  # x = q*c + r with 0 <= r < c
            return _usum(x, quo, qconst) if d.op is Ops.IDIV else r
        if d.op is Ops.IDIV:
            return _usum(x, quo, qconst) + r // cv
        return r % cv
    # common factor: (a*g + b*g) // (c*g) -> (a + b) // c ; % -> ((a + b) % c) * g
    g = math.gcd(cv, *[t.const_factor() for t in rem]) if rem else cv
    if g > 1 and rconst % g == 0:
        xs = x.divides(g)
        if xs is not None:
            return xs // (cv // g) if d.op is Ops.IDIV else (xs % (cv // g)) * g
    return None


def lt_fold(x: UOp, c: UOp) -> UOp | None:
    """sum(a_i * g) + r < c with 0 <= r < g and g dividing c  ->  sum(a_i) < c / g (when g does not divide c the
    comparison depends on r: (4*q + r) < 7 is false for q=1, r=3)."""
    if c.arg <= 0 or x.vmin < 0 or not no_wrap(x):
        return None
    terms = split_add(x)
    if terms is None:
        return None
    big = [t for t in terms if t.const_factor() != 1 and t.op is not Ops.CONST]
    small = [t for t in terms if t.const_factor() == 1 or t.op is Ops.CONST]
    if not big:
        return None
    g = math.gcd(*[t.const_factor() for t in big], c.arg)
    if g <= 1:
        return None
    rs = _usum(x, small, 0)
    if rs.vmin < 0 or rs.vmax >= g:
        return None
    qs = _usum(x, [t.divides(g) for t in big], 0)  # type: ignore[misc]
    return qs < c.arg // g


def _add_lt(s: UOp, x: UOp, c0: UOp, c1: UOp) -> UOp | None:
    # x + c0 < c1  <=>  x < c1 - c0, when neither side wraps
    return x < (c1.arg - c0.arg) if no_wrap(s) and _in_range(x, c1.arg - c0.arg) else None


def _mul_lt(s: UOp, x: UOp, c0: UOp, c1: UOp) -> UOp | None:
    if c0.arg > 1 and no_wrap(s):
        return x < -((-c1.arg) // c0.arg)  # x*c0 < c1  <=>  x < ceil(c1/c0)
    return None


def _move_const_up(x: UOp, c1: UOp, y: UOp) -> UOp | None:
    return (x + y) + c1 if y.op is not Ops.CONST else None


def _mul_const_up(x: UOp, c1: UOp, y: UOp) -> UOp | None:
    return (x * y) * c1 if y.op is not Ops.CONST else None


def _recombine(x: UOp, c: UOp) -> UOp:
    return x


def _max_fold(x: UOp, y: UOp) -> UOp | None:
    if x.vmin >= y.vmax:
        return x
    if x.vmax <= y.vmin:
        return y
    return None


def _nested_div(x: UOp, c1: UOp, c2: UOp) -> UOp | None:
    return x // (c1.arg * c2.arg) if c1.arg > 0 and c2.arg > 0 else None


def _nested_mod(x: UOp, c1: UOp, c2: UOp) -> UOp | None:
    return x % c2 if c1.arg > 0 and c2.arg > 0 and c1.arg % c2.arg == 0 else None


def _mod_div_zero(x: UOp, c1: UOp, c2: UOp) -> UOp | None:
    # (x % c1) // c2 -> 0 handled by bounds; (x % (c2*k)) // c2 -> (x // c2) % k for x >= 0
    if c1.arg > 0 and c2.arg > 0 and c1.arg % c2.arg == 0 and x.vmin >= 0:
        return (x // c2) % (c1.arg // c2.arg)
    return None


def _div_mod_lt(x: UOp, d: UOp, c: UOp) -> UOp | None:
    # x // d < c  ->  x < c*d  for d > 0 and x >= 0 (trunc == floor there)
    return x < c.arg * d.arg if d.arg > 0 and x.vmin >= 0 and _in_range(x, c.arg * d.arg) else None


symbolic_int = PatternMatcher([
    # canonical order: constants on the right of commutative ops
    (UPat(GroupOp.Commutative, name="a", src=(UPat(Ops.CONST), UPat.var("y"))),
     lambda a, y: a.replace(src=(y, a.src[0])) if y.op is not Ops.CONST else None),
    # bounds-based pruning: an int/bool ALU whose bounds pin its value is that constant
    (UPat(GroupOp.ALU - {Ops.THREEFRY}, name="x"), _bounds_const),
    # two-stage constant folding of associative ops: exact for wrapping ints and bools; floats only for MAX (a float
    # sum or product regrouped rounds differently: (x + 1) + 1 is not x + 2 at x = 2**24 in float32)
    *((UPat.var("x", INTS_BOOL).alu(op, UPat.cvar("c1", vec=False)).alu(op, UPat.cvar("c2", vec=False)).named("f"),
       lambda f, x, c1, c2: x.alu(f.op, c1.alu(f.op, c2))) for op in GroupOp.Associative),
    (UPat.var("x").maximum(UPat.cvar("c1", vec=False)).maximum(UPat.cvar("c2", vec=False)),
     lambda x, c1, c2: x.maximum(c1.maximum(c2)) if c1.arg == c1.arg and c2.arg == c2.arg else None),
    # combine terms
    (UPat.var("x", INTS) * UPat.cvar("c0") + UPat.var("x") * UPat.cvar("c1"), lambda x, c0, c1: x * (c0 + c1)),
    (UPat.var("x", INTS) + UPat.var("x") * UPat.cvar("c"), lambda x, c: x * (c + 1)),
    (UPat.var("x", INTS) + UPat.var("x"), lambda x: x * 2),
    (UPat(Ops.ADD, INTS, name="x"), fold_like_terms),
    # x//c*c + x%c -> x (C semantics make this an identity for every x)
    ((UPat.var("x", INTS) // UPat.cvar("c")) * UPat.cvar("c") + UPat.var("x") % UPat.cvar("c"), _recombine),
    # ((x//c)%d)*c + x%c -> x % (c*d) for x >= 0
    (((UPat.var("x", INTS) // UPat.cvar("c", vec=False)) % UPat.cvar("d", vec=False)) * UPat.cvar("c")
     + UPat.var("x") % UPat.cvar("c"),
     lambda x, c, d: x % (c.arg * d.arg) if x.vmin >= 0 and c.arg > 0 and d.arg > 0 and _in_range(x, c.arg * d.arg)
     else None),
    # distribute a constant factor over a sum with a constant: (x + c0) * c -> x*c + c0*c
    ((UPat.var("x", INTS) + UPat.cvar("c0", vec=False)) * UPat.cvar("c", vec=False),
     lambda x, c0, c: x * c + c0.arg * c.arg),
    # move constants to the top of sums and products
    ((UPat.var("x", INTS) + UPat.cvar("c1", vec=False)) + UPat.var("y"), _move_const_up),
    ((UPat.var("x", INTS) * UPat.cvar("c1", vec=False)) * UPat.var("y"), _mul_const_up),
    # div / mod
    (UPat(Ops.IDIV, INTS, name="d", src=(UPat.var("x"), UPat.cvar("c", vec=False))), fold_divmod),
    (UPat(Ops.MOD, INTS, name="d", src=(UPat.var("x"), UPat.cvar("c", vec=False))), fold_divmod),
    ((UPat.var("x", INTS) // UPat.cvar("c1", vec=False)) // UPat.cvar("c2", vec=False), _nested_div),
    ((UPat.var("x", INTS) % UPat.cvar("c1", vec=False)) % UPat.cvar("c2", vec=False), _nested_mod),
    ((UPat.var("x", INTS) % UPat.cvar("c1", vec=False)) // UPat.cvar("c2", vec=False), _mod_div_zero),
    (UPat(Ops.RANGE, src=(UPat.var("end"),), name="r") % UPat.var("end"), lambda r, end: r),
    (UPat(Ops.RANGE, src=(UPat.var("end"),), name="r") // UPat.var("end"), lambda r, end: r.const_like(0)),
    # comparisons
    ((UPat.var("x", INTS) + UPat.cvar("c0", vec=False)).named("s") < UPat.cvar("c1", vec=False), _add_lt),
    ((UPat.var("x", INTS) * UPat.cvar("c0", vec=False)).named("s") < UPat.cvar("c1", vec=False), _mul_lt),
    ((UPat.var("x", INTS) // UPat.cvar("d", vec=False)) < UPat.cvar("c", vec=False), _div_mod_lt),
    (UPat.var("x", INTS) < UPat.cvar("c", vec=False), lt_fold),
    ((UPat.var("x", INTS) * -1) < (UPat.var("y") * -1), lambda x, y: y < x),
    ((UPat.var("x", INTS) < UPat.cvar("c", vec=False)).ne(True), lambda x, c: (c - 1) < x),
    ((UPat.cvar("c", vec=False) < UPat.var("x", INTS)).ne(True), lambda x, c: x < (c + 1)),
    # max
    (UPat.var("x", INTS).maximum(UPat.var("y")), _max_fold),
    (UPat.var("x", INTS).maximum((UPat.var("x") + UPat.cvar("c", vec=False)).named("s")),
     lambda x, c, s: (s if c.arg >= 0 else x) if no_wrap(s) else None),
    # where
    (UPat.var("cond", dtypes.bool).ne(True).where(UPat.var("t"), UPat.var("f")), lambda cond, t, f: cond.where(f, t)),
    (UPat.var("a", dtypes.bool).where(UPat.var("b", dtypes.bool).where(UPat.var("c"), UPat.var("d")), UPat.var("d")),
     lambda a, b, c, d: (a & b).where(c, d)),
    # casts that don't change the value
    (UPat.var("x", INTS).cast(INTS, name="a").cast(name="b"),
     lambda x, a, b: x.cast(b.dtype) if a.dtype.min <= x.vmin and x.vmax <= a.dtype.max else None),
])  # fmt: skip

symbolic = symbolic_simple + symbolic_int


def _drop_dead(x: UOp) -> UOp | None:
    live = tuple(r for r in x.src[1:] if r.op is Ops.RANGE)
    if len(live) == len(x.src) - 1:
        return None
    return x.replace(src=(x.src[0], *live)) if live else x.src[0]


# dead-range removal: a loop that runs once is its index 0; END/REDUCE forget ranges that became constants.
# Not part of `symbolic` (stages decide when loops may disappear): use `symbolic + pm_dead_ranges`.
pm_dead_ranges = PatternMatcher([
    (UPat(Ops.RANGE, name="r", src=(UPat(Ops.CONST),)), lambda r: r.const_like(0) if r.src[0].arg <= 1 else None),
    (UPat((Ops.END, Ops.REDUCE), name="x", src=(UPat(),), allow_any_len=True), _drop_dead),
])  # fmt: skip


# the cached simplification of a node that simplifies to itself: a marker, not the node (a node whose __dict__ held
# itself would be a reference cycle, freed only by the cyclic garbage collector)
_ITSELF = object()


def simplify(u: UOp) -> UOp:
    """Run the `symbolic` rules on `u` to a fixed point (cached per node)."""
    cached: Any = u.__dict__.get("_simplified")
    if cached is not None:
        return u if cached is _ITSELF else cached
    ret = graph_rewrite(u, symbolic, name="simplify")
    u.__dict__["_simplified"] = _ITSELF if ret is u else ret
    if ret is not u:
        ret.__dict__.setdefault("_simplified", _ITSELF)
    return ret


UOp._simplifier = simplify  # UOp.simplify() runs these rules; this module, not uop.py, owns the import edge


# ---- affine decomposition (index analysis for vectorisation and the optimiser's stride checks) ----


def affine(x: UOp, v: UOp) -> tuple[int, UOp] | None:
    """(c, rest) with x == c*v + rest exactly (rest free of v), or None when x is not visibly affine in v.

    One pass over x's nodes, sources first (no recursion: index expressions can be long sums)."""
    found: dict[UOp, tuple[int, UOp] | None] = {}
    has_v: dict[UOp, bool] = {}
    for n in x.toposort():
        has_v[n] = n is v or any(has_v[s] for s in n.src)
        if n is v:
            found[n] = 1, UOp.const(n.dtype, 0)
        elif not has_v[n]:
            found[n] = 0, n
        elif n.op in (Ops.ADD, Ops.SUB) and (a := found[n.src[0]]) is not None and (b := found[n.src[1]]) is not None:
            found[n] = (a[0] + b[0], a[1] + b[1]) if n.op is Ops.ADD else (a[0] - b[0], a[1] - b[1])
        else:
            found[n] = _scaled(found, n) if n.op is Ops.MUL else None
    return found[x]


def _scaled(found: dict[UOp, tuple[int, UOp] | None], n: UOp) -> tuple[int, UOp] | None:
    """`p * CONST` (either order) of an affine p."""
    for p, q in (n.src, n.src[::-1]):
        if q.op is Ops.CONST and (a := found[p]) is not None:
            return a[0] * int(q.arg), a[1] * q
    return None
