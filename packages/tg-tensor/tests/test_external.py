"""Tensor.from_blob over numpy/ctypes memory (no copy, writes through, errors)."""

import ctypes

import numpy as np
import pytest

from tg.tensor import Tensor, dtypes


def test_from_blob_reads_the_memory_without_a_copy():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    t = Tensor.from_blob(a.ctypes.data, a.shape, dtype=dtypes.float32)
    assert t.shape == (3, 4) and t.dtype == dtypes.float32 and t.device == "CPU"
    np.testing.assert_array_equal(t.numpy(), a)
    np.testing.assert_array_equal((t * 2 + 1).numpy(), a * 2 + 1)
    a[0, 0] = 100.0  # the tensor is the memory: a later kernel sees the change
    assert (t + 0).numpy()[0, 0] == 100.0
    np.testing.assert_array_equal(Tensor.from_blob(a.ctypes.data, 12, dtype="float32").to("PYTHON").numpy(), a.ravel())


def test_from_blob_in_place_writes_go_to_the_memory():
    a = np.zeros(6, dtype=np.int32)
    t = Tensor.from_blob(a.ctypes.data, (2, 3), dtype=dtypes.int32)
    t[1, 2] = 7
    t.realize()
    assert a[5] == 7
    t.assign(Tensor([[1, 2, 3], [4, 5, 6]], dtype=dtypes.int32)).realize()
    np.testing.assert_array_equal(a, [1, 2, 3, 4, 5, 6])
    t += 10
    t.realize()
    np.testing.assert_array_equal(a, [11, 12, 13, 14, 15, 16])


def test_from_blob_ctypes_array_dtypes_and_empty():
    raw = (ctypes.c_uint16 * 4)(1, 2, 65535, 0)
    t = Tensor.from_blob(ctypes.addressof(raw), (4,), dtype=dtypes.uint16)
    assert t.tolist() == [1, 2, 65535, 0]
    assert Tensor.from_blob(ctypes.addressof(raw), (2,), dtype=dtypes.uint32).tolist() == [
        int(np.frombuffer(bytes(raw), np.uint32)[0]),
        int(np.frombuffer(bytes(raw), np.uint32)[1]),
    ]
    empty = Tensor.from_blob(0, (0, 3))
    assert empty.shape == (0, 3) and empty.numpy().shape == (0, 3) and empty.dtype == dtypes.default_float


def test_from_blob_errors():
    a = np.zeros(4, dtype=np.float32)
    with pytest.raises(ValueError, match="not aligned to float's 4 bytes"):
        Tensor.from_blob(a.ctypes.data + 1, (2,), dtype=dtypes.float32)
    with pytest.raises(ValueError, match="device PYTHON cannot use host memory at a raw pointer"):
        Tensor.from_blob(a.ctypes.data, (4,), device="PYTHON")
    with pytest.raises(TypeError, match="ptr must be an int address, got str"):
        Tensor.from_blob("0x10", (4,))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"negative dimension in shape \(-1,\)"):
        Tensor.from_blob(a.ctypes.data, (-1,))
    with pytest.raises(ValueError, match="not a valid address"):
        Tensor.from_blob(0, (4,))
