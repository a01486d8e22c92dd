"""`hatch run demo`: shows the installed tg packages, runs a small MLP and a matmul checked against numpy, then
trains a small CNN on scikit-learn's bundled digits (examples/digits_cnn.py) and prints its test accuracy."""

import importlib.metadata as md
import runpy
import sys
import time
from pathlib import Path

DISTRIBUTIONS = ["tg-ir", "tg-codegen", "tg-runtime", "tg-drivers", "tg-tensor", "amdflash", "tg-pci-server"]


def versions() -> None:
    """Print the version of every tg distribution."""
    print("tg packages:")
    for dist in DISTRIBUTIONS:
        print(f"  {dist:<14} {md.version(dist)}")


def timed(label: str, fn):
    """Run fn(), print its kernel count and wall time, return its result."""
    from tg.tensor import GlobalCounters

    before, start = GlobalCounters.kernel_count, time.perf_counter()
    out = fn()
    ms = (time.perf_counter() - start) * 1e3
    print(f"  {label:<34} {GlobalCounters.kernel_count - before:3d} kernels {ms:9.2f} ms")
    return out


def main() -> None:
    """Versions, then an MLP forward pass and a matmul on the default device, checked against numpy."""
    versions()
    import numpy as np

    from tg.tensor import Device, Tensor, nn

    print(f"\ndevice: {Device.DEFAULT}")
    Tensor.manual_seed(0)
    mlp = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10), nn.Softmax(dim=-1))
    x = Tensor.randn(32, 64)
    timed("random input and weights", lambda: Tensor.realize(x, *mlp.parameters()))
    logits = timed("MLP forward (first run, compiles)", lambda: mlp(x).numpy())
    timed("MLP forward (cached kernels)", lambda: mlp(x).numpy())
    xn, (w1, b1, w2, b2) = x.numpy(), (p.numpy() for p in mlp.parameters())
    h = np.maximum(xn @ w1.T + b1, 0) @ w2.T + b2
    e = np.exp(h - h.max(-1, keepdims=True))
    np.testing.assert_allclose(logits, e / e.sum(-1, keepdims=True), rtol=1e-4, atol=1e-6)
    print("  MLP matches numpy")

    a, b = Tensor.rand(128, 96).realize(), Tensor.rand(96, 64).realize()
    c = timed("matmul 128x96 @ 96x64", lambda: (a @ b).numpy())
    np.testing.assert_allclose(c, a.numpy() @ b.numpy(), rtol=1e-4)
    print("  matmul matches numpy")

    print("\ntraining a CNN on scikit-learn's digits (Adam, 600 steps of batch 64):")
    digits = runpy.run_path(str(Path(__file__).parent.parent / "examples" / "digits_cnn.py"))
    digits["main"](sys.argv[1:])


if __name__ == "__main__":
    main()
