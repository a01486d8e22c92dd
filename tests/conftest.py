"""End-to-end fixtures: `device` runs each test on CPU and on PYTHON (the reference interpreter).

Set DEV to run on one device only: `DEV=PYTHON hatch test tests`.
"""

import os

import numpy as np
import pytest


def _devices() -> list[str]:
    dev = os.environ.get("DEV", "").split(":")[0].upper()
    return [dev] if dev else ["CPU", "PYTHON"]


@pytest.fixture(params=_devices())
def device(request: pytest.FixtureRequest) -> str:
    """Each device under test in turn (CPU and PYTHON unless DEV picks one)."""
    return str(request.param)


@pytest.fixture
def rng() -> np.random.Generator:
    """A seeded numpy generator."""
    return np.random.default_rng(2024)
