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
    # bottom_up sees the parent before its children get rewritten
    pm = PatternMatcher(
        [
            (UPat(Ops.MUL, src=(UPat(Ops.ADD, name="a"), UPat.cvar("c"))), lambda a, c: a.src[0] * c + a.src[1] * c),
            (UPat.var("x") + UPat.const(None, 0), lambda x: x),
        ]
    )
    x = Variable("x", 0, 10)
    out_td = graph_rewrite((x + 0) * 2, pm)
    assert out_td is x * 2
    out_bu = graph_rewrite((x + 0) * 2, pm, bottom_up=True)
    assert out_bu is not None


def test_compiled_matches_interpreter() -> None:
    pat = (UPat.var("x") * UPat.cvar("c")) + UPat.var("y")
    pm_c = PatternMatcher([(pat, lambda x, c, y: x)])
    pm_i = PatternMatcher([(pat, lambda x, c, y: x)], compiled=False)
    x, y = Variable("x", 0, 10), Variable("y", 0, 10)
    for e in [x * 3 + y, y + x * 3, x + y, 3 * x + y * 2]:
        assert pm_c.rewrite(e) is pm_i.rewrite(e)
