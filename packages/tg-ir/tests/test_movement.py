import pytest

from tg.ir import Ops, UOp, Variable, dtypes, sym_infer


def buf(n: int = 12) -> UOp:
    return UOp.new_buffer("CPU", n, dtypes.float32)


def test_new_buffer() -> None:
    b = buf()
    assert b.op is Ops.BUFFER and b.shape == (12,) and b.size == 12 and b.device == "CPU"
    assert b.src[0].op is Ops.UNIQUE and b.src[1].op is Ops.DEVICE
    assert buf() is not buf()
    with pytest.raises(ValueError, match="size"):
        UOp.new_buffer("CPU", -1, dtypes.float32)


def test_movement_shapes() -> None:
    t = buf().reshape((3, 4))
    assert t.shape == (3, 4) and t.ndim == 2
    assert t.permute((1, 0)).shape == (4, 3)
    assert t.reshape((3, 1, 4)).expand((3, 5, 4)).shape == (3, 5, 4)
    assert t.pad(((1, 1), (0, 2))).shape == (5, 6)
    assert t.shrink(((1, 3), (0, 2))).shape == (2, 2)
    assert t.flip((True, False)).shape == (3, 4)
    assert t.r(Ops.ADD, (1,)).shape == (3, 1)
    assert t.contiguous().shape == (3, 4)
    assert t.copy_to_device("CPU:1").device == "CPU:1"
    assert t.detach().shape == (3, 4)
    assert t.reshape((3, 4)) is t


def test_movement_errors() -> None:
    t = buf().reshape((3, 4))
    with pytest.raises(ValueError, match=r"\(3, 4\) to \(5, 4\)"):
        t.reshape((5, 4))
    with pytest.raises(ValueError, match="permutation"):
        t.permute((0, 0))
    with pytest.raises(ValueError, match="size-1"):
        t.expand((6, 4))
    with pytest.raises(ValueError, match="negative"):
        t.pad(((-1, 0), (0, 0)))
    with pytest.raises(ValueError, match="out of bounds"):
        t.shrink(((0, 4), (0, 4)))
    with pytest.raises(ValueError, match="bools"):
        t.flip((True,))
    with pytest.raises(ValueError, match="axes"):
        t.r(Ops.ADD, (2,))


def test_elementwise_needs_equal_shapes() -> None:
    a = buf().reshape((3, 4))
    b = buf().reshape((4, 3))
    with pytest.raises(ValueError, match=r"\(3, 4\) vs \(4, 3\)"):
        _ = a + b
    assert (a + a).shape == (3, 4)
    assert (a + 1.0).shape == (3, 4)
    assert (a < 1.0).shape == (3, 4)


def test_full_and_const_like() -> None:
    f = UOp.full((2, 3), 1.5, dtypes.float32, "CPU")
    assert f.shape == (2, 3) and f.device == "CPU"
    assert UOp.const(dtypes.int32, 3)._shape is None


def test_assign_checks() -> None:
    a = buf().reshape((3, 4))
    assert a.assign(a + 1.0).shape == (3, 4)
    with pytest.raises(TypeError, match="dtype mismatch"):
        a.assign(a.cast(dtypes.int32))


def test_symbolic_shape() -> None:
    n = Variable("n", 1, 10)
    b = UOp.new_buffer("CPU", 40, dtypes.float32).shrink(((0, n * 4),))
    assert sym_infer(b.shape[0], {"n": 3}) == 12
    assert b.reshape((n, 4)).shape == (n, 4)


def test_symbolic_bounds_checks_decide_by_bounds() -> None:
    # the movement mixin decides `a >= b` with one symbolic side from the bounds (undecidable: allowed)
    b = UOp.new_buffer("CPU", 40, dtypes.float32)
    inside, straddles, outside = Variable("i", 1, 8), Variable("s", 30, 50), Variable("o", 41, 60)
    assert b.shrink(((0, inside),)).shape == (inside,)  # int size >= symbolic end
    assert b.shrink(((0, straddles),)).shape == (straddles,)  # undecided by bounds: allowed
    with pytest.raises(ValueError, match=r"shrink: \(\(0, o\),\) out of bounds for shape \(40,\)"):
        b.shrink(((0, outside),))
    with pytest.raises(ValueError, match=r"shrink: \(\(i, 0\),\) out of bounds"):
        b.shrink(((inside, 0),))  # symbolic start > int end
    with pytest.raises(ValueError, match="pad: negative padding"):
        b.pad(((Variable("neg", -5, -1), 0),))
    # nodes the mixin builds are UOps, hash-consed with the ones built directly
    assert b.copy_to_device("PYTHON") is UOp(Ops.COPY, dtypes.float32, (b, UOp(Ops.DEVICE, arg="PYTHON")))
    assert b.assign(b).op is Ops.ASSIGN and b.contiguous().op is Ops.CONTIGUOUS and b.mselect(0, None).arg == (0, None)


def test_device_of_a_very_deep_graph_needs_no_recursion() -> None:
    x = UOp.new_buffer("CPU", 4, dtypes.float32)
    for _ in range(5000):
        x = x + x.const_like(1.0)
    assert x.device == "CPU"


def test_negative_sizes_and_bad_devices_raise() -> None:
    t = buf(3).reshape((3, 1))
    with pytest.raises(ValueError, match=r"expand: negative dimension in \(3, -2\)"):
        t.expand((3, -2))
    with pytest.raises(ValueError, match="negative dimension"):
        UOp.full((-2, 3), 1.0, dtypes.float32, "CPU")
    with pytest.raises(TypeError, match="copy_to_device: device must be a str"):
        t.copy_to_device(3)  # type: ignore[arg-type]
    assert t.copy_to_device(("CPU:1", "CPU:2")).op is Ops.COPY and t.copy_to_device("PYTHON").device == "PYTHON"


def test_new_buffer_needs_a_value_dtype() -> None:
    with pytest.raises(TypeError, match=r"new_buffer: dtype must be a value dtype, got dtypes\.void"):
        UOp.new_buffer("CPU", 4, dtypes.void)
    with pytest.raises(TypeError, match="value dtype"):
        UOp.new_buffer("CPU", 4, dtypes.float32.ptr())
    assert UOp.new_buffer("CPU", 4, dtypes.float16).dtype is dtypes.float16
