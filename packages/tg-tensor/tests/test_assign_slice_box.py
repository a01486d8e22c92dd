"""A write into a slice of a stored tensor stores only the slice (the scheduler's W1 rule), with the values numpy
gives: static and Variable offsets, nested slices, under TinyJit, and a value that reads the same buffer."""

from __future__ import annotations

import numpy as np
import pytest

from tg.tensor import GlobalCounters, Tensor, TinyJit, Variable


def stored(a: np.ndarray) -> Tensor:
    return Tensor(a).contiguous().realize()


def traffic_of(fn: object) -> tuple[int, int]:
    """(kernels run, bytes they moved) while `fn()` runs."""
    GlobalCounters.reset()
    fn()  # type: ignore[operator]
    return GlobalCounters.kernel_count, GlobalCounters.global_mem


def kv_like() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return rng.standard_normal((2, 4, 1024, 16)).astype(np.float32), rng.standard_normal((2, 4, 3, 16)).astype(
        np.float32
    )


def test_static_slice_moves_only_the_slice() -> None:
    base, new = kv_like()
    cache, value = stored(base), stored(new)
    kernels, moved = traffic_of(lambda: cache[:, :, 100:103].assign(value))
    base[:, :, 100:103] = new
    np.testing.assert_array_equal(cache.numpy(), base)
    # the kernel reads the value and writes the slice: 2 x 384 floats, not the 131072 floats of the buffer
    assert kernels == 1 and moved <= 4 * new.nbytes < base.nbytes // 10, (kernels, moved)


def test_variable_offset_moves_only_the_slice() -> None:
    base, new = kv_like()
    cache, value = stored(base), stored(new)
    pos = Variable("pos", 0, 1021)
    for p in (0, 517, 1021):
        kernels, moved = traffic_of(lambda p=p: cache[:, :, pos.bind(p) : pos.bind(p) + 3].assign(value))
        base[:, :, p : p + 3] = new
        assert kernels == 1 and moved <= 4 * new.nbytes, (p, kernels, moved)
    np.testing.assert_array_equal(cache.numpy(), base)


def test_under_jit_each_position_written() -> None:
    base, new = kv_like()
    cache = stored(base)
    pos = Variable("pos", 0, 1021)

    @TinyJit
    def step(value: Tensor, p: object) -> Tensor:
        cache[:, :, p : p + 3].assign(value)  # type: ignore[misc]
        return (value * 2).realize()

    for i, p in enumerate((5, 9, 400, 800)):
        v = stored(new + i)
        kernels, moved = traffic_of(lambda v=v, p=p: step(v, pos.bind(p)))
        base[:, :, p : p + 3] = new + i
        assert moved <= 8 * new.nbytes, (p, kernels, moved)  # the slice write and `value * 2`
    np.testing.assert_array_equal(cache.numpy(), base)


def test_nested_slice_and_2d() -> None:
    a = np.arange(60, dtype=np.float32).reshape(6, 10)
    t = stored(a)
    t[1:5][1:3, 2:7].assign(Tensor.full((2, 5), -1.0))
    a[1:5][1:3, 2:7] = -1.0
    np.testing.assert_array_equal(t.numpy(), a)


@pytest.mark.parametrize("src", [slice(0, 4), slice(2, 6), slice(3, 7)])
def test_value_read_from_the_same_buffer(src: slice) -> None:
    """The value reads the buffer it is written into (overlapping or not): old values, as numpy's copy."""
    a = np.arange(40, dtype=np.float32).reshape(4, 10)
    t = stored(a)
    t[:, 2:6].assign(t[:, src] * 10 + 1)
    a[:, 2:6] = a[:, src].copy() * 10 + 1
    np.testing.assert_array_equal(t.numpy(), a)


def test_permuted_view_still_written() -> None:
    """A view the rule does not cover (a permute of a slice) writes the whole buffer, with the right values."""
    a = np.zeros((3, 5), dtype=np.float32)
    t = stored(a)
    t.T[1:3].assign(Tensor(np.ones((2, 3), dtype=np.float32) * 7))
    a.T[1:3] = 7
    np.testing.assert_array_equal(t.numpy(), a)
