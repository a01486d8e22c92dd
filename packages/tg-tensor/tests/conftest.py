"""Shared fixtures: the device under test comes from DEV (default CPU): `DEV=PYTHON hatch test packages/tg-tensor`.

The PYTHON device interprets every kernel in Python, so tests ask `size(n)` for their dimensions: on PYTHON
large sizes shrink to keep the suite fast.
"""

import os
from collections.abc import Callable

import numpy as np
import pytest

from tg.ir.target import Target


def _device() -> str:
    """The instance name of DEV's first target (`DEV=CPU:CLANG:x86-64-v2` -> CPU, `DEV=HCQ+CPU` -> CPU)."""
    targets = Target.parse(os.environ.get("DEV", ""))
    return targets[0].name if targets else "CPU"


@pytest.fixture
def device() -> str:
    """The device the tests run on (DEV, default CPU)."""
    return _device()


@pytest.fixture
def size() -> Callable[[int], int]:
    """`size(n)`: n on compiled devices, at most 5 on the PYTHON interpreter."""
    small = _device() == "PYTHON"
    return lambda n: min(n, 5) if small else n


@pytest.fixture
def rng() -> np.random.Generator:
    """A seeded numpy generator."""
    return np.random.default_rng(1234)
