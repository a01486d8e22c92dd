"""No reference cycles per op or per training step: a graph is freed by reference counting the moment its last tensor
goes, not when Python's cyclic garbage collector next runs (until then it pins its nodes, buffers and index entries,
and a graph that survives a collection is promoted and rescanned by the older, costlier collections)."""

import gc
import weakref
from collections.abc import Callable, Iterator

import numpy as np
import pytest

from tg.tensor import Tensor
from tg.tensor.nn.optim import Adam


@pytest.fixture
def collector_off() -> Iterator[None]:
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


# ops whose result carries a custom gradient rule (stored on the result's node)
CUSTOM_GRADIENT_OPS: dict[str, Callable[[Tensor], Tensor]] = {
    "exp": lambda x: x.exp(),
    "tanh": lambda x: x.tanh(),
    "gelu": lambda x: x.gelu(),
    "conv2d": lambda x: x.reshape(1, 1, 2, 3).conv2d(Tensor.ones(2, 1, 1, 2)),
}


@pytest.mark.parametrize("op", CUSTOM_GRADIENT_OPS)
def test_a_custom_gradient_result_is_freed_without_the_collector(op: str, collector_off: None) -> None:
    x = Tensor(np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3), requires_grad=True)
    y = CUSTOM_GRADIENT_OPS[op](x)
    node = weakref.ref(y.uop)
    del y
    assert node() is None


def test_an_eager_training_step_leaves_no_cyclic_garbage(collector_off: None) -> None:
    rng = np.random.default_rng(0)
    w1 = Tensor(rng.uniform(-0.5, 0.5, (4, 1, 3, 3)).astype(np.float32), requires_grad=True)
    w2 = Tensor(rng.uniform(-0.5, 0.5, (10, 64)).astype(np.float32), requires_grad=True)
    opt = Adam([w1, w2], lr=1e-3)

    def step() -> float:
        x = Tensor(rng.uniform(0, 1, (8, 1, 8, 8)).astype(np.float32))
        y = Tensor(rng.integers(0, 10, (8,)).astype(np.int32))
        with Tensor.train():
            opt.zero_grad()
            logits = x.conv2d(w1, padding=1).relu().max_pool2d(2).flatten(1) @ w2.T
            loss = logits.sparse_categorical_crossentropy(y)
            loss.backward()
            opt.step()
        return loss.item()

    for _ in range(3):  # the first steps compile and fill caches
        step()
    gc.collect()
    for _ in range(3):
        step()
    assert gc.collect() == 0  # nothing unreachable: every graph of the steps was freed by reference counting
