"""Discovery: scan_bus over a fake sysfs tree, list_devices backends and caching, open_device errors."""

from __future__ import annotations

import os
from typing import Any

import pytest

from tg.drivers.errors import DeviceNotFoundError, NoPCIBusError
from tg.drivers.mock import MockPCIDevice
from tg.drivers.pci import LinuxPCIDevice, list_devices, open_device, register_backend, scan_bus, unregister_backend
from tg.drivers.pci.discovery import registered_backends

AMD = (0x1002, ((0xFFFF, (0x744C,)),))


def _populate(fake_sysfs: Any) -> None:
    fake_sysfs.add_device("0000:0b:00.0", device=0x744C)
    fake_sysfs.add_device("0000:03:00.0", device=0x744C)
    fake_sysfs.add_device("0000:03:00.1", device=0xAB30, class_code=0x040300)  # HDMI audio
    fake_sysfs.add_device("0000:04:00.0", device=0x7480)
    fake_sysfs.add_device("0000:05:00.0", vendor=0x10DE, device=0x2204)
    fake_sysfs.add_device("0000:06:00.0", vendor=0x10DE, device=0x2684)
    fake_sysfs.add_device("0000:07:00.0", vendor=0x10DE, device=0x2203, class_code=0x0C0330)


def test_scan_bus_vendor_and_exact_ids_sorted(fake_sysfs: Any) -> None:
    _populate(fake_sysfs)
    assert scan_bus(*AMD) == ["0000:03:00.0", "0000:0b:00.0"]
    assert scan_bus(0x1002, [(0xFFFF, [0x744C, 0x7480])]) == ["0000:03:00.0", "0000:04:00.0", "0000:0b:00.0"]


def test_scan_bus_masks(fake_sysfs: Any) -> None:
    _populate(fake_sysfs)
    assert scan_bus(0x10DE, ((0xFF00, (0x2200,)),)) == ["0000:05:00.0", "0000:07:00.0"]
    everything = scan_bus(0x1002, ((0, (0,)),))
    assert everything == ["0000:03:00.0", "0000:03:00.1", "0000:04:00.0", "0000:0b:00.0"]


def test_scan_bus_class_filter(fake_sysfs: Any) -> None:
    _populate(fake_sysfs)
    assert scan_bus(0x10DE, ((0xFF00, (0x2200,)),), base_class=0x03) == ["0000:05:00.0"]
    assert scan_bus(0x1002, ((0, (0,)),), base_class=0x04) == ["0000:03:00.1"]


def test_scan_bus_skips_unreadable_entries(fake_sysfs: Any) -> None:
    _populate(fake_sysfs)
    os.remove(fake_sysfs.path("0000:0b:00.0", "device"))  # hot-removed mid-scan
    with open(fake_sysfs.path("0000:04:00.0", "vendor"), "w") as f:
        f.write("garbage")
    os.makedirs(fake_sysfs.path("0000:0f:00.0"))  # empty entry
    assert scan_bus(0x1002, ((0, (0,)),)) == ["0000:03:00.0", "0000:03:00.1"]


def test_scan_bus_without_sysfs(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TG_DRIVERS_SYSFS_ROOT", str(tmp_path / "nothing"))
    with pytest.raises(NoPCIBusError, match=r"no PCI bus: .*bus/pci/devices does not exist"):
        scan_bus(*AMD)
    assert issubclass(NoPCIBusError, RuntimeError)


def test_scan_bus_validates_filters(fake_sysfs: Any) -> None:
    with pytest.raises(ValueError, match="vendor id"):
        scan_bus(0x10000, ())
    with pytest.raises(TypeError, match=r"\(mask, iterable_of_ids\) pair"):
        scan_bus(0x1002, [0x744C])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="device id"):
        scan_bus(0x1002, [(0xFFFF, [-1])])
    with pytest.raises(ValueError, match="base_class"):
        scan_bus(0x1002, (), base_class=0x300)


def test_list_devices_sysfs_backend_and_cache(fake_sysfs: Any) -> None:
    fake_sysfs.add_device("0000:03:00.0")
    found = list_devices(*AMD)
    assert found == [(LinuxPCIDevice, "0000:03:00.0")]
    fake_sysfs.add_device("0000:0c:00.0")
    assert len(list_devices(*AMD)) == 1  # memoised
    assert len(list_devices(0x1002, [(0xFFFF, [0x744C])], refresh=True)) == 2  # lists are normalised like tuples
    list_devices.cache_clear()
    assert [name for _, name in list_devices(*AMD)] == ["0000:03:00.0", "0000:0c:00.0"]


def test_mock_backend_selected_by_env(monkeypatch: pytest.MonkeyPatch) -> None:
    backend = MockPCIDevice.make_backend(
        [
            {"device": 0x744C},
            {"device": 0x7480, "pcibus": "mock:zz"},
            {"vendor": 0x10DE, "device": 0x2204, "class_code": 0x030200},
        ]
    )
    register_backend("mock", backend)
    try:
        monkeypatch.setenv("TG_DRIVERS_BACKEND", "mock")
        assert [name for _, name in list_devices(0x1002, ((0, (0,)),))] == ["mock:0", "mock:zz"]
        assert [name for _, name in list_devices(0x10DE, ((0xFF00, (0x2200,)),), base_class=0x03)] == ["mock:2"]
        with open_device("AM", 1, 0x1002, ((0, (0,)),)) as dev:
            assert isinstance(dev, MockPCIDevice) and dev.pcibus == "mock:zz" and dev.read_config(2, 2) == 0x7480
        with open_device("AM", 0, *AMD) as dev, pytest.raises(Exception, match="Failed to acquire lock"):
            open_device("AM", 0, *AMD)  # the mock device is locked like a real one
    finally:
        unregister_backend("mock")
    assert "mock" not in registered_backends()


def test_unknown_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TG_DRIVERS_BACKEND", "nope")
    with pytest.raises(ValueError, match=r"unknown discovery backend TG_DRIVERS_BACKEND='nope'; registered: \["):
        list_devices(*AMD)
    with pytest.raises(TypeError):
        register_backend("x", 3)  # type: ignore[arg-type]


def test_open_device_out_of_range(fake_sysfs: Any) -> None:
    fake_sysfs.add_device("0000:03:00.0")
    with pytest.raises(DeviceNotFoundError, match=r"^AM:1 does not exist \(1 device\(s\) available: 0000:03:00.0\)"):
        open_device("am", 1, *AMD)
    with pytest.raises(DeviceNotFoundError, match=r"AM:0 does not exist \(0 device\(s\) available\)"):
        open_device("AM", 0, 0x1234, ((0xFFFF, (1,)),))


def test_remote_env_selects_remote_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[Any, ...]] = []
    register_backend("remote", lambda *a: calls.append(a) or [])
    try:
        monkeypatch.setenv("REMOTE", "127.0.0.1:1")
        assert list_devices(*AMD) == []
        assert calls == [(0x1002, ((0xFFFF, (0x744C,)),), None)]
    finally:
        from tg.drivers.pci import discovery

        register_backend("remote", discovery._remote_backend)
