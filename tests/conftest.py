"""End-to-end fixtures: `device` runs each test on CPU and on PYTHON (the reference interpreter).

Set DEV to run on one device only: `DEV=PYTHON hatch test tests`.
"""

import os

import numpy as np
import pytest

from tg.ir.target import Target


def _devices() -> list[str]:
    """DEV's first target's instance name (`DEV=CPU:CLANG:x86-64-v2` -> CPU), else CPU and PYTHON."""
    targets = Target.parse(os.environ.get("DEV", ""))
    return [targets[0].name] if targets else ["CPU", "PYTHON"]


@pytest.fixture(params=_devices())
def device(request: pytest.FixtureRequest) -> str:
    """Each device under test in turn (CPU and PYTHON unless DEV picks one)."""
    return str(request.param)


@pytest.fixture
def rng() -> np.random.Generator:
    """A seeded numpy generator."""
    return np.random.default_rng(2024)
