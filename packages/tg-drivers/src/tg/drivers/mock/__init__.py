"""Simulators for tests and for hardware-free development: register models, mock PCI devices, a mock USB bridge.

``RemoteServerThread`` (the in-thread remote PCI server fixture) lives in :mod:`tg.drivers.mock.remote` and is loaded
on first access, so importing this package does not import the remote server.
"""

from typing import Any

from tg.drivers.mock.pci import BarSpec, MockPCIDevice
from tg.drivers.mock.regmodel import DwordRegisterFile, RegisterModel

# the USB bridge simulator and RemoteServerThread load lazily; RemoteServerThread is not part of `import *`
__all__ = ["BarSpec", "DwordRegisterFile", "MockASM24Bridge", "MockPCIDevice", "MockUSBContext", "RegisterModel"]


def __getattr__(name: str) -> Any:
    if name in ("MockASM24Bridge", "MockUSBContext"):
        from tg.drivers.mock import usb

        return getattr(usb, name)
    if name == "RemoteServerThread":
        from tg.drivers.mock.remote import RemoteServerThread

        return RemoteServerThread
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
