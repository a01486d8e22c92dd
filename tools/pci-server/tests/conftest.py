"""Shared fixtures for tg-pci-server tests: an isolated environment (no token, token file or lock directory of the
developer's setup leaks in) and real `tg-pci-server` processes on ephemeral loopback ports."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tg_pci_server.testing import ServerProcess


@pytest.fixture(autouse=True)
def _isolated_env(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("TG_REMOTE_TOKEN", "REMOTE_TOKEN", "TG_REMOTE_TOKEN_FILE", "REMOTE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path_factory.mktemp("config")))
    monkeypatch.setenv("TG_DRIVERS_LOCK_DIR", str(tmp_path_factory.mktemp("locks")))


@pytest.fixture
def server_process(tmp_path: Path) -> Iterator[Callable[..., ServerProcess]]:
    """`server_process(*args, env=None)` starts a server (generated token unless args say otherwise); all stop after."""
    started: list[ServerProcess] = []

    def start(*args: str, env: dict[str, str] | None = None) -> ServerProcess:
        full = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / f"config{len(started)}"), **(env or {})}
        srv = ServerProcess(tmp_path / f"server{len(started)}", ["--backend", "mock", *args], full)
        started.append(srv)
        return srv

    yield start
    for srv in started:
        srv.stop()
