"""PyTorch habits and the wider Tensor API against numpy: argument spellings, creation and random ops, scans and
sorting, einsum, interpolate, bitcasts, in-place methods, and errors phrased in the user's terms."""

import numpy as np
import pytest

from tg.tensor import Tensor, dtypes, no_grad


def test_reduction_argument_spellings(device):
    a = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    t = Tensor(a, device=device)
    np.testing.assert_array_equal(t.sum(dim=1).numpy(), a.sum(1))
    np.testing.assert_array_equal(t.sum(axis=(0, 2), keepdims=True).numpy(), a.sum((0, 2), keepdims=True))
    np.testing.assert_array_equal(t.max(dim=-1, keepdim=True).numpy(), a.max(-1, keepdims=True))
    np.testing.assert_allclose(t.var(dim=2).numpy(), a.var(2, ddof=1), rtol=1e-6)
    np.testing.assert_allclose(t.std(0, correction=0).numpy(), a.std(0), rtol=1e-6)
    np.testing.assert_array_equal(t.argmin(dim=1).numpy(), a.argmin(1))
    assert t.any().item() and not (t < 0).any().item() and (t >= 0).all(dim=0).numpy().all()
    np.testing.assert_allclose(t.softmax(dim=1).numpy().sum(1), np.ones((2, 4)), rtol=1e-6)
    with pytest.raises(TypeError, match="both axis= and dim="):
        t.sum(axis=0, dim=1)
    with pytest.raises(IndexError, match="dimension 3 out of range for a 3-d tensor"):
        t.sum(3)


def test_logsumexp_and_softmax_extremes(device):
    assert Tensor([-np.inf, -np.inf], device=device).logsumexp().item() == -np.inf
    assert Tensor([np.inf, 1.0], device=device).logsumexp().item() == np.inf
    np.testing.assert_allclose(Tensor([1e4, 1e4 - 1], device=device).logsumexp().item(), 1e4 + np.log1p(np.exp(-1)))
    np.testing.assert_allclose(Tensor([[1e4, 0.0]], device=device).softmax(1).numpy(), [[1.0, 0.0]])
    assert Tensor([1e8], device=device).relu6().item() == 6.0
    assert Tensor([1e8], device=device).hardsigmoid().item() == 1.0
    assert Tensor([1e8], device=device).hardswish().item() == 1e8
    assert Tensor([-np.inf], device=device).logaddexp(-np.inf).item() == -np.inf


def test_dtype_arguments(device):
    assert Tensor([1, 2], dtype=np.float32, device=device).dtype is dtypes.float32
    assert Tensor([1, 2], dtype=np.dtype("int8"), device=device).dtype is dtypes.int8
    assert Tensor.zeros(2, dtype=float, device=device).dtype is dtypes.float64
    assert Tensor.ones(2, dtype=int, device=device).dtype is dtypes.int64
    assert Tensor([1.5], device=device).cast(bool).dtype is dtypes.bool
    t = Tensor([1.5, -2.5], device=device)
    assert t.double().dtype is dtypes.float64 and t.long().dtype is dtypes.int64 and t.byte().dtype is dtypes.uint8
    assert t.to(dtypes.half).dtype is dtypes.float16 and t.type_as(Tensor([1], device=device)).dtype is dtypes.int32


def test_cat_stack_forms(device):
    a, b = Tensor([[1, 2]], device=device), Tensor([[3, 4]], device=device)
    for out in (Tensor.cat([a, b]), Tensor.cat(a, b), a.cat(b), a.cat([b], dim=0)):
        assert out.tolist() == [[1, 2], [3, 4]]
    assert Tensor.stack([a, b], dim=1).shape == (1, 2, 2)
    with pytest.raises(ValueError, match="cat needs at least one tensor"):
        Tensor.cat([])


def test_creation_ops(device):
    np.testing.assert_allclose(Tensor.linspace(0, 1, 5, device=device).numpy(), np.linspace(0, 1, 5))
    np.testing.assert_allclose(Tensor.linspace(-3, 7, 11, device=device).numpy(), np.linspace(-3, 7, 11), atol=1e-6)
    assert Tensor.linspace(2, 5, 1, device=device).tolist() == [2.0]
    with pytest.raises(ValueError, match="zeros: negative dimension in shape \\(-1, 3\\)"):
        Tensor.zeros(-1, 3, device=device)
    x = Tensor.randint(3, 7, (200,), device=device).numpy()
    assert x.min() >= 3 and x.max() <= 6 and len(set(x.tolist())) == 4
    assert Tensor.randint(2, 3, low=-2, high=0, device=device).shape == (2, 3)
    assert sorted(Tensor.randperm(50, device=device).tolist()) == list(range(50))
    w = Tensor([0.0, 1.0, 0.0, 3.0], device=device)
    assert set(w.multinomial(2).tolist()) == {1, 3}
    draws = w.multinomial(400, replacement=True).numpy()
    assert set(draws.tolist()) <= {1, 3} and 0.6 < (draws == 3).mean() < 0.9
    k = Tensor.kaiming_uniform(256, 64, a=0.0, device=device).numpy()
    assert abs(k.max() - np.sqrt(6 / 64)) < 0.02 and abs(k.std() - np.sqrt(2 / 64)) < 0.01
    g = Tensor.glorot_uniform(100, 50, device=device).numpy()
    assert np.abs(g).max() <= np.sqrt(6 / 150) + 1e-6
    assert Tensor([1.0, 2.0], device=device).rand_like().shape == (2,)


def test_scans_and_sorting(device, rng):
    a = rng.standard_normal((4, 300)).astype(np.float32)  # long enough to use the blocked scan
    t = Tensor(a, device=device)
    np.testing.assert_allclose(t.cumsum(1).numpy(), np.cumsum(a, 1), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(t.cummax(dim=1).values.numpy(), np.maximum.accumulate(a, 1))
    small = a[:, :6]
    np.testing.assert_allclose(Tensor(small, device=device).cumprod(1).numpy(), np.cumprod(small, 1), rtol=1e-5)
    values, indices = Tensor(small, device=device).sort(dim=1, descending=True)
    np.testing.assert_array_equal(indices.numpy(), np.argsort(-small, 1, kind="stable"))
    np.testing.assert_array_equal(values.numpy(), -np.sort(-small, 1))
    v, i = Tensor([3.0, 1.0, 3.0, 2.0], device=device).topk(2)
    assert v.tolist() == [3.0, 3.0] and i.tolist() == [0, 2]


def test_einsum_and_interpolate(device, rng):
    a, b = rng.standard_normal((3, 4)).astype(np.float32), rng.standard_normal((4, 5)).astype(np.float32)
    np.testing.assert_allclose(Tensor.einsum("ij,jk->ik", Tensor(a, device=device), Tensor(b, device=device)).numpy(),
                               a @ b, rtol=1e-5, atol=1e-5)  # fmt: skip
    np.testing.assert_allclose(Tensor.einsum("ii", Tensor(a[:, :3], device=device)).numpy(), np.trace(a[:, :3]), 1e-6)
    x = np.arange(4, dtype=np.float32).reshape(1, 1, 4)
    np.testing.assert_allclose(Tensor(x, device=device).interpolate(7, align_corners=True).numpy().ravel(),
                               np.linspace(0, 3, 7), rtol=1e-6)  # fmt: skip
    assert Tensor(x, device=device).interpolate(8, mode="nearest").tolist() == [[[0, 0, 1, 1, 2, 2, 3, 3]]]


def test_bitcast_changes_last_dim(device):
    a = np.array([[1.5, -2.25], [3e8, 1e-3]], dtype=np.float32)
    t = Tensor(a, device=device)
    np.testing.assert_array_equal(t.bitcast(dtypes.uint8).numpy(), a.view(np.uint8))
    np.testing.assert_array_equal(t.bitcast("int16").numpy(), a.view(np.int16))
    np.testing.assert_array_equal(t.bitcast(dtypes.float64).numpy(), a.view(np.float64))
    np.testing.assert_array_equal(Tensor(a.view(np.uint8), device=device).bitcast(dtypes.float32).numpy(), a)
    np.testing.assert_array_equal(t.view(np.uint16).numpy(), a.view(np.uint16))


def test_torch_habits(device):
    t = Tensor([[1.0, -2.0, 3.0]], device=device)
    assert t.size() == (1, 3) and t.size(1) == 3 and t.dim() == 2 and t.itemsize == 4
    c = t.clone()
    assert c.tolist() == t.tolist() and c.uop is not t.uop
    assert t.cpu().device == "CPU"
    assert t.lt(0).tolist() == [[False, True, False]] and t.ge(1).tolist() == [[True, False, True]]
    assert t.logical_and(t > 0).tolist() == [[True, False, True]]
    assert Tensor([7, -7], device=device).fmod(3).tolist() == [1, -1]
    assert Tensor([6, 3], device=device).bitwise_and(5).tolist() == [4, 1]
    assert t.squeeze(0).shape == (3,) and t.expand_as(Tensor.zeros(2, 3)).shape == (2, 3)
    assert t.clamp(min=0).tolist() == [[1.0, 0.0, 3.0]] and t.clip(max=0).tolist() == [[0.0, -2.0, 0.0]]


def test_inplace_methods(device):
    t = Tensor([1.0, 2.0], device=device).contiguous().realize()
    assert t.add_(1).tolist() == [2.0, 3.0]
    t.mul_(Tensor([2.0, 0.5], device=device)).sub_(1)
    assert t.tolist() == [3.0, 0.5]
    assert t.clamp_(max=1.0).tolist() == [1.0, 0.5]
    assert t.zero_().tolist() == [0.0, 0.0] and t.fill_(4).tolist() == [4.0, 4.0]
    t.copy_(Tensor([9.0, 8.0], device=device))
    assert t.tolist() == [9.0, 8.0]
    w = Tensor([1.0, 2.0], device=device, requires_grad=True)
    with pytest.raises(RuntimeError, match="in-place"):
        w.add_(1)
    with no_grad():
        w.sub_(0.5)
    assert w.tolist() == [0.5, 1.5] and w.requires_grad


def test_errors_name_the_users_shapes(device):
    with pytest.raises(ValueError, match=r"batch dims \(2,\) and \(3,\) of \(2, 3, 4\) @ \(3, 4, 2\)"):
        Tensor.ones(2, 3, 4, device=device) @ Tensor.ones(3, 4, 2, device=device)
    with pytest.raises(ValueError, match=r"conv2d: input \(1, 3, 5, 5\) has 3 channels"):
        Tensor.ones(1, 3, 5, 5, device=device).conv2d(Tensor.ones(2, 2, 3, 3, device=device))
    with pytest.raises(ValueError, match="cross_entropy: index targets"):
        Tensor.ones(4, 3, device=device).cross_entropy(Tensor([0, 1], device=device))


def test_bits_logic_and_small_helpers(device):
    a = Tensor([0b1100, 0b1010], device=device, dtype=dtypes.uint8)
    assert a.bitwise_or(1).tolist() == [13, 11] and a.bitwise_xor(0b0110).tolist() == [10, 12]
    assert (
        a.bitwise_not().tolist() == [243, 245] and a.lshift(1).tolist() == [24, 20] and a.rshift(2).tolist() == [3, 2]
    )
    assert Tensor([0, 2], device=device).logical_not().tolist() == [True, False]
    assert Tensor([2, 0, 1], device=device).one_hot(3).tolist() == [[0, 0, 1], [1, 0, 0], [0, 1, 0]]
    gx, gy = Tensor([1, 2, 3], device=device).meshgrid(Tensor([4, 5], device=device))
    assert gx.tolist() == [[1, 1], [2, 2], [3, 3]] and gy.tolist() == [[4, 5], [4, 5], [4, 5]]
    t = Tensor([1.0, np.inf, -np.inf, np.nan], device=device)
    assert t.isfinite().tolist() == [True, False, False, False]
    assert t.element_size() == 4 and t.nbytes == 16
    assert Tensor([0.5, 1.5, 2.5, -0.5], device=device).round().tolist() == [0.0, 2.0, 2.0, -0.0]
    assert Tensor([1.0, 2.0], device=device).const_like(3).tolist() == [3.0, 3.0]
    x = Tensor(np.arange(24, dtype=np.float32).reshape(2, 12), device=device)
    np.testing.assert_array_equal(x.rearrange("b (h w) -> b w h", h=3).numpy(),
                                  np.arange(24, dtype=np.float32).reshape(2, 3, 4).transpose(0, 2, 1))  # fmt: skip
    with pytest.raises(ValueError, match="rearrange"):
        x.rearrange("b c d -> b c d")


def test_random_initialisers_statistics(device):
    Tensor.manual_seed(1)
    n = Tensor.normal(20000, mean=2.0, std=3.0, device=device).numpy()
    assert abs(n.mean() - 2.0) < 0.1 and abs(n.std() - 3.0) < 0.1
    assert Tensor.randn_like(Tensor.zeros(3, 4, device=device)).shape == (3, 4)
    s = Tensor.scaled_uniform(100, 100, device=device).numpy()
    assert np.abs(s).max() <= 0.01 + 1e-7 and s.std() > 0.004
    k = Tensor.kaiming_normal(512, 128, a=0.0, device=device).numpy()
    assert abs(k.std() - np.sqrt(2 / 128)) < 0.005


def test_max_pool_indices_and_unpool(device):
    x = np.array([[[[1, 5, 2, 0], [3, 4, 8, 1], [0, 9, 2, 2], [7, 1, 3, 6]]]], dtype=np.float32)
    values, indices = Tensor(x, device=device).max_pool2d(2, return_indices=True)
    assert values.tolist() == [[[[5.0, 8.0], [9.0, 6.0]]]] and indices.tolist() == [[[[1, 6], [9, 15]]]]
    restored = values.max_unpool2d(indices)
    expected = np.zeros_like(x)
    expected.reshape(-1)[[1, 6, 9, 15]] = [5, 8, 9, 6]
    np.testing.assert_array_equal(restored.numpy(), expected)
