"""Symbolic simplification: canonical forms for known expressions and value preservation (hypothesis)."""

import itertools
import os
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tg.ir import Ops, UOp, Variable, cdiv, cmod, dtypes, exec_alu, simplify, symbolic
from tg.ir.pattern import graph_rewrite

x = Variable("x", 0, 100)
y = Variable("y", 0, 10)
n = Variable("n", -50, -1)
r = UOp.range(16, 0)

# (expression, expected simplified expression)
CANONICAL: list[tuple[Any, Any]] = [
    ((x * 4 + 3) // 4, x),
    ((x + 8) % 4, x % 4),
    ((x * 4 + 3) % 4, 3),
    (x + 0, x),
    (x * 1, x),
    (x * 0, 0),
    (x // 1, x),
    (x - x, 0),
    (x * 2 + x * 3, x * 5),
    ((x + 1) * 4 - 4, x * 4),
    ((x // 4) * 4 + x % 4, x),
    ((x // 2) // 3, x // 6),
    ((x % 12) % 4, x % 4),
    (x * 3 < 7, x < 3),
    (x // 4 < 3, x < 12),
    ((x + y * 8) % 8, x % 8),
    (x % 101, x),
    (x // 101, 0),
    (x < 101, True),
    (x < 0, False),
    ((x + 3) + (y + 2), (x + y) + 5),
    ((x * 6 + y * 4) // 2, x * 3 + y * 2),
    (r % 16, r),
    (r // 16, 0),
    (x.maximum(x + 1), x + 1),
    (x.maximum(y - 20), x),
    ((x < 5).where(y, y), y),
    ((x < 5).where((x < 5).where(y, 3), 4), (x < 5).where(y, 4)),
    ((x < 5).where(y, (x < 5).where(3, x)), (x < 5).where(y, x)),
    (x // -4, -(x // 4)),
    (x % -4, x % 4),
    ((y * 4 + 3) // 4 * 4, y * 4),
    (((x // 4) % 8) * 4 + x % 4, x % 32),
    ((x // 4) * 4 + y + x % 4, x + y),
    ((x % 4) * 3 + y + (x // 4) * 12 + 1, x * 3 + y + 1),
]


def _sum_terms(u: UOp) -> list[UOp]:
    return [t for s in u.src for t in _sum_terms(s)] if u.op is Ops.ADD else [u]


def same_up_to_term_order(a: UOp, b: UOp) -> bool:
    """Structural equality, treating sums as multisets of terms (simplify doesn't sort terms)."""
    if a is b:
        return True
    ta, tb = _sum_terms(a), _sum_terms(b)
    return len(ta) > 1 and sorted(map(id, ta)) == sorted(map(id, tb))


@pytest.mark.parametrize("expr,expected", CANONICAL, ids=[str(i) for i in range(len(CANONICAL))])
def test_canonical_forms(expr: UOp, expected: Any) -> None:
    got = expr.simplify()
    if isinstance(expected, UOp):
        want = expected.simplify()
        assert same_up_to_term_order(got, want), f"{expr.render(False)} -> {got.render(False)}, want {want.render()}"
    else:
        assert got.op is Ops.CONST and got.arg == expected, f"{expr.render(False)} -> {got.render(False)}"


def test_simplify_is_cached_and_a_matcher() -> None:
    e = (x * 4 + 3) // 4
    assert simplify(e) is e.simplify() is x
    assert graph_rewrite(e, symbolic) is x


def test_division_is_c_style() -> None:
    # // and % on UOps are C-style (truncate toward zero), unlike Python's floor semantics
    assert (n // 4).sym_infer({"n": -7}) == -1 and -7 // 4 == -2
    assert (n % 4).sym_infer({"n": -7}) == -3 and -7 % 4 == 1
    assert UOp.const(dtypes.int32, -7).alu(Ops.IDIV, UOp.const(dtypes.int32, 2)).simplify().arg == -3
    assert UOp.const(dtypes.int32, -7).alu(Ops.MOD, UOp.const(dtypes.int32, 2)).simplify().arg == -1
    assert cdiv(-7, 2) == -3 and cmod(-7, 2) == -1 and cdiv(7, -2) == -3 and cmod(7, -2) == 1
    # folding with a negative numerator keeps C semantics
    e = (n * 4 + 3) // 4
    for v in range(-50, 0):
        assert simplify(e).sym_infer({"n": v}) == cdiv(v * 4 + 3, 4)


# ---- property: simplify preserves value ----------------------------------------------------------------------------

VARS = [Variable("a", 0, 20), Variable("b", -10, 10), Variable("c", 1, 8), Variable("d", -30, -1)]
consts = st.integers(-12, 12)
nonzero = st.integers(-9, 9).filter(lambda v: v != 0)


def _leaf() -> st.SearchStrategy[UOp]:
    return st.one_of(st.sampled_from(VARS), consts.map(lambda v: UOp.const(dtypes.int32, v)))


def _extend(children: st.SearchStrategy[UOp]) -> st.SearchStrategy[UOp]:
    return st.one_of(
        st.tuples(children, children).map(lambda t: t[0] + t[1]),
        st.tuples(children, children).map(lambda t: t[0] - t[1]),
        st.tuples(children, consts).map(lambda t: t[0] * t[1]),
        st.tuples(children, nonzero).map(lambda t: t[0] // t[1]),
        st.tuples(children, nonzero).map(lambda t: t[0] % t[1]),
        st.tuples(children, children).map(lambda t: t[0].maximum(t[1])),
        st.tuples(children, children).map(lambda t: t[0].minimum(t[1])),
        st.tuples(children, children, children).map(lambda t: (t[0] < t[1]).where(t[1], t[2])),
        st.tuples(children, children, children).map(lambda t: (t[0].ne(t[1])).where(t[2], t[0])),
        st.tuples(children).map(lambda t: t[0] // VARS[2]),
        st.tuples(children).map(lambda t: t[0] % VARS[2]),
    )


exprs = st.recursive(_leaf(), _extend, max_leaves=12)
values = st.fixed_dictionaries({v.expr: st.integers(v.vmin, v.vmax) for v in VARS})  # type: ignore[arg-type]


N_EXAMPLES = int(os.environ.get("TG_HYP_N", "150"))  # raise it for a longer hunt (`.ci/run --full`: 400)


def ref_eval(u: UOp, vals: dict[str, int]) -> int | bool:
    """An evaluator written out here, independent of exec_alu: IDIV truncates toward zero, MOD follows the dividend."""
    cache: dict[UOp, int | bool] = {}
    for n in u.toposort():
        s = [cache[x] for x in n.src]
        if n.op is Ops.CONST:
            v: int | bool = n.arg
        elif n.op is Ops.DEFINE_VAR:
            v = vals[n.arg[0]]
        elif n.op is Ops.ADD:
            v = s[0] + s[1]
        elif n.op is Ops.MUL:
            v = s[0] * s[1]
        elif n.op in (Ops.IDIV, Ops.MOD):
            a, b = int(s[0]), int(s[1])
            q = abs(a) // abs(b) * (1 if (a < 0) == (b < 0) else -1)
            v = q if n.op is Ops.IDIV else a - b * q
        elif n.op is Ops.MAX:
            v = max(s[0], s[1])
        elif n.op is Ops.CMPLT:
            v = s[0] < s[1]
        elif n.op is Ops.CMPNE:
            v = s[0] != s[1]
        elif n.op is Ops.CMPEQ:
            v = s[0] == s[1]
        elif n.op is Ops.WHERE:
            v = s[1] if s[0] else s[2]
        elif n.op is Ops.AND:
            v = bool(s[0] and s[1]) if n.dtype is dtypes.bool else int(s[0]) & int(s[1])
        elif n.op is Ops.OR:
            v = bool(s[0] or s[1]) if n.dtype is dtypes.bool else int(s[0]) | int(s[1])
        elif n.op is Ops.XOR:
            v = s[0] != s[1] if n.dtype is dtypes.bool else int(s[0]) ^ int(s[1])
        elif n.op is Ops.NEG:
            v = -s[0]
        else:
            raise NotImplementedError(n.op)
        cache[n] = v
    return cache[u]


@settings(max_examples=N_EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(exprs, values)
def test_simplify_preserves_value(e: UOp, vals: dict[str, int]) -> None:
    before = ref_eval(e, vals)
    assert e.sym_infer(vals) == before  # the IR's own evaluator agrees with the explicit C semantics
    s = e.simplify()
    assert ref_eval(s, vals) == before, f"{e.render(False)} -> {s.render(False)} at {vals}"


@settings(max_examples=200, deadline=None)
@given(exprs)
def test_bounds_are_sound(e: UOp) -> None:
    # vmin/vmax must contain every value the expression takes (checked on a grid of the variable ranges)
    grid = [sorted({int(v.vmin), int(v.vmax), 0 if v.vmin <= 0 <= v.vmax else int(v.vmin)}) for v in VARS]  # type: ignore[call-overload]
    for combo in itertools.product(*grid):
        val = e.sym_infer({v.expr: c for v, c in zip(VARS, combo, strict=True)})
        assert e.vmin <= val <= e.vmax, f"{e.render(False)}={val} outside [{e.vmin}, {e.vmax}]"


@settings(max_examples=150, deadline=None)
@given(exprs)
def test_simplify_is_idempotent(e: UOp) -> None:
    s = e.simplify()
    assert graph_rewrite(s, symbolic) is s


@settings(max_examples=N_EXAMPLES, deadline=None)
@given(st.sampled_from([1, 2, 4, 8]), st.sampled_from([2, 4, 16]), st.integers(-8, 8), st.sampled_from([2, 3, 4, 8]),
       st.sampled_from([2, 3, 4]), st.permutations(VARS), values)  # fmt: skip
def test_index_math_preserves_value(s1: int, mult: int, off: int, d: int, m: int, vs: list[UOp],
                                    vals: dict[str, int]) -> None:  # fmt: skip
    # kernel-style index math: strided sums, div/mod splits and their recombinations, with negative variables too
    s0 = s1 * mult
    idx = vs[0] * s0 + vs[1] * s1 + vs[2] + off
    for e in [(idx // d) % m + (idx % d) * m, ((idx // s1) % mult) * s1 + idx % s1, (idx // s1) * s1 + idx % s1,
              (idx < s0).where(idx // d, idx % m), (idx * d + 1) // d, (idx + d * 3) % d]:  # fmt: skip
        assert ref_eval(e.simplify(), vals) == ref_eval(e, vals), f"{e.render(False)} -> {e.simplify().render()}"


def test_kernel_index_patterns() -> None:
    r0, r1, r2 = UOp.range(6, 0), UOp.range(3, 1), UOp.range(4, 2)
    flat = r0 * 12 + r1 * 4 + r2  # a (6, 3, 4) contiguous index
    assert ((flat // 4) % 3).simplify() is r1
    assert (flat // 12).simplify() is r0
    assert (((r0 * 3 + r1) * 4 + r2) // 4).simplify().render() == "(ridx0*3)+ridx1"
    assert (r0 * 4 + r2 < 24).simplify().arg is True
    assert ((r0 + -1) * 4 + r2).render() == "((ridx0*4)+ridx2)-4"


def test_coefficients_larger_than_the_divisor_reduce() -> None:
    # sliding-window indices: row j of a window starts at j*(n+1) in a repeated row of n, i.e. at j (mod n)
    r0, r1 = UOp.range(3, 0), UOp.range(8, 1)
    assert ((r0 * 11 + r1) % 10).simplify().render() == "ridx0+ridx1"
    assert ((r0 * 11 + r1) // 10).simplify() is r0
    i, j = Variable("i", 0, 2), Variable("j", 0, 7)
    for e in [(i * 11 + j) % 10, (i * 23 + j) % 10, (i * 23 + j + 5) // 10, (i * 17 + j * 13) % 6]:
        for vi in range(3):
            for vj in range(8):
                vals = {"i": vi, "j": vj}
                assert ref_eval(e.simplify(), vals) == ref_eval(e, vals), e.render(False)


def test_overflow_makes_bounds_the_dtype_range() -> None:
    # x * 2**30 can wrap in int32, so its bounds (and the folds that rely on them) must not assume it doesn't
    big = x * 2**30
    assert (big.vmin, big.vmax) == (dtypes.int32.min, dtypes.int32.max)
    e = big // 2**30
    for v in (0, 1, 2, 3, 7, 100):
        assert ref_eval_wrapped(e.simplify(), v) == ref_eval_wrapped(e, v)


def ref_eval_wrapped(e: UOp, v: int) -> int:
    return int(e.sym_infer({"x": v}))  # exec_alu wraps each step to int32, like the C code


def test_unsigned_constants_and_minimum() -> None:
    a = Variable("a", 0, 10, dtypes.uint32)
    assert UOp.const(dtypes.uint32, -1).arg == 2**32 - 1 and UOp.const(dtypes.int8, 200).arg == -56
    assert a.minimum(0).sym_infer({"a": 5}) == 0 and a.minimum(7).sym_infer({"a": 9}) == 7
    assert a.minimum(7).simplify().sym_infer({"a": 3}) == 3


def test_dead_range_removal() -> None:
    from tg.ir import AxisType, pm_dead_ranges

    buf = UOp.param(0, dtypes.float32, 16)
    r1, r16 = UOp.range(1, 0, AxisType.LOOP), UOp.range(16, 1, AxisType.REDUCE)
    val = buf.index(r1 * 16 + r16).load()
    ast = UOp.sink(buf.index(r1).store(val.reduce(r16, arg=Ops.ADD)).end(r1))
    out = graph_rewrite(ast, symbolic + pm_dead_ranges)
    assert not any(u.op is Ops.RANGE and u.src[0].arg == 1 for u in out.toposort())
    st = out.src[0]
    assert st.op is Ops.STORE and st.src[1].op is Ops.REDUCE and st.src[1].src[1] is r16
    assert graph_rewrite(val.reduce(r1, arg=Ops.ADD), symbolic + pm_dead_ranges).op is Ops.LOAD


def _eval_wrapping(u: UOp, vals: dict[str, int]) -> Any:
    """Evaluate with the dtype's own arithmetic (exec_alu wraps ints like C), as the generated code would."""
    cache: dict[UOp, Any] = {}
    for node in u.toposort():
        if node.op is Ops.DEFINE_VAR:
            cache[node] = vals[node.arg[0]]
        elif node.op is Ops.CONST:
            cache[node] = node.arg
        else:
            cache[node] = exec_alu(node.op, node.dtype, [cache[s] for s in node.src])
    return cache[u]


def test_unsigned_wrapping_sums_are_not_split() -> None:
    # uint8: x - 1 is x + 255, which wraps at x == 0; splitting it as if it were exact gave wrong values
    v = Variable("v", 0, 17, dtypes.uint8)
    p = Variable("p", 5, 21, dtypes.uint8) * Variable("q", 5, 21, dtypes.uint8)  # may exceed 255 and wrap
    cases = [(v + 255) // 4, (v + 255) % 4, (v + 255) < 5, (v * 16) < 100, (p + 252) // 16, (p + 252) // 16 * p,
             (v + 250).maximum(v), v.maximum(v + 250)]  # fmt: skip
    for e in cases:
        s = e.simplify()
        for vv, pv, qv in itertools.product(range(0, 18), (5, 7, 21), (5, 16)):
            env = {"v": vv, "p": pv, "q": qv}
            assert _eval_wrapping(s, env) == _eval_wrapping(e, env), (e.render(), s.render(), env)


_SMALL_INT_DTYPES = [dtypes.uint8, dtypes.int8, dtypes.uint32]
_STEP = st.tuples(st.sampled_from(["add", "mul", "sub", "idiv", "mod", "max", "lt", "ne"]), st.integers(0, 99),
                  st.integers(0, 99), st.sampled_from([-3, -1, 1, 2, 3, 4, 7, 16, 250]))  # fmt: skip


def _build_step(op: str, a: UOp, b: UOp, c: UOp) -> UOp:
    if op == "add":
        return a + b
    if op == "mul":
        return a * c
    if op == "sub":
        return a - c
    if op == "idiv":
        return a // c
    if op == "mod":
        return a % c
    if op == "max":
        return a.maximum(b)
    if op == "lt":
        return (a < c).where(a, b)
    return a.ne(c).where(b, a + c)


@settings(max_examples=N_EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(_SMALL_INT_DTYPES), st.integers(-20, 20), st.integers(0, 20), st.lists(_STEP, min_size=1,
       max_size=6), st.integers(0, 20), st.integers(0, 20))  # fmt: skip
def test_simplify_preserves_wrapping_value(dt: Any, lo: int, width: int, steps: list[Any], o0: int, o1: int) -> None:
    lo = max(lo, dt.min)
    hi = lo + width
    pool = [Variable("a", lo, hi, dt), Variable("b", lo, hi, dt)]
    for op, i, j, cv in steps:
        pool.append(_build_step(op, pool[i % len(pool)], pool[j % len(pool)], UOp.const(dt, cv)))
    e = pool[-1]
    env = {"a": lo + o0 % (width + 1), "b": lo + o1 % (width + 1)}
    assert _eval_wrapping(e.simplify(), env) == _eval_wrapping(e, env), (e.render(), e.simplify().render(), env)


def test_strided_sum_less_than_a_non_multiple_keeps_the_remainder() -> None:
    # (4*q + r) < 7 is false for q=1, r=3: folding it to q < 2 would let a padded row through a gate
    q, r = UOp.range(4, 4), UOp.range(4, 3)
    for c in (5, 6, 7, 8, 12, 13):
        e = (q * 4 + r) < c
        for qv, rv in itertools.product(range(4), range(4)):
            got = e.simplify().substitute({q: UOp.const(dtypes.int32, qv), r: UOp.const(dtypes.int32, rv)}).simplify()
            assert got.arg == (4 * qv + rv < c), f"{e.render()} -> {e.simplify().render()} at q={qv} r={rv}"
    assert ((q * 4 + r) < 8).simplify().render() == "ridx4<2"


def test_affine_decomposes_index_sums_in_one_range() -> None:
    from tg.ir.symbolic import affine

    r, q = UOp.range(8, 0), UOp.range(5, 1)
    n = Variable("n", 1, 9)
    x = (r * 3 + q * 2 + n) - r + r * 4 + 7
    c, rest = affine(x, r)  # type: ignore[misc]
    assert c == 6
    assert r not in rest.toposort()
    for rv, qv, nv in itertools.product(range(8), range(5), (1, 9)):
        env = {r: UOp.const(dtypes.int32, rv), q: UOp.const(dtypes.int32, qv), n: UOp.const(dtypes.int32, nv)}
        expected = 6 * rv + 2 * qv + nv + 7
        assert x.substitute(env).simplify().arg == c * rv + rest.substitute(env).simplify().arg == expected
    assert affine(r * r, r) is None and affine(r // 2, r) is None
    assert affine(q + 1, r) == (0, q + 1)


def test_a_simplified_node_is_freed_without_the_cyclic_collector() -> None:
    import gc
    import weakref

    gc.collect()
    gc.disable()
    try:
        unique_range = UOp.range(23, 977)  # a node no other test holds: freed as soon as it is dropped
        expr = unique_range * 3 + 1  # already simplest: simplify() returns the node itself
        simplified = (expr + 0).simplify()  # simplifies to `expr`
        assert simplified is expr and expr.simplify() is expr
        refs = [weakref.ref(unique_range), weakref.ref(expr)]
        del unique_range, expr, simplified
        assert [r() for r in refs] == [None, None]
    finally:
        gc.enable()
