"""tg.drivers: raw hardware access: MMIO views, PCI (sysfs/VFIO), USB-to-PCIe bridge, remote PCI client and server.

Importing this package does no I/O and loads no optional library: libusb is imported when a USB device is opened, the
remote client and server live in :mod:`tg.drivers.remote`.
"""

import sys

from tg.drivers.__about__ import __version__
from tg.drivers.alloc import BumpAllocator
from tg.drivers.errors import (
    ConnectionClosedError,
    DeviceBusyError,
    DeviceGoneError,
    DeviceNotFoundError,
    DriverBoundError,
    LinkDownError,
    MockAccessError,
    NoPCIBusError,
    PCIeCompletionError,
    RemoteError,
    ShortReadError,
    TGDriversError,
    UnsupportedFirmwareError,
)
from tg.drivers.lock import acquire_device_lock
from tg.drivers.mmio import BufferMMIO, HostMMIO, MMIOView, ModelMMIO
from tg.drivers.pci.base import PCIDevice

if sys.byteorder != "little":
    raise RuntimeError("tg.drivers supports little-endian hosts only (device memory is little-endian)")

__all__ = [
    "BufferMMIO",
    "BumpAllocator",
    "ConnectionClosedError",
    "DeviceBusyError",
    "DeviceGoneError",
    "DeviceNotFoundError",
    "DriverBoundError",
    "HostMMIO",
    "LinkDownError",
    "MMIOView",
    "MockAccessError",
    "ModelMMIO",
    "NoPCIBusError",
    "PCIDevice",
    "PCIeCompletionError",
    "RemoteError",
    "ShortReadError",
    "TGDriversError",
    "UnsupportedFirmwareError",
    "__version__",
    "acquire_device_lock",
]
