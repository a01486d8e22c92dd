"""Augmented assignment (`a += b` ... `a @= b`) and the `_` methods write in place like torch: other references and
views see the new value; leaves that require grad, float results into int tensors and growing broadcasts raise."""

import operator

import numpy as np
import pytest

from tg.tensor import Tensor, dtypes, no_grad

# in-place operator, numpy reference, the dtype kinds it is tested on
AUGMENTED_OPS = [
    (operator.iadd, np.add, "float int"),
    (operator.isub, np.subtract, "float int"),
    (operator.imul, np.multiply, "float int"),
    (operator.itruediv, np.divide, "float"),
    (operator.ifloordiv, np.floor_divide, "float int"),
    (operator.imod, np.mod, "float int"),
    (operator.ipow, np.power, "float"),
    (operator.iand, np.bitwise_and, "int"),
    (operator.ior, np.bitwise_or, "int"),
    (operator.ixor, np.bitwise_xor, "int"),
    (operator.ilshift, np.left_shift, "int"),
    (operator.irshift, np.right_shift, "int"),
]


def _ops_for(kind):
    return pytest.mark.parametrize(
        ("op", "ref"),
        [
            pytest.param(op, ref, id=f"{op.__name__}-{ref.__name__}")
            for op, ref, kinds in AUGMENTED_OPS
            if kind in kinds.split()
        ],
    )


@_ops_for("float")
def test_float_augmented_ops_write_in_place(op, ref):
    a_np = np.array([[1.5, -2.0, 3.0], [4.0, 0.5, -6.0]], np.float32)
    b_np = np.array([2.0, 3.0, 1.5], np.float32)  # broadcast along rows
    a = Tensor(a_np).contiguous().realize()
    alias, row = a, a[1]
    result = op(a, Tensor(b_np))
    with np.errstate(invalid="ignore"):  # a negative base to a fractional power: NaN (tg too)
        expected = ref(a_np, b_np).astype(np.float32)
    assert result is a and alias is a
    np.testing.assert_allclose(a.numpy(), expected, rtol=1e-6)
    np.testing.assert_allclose(row.numpy(), expected[1], rtol=1e-6)  # a view sees the write


@_ops_for("int")
def test_int_augmented_ops(op, ref):
    a_np = np.array([7, -8, 12, 5], np.int32)
    a = Tensor(a_np).contiguous().realize()
    view = a[1:3]
    op(a, 2)
    expected = ref(a_np, np.int32(2)).astype(np.int32)
    np.testing.assert_array_equal(a.numpy(), expected)
    np.testing.assert_array_equal(view.numpy(), expected[1:3])


def test_matmul_in_place():
    a = Tensor([[1.0, 2.0], [3.0, 4.0]]).contiguous().realize()
    alias = a
    a @= Tensor([[0.0, 1.0], [1.0, 0.0]])
    assert alias is a
    np.testing.assert_array_equal(alias.numpy(), [[2.0, 1.0], [4.0, 3.0]])


def test_lazy_tensor_in_place_and_loop_accumulation():
    acc = Tensor.zeros(3)
    for i in range(4):
        acc += Tensor([1.0, 2.0, 3.0]) * i
    np.testing.assert_array_equal(acc.numpy(), [6.0, 12.0, 18.0])


def test_float_result_into_int_tensor_raises_like_torch():
    a = Tensor([1, 2, 3])
    with pytest.raises(RuntimeError, match="/=: result type float can't be cast to the desired output type int"):
        a /= 2
    with pytest.raises(RuntimeError, match=r"\+=: result type float"):
        a += 0.5
    b = Tensor([True, False])
    with pytest.raises(RuntimeError, match="can't be cast to the desired output type bool"):
        b += 1
    assert a.tolist() == [1, 2, 3]
    f = Tensor([1.0, 2.0], dtype=dtypes.float16)
    f += Tensor([1.0, 1.0])  # float32 result into float16: same kind, allowed (torch too)
    assert f.dtype is dtypes.float16 and f.tolist() == [2.0, 3.0]


def test_broadcast_must_not_grow_self():
    a = Tensor([1.0, 2.0, 3.0])
    with pytest.raises(RuntimeError, match=r"output with shape \(3,\) doesn't match the broadcast shape \(2, 3\)"):
        a += Tensor.ones(2, 3)


def test_leaf_requiring_grad_raises_unless_no_grad():
    w = Tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(RuntimeError, match=r"-=: a leaf tensor that requires grad"):
        w -= 1
    with pytest.raises(RuntimeError, match="add_: a leaf tensor that requires grad"):
        w.add_(1)
    with no_grad():
        w -= 1
    assert w.tolist() == [0.0, 1.0] and w.requires_grad


def test_in_place_on_non_leaf_keeps_gradient():
    x = Tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = x * 2
    y += x * x  # torch allows it on a non-leaf; the graph records it
    (g,) = y.sum().gradient(x)
    np.testing.assert_array_equal(g.numpy(), [4.0, 6.0, 8.0])


@pytest.mark.torch
def test_matches_torch_semantics():
    torch = pytest.importorskip("torch")
    ta, a = torch.tensor([1.0, 2.0, 3.0]), Tensor([1.0, 2.0, 3.0]).contiguous().realize()
    tv, v = ta[1:], a[1:]
    ta *= 3
    a *= 3
    np.testing.assert_array_equal(v.numpy(), tv.numpy())
    with pytest.raises(RuntimeError):
        t = torch.tensor([1, 2])
        t /= 2
