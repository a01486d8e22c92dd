"""Hardware smoke tests (spec §8.5): skipped unless TG_DRIVERS_HW=1 on a machine with the device.

Selection: ``TG_DRIVERS_HW_VENDOR``/``TG_DRIVERS_HW_DEVICE`` (hex, default AMD Navi31 1002:744c) for native PCI; the
bridge is found by its USB ids; the remote test needs ``REMOTE=host:port`` of a running ``tg-pci-server``.
"""

from __future__ import annotations

import os

import pytest

from tg.drivers.errors import DeviceBusyError
from tg.drivers.pci import LinuxPCIDevice, scan_bus

pytestmark = pytest.mark.hardware

VENDOR = int(os.environ.get("TG_DRIVERS_HW_VENDOR", "1002"), 16)
DEVICE = int(os.environ.get("TG_DRIVERS_HW_DEVICE", "744c"), 16)
IDS = ((0xFFFF, (DEVICE,)),)


def _first_bus() -> str:
    found = scan_bus(VENDOR, IDS)
    if not found:
        pytest.fail(f"no PCI device {VENDOR:04x}:{DEVICE:04x} found")
    return found[0]


def test_native_scan_config_and_bar5() -> None:
    with LinuxPCIDevice("TGHW", _first_bus()) as dev:
        assert dev.read_config(0, 4) == VENDOR | DEVICE << 16
        _, size = dev.bar_info(5)
        assert size > 0
        dev.map_bar(5, size=4096).read32(0)  # must not fault


def test_native_lock_contention() -> None:
    bus = _first_bus()
    with LinuxPCIDevice("TGHW", bus), pytest.raises(DeviceBusyError):
        LinuxPCIDevice("TGHW", bus)


def test_usb_bridge_link_and_gpu_vendor() -> None:
    from tg.drivers.usb import BRIDGE_USB_IDS, USB3, USBPCIDevice

    found = [d for vid, pid in BRIDGE_USB_IDS for d in USB3.list_devices(vid, pid)]
    if not found:
        pytest.fail("no ASM24 bridge with the custom firmware found")
    dev, name = found[0]
    with USBPCIDevice("TGHW", dev, name) as gpu:
        assert gpu.ctrl.pcie_cfg_req(0, bus=4, size=2) == VENDOR
        assert gpu.bar_info(5)[1] > 0


def test_remote_ping_and_probe() -> None:
    if not os.environ.get("REMOTE"):
        pytest.skip("set REMOTE=host:port of a running tg-pci-server")
    from tg.drivers.pci import list_devices

    found = list_devices(VENDOR, IDS, refresh=True)
    assert found, "the remote server reported no matching device"
    factory, name = found[0]
    with factory("TGHW", name) as dev:
        assert dev.read_config(0, 2) == VENDOR
