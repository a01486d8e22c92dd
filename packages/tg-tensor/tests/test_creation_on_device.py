"""Large arange and random draws are computed on the device (no n-sized host list) and give the host path's values."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from tg.ir import dtypes
from tg.tensor import Tensor, TinyJit, creation

BIG = creation.DEVICE_INDEX_MIN * 4 + 3  # above the threshold, not a power of two


@pytest.mark.parametrize(
    ("args", "dtype"),
    [
        ((BIG,), None),
        ((-5 * BIG, 5 * BIG, 9), dtypes.int32),
        ((7, 7 + 3 * BIG, 3), dtypes.int64),
        ((BIG, -BIG, -2), dtypes.int16 if BIG < 2**15 else dtypes.int32),
        ((0.5, 0.5 + BIG * 0.1, 0.1), dtypes.float32),
        ((-1.0, 1.0, 2.0 / BIG), dtypes.float64),
        ((0, BIG), dtypes.uint32),
    ],
)
def test_device_arange_equals_host_values(args: tuple, dtype: object) -> None:
    got = Tensor.arange(*args, dtype=dtype).numpy()
    start, stop, step = (0, args[0], 1) if len(args) == 1 else (args[0], args[1], args[2] if len(args) > 2 else 1)
    n = max(0, int(np.ceil((stop - start) / step)))
    ref = np.array([start + i * step for i in range(n)], dtype=np.float64 if isinstance(step, float) else np.int64)
    assert len(got) == n >= creation.DEVICE_INDEX_MIN
    np.testing.assert_array_equal(got, ref.astype(got.dtype))


def test_device_arange_out_of_range_raises_like_host() -> None:
    with pytest.raises(OverflowError, match="out of range"):
        Tensor.arange(0, BIG * 4, 4, dtype=dtypes.int16)


def test_device_arange_large_2_pow_24() -> None:
    n = (1 << 24) + 5
    got = Tensor.arange(n).numpy()
    assert got.dtype == np.int32 and got[0] == 0 and got[-1] == n - 1
    np.testing.assert_array_equal(got[:: 1 << 16], np.arange(0, n, 1 << 16))


def test_device_index_has_no_n_sized_upload(monkeypatch: pytest.MonkeyPatch) -> None:
    uploaded: list[int] = []
    from tg.tensor import realize

    real = realize.upload
    monkeypatch.setattr(realize, "upload", lambda raw, buf: (uploaded.append(len(raw)), real(raw, buf))[1])
    Tensor.arange(1 << 22).realize()
    Tensor.rand(1 << 22).realize()
    assert uploaded and max(uploaded) <= 8 * 4096, uploaded


def test_device_rand_equals_host_counters(monkeypatch: pytest.MonkeyPatch) -> None:
    Tensor.manual_seed(3)
    Tensor.rand(5).realize()  # advance the counter a little
    device_side = Tensor.rand(BIG).numpy()
    monkeypatch.setattr(creation, "DEVICE_INDEX_MIN", 1 << 62)  # every draw on the host path
    Tensor.manual_seed(3)
    Tensor.rand(5).realize()
    host_side = Tensor.rand(BIG).numpy()
    np.testing.assert_array_equal(device_side, host_side)
    assert 0.0 <= device_side.min() and device_side.max() < 1.0 and abs(device_side.mean() - 0.5) < 0.01


def test_device_rand_in_jit_redraws_each_replay() -> None:
    @TinyJit
    def draw(x: Tensor) -> Tensor:
        return (x + Tensor.rand(BIG)).realize()

    x = Tensor.zeros(BIG).contiguous().realize()
    outs = [draw(x).numpy() for _ in range(4)]
    for a, b in itertools.pairwise(outs):
        assert not np.array_equal(a, b)
    # replays draw what eager calls would: same seed and counter give the same numbers
    Tensor.manual_seed(11)
    eager = [(x + Tensor.rand(BIG)).numpy() for _ in range(4)]
    Tensor.manual_seed(11)
    jitted = [draw(x).numpy() for _ in range(4)]
    np.testing.assert_array_equal(np.stack(eager[2:]), np.stack(jitted[2:]))
