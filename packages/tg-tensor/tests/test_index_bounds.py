"""Out-of-range tensor indices raise (torch semantics) instead of selecting nothing: checked at once when the index
values are on hand, in the realizing schedule when they are computed (tg.tensor.bounds)."""

import numpy as np
import pytest

from tg.tensor import Tensor
from tg.tensor.bounds import IndexOutOfRange

X = np.arange(12, dtype=np.float32).reshape(3, 4)


def _lazy(values: list) -> Tensor:
    """An index tensor whose values are computed (not on hand until realized)."""
    return Tensor(values) * 1 + 0


def test_error_is_indexerror_and_runtimeerror():
    assert issubclass(IndexOutOfRange, IndexError) and issubclass(IndexOutOfRange, RuntimeError)


@pytest.mark.parametrize(
    "make_index", [lambda v: v, np.array, Tensor, _lazy], ids=["list", "numpy", "tensor", "computed"]
)
@pytest.mark.parametrize(
    ("values", "dim", "bad"), [([0, 3], 0, 3), ([-4, 1], 0, -4), ([4], 1, 4), ([-5], 1, -5)], ids=str
)
def test_advanced_get_out_of_range_raises(make_index, values, dim, bad):
    x = Tensor(X)
    index = (make_index(values),) if dim == 0 else (slice(None), make_index(values))
    size = X.shape[dim]
    with pytest.raises(IndexError, match=f"index {bad} is out of bounds for dimension {dim} with size {size}"):
        x[index].numpy()


@pytest.mark.parametrize("make_index", [Tensor, _lazy], ids=["tensor", "computed"])
def test_negative_indices_wrap_once(make_index):
    idx = [-3, -1, 0, 2]
    np.testing.assert_array_equal(Tensor(X)[make_index(idx)].numpy(), X[idx])
    np.testing.assert_array_equal(Tensor(X)[:, make_index([-4, 3])].numpy(), X[:, [-4, 3]])


def test_message_names_the_value_range():
    with pytest.raises(IndexError, match=r"index values span \[-1, 7\]; valid: -3\.\.2"):
        Tensor(X)[Tensor([-1, 7, 0])]


@pytest.mark.parametrize("make_index", [Tensor, _lazy], ids=["tensor", "computed"])
@pytest.mark.parametrize("op", ["gather", "scatter", "scatter_add", "scatter_reduce"])
@pytest.mark.parametrize("bad", [4, -1], ids=["high", "negative"])
def test_gather_scatter_out_of_range_raise(make_index, op, bad):
    """gather/scatter take indices in [0, n) (no wrapping), as torch."""
    x = Tensor(X)
    idx = make_index([[0, bad], [1, 2], [3, 3]])
    src = Tensor.ones(3, 2)
    run = {
        "gather": lambda: x.gather(1, idx),
        "scatter": lambda: x.scatter(1, idx, src),
        "scatter_add": lambda: x.scatter(1, idx, src, reduce="add"),
        "scatter_reduce": lambda: x.scatter_reduce(1, idx, src, "amax"),
    }[op]
    name = op.removesuffix("_add")
    with pytest.raises(IndexError, match=f"{name}: index {bad} is out of bounds for dimension 1 with size 4"):
        run().numpy()


def test_computed_index_is_checked_in_the_realizing_schedule_and_stays_lazy():
    g = Tensor(X).gather(1, _lazy([[1], [2], [4]]))  # building the graph does not raise or realize
    doubled = (g * 2).sum()
    for _ in range(2):  # the failed realize leaves the tensor lazy: it raises again, never holds a wrong value
        with pytest.raises(IndexError, match="index 4 is out of bounds"):
            doubled.item()


def test_gradient_through_bad_gather_raises():
    w = Tensor(X, requires_grad=True)
    loss = w.gather(1, _lazy([[0], [5], [1]])).sum()
    (grad,) = loss.gradient(w)
    with pytest.raises(IndexError, match="index 5 is out of bounds"):
        grad.numpy()


def test_in_range_computed_index_passes_and_matches_numpy():
    idx = _lazy([[3, 0], [1, 1], [2, 0]])
    np.testing.assert_array_equal(
        Tensor(X).gather(1, idx).numpy(), np.take_along_axis(X, np.array([[3, 0], [1, 1], [2, 0]]), 1)
    )


@pytest.mark.parametrize("make_index", [Tensor, _lazy], ids=["tensor", "computed"])
def test_setitem_out_of_range_raises_before_writing(make_index):
    y = Tensor.zeros(4)
    y.realize()
    with pytest.raises(IndexError, match="setitem: index 4 is out of bounds for dimension 0 with size 4"):
        y[make_index([1, 4])] = 5.0
    assert y.tolist() == [0.0, 0.0, 0.0, 0.0]  # nothing written, the tensor still works
    y[make_index([1, -1])] = 5.0
    assert y.tolist() == [0.0, 5.0, 0.0, 5.0]


def test_int_next_to_tensor_index_is_checked():
    with pytest.raises(IndexError, match="index 3 is out of bounds for dimension 0 with size 3"):
        Tensor(X)[3, Tensor([0])]


def test_embedding_with_out_of_range_token_raises():
    from tg.tensor.nn import Embedding

    emb = Embedding(5, 2)
    with pytest.raises(IndexError, match="index 5 is out of bounds for dimension 0 with size 5"):
        emb(Tensor([[0, 5]])).numpy()


@pytest.mark.torch
def test_same_cases_raise_in_torch():
    torch = pytest.importorskip("torch")
    t = torch.tensor(X)
    for fn in (
        lambda: t[torch.tensor([0, 3])],
        lambda: t.gather(1, torch.tensor([[0, -1], [1, 2], [3, 3]])),
        lambda: t.scatter(1, torch.tensor([[0, 4], [1, 2], [3, 3]]), 1.0),
    ):
        with pytest.raises((IndexError, RuntimeError), match="out of bounds"):
            fn()
