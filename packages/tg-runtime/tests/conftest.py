"""Shared fixtures for tg.runtime tests: a private compile cache per test, and the GPU backends' scaffolding
(the CL device or a skip, NVRTC or a skip, a device registry whose backend library is missing)."""

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tg.runtime import device as device_mod
from tg.runtime.device import Compiled, DeviceUnavailable


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


@pytest.fixture
def cl_device() -> Compiled:
    """The CL device (PoCL on machines without a GPU); the test is skipped where no OpenCL device opens."""
    try:
        return device_mod.Device["CL"]
    except DeviceUnavailable as e:
        pytest.skip(f"no OpenCL device: {e}")


@pytest.fixture
def nvrtc() -> None:
    """Skips the test where NVRTC (the CUDA runtime compiler) is not installed."""
    from tg.runtime.backends import _cuda

    try:
        _cuda.libnvrtc()
    except DeviceUnavailable as e:
        pytest.skip(str(e))


@pytest.fixture
def registry_without(monkeypatch: pytest.MonkeyPatch) -> Callable[[Any, str, str], device_mod._DeviceRegistry]:
    """`registry_without(module, loader, message)`: a fresh device registry in which `module.loader()` (the function
    that opens a backend's library) raises DeviceUnavailable(message), as on a machine without that library."""

    def make(module: Any, loader: str, message: str) -> device_mod._DeviceRegistry:
        def missing() -> None:
            raise DeviceUnavailable(message)

        monkeypatch.setattr(module, loader, missing)
        return device_mod._DeviceRegistry()

    return make
