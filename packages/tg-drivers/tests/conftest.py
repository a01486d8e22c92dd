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
    for name in ("TG_REMOTE_TOKEN", "REMOTE_TOKEN", "TG_REMOTE_TOKEN_FILE"):  # no token from the developer's setup
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path_factory.mktemp("config")))
    yield path


class FakeSysfs:
    """A fake ``/sys`` tree with PCI devices, enough for discovery and LinuxPCIDevice (regular files, mmap-able)."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.devices = os.path.join(root, "bus", "pci", "devices")
        os.makedirs(self.devices, exist_ok=True)

    def path(self, bus: str, name: str = "") -> str:
        return os.path.join(self.devices, bus, name)

    def add_device(
        self,
        bus: str,
        vendor: int = 0x1002,
        device: int = 0x744C,
        class_code: int = 0x030000,
        bars: dict[int, int] | None = None,
        bar_addrs: dict[int, int] | None = None,
        resize_mask: dict[int, int] | None = None,
        driver: str | None = None,
        cfg_size: int = 4096,
    ) -> str:
        """Create a device directory; ``bars`` maps BAR index to size (files are sparse)."""
        d = self.path(bus)
        os.makedirs(d)
        attrs = {
            "vendor": f"0x{vendor:04x}",
            "device": f"0x{device:04x}",
            "class": f"0x{class_code:06x}",
            "enable": "0",
            "reset": "",
        }
        for name, text in attrs.items():
            with open(os.path.join(d, name), "w") as f:
                f.write(text + "\n")
        cfg = bytearray(cfg_size)
        cfg[0:4] = (vendor | device << 16).to_bytes(4, "little")
        cfg[8:12] = (class_code << 8).to_bytes(4, "little")
        with open(os.path.join(d, "config"), "wb") as f:
            f.write(cfg)
        bars = bars or {}
        lines = []
        for i in range(13):
            size = bars.get(i, 0)
            if size:
                start = (bar_addrs or {}).get(i, 0xF000_0000 + i * 0x1000_0000)
                lines.append(f"0x{start:016x} 0x{start + size - 1:016x} 0x0000000000040200")
                with open(os.path.join(d, f"resource{i}"), "wb") as f:
                    f.truncate(size)
            else:
                lines.append("0x0000000000000000 0x0000000000000000 0x0000000000000000")
        with open(os.path.join(d, "resource"), "w") as f:
            f.write("\n".join(lines) + "\n")
        for i, mask in (resize_mask or {}).items():
            with open(os.path.join(d, f"resource{i}_resize"), "w") as f:
                f.write(f"{mask:016x}\n")
        if driver is not None:
            drv = os.path.join(self.root, "bus", "pci", "drivers", driver)
            os.makedirs(drv, exist_ok=True)
            with open(os.path.join(drv, "unbind"), "w"):
                pass
            os.symlink(drv, os.path.join(d, "driver"))
        return d


@pytest.fixture
def fake_sysfs(tmp_path: object, monkeypatch: pytest.MonkeyPatch) -> FakeSysfs:
    """A fake sysfs root selected through TG_DRIVERS_SYSFS_ROOT."""
    root = os.path.join(str(tmp_path), "sys")
    fs = FakeSysfs(root)
    monkeypatch.setenv("TG_DRIVERS_SYSFS_ROOT", root)
    from tg.drivers.pci.discovery import list_devices

    list_devices.cache_clear()
    return fs
