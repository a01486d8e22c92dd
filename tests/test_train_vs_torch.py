"""The training benchmark's models (bench/train_worker.py) give PyTorch's loss curve: same initial weights, same
batches, Adam; tg's TinyJit step against torch eager, step by step within float32 tolerance.

Runs in `hatch run torch:test` (marked torch); the digits models need scikit-learn for their data."""

import importlib
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytestmark = pytest.mark.torch
BENCH = Path(__file__).resolve().parents[1] / "bench"


def _bench() -> tuple[Any, Any]:
    pytest.importorskip("torch")
    sys.path.insert(0, str(BENCH))
    try:
        return importlib.import_module("bench_train"), importlib.import_module("train_worker")
    finally:
        sys.path.remove(str(BENCH))


@pytest.mark.parametrize(
    "model,steps",
    [("mlp", 100), ("cnn", 100), pytest.param("gpt", 100, marks=pytest.mark.slow), ("gpt", 12), ("resnet", 8),
     pytest.param("resnet", 100, marks=pytest.mark.slow), pytest.param("transformer", 5, marks=pytest.mark.slow)],
)  # fmt: skip
@pytest.mark.parametrize("framework", ["tg-jit", "tg-eager"])
def test_loss_curve_equals_torch(model: str, steps: int, framework: str, tmp_path: Path) -> None:
    """JIT and eager (whose optimizer update replays a captured program) both follow torch's curve."""
    if framework == "tg-eager" and model != "cnn":
        pytest.skip("eager is compared on the CNN (the benchmark's eager row); the JIT runs every model")
    bench, worker = _bench()
    if model in ("mlp", "cnn"):
        pytest.importorskip("sklearn")
    path = tmp_path / f"{model}.npz"
    np.savez(path, **bench.make_data(model, steps))
    data = np.load(path)
    ref = worker.run_torch("torch", model, data, steps)["losses"]
    got = worker.run_tensor_lib(framework, model, data, steps)["losses"]
    assert len(got) == len(ref) == steps
    np.testing.assert_allclose(got, ref, rtol=2e-4, atol=1e-5)
