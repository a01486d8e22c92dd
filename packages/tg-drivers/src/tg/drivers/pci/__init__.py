"""PCI devices: the PCIDevice interface, native Linux devices and discovery."""

from tg.drivers.pci.base import PCIDevice
from tg.drivers.pci.ids import device_matches, normalize_devices

__all__ = ["PCIDevice", "device_matches", "normalize_devices"]
