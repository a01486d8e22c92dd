"""Shared fixtures for amdflash tests: an isolated lock directory and environment, a CLI runner, a default board."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from amdflash.sim import SimConfig, SimulatedNavi31
from amdflash.sim.harness import Result, run_cli


@pytest.fixture(autouse=True)
def _isolated_env(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TG_DRIVERS_LOCK_DIR", str(tmp_path_factory.mktemp("locks")))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("cache")))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path_factory.mktemp("config")))  # the remote token file
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path_factory.mktemp("state")))  # flash backups and journals
    monkeypatch.delenv("AMDFLASH_BACKUP_DIR", raising=False)
    for name in (
        "REMOTE",
        "AMDFLASH_DEBUG",
        "TG_DRIVERS_BACKEND",
        "TG_REMOTE_TOKEN",
        "REMOTE_TOKEN",
        "TG_REMOTE_TOKEN_FILE",
    ):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def cli() -> Callable[..., Result]:
    """`cli(board_or_opener, *argv, settings=FAST_SETTINGS) -> Result` runs `main` in-process."""
    return run_cli


@pytest.fixture
def board() -> SimulatedNavi31:
    """A default simulated board (blank flash)."""
    return SimulatedNavi31(SimConfig())
