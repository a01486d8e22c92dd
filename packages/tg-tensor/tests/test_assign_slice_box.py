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


def test_cached_attention_decode_under_jit_matches_numpy() -> None:
    """tg-llm's decode step in small: write one key/value at a Variable position of a cache, then attend over the
    cache up to it (causal mask from arange, softmax, two matmuls). Under TinyJit each replay must see the new
    position's mask and cache rows: since the fusion cost model stores the broadcast mask on its own kernel, that
    kernel read only the Variable and the JIT pruned it, so replays diverged from eager (and numpy)."""
    rng = np.random.default_rng(1)
    n_pos, hd, prompt, heads = 32, 8, 4, 4
    base = np.zeros((2, n_pos, hd), np.float32)
    base[:, :prompt] = rng.standard_normal((2, prompt, hd)).astype(np.float32)
    steps = [rng.standard_normal((heads + 2, 1, hd)).astype(np.float32) for _ in range(6)]  # (q heads, k, v)
    pos = Variable("pos", 0, n_pos - 1)

    def decode(cache: Tensor, qkv: Tensor, p: object) -> Tensor:
        q, kv = qkv[:heads].reshape(heads, hd), qkv[heads:]  # (heads, hd), (2, 1, hd): heads share the k/v
        cache[:, p : p + 1].assign(kv)  # type: ignore[misc]
        keys, values = cache[0, : p + 1], cache[1, : p + 1]  # type: ignore[operator]
        scores = (q @ keys.transpose()) * (1.0 / np.sqrt(hd))
        mask = Tensor.arange(p + 1).reshape(1, -1) <= (Tensor.arange(1) + p).reshape(1, 1)  # type: ignore[operator]
        return (mask.where(scores, float("-inf")).softmax(-1) @ values).realize()

    jit_cache, eager_cache = stored(base), stored(base)
    jitted = TinyJit(decode)
    for i, qkv in enumerate(steps):  # run, capture, then replays
        p = prompt + i
        base[:, p] = qkv[heads:, 0]
        scores = qkv[:heads, 0] @ base[0, : p + 1].T / np.sqrt(hd)  # (heads, p + 1): the mask is broadcast on heads
        weights = np.exp(scores - scores.max(-1, keepdims=True))
        expected = (weights / weights.sum(-1, keepdims=True)) @ base[1, : p + 1]
        out_jit = jitted(jit_cache, stored(qkv), pos.bind(p)).numpy()
        out_eager = decode(eager_cache, stored(qkv), pos.bind(p)).numpy()
        np.testing.assert_allclose(out_eager, expected, rtol=1e-5, atol=1e-6, err_msg=f"eager, position {p}")
        np.testing.assert_allclose(out_jit, expected, rtol=1e-5, atol=1e-6, err_msg=f"jit, position {p}")
    np.testing.assert_array_equal(jit_cache.numpy(), base)
    np.testing.assert_array_equal(eager_cache.numpy(), base)
