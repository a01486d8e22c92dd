"""Train a small CNN on scikit-learn's bundled digits (1797 8x8 images; no download) with tg, and report test accuracy.

Run it with `hatch run demo` (the demo environment installs scikit-learn and tqdm) or `python examples/digits_cnn.py
[--steps N]`. The recipe (specs/tensor-api.md 6.4): stratified 75/25 split with random_state=0, pixels / 16,
Conv2d(1,16,3,p=1) -> relu -> Conv2d(16,32,3,p=1) -> relu -> max_pool2d(2) -> flatten -> Linear(512,10), Adam lr 2e-3,
600 steps of batch 64 in training mode, sparse categorical cross-entropy. The model is an `nn.Module` (torch's
habits: `model.parameters()`, `model.train()`/`model.eval()`, `state_dict()`). Each step (forward, backward, Adam
update) is one TinyJit replay after the first two calls.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from tg.tensor import Tensor, TinyJit, nn
from tg.tensor.nn import functional as F
from tg.tensor.nn.optim import Adam


class DigitsCNN(nn.Module):
    """Two 3x3 convolutions, a 2x2 max-pool and a linear classifier: 8x8 images -> 10 logits."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.fc = nn.Linear(32 * 4 * 4, 10)

    def forward(self, x: Tensor) -> Tensor:
        x = F.relu(self.conv2(F.relu(self.conv1(x))))
        return self.fc(F.max_pool2d(x, 2).flatten(1))


def load_data() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(train images, train labels, test images, test labels) of sklearn's digits, images (N, 1, 8, 8) in [0, 1]."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    images = (digits.images / 16).astype(np.float32)[:, None]
    x_train, x_test, y_train, y_test = train_test_split(
        images, digits.target.astype(np.int32), test_size=0.25, random_state=0, stratify=digits.target
    )
    return x_train, y_train, x_test, y_test


def train(
    steps: int = 600, batch: int = 64, lr: float = 2e-3, seed: int = 0, progress: bool = True
) -> dict[str, float]:
    """Train the CNN; returns test accuracy, losses, wall time and steps per second."""
    from tqdm import tqdm

    start = time.perf_counter()
    x_train, y_train, x_test, y_test = load_data()
    Tensor.manual_seed(seed)
    rng = np.random.default_rng(seed)
    model = DigitsCNN()
    opt = Adam(model.parameters(), lr=lr)

    @TinyJit
    def train_step(x: Tensor, y: Tensor) -> Tensor:
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step(loss)
        return loss

    order = rng.permutation(len(x_train))
    position, first_loss, last_loss = 0, float("nan"), float("nan")
    bar = tqdm(range(steps), desc="training", unit="step", disable=not progress)
    loop_start = time.perf_counter()
    model.train()
    for i in bar:
        if position + batch > len(order):
            order, position = rng.permutation(len(x_train)), 0
        idx = order[position : position + batch]
        position += batch
        loss = train_step(Tensor(x_train[idx]).realize(), Tensor(y_train[idx]).realize())
        if i % 10 == 0 or i == steps - 1:
            last_loss = float(loss.item())
            first_loss = last_loss if i == 0 else first_loss
            bar.set_postfix(loss=f"{last_loss:.4f}")
    loop_time = time.perf_counter() - loop_start
    bar.close()
    model.eval()
    predictions = model(Tensor(x_test)).argmax(-1).numpy()
    return {
        "accuracy": float((predictions == y_test).mean()),
        "first_loss": first_loss,
        "last_loss": last_loss,
        "steps_per_second": steps / loop_time,
        "seconds": time.perf_counter() - start,
        "test_images": float(len(y_test)),
    }


def main(argv: list[str] | None = None) -> dict[str, float]:
    """Command line entry: train, print accuracy and speed."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    try:
        import sklearn  # noqa: F401
        import tqdm  # noqa: F401
    except ImportError as e:
        sys.exit(
            f"the digits demo needs scikit-learn and tqdm ({e}): `pip install scikit-learn tqdm`, or `hatch run demo`"
        )
    result = train(args.steps, args.batch, seed=args.seed)
    print(
        f"digits CNN: test accuracy {result['accuracy']:.2%} on {int(result['test_images'])} images, "
        f"loss {result['first_loss']:.3f} -> {result['last_loss']:.3f}, "
        f"{result['steps_per_second']:.1f} steps/s, {result['seconds']:.1f} s in all (incl. compilation)"
    )
    return result


if __name__ == "__main__":
    main()
