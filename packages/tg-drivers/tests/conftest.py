"""Shared fixtures for tg-drivers tests: isolated lock directory, hardware opt-in, mock devices."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip tests marked ``hardware`` unless TG_DRIVERS_HW=1."""
    if os.environ.get("TG_DRIVERS_HW") == "1":
        return
    skip = pytest.mark.skip(reason="hardware test: set TG_DRIVERS_HW=1 on a machine with the device")
    for item in items:
        if "hardware" in item.keywords and "tg-drivers" in str(item.path):
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _isolated_lock_dir(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Every test gets its own lock directory, so device locks never collide with other tests or real tools."""
    if os.environ.get("TG_DRIVERS_HW") == "1":  # hardware tests use the real lock directory
        yield os.environ.get("TG_DRIVERS_LOCK_DIR", "")
        return
    path = str(tmp_path_factory.mktemp("locks"))
    monkeypatch.setenv("TG_DRIVERS_LOCK_DIR", path)
    monkeypatch.delenv("TG_DRIVERS_BACKEND", raising=False)
    monkeypatch.delenv("REMOTE", raising=False)
    yield path
