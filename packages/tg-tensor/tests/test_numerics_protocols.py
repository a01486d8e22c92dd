"""Pickling keeps the values; numpy and Python conversion protocols give numbers."""

import pickle

import numpy as np
import pytest

from tg.tensor import Tensor, dtypes


@pytest.mark.parametrize("dtype", [dtypes.float32, dtypes.int32, dtypes.bfloat16, dtypes.float16, dtypes.bool])
def test_pickle_realized_tensor_keeps_data_in_own_buffer(device: str, dtype: dtypes) -> None:
    t = Tensor([[1, 0, 2], [3, 4, 0]], device=device, dtype=dtype).realize()
    u = pickle.loads(pickle.dumps(t))
    assert (u.shape, u.dtype, u.device) == (t.shape, t.dtype, t.device)
    assert u.tolist() == t.tolist()
    u.assign(u.zeros_like()).realize()  # the load has its own buffer: writing it leaves the original alone
    assert t.tolist() == Tensor([[1, 0, 2], [3, 4, 0]], dtype=dtype).tolist()


def test_pickle_lazy_tensor_and_views(device: str) -> None:
    t = Tensor.arange(12, device=device).reshape(3, 4)
    for x in (t * 2 + 1, t.T, t[1:, ::-2]):
        u = pickle.loads(pickle.dumps(x))
        np.testing.assert_array_equal(u.numpy(), x.numpy())
    assert pickle.loads(pickle.dumps(Tensor([1.0], requires_grad=True))).requires_grad is True


def test_array_protocol_and_ufuncs(device: str) -> None:
    t = Tensor([[1.0, 4.0], [9.0, 16.0]], device=device)
    a = np.asarray(t)
    assert a.dtype == np.float32 and a.tolist() == [[1.0, 4.0], [9.0, 16.0]]
    np.testing.assert_array_equal(np.sqrt(t), [[1, 2], [3, 4]])
    assert np.asarray(t, dtype=np.float64).dtype == np.float64
    assert np.array(Tensor([1, 2], device=device)).dtype == np.int32


def test_scalar_conversions(device: str) -> None:
    assert float(Tensor([2.5], device=device)) == 2.5
    assert int(Tensor([[-3.7]], device=device)) == -3
    assert int(Tensor(7, device=device)) == 7
    assert [10, 11, 12][Tensor(2, device=device)] == 12
    assert range(10)[Tensor([3], device=device)] == 3
    assert f"{Tensor([3.14159], device=device):.2f}" == "3.14"
    assert f"{Tensor(42, device=device):>5d}" == "   42"
    assert f"{Tensor([1.0, 2.0], device=device)}".startswith("tensor([1., 2.]")  # str() shows the values
    with pytest.raises(TypeError, match="one-element"):
        float(Tensor([1.0, 2.0], device=device))
    with pytest.raises(TypeError, match="integer tensors"):
        [1, 2][Tensor(1.0, device=device)]
    with pytest.raises(TypeError, match="one-element"):
        f"{Tensor([1.0, 2.0], device=device):.2f}"
