"""Issue 27, item 3: class labels outside [0, classes) raise instead of silently dropping their rows (torch raises
too); ignored labels still count for nothing."""

from __future__ import annotations

import numpy as np
import pytest

from tg.tensor import Tensor
from tg.tensor.bounds import IndexOutOfRange

LOSSES = {
    "cross_entropy": lambda x, y: x.cross_entropy(y),
    "nll_loss": lambda x, y: x.log_softmax(1).nll_loss(y),
    "sparse_categorical_crossentropy": lambda x, y: x.sparse_categorical_crossentropy(y),
}


@pytest.mark.parametrize("loss", list(LOSSES))
@pytest.mark.parametrize("labels", [[0, 5, 1], [-2, 0, 1]], ids=["above", "below"])
def test_out_of_range_label_raises(loss: str, labels: list[int]) -> None:
    x = Tensor(np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32))
    with pytest.raises(IndexOutOfRange, match=f"{loss}: index"):
        LOSSES[loss](x, Tensor(labels)).item()


@pytest.mark.parametrize("loss", list(LOSSES))
def test_computed_out_of_range_label_raises_when_read(loss: str) -> None:
    x = Tensor(np.random.default_rng(1).standard_normal((3, 4)).astype(np.float32))
    labels = Tensor([0, 1, 2]) + Tensor([0, 3, 0])  # lazy: checked when the loss is realized
    out = LOSSES[loss](x, labels)
    with pytest.raises(IndexError, match="out of bounds for dimension 1 with size 4"):
        out.realize()


def test_out_of_range_label_raises_in_backward_too() -> None:
    x = Tensor.randn(2, 3, requires_grad=True)
    loss = x.cross_entropy(Tensor([0, 1]) * 3)  # label 3 for 3 classes
    with pytest.raises(RuntimeError, match="index 3 is out of bounds"):  # IndexOutOfRange is also a RuntimeError
        loss.backward()
        assert x.grad is not None
        x.grad.realize()


def test_ignored_labels_still_count_for_nothing() -> None:
    logits = np.random.default_rng(2).standard_normal((3, 4)).astype(np.float32)
    x = Tensor(logits)
    got = x.cross_entropy(Tensor([0, -100, 3])).item()
    logp = logits - np.log(np.exp(logits).sum(1, keepdims=True))
    assert got == pytest.approx(-(logp[0, 0] + logp[2, 3]) / 2, rel=1e-5)
    assert x.sparse_categorical_crossentropy(Tensor([0, -1, 3])).item() == pytest.approx(got, rel=1e-5)


def test_float_labels_for_index_losses_raise() -> None:
    with pytest.raises(TypeError, match="integer tensor"):
        Tensor.randn(2, 3).sparse_categorical_crossentropy(Tensor([0.0, 1.0]))


@pytest.mark.parametrize("loss", list(LOSSES))
def test_known_labels_are_checked_when_the_loss_is_built(loss: str) -> None:
    """Labels held in a buffer are checked on the host at once (no deferred check rides along with every realize of
    the loss: the eager training step's cost); an ignored label is exempt."""
    x = Tensor(np.random.default_rng(2).standard_normal((3, 4)).astype(np.float32))
    with pytest.raises(IndexOutOfRange, match=f"{loss}: index 4 is out of bounds"):
        LOSSES[loss](x, Tensor([0, 4, 1]).realize())
    ignored = {"cross_entropy": -100, "nll_loss": None, "sparse_categorical_crossentropy": -1}[loss]
    if ignored is not None:
        labels = np.array([ignored, 3, 1])
        got = LOSSES[loss](x, Tensor(labels).realize()).item()
        logp = x.log_softmax(1).numpy()
        np.testing.assert_allclose(got, -(logp[1, 3] + logp[2, 1]) / 2, rtol=1e-5)


@pytest.mark.parametrize("loss", ["cross_entropy", "sparse_categorical_crossentropy"])
def test_a_minus_infinite_logit_of_another_class_keeps_the_loss_finite(loss: str) -> None:
    """As torch: without label smoothing only the label's log-probability counts (the smoothing term, an average
    over all classes, is -inf here and used to turn the loss into 0 * -inf = nan)."""
    x = Tensor(np.array([[0.0, -np.inf, 1.0], [2.0, 0.0, -np.inf]], dtype=np.float32))
    got = LOSSES[loss](x, Tensor([2, 0]).realize()).item()
    want = -(1.0 - np.log(1.0 + np.e) + 2.0 - np.log(np.exp(2.0) + 1.0)) / 2
    np.testing.assert_allclose(got, want, rtol=1e-5)
