"""Acceptance test of the digits demo (specs/tensor-api.md 6.4): the fixed-seed recipe reaches >= 97% test accuracy."""

import runpy
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).parent.parent / "examples" / "digits_cnn.py"


@pytest.mark.slow
def test_digits_cnn_reaches_97_percent() -> None:
    pytest.importorskip("sklearn")
    pytest.importorskip("tqdm")
    digits = runpy.run_path(str(EXAMPLE))
    result = digits["train"](steps=600, batch=64, seed=0, progress=False)
    assert result["accuracy"] >= 0.97, result
    assert result["last_loss"] < result["first_loss"] / 10, result
