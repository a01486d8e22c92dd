"""Simulators for tests and for hardware-free development: register models, mock PCI devices, a mock USB bridge.

``RemoteServerThread`` (the in-thread remote PCI server fixture) lives in :mod:`tg.drivers.mock.remote` and is loaded
on first access, so importing this package does not import the remote server.
"""

from typing import Any

from tg.drivers.mock.pci import BarSpec, MockPCIDevice
from tg.drivers.mock.regmodel import DwordRegisterFile, RegisterModel

# MockASM24Bridge and RemoteServerThread are importable by name but loaded lazily (not part of `import *`)
__all__ = ["BarSpec", "DwordRegisterFile", "MockPCIDevice", "RegisterModel"]


def __getattr__(name: str) -> Any:
    if name == "MockASM24Bridge":
        from tg.drivers.mock.usb import MockASM24Bridge

        return MockASM24Bridge
    if name == "RemoteServerThread":
        from tg.drivers.mock.remote import RemoteServerThread

        return RemoteServerThread
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
