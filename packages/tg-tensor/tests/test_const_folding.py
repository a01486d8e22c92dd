"""Issue 27, item 4: a float chain over a constant folds to what float32 arithmetic gives step by step (numpy)."""

from __future__ import annotations

import numpy as np

from tg.tensor import Tensor


def _numpy_chain(steps: int) -> np.float32:
    ref = np.float32(1.0)
    for _ in range(steps):
        ref = np.float32(ref * np.float32(1.0001)) + np.float32(0.0001)
    return ref


def test_chain_over_a_constant_equals_numpy_float32() -> None:
    x = Tensor(1.0)
    for _ in range(3000):
        x = x * 1.0001 + 0.0001
    assert x.item() == float(_numpy_chain(3000))  # 1.6998134 (folding used to give 1.6997367)


def test_chain_over_a_buffer_equals_the_folded_chain() -> None:
    x = Tensor.full((4,), 1.0).contiguous().realize()
    for _ in range(300):
        x = x * 1.0001 + 0.0001
    np.testing.assert_array_equal(x.numpy(), np.full(4, _numpy_chain(300), np.float32))
