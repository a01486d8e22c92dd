"""PCI devices: the PCIDevice interface, native Linux devices and discovery."""

from tg.drivers.pci.base import PCIDevice
from tg.drivers.pci.discovery import list_devices, open_device, register_backend, scan_bus, unregister_backend
from tg.drivers.pci.ids import device_matches, normalize_devices
from tg.drivers.pci.linux import LinuxPCIDevice

__all__ = [
    "LinuxPCIDevice",
    "PCIDevice",
    "device_matches",
    "list_devices",
    "normalize_devices",
    "open_device",
    "register_backend",
    "scan_bus",
    "unregister_backend",
]
