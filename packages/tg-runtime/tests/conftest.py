"""Shared fixtures for tg.runtime tests."""

from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def _private_cache_dir(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Every test gets its own compile cache, so tests never see each other's (or the user's) cached binaries."""
    cache = tmp_path_factory.mktemp("tg-cache")
    monkeypatch.setenv("TG_CACHE_DIR", str(cache))
    yield cache


@pytest.fixture
def cache_dir(_private_cache_dir: Path) -> Path:
    """The compile-cache directory of this test."""
    return _private_cache_dir
