import math
import pickle
import weakref

import pytest

from tg.ir import AxisType, Ops, UOp, Variable, dtypes, resolve, smax, smin, sym_infer
from tg.ir import __all__ as ir_all


def test_hash_consing_and_weakref() -> None:
    a = UOp.const(dtypes.int32, 3)
    b = UOp.const(dtypes.int32, 3)
    assert a is b
    assert (a + 1) is (b + 1)
    r = weakref.ref(a)
    assert r() is a
    assert UOp.const(dtypes.float32, 0.0) is not UOp.const(dtypes.float32, -0.0)


def test_eq_is_identity_and_eq_method_builds_node() -> None:
    x = Variable("x", 0, 10)
    assert x == x
    assert x != Variable("y", 0, 10)
    assert x.eq(3).op is Ops.CMPEQ and x.eq(3).dtype is dtypes.bool
    assert x.ne(3).op is Ops.CMPNE
    assert {x: 1}[Variable("x", 0, 10)] == 1


def test_immutable() -> None:
    x = Variable("x", 0, 10)
    with pytest.raises(AttributeError, match="immutable"):
        x.arg = 3  # type: ignore[misc]


def test_operators_and_dtypes() -> None:
    x = Variable("x", 0, 10)
    assert (x + 1).op is Ops.ADD
    assert (x * 2).op is Ops.MUL
    assert (x // 2).op is Ops.IDIV
    assert (x % 2).op is Ops.MOD
    assert (x < 2).dtype is dtypes.bool
    assert (3 - x).op is Ops.ADD
    assert (x << 1).op is Ops.SHL and (x >> 1).op is Ops.SHR
    assert (x & 1).op is Ops.AND and (x | 1).op is Ops.OR and (x ^ 1).op is Ops.XOR
    assert (x < 3).where(x, 0).op is Ops.WHERE
    f = UOp.const(dtypes.float32, 2.0)
    assert f.sqrt().op is Ops.SQRT and f.exp2().op is Ops.EXP2 and f.log2().op is Ops.LOG2
    assert f.sin().op is Ops.SIN and f.reciprocal().op is Ops.RECIPROCAL and f.trunc().op is Ops.TRUNC
    assert (f / 2.0).op is Ops.FDIV
    assert f.cast(dtypes.int32).dtype is dtypes.int32
    assert f.bitcast(dtypes.uint32).op is Ops.BITCAST


def test_ill_typed_raises() -> None:
    x = Variable("x", 0, 10)
    f = UOp.const(dtypes.float32, 1.0)
    with pytest.raises(TypeError, match=r"Ops.ADD.*dtypes.int32.*dtypes.float32"):
        UOp(Ops.ADD, dtypes.int32, (x, f))
    with pytest.raises(TypeError, match="Python float"):
        _ = x + 1.5
    with pytest.raises(TypeError, match="WHERE"):
        UOp(Ops.WHERE, dtypes.int32, (x, x, x))
    with pytest.raises(TypeError, match="src must be a tuple"):
        UOp(Ops.ADD, dtypes.int32, [x, x])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="hashable"):
        UOp(Ops.CUSTOM, arg=[1])
    # the basic field checks come before the ALU checks, so a bad field is named instead of crashing
    with pytest.raises(TypeError, match="src must be a tuple of UOps"):
        UOp(Ops.ADD, dtypes.int32, (x, 3))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="dtype must be a DType, got 'int32'"):
        UOp(Ops.ADD, "int32", (x, x))  # type: ignore[arg-type]


def test_ops_that_need_a_dtype_class_raise_on_the_wrong_one() -> None:
    x = Variable("x", 0, 10)
    f = UOp.const(dtypes.float32, 2.0)
    with pytest.raises(TypeError, match=r"Ops.SQRT needs a float dtype, got dtypes.int32"):
        x.sqrt()
    with pytest.raises(TypeError, match=r"Ops.EXP2 needs a float dtype"):
        UOp(Ops.EXP2, dtypes.int32, (x,))
    with pytest.raises(TypeError, match=r"Ops.AND needs an int or bool dtype, got dtypes.float32"):
        _ = f & f
    with pytest.raises(TypeError, match=r"Ops.SHL needs an int or bool dtype"):
        UOp(Ops.SHL, dtypes.float32, (f, f))
    with pytest.raises(TypeError, match=r"Ops.SIN needs a float dtype, got dtypes.int32.vec\(2\)"):
        x.broadcast(2).sin()
    # the right dtype classes still build, vectors included
    b = x < 3
    assert (b & b).dtype is dtypes.bool and (x ^ x).dtype is dtypes.int32 and (x << 1).dtype is dtypes.int32
    assert f.sqrt().dtype is dtypes.float32 and f.broadcast(4).exp2().dtype is dtypes.float32.vec(4)
    assert (x // 2).dtype is dtypes.int32 and (f % f).dtype is dtypes.float32  # float MOD is C's fmod


def test_bounds() -> None:
    x = Variable("x", 0, 10)
    assert (x * 4 + 3).vmin == 3 and (x * 4 + 3).vmax == 43
    assert (x // 3).vmax == 3
    assert (x % 4).vmin == 0 and (x % 4).vmax == 3
    assert (x - 20).vmin == -20
    r = UOp.range(16, 0)
    assert r.vmin == 0 and r.vmax == 15
    assert resolve(x < 11) is True and resolve(x < 5) is True and resolve(x < 5, False) is False


def test_variable_bind_sym_infer() -> None:
    n = Variable("n", 1, 64)
    bn = n.bind(10)
    assert bn.op is Ops.BIND and bn.unbind() == (n, 10)
    assert n.expr == "n"
    with pytest.raises(ValueError, match="out of range"):
        n.bind(100)
    assert sym_infer(n * 3 + 1, {"n": 5}) == 16
    assert sym_infer(n * 3 + 1, {n: 5}) == 16
    assert sym_infer(7, {}) == 7
    assert (n * 2 + bn).variables() == [n]
    with pytest.raises(ValueError, match=r"sym_infer: value 65 out of range \[1, 64\] of n"):
        sym_infer(n * 3 + 1, {"n": 65})
    with pytest.raises(ValueError, match="out of range"):
        (n // 2).sym_infer({n: 0})
    with pytest.raises(TypeError, match=r"bounds of a dtypes.int32 variable must be ints, got \[0.5, 1\]"):
        Variable("y", 0.5, 1)
    with pytest.raises(TypeError, match="must be ints"):
        Variable("y", 0, "8")  # type: ignore[arg-type]


def test_smax_smin() -> None:
    assert smax(1, 5, 3) == 5 and smin((4, 2)) == 2
    n = Variable("n", 1, 64)
    assert isinstance(smax(n, 3), UOp)


def test_substitute_replace_toposort() -> None:
    x, y = Variable("x", 0, 10), Variable("y", 0, 10)
    e = x * 2 + x
    assert e.substitute({x: y}) is y * 2 + y
    topo = list(e.toposort())
    assert topo[-1] is e and topo.index(x) < topo.index(x * 2)
    assert e.substitute({e: y}) is y and e.substitute({}) is e
    gated = e.toposort(gate=lambda u: u.op is not Ops.MUL)
    assert x * 2 not in gated and UOp.const(dtypes.int32, 2) not in gated and x in gated
    assert e.replace(arg=None) is e
    assert e.replace(op=Ops.MUL).op is Ops.MUL


def test_pickle_roundtrip_is_same_object() -> None:
    x = Variable("x", 0, 10)
    e = (x * 4 + 3) // 4
    assert pickle.loads(pickle.dumps(e)) is e
    assert pickle.loads(pickle.dumps(dtypes.float32.vec(4))) is dtypes.float32.vec(4)


def test_repr_pastes_back() -> None:
    x = Variable("x", 0, 10)
    c = UOp.const(dtypes.float32, math.inf)
    e = ((x * 4 + x) // 4).cast(dtypes.float32) + c
    ns = {n: getattr(__import__("tg.ir", fromlist=["x"]), n) for n in ir_all}
    ns["math"] = math
    assert eval(repr(e), ns) is e


def test_range_and_kernel_helpers() -> None:
    buf = UOp.param(0, dtypes.float32, 16)
    r = UOp.range(16, 0, AxisType.LOOP)
    assert r.arg == (0, AxisType.LOOP)
    ld = buf.index(r).load()
    assert ld.dtype is dtypes.float32
    st = buf.index(r).store(ld + 1.0).end(r)
    assert st.op is Ops.END and st.src[0].op is Ops.STORE
    red = ld.reduce(r, arg=Ops.ADD)
    assert red.op is Ops.REDUCE and red.arg is Ops.ADD
    s = UOp.sink(st, arg=None)
    assert s.op is Ops.SINK
    with pytest.raises(ValueError, match="reduce op"):
        ld.reduce(r, arg=Ops.SUB)


def test_pyrender_and_print_uops() -> None:
    from tg.ir import __all__ as names
    from tg.ir import print_uops, pyrender

    x = Variable("x", 0, 10)
    e = (x * 4 + x) % 3
    ns = {n: getattr(__import__("tg.ir", fromlist=["x"]), n) for n in names}
    exec(pyrender(e), ns)
    assert ns["ast"] is e
    listing = print_uops(list(e.toposort()))
    assert "DEFINE_VAR" in listing and "MOD" in listing


def test_render_expr() -> None:
    x, y = Variable("x", 0, 10), Variable("y", 0, 10)
    assert ((x * 4 + 3) // 4).render(simplify=False) == "((x*4)+3)//4"
    assert (x - y).render(simplify=False) == "x-y"
    assert x.maximum(y).render() == "max(x, y)"
    assert UOp.range(4, 0).render() == "ridx0"


def test_deep_graph_is_iterative() -> None:
    x = Variable("x", 0, 10)
    e = x
    for i in range(3000):
        e = e * 2 if i % 2 else e + x
    assert len(e.toposort()) > 3000
    assert repr(e).count("\n") > 3000
    # simplify is iterative too, and folds a 3000-deep sum into its closed form
    s = x
    for i in range(3000):
        s = s + x if i % 2 else s + 1
    folded = s.simplify()
    assert len(folded.toposort()) <= 5 and folded.sym_infer({"x": 3}) == 3 * 1501 + 1500


def test_cached_properties_of_deep_graphs_need_no_recursion() -> None:
    a = UOp.new_buffer("CPU", 8, dtypes.float32)
    x = a
    for _ in range(10_000):
        x = x.alu(Ops.ADD, a)
    # substitute rebuilds every node without computing its shape: .shape at the top must not recurse 10,000 deep
    y = x.substitute({a: UOp.new_buffer("CPU", 8, dtypes.float32)})
    assert y.shape == (8,) and y.device == "CPU"
    assert len(x.key) == 32 and x.key != y.key
    e = Variable("v", 0, 10)
    for _ in range(10_000):
        e = UOp(Ops.ADD, dtypes.int32, (e, UOp.const(dtypes.int32, 1)))  # built raw: bounds not computed on the way
    assert e.vmin == 10_000 and e.vmax == 10_010


def test_symbolic_helpers_on_a_3000_term_sum() -> None:
    # const_factor/divides recursed once per term
    vs = [Variable(f"v{i}", 0, 10) for i in range(3000)]
    s = vs[0] * 4
    for v in vs[1:]:
        s = s + v * 6
    assert s.const_factor() == 2 and (s + 1).const_factor() == 1
    half = s.divides(2)
    assert half is not None and half.sym_infer({f"v{i}": 1 for i in range(3000)}) == (4 + 6 * 2999) // 2
    assert s.divides(4) is None
    assert UOp.const(dtypes.int32, -6).const_factor() == -6 and (vs[0] * -3).const_factor() == -3


def test_repr_of_a_deep_graph_grows_linearly() -> None:
    a = UOp.new_buffer("CPU", 8, dtypes.float32)
    x = a
    for _ in range(10_000):
        x = x.alu(Ops.ADD, a)
    text = repr(x)
    assert text.count("\n") > 10_000 and len(text) < 400 * 10_000  # indentation stops growing: was 200 MB


def test_const_vector_and_nan() -> None:
    v = UOp.const(dtypes.float32.vec(2), (1.0, 2.0))
    assert v.op is Ops.VCONST and v.arg == (1.0, 2.0)
    assert UOp.const(dtypes.float32.vec(2), (3.0, 3.0)).op is Ops.CONST
    assert UOp.const(dtypes.float32, math.nan) is UOp.const(dtypes.float32, float("nan"))
    assert UOp.const(dtypes.int32, 2.7).arg == 2


def test_op_groups() -> None:
    from tg.ir import GroupOp

    assert GroupOp.ALU == GroupOp.Unary | GroupOp.Binary | GroupOp.Ternary
    assert Ops.ADD in GroupOp.Commutative and Ops.IDIV not in GroupOp.Commutative
    assert GroupOp.Movement == {Ops.RESHAPE, Ops.PERMUTE, Ops.EXPAND, Ops.PAD, Ops.SHRINK, Ops.FLIP}
    assert Ops.STORE in GroupOp.Ordering and Ops.COPY in GroupOp.Markers and Ops.GEP in GroupOp.CodegenOnly
    assert repr(AxisType.REDUCE) == "AxisType.REDUCE" and repr(Ops.ADD) == "Ops.ADD"
    assert len(AxisType) == 10


def test_pickle_deep_graph() -> None:
    x = Variable("x", 0, 10)
    e = x
    for i in range(5000):
        e = e + x if i % 2 else e * 2
    assert pickle.loads(pickle.dumps(e)) is e
    b = UOp.new_buffer("CPU", 4, dtypes.float32)
    t = b.reshape((2, 2))
    for _ in range(300):
        t = t + 1.0
    t2, b2 = pickle.loads(pickle.dumps((t, b)))
    assert t2.buf_uop is b2 and b2 is not b  # the buffer is shared inside one load, fresh against the original


def test_cast_and_bitcast_check_their_targets() -> None:
    f = UOp.const(dtypes.float32, 1.0)
    assert f.bitcast(dtypes.int32).dtype is dtypes.int32 and f.cast(dtypes.int8).dtype is dtypes.int8
    assert f.broadcast(2).bitcast(dtypes.float16.vec(4)).dtype is dtypes.float16.vec(4)  # same total size
    with pytest.raises(TypeError, match=r"bitcast needs equal sizes, got dtypes.float32 \(4 bytes\) -> dtypes.int64"):
        f.bitcast(dtypes.int64)
    with pytest.raises(TypeError, match=r"cast: can.t convert dtypes\.float32 to dtypes\.void"):
        f.cast(dtypes.void)
    with pytest.raises(TypeError, match="target must be a DType, got 'int32'"):
        f.cast("int32")  # type: ignore[arg-type]


def test_range_checks_its_end_and_axis_type() -> None:
    with pytest.raises(ValueError, match="range: end must be a non-negative int or an int UOp, got -5"):
        UOp.range(-5, 0)
    with pytest.raises(ValueError, match=r"got 5\.0"):
        UOp.range(5.0, 0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="int UOp"):
        UOp.range(UOp.const(dtypes.float32, 4.0), 0)
    with pytest.raises(TypeError, match="axis_type must be an AxisType"):
        UOp.range(4, 0, "LOOP")  # type: ignore[arg-type]
    n = Variable("n", 1, 8)
    assert UOp.range(n, 0).vmax == 7 and UOp.range(0, 1).src[0].arg == 0


def test_range_accessors() -> None:
    n = Variable("n", 1, 8)
    r = UOp.range(12, 3, AxisType.REDUCE)
    assert (r.axis_id, r.axis_type, r.range_size) == (3, AxisType.REDUCE, 12)
    s = UOp.range(n, 5)
    assert (s.axis_id, s.axis_type) == (5, AxisType.LOOP) and s.range_size is n
    # a third arg element (e.g. the blocked-loop marker) does not change the accessors
    b = UOp(Ops.RANGE, dtypes.int32, (UOp.const(dtypes.int32, 4),), (7, AxisType.UNROLL, "block"))
    assert (b.axis_id, b.axis_type, b.range_size) == (7, AxisType.UNROLL, 4)
    for name in ("axis_id", "axis_type", "range_size"):
        with pytest.raises(TypeError, match=r"Ops.ADD is not a RANGE"):
            getattr(r + 1, name)


def test_const_arg_must_have_the_dtype_python_type() -> None:
    # True == 1 == 1.0 hash alike: a wrongly typed CONST would be handed back to every later UOp.const of that value.
    # (A live node with an equal arg is returned as is, so the raising cases use values no other test builds.)
    with pytest.raises(TypeError, match=r"CONST of dtypes.int32 needs a int arg, got 987654321.0"):
        UOp(Ops.CONST, dtypes.int32, (), 987654321.0)
    with pytest.raises(TypeError, match=r"CONST of dtypes.float32 needs a float arg, got 987654321"):
        UOp(Ops.CONST, dtypes.float32, (), 987654321)
    with pytest.raises(TypeError, match=r"CONST of dtypes.bool needs a bool arg, got 2"):
        UOp(Ops.CONST, dtypes.bool, (), 2)
    try:
        got: UOp | None = UOp(Ops.CONST, dtypes.uint16, (), True)
    except TypeError:
        got = None
    assert got is None or got.arg.__class__ is int  # never a bool-valued int constant
    one = UOp.const(dtypes.uint16, True)
    assert one.arg.__class__ is int and UOp.const(dtypes.uint16, 1) is one
    assert UOp.const(dtypes.float32, 1).arg.__class__ is float and UOp.const(dtypes.bool, 1).arg is True


def test_unreshaped_sees_through_reshapes_only() -> None:
    b = UOp.new_buffer("CPU", 12, dtypes.float32)
    assert b.reshape((3, 4)).reshape((12, 1)).unreshaped is b and b.unreshaped is b
    view = b.reshape((3, 4)).permute((1, 0))
    assert view.unreshaped is view and view.reshape((12,)).unreshaped is view and view.base is b
