import pytest

from tg.ir import AxisType, KernelInfo, Ops, UOp, dtypes
from tg.ir.spec import SpecError, kernel_spec, program_spec, tensor_spec, type_verify, verify


def kernel() -> UOp:
    out, inp = UOp.param(0, dtypes.float32, 16), UOp.param(1, dtypes.float32, 64)
    i = UOp.range(16, 0, AxisType.LOOP)
    j = UOp.range(4, 1, AxisType.REDUCE)
    val = inp.index(i * 4 + j, valid=i < 15).load().reduce(j, arg=Ops.ADD)
    return UOp.sink(out.index(i).store(val * 2.0).end(i), arg=KernelInfo(name="k"))


def test_kernel_spec_accepts_ast() -> None:
    assert verify(kernel(), kernel_spec) and type_verify(kernel())


def test_kernel_spec_rejects_bad_store() -> None:
    out = UOp.param(0, dtypes.float32, 16)
    i = UOp.range(16, 0)
    bad = UOp.sink(out.index(i).store(UOp.const(dtypes.int32, 1)).end(i))
    with pytest.raises(SpecError, match=r"Ops\.STORE") as e:
        verify(bad, kernel_spec)
    assert "UOp(Ops.STORE" in str(e.value)  # the node is printed


def test_kernel_spec_rejects_index_on_non_pointer() -> None:
    i = UOp.range(16, 0)
    bad = UOp(Ops.INDEX, dtypes.float32, (UOp.const(dtypes.float32, 1.0), i))
    with pytest.raises(SpecError, match="INDEX"):
        verify(UOp.sink(bad), kernel_spec)


def test_program_spec_rejects_reduce_and_bad_order() -> None:
    with pytest.raises(SpecError, match="REDUCE"):
        verify(kernel(), program_spec)
    a = UOp.const(dtypes.int32, 1)
    b = a + UOp.const(dtypes.int32, 2)
    with pytest.raises(SpecError, match="before it is defined"):
        verify([b, a], program_spec)
    c2 = UOp.const(dtypes.int32, 2)
    assert verify([a, c2, b], program_spec)


def test_tensor_spec() -> None:
    b = UOp.new_buffer("CPU", 12, dtypes.float32)
    t = (b.reshape((3, 4)) + 1.0).r(Ops.ADD, (1,)).contiguous()
    assert verify(UOp.sink(t, b.reshape((3, 4)).assign(t.expand((3, 4)))), tensor_spec)
    # a raw node with mismatched elementwise shapes is caught
    bad = UOp(Ops.ADD, dtypes.float32, (b.reshape((3, 4)), b.reshape((4, 3))))
    with pytest.raises(SpecError, match="different shapes"):
        verify(UOp.sink(bad), tensor_spec)
    bad_mop = UOp(Ops.PERMUTE, dtypes.float32, (b,), (1, 0))
    with pytest.raises(SpecError):
        verify(UOp.sink(bad_mop), tensor_spec)
    with pytest.raises(SpecError, match="no spec rule"):
        verify(UOp.sink(UOp.range(4, 0)), tensor_spec)


def test_verify_rejects_what_is_not_a_graph_or_a_spec() -> None:
    with pytest.raises(TypeError, match="verify: graph must be a UOp or a list of UOps, got 3"):
        verify(3, kernel_spec)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="verify: graph must be a UOp or a list of UOps"):
        verify([kernel(), 3], program_spec)  # type: ignore[list-item]
    with pytest.raises(TypeError, match="verify: spec must be a PatternMatcher"):
        verify(kernel(), 3)  # type: ignore[arg-type]
    assert verify(kernel(), kernel_spec) and verify((), program_spec)


def test_kernel_spec_accepts_float_mod_but_not_float_idiv() -> None:
    out, inp = UOp.param(0, dtypes.float32, 8), UOp.param(1, dtypes.float32, 8)
    i = UOp.range(8, 0)
    x = inp.index(i).load()
    assert verify(UOp.sink(out.index(i).store(x % 0.5).end(i)), kernel_spec)  # C fmod
    bad = UOp.sink(out.index(i).store(UOp(Ops.IDIV, dtypes.float32, (x, x.const_like(0.5)))).end(i))
    with pytest.raises(SpecError, match=r"Ops\.IDIV"):
        verify(bad, kernel_spec)


def test_function_call_nodes_follow_the_tensor_spec() -> None:
    # FUNCTION(TUPLE(body outputs), *args) with one parameter per argument; GETTUPLE(call, i) has output i's shape
    param = UOp.new_buffer("CPU", 6, dtypes.float32).reshape((2, 3))
    body = UOp(Ops.TUPLE, dtypes.void, (param.alu(Ops.ADD, param), param.r(Ops.ADD, (1,))))
    arg = UOp.new_buffer("CPU", 6, dtypes.float32).reshape((2, 3))
    call = UOp(Ops.FUNCTION, dtypes.void, (body, arg), ("f", (param,)))
    outs = [UOp(Ops.GETTUPLE, dtypes.float32, (call,), i) for i in range(2)]
    assert [o.shape for o in outs] == [(2, 3), (2, 1)] and outs[0].device == "CPU"
    assert verify(UOp.sink(*outs), tensor_spec)
    bad_arity = UOp(Ops.FUNCTION, dtypes.void, (body, arg, arg), ("f", (param,)))
    with pytest.raises(SpecError):
        verify(UOp.sink(UOp(Ops.GETTUPLE, dtypes.float32, (bad_arity,), 0)), tensor_spec)
    with pytest.raises(SpecError):  # output 1 is float32, not int32
        verify(UOp.sink(UOp(Ops.GETTUPLE, dtypes.int32, (call,), 1)), tensor_spec)
