"""Tensor construction from Python data, numpy and bytes; creation helpers; properties; bad input."""

import numpy as np
import pytest

from tg.tensor import Tensor, dtypes


def test_from_python(device):
    assert Tensor(3, device=device).dtype is dtypes.int32
    assert Tensor(3.5, device=device).item() == 3.5
    assert Tensor(True, device=device).dtype is dtypes.bool
    t = Tensor([[1, 2], [3, 4]], device=device)
    assert t.shape == (2, 2) and t.dtype is dtypes.int32 and t.ndim == 2 and t.numel() == 4
    assert t.tolist() == [[1, 2], [3, 4]]
    assert Tensor([1, 2.5], device=device).dtype is dtypes.float32
    assert Tensor([True, False], device=device).dtype is dtypes.bool
    assert Tensor([1, 2], device=device, dtype=dtypes.float16).numpy().dtype == np.float16
    assert Tensor([], device=device).shape == (0,)


@pytest.mark.parametrize("npdt", [np.float32, np.float16, np.float64, np.int32, np.int64, np.uint8, np.bool_, np.int8])
def test_from_numpy_roundtrip(npdt, device, rng):
    a = (rng.standard_normal((3, 4)) * 10).astype(npdt)
    t = Tensor(a, device=device)
    got = t.numpy()
    assert got.dtype == a.dtype and got.shape == a.shape
    np.testing.assert_array_equal(got, a)


def test_from_bytes(device):
    t = Tensor(b"\x01\x02\xff", device=device)
    assert t.dtype is dtypes.uint8 and t.tolist() == [1, 2, 255]


def test_creation_helpers(device):
    np.testing.assert_array_equal(Tensor.zeros(2, 3, device=device).numpy(), np.zeros((2, 3)))
    np.testing.assert_array_equal(Tensor.ones((2, 3), device=device).numpy(), np.ones((2, 3)))
    np.testing.assert_array_equal(Tensor.full((2,), 7, device=device).numpy(), [7, 7])
    assert Tensor.full((2,), 7, device=device).dtype is dtypes.int32
    np.testing.assert_array_equal(Tensor.arange(5, device=device).numpy(), np.arange(5))
    np.testing.assert_allclose(Tensor.arange(1, 2, 0.25, device=device).numpy(), np.arange(1, 2, 0.25))
    np.testing.assert_array_equal(Tensor.arange(10, 0, -3, device=device).numpy(), np.arange(10, 0, -3))
    np.testing.assert_array_equal(Tensor.eye(3, device=device).numpy(), np.eye(3))
    np.testing.assert_array_equal(Tensor.eye(2, 4, device=device).numpy(), np.eye(2, 4))
    np.testing.assert_array_equal(Tensor.eye(4, 2, device=device).numpy(), np.eye(4, 2))
    t = Tensor([[1.0, 2.0]], device=device)
    np.testing.assert_array_equal(t.zeros_like().numpy(), [[0, 0]])
    np.testing.assert_array_equal(t.ones_like().numpy(), [[1, 1]])
    np.testing.assert_array_equal(t.full_like(4).numpy(), [[4, 4]])
    e = Tensor.empty(3, 2, device=device)
    assert e.shape == (3, 2) and e.dtype is dtypes.float32


def test_zero_size(device):
    t = Tensor.zeros(0, 3, device=device)
    assert t.numpy().shape == (0, 3)
    assert (t + 1).numpy().shape == (0, 3)
    np.testing.assert_array_equal(t.sum(0).numpy(), [0, 0, 0])


def test_bad_input(device):
    with pytest.raises(ValueError, match="available devices"):
        Tensor([1, 2], device="NOSUCHDEVICE")
    with pytest.raises(ValueError, match="rectangular"):
        Tensor([[1, 2], [3]], device=device)
    with pytest.raises(TypeError):
        Tensor({"a": 1}, device=device)
    with pytest.raises(ValueError, match="one element"):
        Tensor([1, 2], device=device).item()
    with pytest.raises(ValueError, match="bitcast"):
        Tensor([1, 2, 3], device=device).bitcast(dtypes.int64)


def test_repr_shows_values_like_torch(device):
    from tg.tensor import Device

    t = Tensor([[1.0, 2.5], [3.0, 4.0]], device=device) + 1
    suffix = "" if Device.canonicalize(device) == Device.DEFAULT else f", device='{Device.canonicalize(device)}'"
    assert repr(t) == "tensor([[2. , 3.5],\n        [4. , 5. ]]" + suffix + ")"
    assert repr(Tensor([1, 2], device=device, dtype="int8")) == "tensor([1, 2]" + suffix + ", dtype=int8)"
    assert "requires_grad=True" in repr(Tensor([1.0], device=device, requires_grad=True))
    big = repr(Tensor.arange(2000, device=device))
    assert "..." in big and big.count(",") < 20  # summarised, as numpy/torch


def test_to_device_and_cast(device):
    other = "PYTHON" if device == "CPU" else "CPU"
    t = Tensor([1.5, -2.5], device=device)
    u = (t * 2).to(other)
    assert u.device == other
    np.testing.assert_array_equal(u.numpy(), [3.0, -5.0])
    assert t.to(device) is t
    np.testing.assert_array_equal(t.cast(dtypes.int32).numpy(), [1, -2])
    np.testing.assert_array_equal(Tensor([1.0], device=device).bitcast(dtypes.int32).numpy(), [0x3F800000])


def test_host_data_without_numpy(device):
    assert Tensor.zeros(2, 0, device=device).tolist() == [[], []]
    assert Tensor.zeros(0, 2, device=device).tolist() == []
    assert Tensor([1e10, -1e10], dtype=dtypes.float16, device=device).tolist() == [float("inf"), float("-inf")]
    assert Tensor(b"\x00\x00\x80\x3f", dtype=dtypes.float32, device=device).tolist() == [1.0]
    assert Tensor([[True, False]], device=device).tolist() == [[True, False]]
    assert Tensor(3, device=device).tolist() == 3
    assert Tensor([[1, 2], [3, 4]], device=device).T.tolist() == [[1, 3], [2, 4]]
    with pytest.raises(ValueError, match="whole number"):
        Tensor(b"\x00\x01\x02", dtype=dtypes.float32, device=device)


def test_numpy_scalars_and_dtypes(device):
    assert Tensor(np.array([1, 2], dtype=np.int64), device=device).dtype is dtypes.int64
    assert Tensor(np.uint64(5), device=device).dtype is dtypes.uint64
    assert Tensor(np.array(3.0), device=device).shape == ()
    assert Tensor([np.float32(1), np.int64(2)], device=device).dtype is dtypes.float32
    assert Tensor([np.True_], device=device).dtype is dtypes.bool
    non_contiguous = np.arange(12, dtype=np.int32).reshape(3, 4)[:, ::2]
    np.testing.assert_array_equal(Tensor(non_contiguous, device=device).numpy(), non_contiguous)
    with pytest.raises(TypeError, match="numpy dtype"):
        Tensor(np.array(["a"]), device=device)
