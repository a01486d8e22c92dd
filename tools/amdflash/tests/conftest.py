"""Shared fixtures for amdflash tests: lock directory, fast timeouts, and a CLI runner with an opener spy."""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from amdflash.cli import main
from amdflash.settings import Settings
from amdflash.sim import SimConfig, SimulatedNavi31, make_sim_device

FAST = Settings(transaction_timeout=0.05, command_timeout=0.05, end_timeout=0.05, busy_poll_interval=0.0)


@pytest.fixture(autouse=True)
def _lock_dir(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TG_DRIVERS_LOCK_DIR", str(tmp_path_factory.mktemp("locks")))
    monkeypatch.delenv("REMOTE", raising=False)
    monkeypatch.delenv("AMDFLASH_DEBUG", raising=False)


@dataclass
class Result:
    """Outcome of one CLI invocation."""

    code: int
    out: str
    err: str

    @property
    def lines(self) -> list[str]:
        return self.out.splitlines()


@dataclass
class Spy:
    """An opener that serves the simulated board and records every call."""

    board: SimulatedNavi31
    calls: list[tuple[int, str]] = field(default_factory=list)
    devices: list[Any] = field(default_factory=list)

    def __call__(self, index: int, transport: str) -> Any:
        self.calls.append((index, transport))
        dev = make_sim_device(self.board)
        self.devices.append(dev)
        return dev


Runner = Callable[..., Result]


@pytest.fixture
def cli() -> Iterator[Runner]:
    """`cli(board_or_opener, *argv, settings=FAST) -> Result` runs `main` in-process."""

    def run(target: Any, *argv: str, settings: Settings = FAST) -> Result:
        out, err = io.StringIO(), io.StringIO()
        opener = Spy(target) if isinstance(target, SimulatedNavi31) else target
        code = main(list(argv), opener=opener, stdout=out, stderr=err, settings=settings)
        return Result(code, out.getvalue(), err.getvalue())

    yield run


@pytest.fixture
def board() -> SimulatedNavi31:
    """A default simulated board (blank flash)."""
    return SimulatedNavi31(SimConfig())


@pytest.fixture
def fast_settings() -> Settings:
    return FAST
