import pytest

from tg.ir import Ops, PatternMatcher, UOp, UPat, Variable, dtypes, graph_rewrite, track_rewrites


def test_basic_rule_and_commutative() -> None:
    pm = PatternMatcher([(UPat.var("x") + UPat.const(None, 0), lambda x: x)])
    x = Variable("x", 0, 10)
    assert graph_rewrite(x + 0, pm) is x
    assert graph_rewrite(UOp.const(dtypes.int32, 0) + x, pm) is x
    assert graph_rewrite((x + 0) * 2, pm) is x * 2


def test_name_binding_consistency() -> None:
    pm = PatternMatcher([(UPat(Ops.ADD, src=(UPat.var("x"), UPat.var("x"))), lambda x: x * 2)])
    x, y = Variable("x", 0, 10), Variable("y", 0, 10)
    assert graph_rewrite(x + x, pm) is x * 2
    assert graph_rewrite(x + y, pm) is x + y


def test_repeat_src_and_any_len() -> None:
    pm = PatternMatcher([(UPat(Ops.SINK, src=UPat(Ops.CONST), name="s"), lambda s: UOp(Ops.NOOP))])
    c = UOp.const(dtypes.int32, 1)
    assert graph_rewrite(UOp.sink(c, c + 0), pm).op is Ops.SINK
    assert graph_rewrite(UOp.sink(c, UOp.const(dtypes.int32, 2)), pm).op is Ops.NOOP
    pm2 = PatternMatcher([(UPat(Ops.SINK, src=(UPat(Ops.CONST, name="a"),), allow_any_len=True), lambda a: a)])
    assert graph_rewrite(UOp.sink(c, c + 0), pm2) is c


def test_any_and_ctx() -> None:
    seen: list[int] = []
    pm = PatternMatcher(
        [
            (
                UPat.any(UPat(Ops.CONST, arg=1, name="c"), UPat(Ops.CONST, arg=2, name="c")),
                lambda ctx, c: seen.append(c.arg),
            )
        ]
    )
    graph_rewrite(
        UOp.sink(UOp.const(dtypes.int32, 1), UOp.const(dtypes.int32, 2), UOp.const(dtypes.int32, 3)), pm, ctx=seen
    )
    assert sorted(seen) == [1, 2]


def test_malformed_patterns_raise_at_construction() -> None:
    with pytest.raises(TypeError):
        UPat(op="ADD")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        UPat(Ops.ADD, src=(1, 2))
    with pytest.raises(ValueError):
        UPat(name="not an identifier")
    with pytest.raises(ValueError, match="never binds"):
        PatternMatcher([(UPat(Ops.ADD, name="x"), lambda y: y)])
    with pytest.raises(TypeError):
        PatternMatcher([(UPat(Ops.ADD), 3)])  # type: ignore[list-item]


def test_compose_and_trace() -> None:
    pm1 = PatternMatcher([(UPat.var("x") * UPat.const(None, 1), lambda x: x)])
    pm2 = PatternMatcher([(UPat.var("x") + UPat.const(None, 0), lambda x: x)])
    x = Variable("x", 0, 10)
    pm = pm1 + pm2
    assert len(pm) == 2
    with track_rewrites() as events:
        assert graph_rewrite(x * 1 + 0, pm) is x
    assert len(events) == 2 and all("test_pattern.py" in e.rule for e in events)


def test_bottom_up() -> None:
    # bottom_up applies rules to a node before its sources are rewritten; the default rewrites sources first
    marker = UOp.const(dtypes.int32, 99)
    pm = PatternMatcher([
        (UPat(Ops.MUL, src=(UPat(Ops.ADD), UPat.cvar("c"))), lambda c: marker),
        (UPat.var("x") + UPat.const(None, 0), lambda x: x),
    ])  # fmt: skip
    x = Variable("x", 0, 10)
    assert graph_rewrite((x + 0) * 2, pm) is x * 2
    assert graph_rewrite((x + 0) * 2, pm, bottom_up=True) is marker
    # bottom_up still reaches a fixed point below: sources get rewritten after the parent doesn't match
    assert graph_rewrite(UOp.sink(x + 0), pm, bottom_up=True) is UOp.sink(x)


def test_skip_keeps_nodes_and_their_sources() -> None:
    # nodes whose op is in `skip` are kept as they are, in both orders, even when a rule returns one
    x = Variable("x", 0, 10)
    fold = PatternMatcher([(UPat.var("x") + UPat.const(None, 0), lambda x: x)])
    inner = UOp(Ops.LOAD, dtypes.int32, (UOp(Ops.NOOP, dtypes.int32, (x + 0,)),))
    for bottom_up in (False, True):
        assert graph_rewrite(UOp.sink(x + 0, inner), fold, bottom_up=bottom_up) is not UOp.sink(x, inner)
        kept = graph_rewrite(UOp.sink(x + 0, inner), fold, bottom_up=bottom_up, skip=frozenset({Ops.LOAD}))
        assert kept is UOp.sink(x, inner)
    make = PatternMatcher([
        (UPat(Ops.NOOP, name="n"), lambda n: UOp(Ops.LOAD, dtypes.int32, (n.src[0] + 0,))),
        (UPat.var("x") + UPat.const(None, 0), lambda x: x),
    ])  # fmt: skip
    made = graph_rewrite(UOp(Ops.NOOP, dtypes.int32, (x,)), make, bottom_up=True, skip=frozenset({Ops.LOAD}))
    assert made is UOp(Ops.LOAD, dtypes.int32, (x + 0,))


def test_compiled_matches_interpreter() -> None:
    pat = (UPat.var("x") * UPat.cvar("c")) + UPat.var("y")
    pm_c = PatternMatcher([(pat, lambda x, c, y: x)])
    pm_i = PatternMatcher([(pat, lambda x, c, y: x)], compiled=False)
    x, y = Variable("x", 0, 10), Variable("y", 0, 10)
    for e in [x * 3 + y, y + x * 3, x + y, 3 * x + y * 2]:
        assert pm_c.rewrite(e) is pm_i.rewrite(e)


def test_three_way_permutation_and_repeat_with_names() -> None:
    x, y, z = (Variable(n, 0, 10) for n in "xyz")
    w = (x < 3).where(y, z)
    pm = PatternMatcher([(UPat(Ops.WHERE, src=[UPat(Ops.DEFINE_VAR, arg=("z", 0, 10), name="a"), UPat.var("b"),
                                              UPat.var("c")]), lambda a, b, c: a)])  # fmt: skip
    assert pm.rewrite(w) is z
    # names inside a repeated src: handled by the interpreter fallback, same semantics
    pm2 = PatternMatcher([(UPat(Ops.SINK, src=UPat(Ops.DEFINE_VAR, name="v")), lambda v: v)])
    assert pm2.rewrite(UOp.sink(x, x)) is x
    assert pm2.rewrite(UOp.sink(x, y)) is None  # v must bind one node
    assert pm2.rewrite(UOp.sink(x, x + 1)) is None


def test_dtype_matching_includes_vector_lanes() -> None:
    v = UOp.const(dtypes.float32.vec(4), (1.0, 2.0, 3.0, 4.0))
    pm = PatternMatcher([(UPat(Ops.VCONST, dtypes.float32, name="c"), lambda c: UOp(Ops.NOOP))])
    assert pm.rewrite(v) is UOp(Ops.NOOP)
    assert PatternMatcher([(UPat(Ops.VCONST, dtypes.int32), lambda: UOp(Ops.NOOP))]).rewrite(v) is None


def test_rule_returning_input_is_no_match_and_rewrite_is_memoised() -> None:
    calls: list[UOp] = []

    def f(x: UOp) -> UOp:
        calls.append(x)
        return x

    pm = PatternMatcher([(UPat(Ops.ADD, name="x"), f), (UPat(Ops.ADD, name="x"), lambda x: x.src[0])])
    a = Variable("a", 0, 1)
    shared = a + 1
    assert graph_rewrite(UOp.sink(shared * 2, shared * 3), pm) is UOp.sink(a * 2, a * 3)
    assert len(calls) == 1  # the shared node was visited once


def test_rewrite_cycle_raises() -> None:
    import tg.ir.pattern as pattern_mod

    a = Variable("a", 0, 1)
    pm = PatternMatcher([(UPat(Ops.ADD, name="x"), lambda x: x.src[1] + x.src[0])])
    old = pattern_mod.REWRITE_LIMIT
    pattern_mod.REWRITE_LIMIT = 1000
    try:
        with pytest.raises(pattern_mod.RewriteError, match="fixed point"):
            graph_rewrite(a + Variable("b", 0, 1), pm)
        with pytest.raises(pattern_mod.RewriteError, match="cycle"):
            graph_rewrite(a + Variable("b", 0, 1), pm, bottom_up=True)
    finally:
        pattern_mod.REWRITE_LIMIT = old


def test_upat_repr_and_stats() -> None:
    import tg.ir.pattern as pattern_mod
    from tg.ir import Context

    assert "Ops.ADD" in repr(UPat.var("x") + 1)
    x = Variable("x", 0, 10)
    pm = PatternMatcher([(UPat.var("x") + 0, lambda x: x)])
    with Context(TRACK_MATCH_STATS=1):
        graph_rewrite(x + 0, pm)
    assert any(v[0] >= 1 for k, v in pattern_mod.match_stats.items() if "test_pattern.py" in k)
    assert "test_pattern.py" in pattern_mod.print_match_stats(1000)


def test_debug_prints_rewrite_summary(capsys: pytest.CaptureFixture[str]) -> None:
    from tg.ir import Context

    x = Variable("x", 0, 10)
    with Context(DEBUG=7):
        graph_rewrite(x + 0, PatternMatcher([(UPat.var("x") + 0, lambda x: x)]), name="mine")
    out = capsys.readouterr().out
    assert "graph_rewrite mine" in out and "fired" in out


def test_matchers_compile_lazily_per_op() -> None:
    pm = PatternMatcher([(UPat.var("x") + 0, lambda x: x), (UPat.var("x") * 1, lambda x: x)])
    assert pm._fast == {}
    x = Variable("x", 0, 10)
    assert pm.rewrite(x + 0) is x
    assert Ops.ADD in pm._fast and Ops.MUL not in pm._fast
    assert pm.rewrite(UOp.sink(x)) is None and pm._fast[Ops.SINK] is None


def test_a_rule_returning_a_non_uop_is_named() -> None:
    x = Variable("x", 0, 10)
    pm = PatternMatcher([(UPat(Ops.ADD, name="a"), lambda a: 3)])
    with pytest.raises(TypeError, match=r"rule test_pattern.py:\d+ returned int 3 for Ops.ADD; rules must return"):
        graph_rewrite(x + 1, pm)
    with pytest.raises(TypeError, match="returned int 3"):
        graph_rewrite(x + 1, pm, bottom_up=True)
    with pytest.raises(TypeError, match=r"PatternMatcher needs a list of \(UPat, callable\) rules, got int"):
        PatternMatcher(3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="graph_rewrite needs a PatternMatcher, got list"):
        graph_rewrite(x, [pm])  # type: ignore[arg-type]
