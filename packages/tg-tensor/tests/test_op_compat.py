"""Behaviour fixed while running tinygrad's own op tests against tg (issue 27, item 6; scripts/tinygrad_op_tests.py):
each case here failed before its fix. Values are numpy's or torch's (listed inline; torch-marked cases compare
with torch itself)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tg.tensor import Tensor, dtypes, nn
from tg.tensor.errors import ArgumentError, DimError, DTypeError, UnsupportedMode

# ---- division with rounding modes -------------------------------------------------------------------------------


@pytest.mark.parametrize("den", [-3, -2, 2, 3])
def test_div_rounding_modes(den: int) -> None:
    num = [5, 6, 7, 0, -5, -6, -7]
    t = Tensor(num)
    assert t.div(den, rounding_mode="trunc").tolist() == [int(n / den) for n in num]
    assert t.div(den, rounding_mode="floor").tolist() == [n // den for n in num]
    assert t.div(den, rounding_mode="trunc").dtype is dtypes.int32
    f = Tensor([float(n) for n in num]).div(float(den), rounding_mode="floor")
    np.testing.assert_array_equal(f.numpy(), np.floor(np.array(num, np.float32) / den))
    with pytest.raises(RuntimeError, match="rounding_mode"):
        t.div(den, rounding_mode="typo")


# ---- reductions over empty dims give the identity ---------------------------------------------------------------


def test_reductions_over_empty_dims() -> None:
    x = Tensor.ones(1, 0, 3, 0, 5)
    assert x.all(axis=(1, 3)).shape == (1, 3, 5) and x.all(axis=(1, 3)).numpy().all()
    assert not x.any(axis=(1, 3)).numpy().any()
    e = Tensor.ones(2, 0)
    assert e.max(1).tolist() == [-math.inf, -math.inf] and e.min(1).tolist() == [math.inf, math.inf]
    assert e.prod(1).tolist() == [1.0, 1.0] and e.sum(1).tolist() == [0.0, 0.0]
    assert Tensor.ones(2, 4, 0).cumprod(2).shape == (2, 4, 0)


def test_cummax_and_cummin_return_values_and_indices() -> None:
    values, indices = Tensor([1.0, 3.0, 3.0, 2.0, 5.0]).cummax(0)
    assert values.tolist() == [1.0, 3.0, 3.0, 3.0, 5.0] and indices.tolist() == [0, 1, 2, 2, 4]  # torch's
    low = Tensor([[4, 3, 5, 1]]).cummin(1)
    assert low.values.tolist() == [[4, 3, 3, 1]] and low.indices.tolist() == [[0, 1, 1, 3]]
    assert Tensor.ones(2, 0, 4).cummax(1).values.shape == (2, 0, 4)


def test_var_std_with_no_degrees_of_freedom_divide_by_zero() -> None:
    x = Tensor([[1.0, 2.0, 4.0]])
    assert math.isnan(x.var(0).tolist()[0])  # 0 / 0, as torch
    assert x.var(1, correction=3).tolist() == [math.inf]  # sum of squares / 0


# ---- gradients at ties and boundaries (torch's conventions) ----------------------------------------------------


def test_clip_gradient_includes_the_boundaries() -> None:
    x = Tensor([-3.0, -2.5, 0.0, 1.5, 2.0])
    (g,) = x.clip(-2.5, 1.5).sum().gradient(x)
    assert g.tolist() == [0.0, 1.0, 1.0, 1.0, 0.0]


def test_minimum_splits_the_gradient_of_ties() -> None:
    x = Tensor([1.0, 0.0, 3.0, -4.0])
    (g,) = x.minimum(3.0).sum().gradient(x)
    assert g.tolist() == [1.0, 1.0, 0.5, 1.0]
    assert math.isnan(Tensor([math.nan]).minimum(1.0).item())


def test_abs_and_copysign_have_zero_gradient_at_zero() -> None:
    x = Tensor([-1.0, -0.0, 0.0, 1.0])
    (g,) = x.abs().sum().gradient(x)
    assert g.tolist() == [-1.0, 0.0, 0.0, 1.0]
    assert x.abs().tolist() == [1.0, 0.0, 0.0, 1.0] and math.isnan(Tensor([math.nan]).abs().item())
    (g2,) = x.copysign(-1.0).sum().gradient(x)
    assert g2.tolist() == [1.0, 0.0, 0.0, -1.0]


def test_backward_of_a_graph_without_requires_grad_fills_its_tensors() -> None:
    x = Tensor([-1.0, 2.0, -3.0])  # tinygrad's habit: nothing asked for gradients
    (x * (x < 0)).sum().backward()
    assert x.grad is not None and x.grad.tolist() == [1.0, 0.0, 1.0]
    with pytest.raises(RuntimeError, match="does not require grad"):
        Tensor([1, 2]).sum().backward()


# ---- bitwise operators --------------------------------------------------------------------------------------------


def test_reflected_bitwise_operators_and_masks() -> None:
    t = Tensor([1, 2, 3])
    assert (1 & t).tolist() == [1, 0, 1] and (6 | t).tolist() == [7, 6, 7] and (1 ^ t).tolist() == [0, 3, 2]
    assert (1 << t).tolist() == [2, 4, 8] and t.bitwise_and(2, reverse=True).tolist() == [0, 2, 2]
    assert (Tensor([0], dtype=dtypes.int32) | 0xFFFFFFFF).item() == -1  # an unsigned bit mask is its bit pattern
    with pytest.raises(DTypeError, match="<<: needs integer or bool"):
        Tensor([1.0]) << 2


# ---- argument errors are the types torch and tinygrad raise ----------------------------------------------------


ERROR_CASES: list[tuple[object, type]] = [
    (lambda: Tensor(3.14).cat(Tensor(3.14)), IndexError),
    (lambda: Tensor(3.14) @ Tensor.ones(3, 3), RuntimeError),
    (lambda: Tensor.ones(2, 4).matmul(Tensor.ones(1, 3)), RuntimeError),
    (lambda: Tensor.ones(3, 4, 5, 6).permute(0, 2), RuntimeError),
    (lambda: Tensor.ones(3, 4).flip((1, -1)), RuntimeError),
    (lambda: Tensor.ones(3, 3).diagonal(dim1=0, dim2=0), RuntimeError),
    (lambda: Tensor(1.0).squeeze(1), IndexError),
    (lambda: Tensor.ones(8).unfold(0, 9, 3), RuntimeError),
    (lambda: Tensor.ones(3, 3, 3).pad((3, 0), mode="typo"), NotImplementedError),
    (lambda: Tensor.linspace(5, 10, 3, dtype="bool"), ValueError),
    (lambda: Tensor([-2, 0, 2]) ** -2, RuntimeError),
    (lambda: Tensor.ones(2, 4).roll((1, 2)), RuntimeError),
    (lambda: Tensor.empty(2, -3), ValueError),
    (lambda: Tensor.randint((2, -3)), ValueError),
    (lambda: Tensor.kaiming_uniform((-3, 3), 3), ValueError),
    (lambda: Tensor([1.0, 2.0]).prod(dtype=""), AttributeError),
    (lambda: Tensor.stack((Tensor([1, 2]), Tensor([3, 4])), Tensor([5, 6])), ValueError),
    (lambda: Tensor.ones(10, 11, 12)[Tensor([True, False])], IndexError),
]


@pytest.mark.parametrize(("make", "error"), ERROR_CASES, ids=[str(i) for i in range(len(ERROR_CASES))])
def test_error_types(make: object, error: type) -> None:
    with pytest.raises(error):
        make()  # type: ignore[operator]


def test_error_classes_keep_their_old_bases() -> None:
    assert issubclass(ArgumentError, ValueError) and issubclass(ArgumentError, RuntimeError)
    assert issubclass(DimError, IndexError) and issubclass(UnsupportedMode, NotImplementedError)
    assert issubclass(DTypeError, TypeError) and issubclass(DTypeError, RuntimeError)


# ---- shapes and arguments tinygrad accepts ------------------------------------------------------------------------


def test_reshape_none_keeps_a_dim_and_unfold_of_size_zero() -> None:
    assert Tensor.ones(4, 3, 6, 6).reshape((None, None, 36)).shape == (4, 3, 36)
    assert Tensor.ones(3, 3, 3).unfold(1, 0, 8).shape == (3, 1, 3, 0)
    assert Tensor.arange(8).reshape(2, 4).roll((1,)).tolist() == [[7, 0, 1, 2], [3, 4, 5, 6]]


def test_meshgrid_takes_scalars_and_arange_widens() -> None:
    grids = Tensor([0.0, 1.0]).meshgrid(Tensor(10.0), Tensor([3.0, 4.0, 5.0]))
    assert [g.shape for g in grids] == [(2, 1, 3)] * 3 and grids[1].numpy().max() == 10.0
    big = Tensor.arange(2**31, 2**31 + 3)
    assert big.dtype is dtypes.int64 and big.tolist() == [2**31, 2**31 + 1, 2**31 + 2]


def test_arange_out_of_its_dtype_raises_before_allocating() -> None:
    with pytest.raises(OverflowError, match="8589934591 is out of range"):
        Tensor.arange(2**33, dtype=dtypes.int32)  # was: a 32 GiB buffer built before any check
    with pytest.raises(OverflowError, match="128 is out of range"):
        Tensor.arange(129, dtype=dtypes.int8)
    with pytest.raises(OverflowError, match="-129 is out of range"):
        Tensor.arange(127, -130, -1, dtype=dtypes.int8)
    assert Tensor.arange(-128, 128, dtype=dtypes.int8).tolist() == list(range(-128, 128))


def test_nonzero_and_masked_select_with_size() -> None:
    assert Tensor([1, 0, 2, 0, 3]).nonzero(size=5, fill_value=-1).tolist() == [[0], [2], [4], [-1], [-1]]
    assert Tensor([[1, 0], [0, 2]]).nonzero(size=2).tolist() == [[0, 0], [1, 1]]
    assert Tensor(5).nonzero(size=4).shape == (4, 0)
    t, mask = Tensor(list(range(9))), Tensor([True, False, True, False, True, False, False, False, True])
    assert t.masked_select(mask, size=6, fill_value=-1).tolist() == [0, 2, 4, 8, -1, -1]
    assert Tensor([1.0, 2.0]).masked_select(Tensor([True, False]), size=3, fill_value=-1).dtype is dtypes.float32


def test_tuples_inside_an_index_are_index_lists() -> None:
    x = Tensor(np.arange(24).reshape(2, 3, 4))
    assert x[(1, 0), :, 0].tolist() == np.arange(24).reshape(2, 3, 4)[[1, 0], :, 0].tolist()
    assert x[((0,),)].shape == (1, 3, 4)


def test_normalize_with_p_zero_and_negative() -> None:
    a = np.array([[1.0, 0.0, -2.0], [3.0, 4.0, 0.0]], np.float32)
    np.testing.assert_allclose(Tensor(a).normalize(p=0).numpy(), a / (a != 0).sum(1, keepdims=True))
    with np.errstate(divide="ignore"):
        ref = a / np.maximum((np.abs(a) ** -1).sum(0) ** -1, 1e-12)
    np.testing.assert_allclose(Tensor(a).normalize(p=-1, dim=0).numpy(), ref, rtol=1e-5)


def test_int_power_with_a_float_exponent_is_float() -> None:
    assert (Tensor([1, 2, 3], dtype=dtypes.int32) ** 2.0).dtype is dtypes.float32
    assert (Tensor([1, 2, 3]) ** 2).dtype is dtypes.int32


def test_reflect_padding_pads_before_cropping() -> None:
    x = np.arange(25, dtype=np.float32).reshape(1, 1, 5, 5)
    got = Tensor(x).pad((3, -3, 0, -3), mode="reflect").numpy()
    ref = np.pad(x, ((0, 0), (0, 0), (0, 0), (3, 0)), mode="reflect")[..., :5, :5][..., :2, :]
    np.testing.assert_array_equal(got, ref)


def test_uint8_interpolate_keeps_its_dtype() -> None:
    img = Tensor(np.arange(64, dtype=np.uint8).reshape(1, 1, 8, 8))
    out = img.interpolate(size=(4, 4), mode="nearest")
    expected = np.arange(64).reshape(8, 8)[::2, ::2][None, None]
    assert out.dtype is dtypes.uint8 and out.numpy().tolist() == expected.tolist()


def test_scaled_dot_product_attention_refuses_mask_and_causal() -> None:
    q = Tensor.randn(1, 2, 4, 8)
    with pytest.raises(RuntimeError, match="not both"):
        q.scaled_dot_product_attention(q, q, attn_mask=Tensor.ones(1, 2, 4, 4), is_causal=True)


def test_nll_loss_keeps_the_spatial_order() -> None:
    rng = np.random.default_rng(0)
    logits = rng.standard_normal((2, 4, 3, 5)).astype(np.float32)
    target = rng.integers(0, 4, (2, 3, 5))
    logp = logits - np.log(np.exp(logits).sum(1, keepdims=True))
    ref = -np.take_along_axis(logp, target[:, None], 1).mean()
    got = Tensor(logits).log_softmax(1).nll_loss(Tensor(target.astype(np.int32))).item()
    assert got == pytest.approx(ref, rel=1e-5)
    assert Tensor(logits).cross_entropy(Tensor(target.astype(np.int32))).item() == pytest.approx(ref, rel=1e-5)
    assert nn.functional.nll_loss(Tensor(logp), Tensor(target.astype(np.int32))).item() == pytest.approx(ref, rel=1e-5)


def test_gradients_stay_finite_far_out() -> None:
    x = Tensor([300.0, -300.0])
    (g,) = x.tanh().sum().gradient(x)
    assert g.tolist() == [0.0, 0.0]  # torch: 1 - tanh^2 = 0 (was NaN: the series branch overflowed)
    y = Tensor([350.0, -350.0])
    assert y.gelu().sum().gradient(y)[0].tolist() == [1.0, 0.0]
    assert y.gelu(approximate="tanh").sum().gradient(y)[0].tolist() == [1.0, 0.0]
    assert y.erf().sum().gradient(y)[0].tolist() == [0.0, 0.0]


def test_isclose_of_infinities_and_logcumsumexp_spread() -> None:
    a = Tensor([math.inf, -math.inf, math.inf, 0.0])
    b = Tensor([math.inf, math.inf, -math.inf, 0.0])
    assert a.isclose(b).tolist() == [True, False, False, True]
    x = Tensor([0.0, 100.0])
    assert x.logcumsumexp().tolist() == [0.0, 100.0]  # each prefix shifted by its own max (was 0.0169)


def test_clip_without_bounds_and_tensor_slice_bounds_raise() -> None:
    x = Tensor([1.0, 2.0])
    with pytest.raises(RuntimeError, match="give min, max or both"):
        x.clip()
    assert x.clip(max=1.5).tolist() == [1.0, 1.5]
    a = Tensor.ones(4, 3)
    with pytest.raises(TypeError, match="slice bound"):
        a[: Tensor([3]), 1]
    assert a[:3, 1].shape == (3,)
