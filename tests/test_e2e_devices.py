"""Devices through the Tensor API (DISK files, CPU:1), DEBUG output, and bad input at the user boundary."""

import numpy as np
import pytest

from tg.tensor import Context, Tensor, dtypes


def test_disk_tensor_copies_to_the_device_under_test(tmp_path, device):
    path = tmp_path / "x.bin"
    path.write_bytes(np.arange(6, dtype=np.int32).tobytes())
    t = Tensor.empty(6, dtype=dtypes.int32, device=f"disk:{path}")
    assert t.device == f"DISK:{path}"
    np.testing.assert_array_equal((t.to(device) * 2).numpy(), np.arange(6) * 2)


def test_empty_disk_tensor_creates_the_file_and_reads_zeros(tmp_path, device):
    path = tmp_path / "new.bin"
    t = Tensor.empty(5, device=f"disk:{path}")
    np.testing.assert_array_equal(t.to(device).numpy(), np.zeros(5, np.float32))
    assert path.stat().st_size == 5 * 4


def test_copy_to_disk_writes_the_file(tmp_path, device):
    path = tmp_path / "out.bin"
    a = np.array([1.5, -2.0, 3.25], np.float32)
    Tensor(a, device=device).to(f"disk:{path}").realize()
    np.testing.assert_array_equal(np.frombuffer(path.read_bytes(), np.float32), a)


def test_disk_runs_no_kernels_and_says_how_to_compute(tmp_path):
    t = Tensor.empty(4, device=f"disk:{tmp_path / 'k.bin'}")
    with pytest.raises(RuntimeError, match=r"does not run kernels.*to\('CPU'\)"):
        (t + 1).realize()


def test_cpu_1_is_a_separate_device(device, rng):
    a = rng.standard_normal(8).astype(np.float32)
    t = Tensor(a, device=device)
    other = (t + 1).to("CPU:1")
    assert other.device == "CPU:1"
    np.testing.assert_allclose((other * 2).numpy(), (a + 1) * 2, rtol=1e-6)
    with pytest.raises(RuntimeError, match=f"different devices: {device} and CPU:1"):
        t + other
    np.testing.assert_allclose((other.to(device) - t).numpy(), np.ones(8), rtol=1e-6)


@pytest.mark.parametrize(
    "level,shows,hides",
    [
        (2, ["GFLOPS", "GB/s"], ["applied opts", "void ", "Ops.SINK"]),
        (3, ["GFLOPS", "applied opts"], ["void ", "Ops.SINK"]),
        (4, ["GFLOPS", "applied opts", "void "], ["Ops.SINK"]),
        (5, ["GFLOPS", "applied opts", "void ", "Ops.SINK"], []),
    ],
)
def test_debug_levels(level, shows, hides, capsys):
    # a shape no other test uses, so the kernel is compiled (and its code printed) inside this test
    t = Tensor(np.ones((7, 10 + level), np.float32), device="CPU")
    capsys.readouterr()
    with Context(DEBUG=level):
        (t * 3).sum(1).realize()
    out = capsys.readouterr().out
    for s in shows:
        assert s in out, (s, out)
    for s in hides:
        assert s not in out, (s, out)


@pytest.mark.parametrize(
    "make",
    [
        lambda d: Tensor([2**40], device=d),
        lambda d: Tensor([300], dtype=dtypes.uint8, device=d),
        lambda d: Tensor(2**40, device=d),
        lambda d: Tensor.full((2,), -1, dtype=dtypes.uint32, device=d),
        lambda d: Tensor.arange(2**31, 2**31 + 2, dtype=dtypes.int32, device=d),
        lambda d: Tensor([1, 2], device=d) + 2**40,
    ],
    ids=["list", "list_uint8", "scalar", "full_uint32", "arange", "weak_scalar"],
)
def test_ints_that_do_not_fit_raise_instead_of_wrapping(make, device):
    with pytest.raises(OverflowError, match="out of range for"):
        make(device)


def test_ints_that_fit_still_work(device):
    assert Tensor([2**40], dtype=dtypes.int64, device=device).tolist() == [2**40]
    assert Tensor([255, 0], dtype=dtypes.uint8, device=device).tolist() == [255, 0]
    big = Tensor.arange(2**31, 2**31 + 2, device=device)  # no dtype given: an int range beyond int32 is int64
    assert big.dtype is dtypes.int64 and big.tolist() == [2**31, 2**31 + 1]
    assert (~Tensor([1, 0], dtype=dtypes.uint8, device=device)).tolist() == [254, 255]
    assert (Tensor([5], dtype=dtypes.int64, device=device) + 2**40).tolist() == [2**40 + 5]


def test_duplicate_reduce_axes_raise(device):
    t = Tensor([[1, 2], [3, 4]], device=device)
    with pytest.raises(ValueError, match="duplicate axis"):
        t.sum((0, 0))
    with pytest.raises(ValueError, match="duplicate axis"):
        t.max((1, -1))
    assert t.sum((0, 1)).item() == 10


def _bf16_round(x: np.ndarray) -> np.ndarray:
    """float32 -> the nearest bfloat16 (ties to even), as float32: an independent numpy reference."""
    u = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    return (((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16).astype(np.uint32).view(np.float32)


def test_bfloat16_from_lists_and_numpy_and_back(device, rng):
    a = (rng.standard_normal(16) * 100).astype(np.float32)
    want = _bf16_round(a)
    for data in (a.tolist(), a):
        t = Tensor(data, dtype=dtypes.bfloat16, device=device)
        assert t.dtype is dtypes.bfloat16
        np.testing.assert_array_equal(np.array(t.tolist(), np.float32), want)
        np.testing.assert_array_equal(t.float().numpy(), want)
        np.testing.assert_array_equal(np.array((t * 2).tolist(), np.float32), _bf16_round(want * 2))
    assert Tensor(3.3, dtype=dtypes.bfloat16, device=device).item() == float(_bf16_round(np.array([3.3]))[0])
    with pytest.raises(ValueError, match=r"no numpy dtype.*float\(\)"):
        Tensor(a, dtype=dtypes.bfloat16, device=device).numpy()


def test_fp8_lists_round_trip(device):
    t = Tensor([0.3, 448.0, -2.0], dtype=dtypes.fp8e4m3, device=device)
    assert t.tolist() == [0.3125, 448.0, -2.0]
    assert t.float().tolist() == [0.3125, 448.0, -2.0]


def test_contiguous_slices_of_a_disk_tensor_copy_out(tmp_path, device):
    path = tmp_path / "w.bin"
    data = np.arange(24, dtype=np.float32)
    data.tofile(path)
    m = Tensor.empty(4, 6, device=f"disk:{path}")
    np.testing.assert_array_equal(m[1:3].to(device).numpy(), data.reshape(4, 6)[1:3])
    np.testing.assert_array_equal((m[2, 1:4].to(device) * 2).numpy(), data.reshape(4, 6)[2, 1:4] * 2)
    np.testing.assert_array_equal(m.flatten()[5:9].to(device).numpy(), data[5:9])
    # strided slices: the covering span of the file is copied, the view finishes on the device
    np.testing.assert_array_equal(m[1:3, 2:4].to(device).numpy(), data.reshape(4, 6)[1:3, 2:4])
    np.testing.assert_array_equal(m[::2, ::3].numpy(), data.reshape(4, 6)[::2, ::3])
    np.testing.assert_array_equal(m.permute(1, 0)[1:3].to(device).numpy(), data.reshape(4, 6).T[1:3])
    np.testing.assert_array_equal(m.to(device)[1:3, 2:4].numpy(), data.reshape(4, 6)[1:3, 2:4])


def test_copy_of_a_reshaped_computed_value(device):
    x = Tensor([1.0, 2.0, 3.0, 4.0, 5.0, 6.0], device=device)
    other = "PYTHON" if device == "CPU" else "CPU"
    assert (x[1:5] + 1).reshape(2, 2).to(other).tolist() == [[3.0, 4.0], [5.0, 6.0]]


def test_reading_a_slice_of_a_disk_tensor_to_the_host(tmp_path):
    path = tmp_path / "h.bin"
    np.arange(6, dtype=np.int32).tofile(path)
    t = Tensor.empty(2, 3, dtype=dtypes.int32, device=f"disk:{path}")
    assert t.tolist() == [[0, 1, 2], [3, 4, 5]]
    assert t[1].tolist() == [3, 4, 5] and t[0, 1:].numpy().tolist() == [1, 2] and t[1, 2].item() == 5
