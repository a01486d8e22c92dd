"""Device discovery: scan the Linux PCI sysfs tree, list devices from a backend, open one by index.

``list_devices`` returns ``(factory, name)`` pairs; ``factory(devpref, name)`` opens the device. Where the list comes
from, in order of precedence:

1. ``TG_DRIVERS_BACKEND=<name>``: a backend registered with :func:`register_backend` (tests register ``"mock"``;
   ``"sysfs"`` and ``"remote"`` are built in);
2. ``REMOTE=host:port,...``: only the devices of those remote PCI servers (as tinygrad does);
3. otherwise the local sysfs scan, opened as :class:`~tg.drivers.pci.linux.LinuxPCIDevice`.

The sysfs root is ``/sys`` unless ``TG_DRIVERS_SYSFS_ROOT`` points at a fake tree (tests).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterable
from typing import Any

from tg.drivers.errors import DeviceNotFoundError, NoPCIBusError
from tg.drivers.pci.base import PCIDevice
from tg.drivers.pci.ids import DeviceFilter, device_matches, normalize_devices
from tg.drivers.pci.sysfs import sysfs_root

__all__ = [
    "Backend",
    "DeviceEntry",
    "list_devices",
    "open_device",
    "register_backend",
    "registered_backends",
    "scan_bus",
    "sysfs_root",
    "unregister_backend",
]

#: ``factory(devpref, name) -> PCIDevice`` and the device name
DeviceEntry = tuple[Callable[..., PCIDevice], str]
#: ``backend(vendor, devices, base_class) -> [(factory, name), ...]``
Backend = Callable[[int, DeviceFilter, "int | None"], list[DeviceEntry]]


def _pci_devices_dir(root: str | None = None) -> str:
    return os.path.join(root or sysfs_root(), "bus", "pci", "devices")


def _read_hex(path: str) -> int:
    with open(path) as f:
        return int(f.read().strip(), 16)


def _check_vendor(vendor: int) -> None:
    if not isinstance(vendor, int) or isinstance(vendor, bool) or not 0 <= vendor <= 0xFFFF:
        raise ValueError(f"vendor id must be an int in 0..0xffff, got {vendor!r}")


def _check_base_class(base_class: int | None) -> None:
    if base_class is not None and (not isinstance(base_class, int) or not 0 <= base_class <= 0xFF):
        raise ValueError(f"base_class must be None or an int in 0..0xff, got {base_class!r}")


def scan_bus(
    vendor: int, devices: Iterable[tuple[int, Iterable[int]]], base_class: int | None = None, *, root: str | None = None
) -> list[str]:
    """Bus addresses (sorted) of local PCI devices with this vendor whose ``(device & mask) in ids`` for some entry.

    ``base_class`` (e.g. ``0x03`` for display controllers) additionally filters on the top byte of the class code.
    Raises :class:`NoPCIBusError` when the sysfs PCI tree does not exist. Entries that cannot be read (a device removed
    during the scan, an unreadable attribute) are skipped.
    """
    _check_vendor(vendor)
    _check_base_class(base_class)
    wanted = normalize_devices(devices)
    devdir = _pci_devices_dir(root)
    if not os.path.isdir(devdir):
        raise NoPCIBusError(f"no PCI bus: {devdir} does not exist")
    found = []
    for bus in os.listdir(devdir):
        path = os.path.join(devdir, bus)
        try:
            class_code = _read_hex(os.path.join(path, "class")) if base_class is not None else None
            dev_vendor = _read_hex(os.path.join(path, "vendor"))
            dev_device = _read_hex(os.path.join(path, "device"))
        except (OSError, ValueError):
            continue
        if device_matches(dev_vendor, dev_device, class_code, vendor, wanted, base_class):
            found.append(bus)
    return sorted(found)


# ---- backends -------------------------------------------------------------------------------------------------------
_backends: dict[str, Backend] = {}


def register_backend(name: str, fn: Backend) -> None:
    """Register a discovery backend, selected with ``TG_DRIVERS_BACKEND=<name>`` (replaces one of the same name)."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"backend name must be a non-empty string, got {name!r}")
    if not callable(fn):
        raise TypeError(f"backend {name!r} must be callable as fn(vendor, devices, base_class)")
    _backends[name] = fn
    list_devices.cache_clear()


def unregister_backend(name: str) -> None:
    """Remove a registered backend (no error if it is not registered)."""
    _backends.pop(name, None)
    list_devices.cache_clear()


def registered_backends() -> list[str]:
    """Names accepted by ``TG_DRIVERS_BACKEND``."""
    return sorted(_backends)


def _sysfs_backend(vendor: int, devices: DeviceFilter, base_class: int | None) -> list[DeviceEntry]:
    from tg.drivers.pci.linux import LinuxPCIDevice

    return [(LinuxPCIDevice, bus) for bus in scan_bus(vendor, devices, base_class)]


def _remote_backend(vendor: int, devices: DeviceFilter, base_class: int | None) -> list[DeviceEntry]:
    from tg.drivers.remote import RemotePCIDevice, remote_list

    return [
        (functools.partial(RemotePCIDevice, sock=conn), name) for conn, name in remote_list(vendor, devices, base_class)
    ]


class _ListDevices:
    """The memoised ``list_devices`` (a class so it can carry ``cache_clear``)."""

    def __init__(self) -> None:
        self._cache: dict[tuple[Any, ...], list[DeviceEntry]] = {}

    def cache_clear(self) -> None:
        """Forget every memoised result."""
        self._cache.clear()

    def __call__(
        self,
        vendor: int,
        devices: Iterable[tuple[int, Iterable[int]]],
        base_class: int | None = None,
        *,
        refresh: bool = False,
    ) -> list[DeviceEntry]:
        """``(factory, name)`` for every matching device; memoised per filter and environment (``refresh=True``
        rescans). See the module docstring for where devices come from."""
        _check_vendor(vendor)
        _check_base_class(base_class)
        wanted = normalize_devices(devices)
        backend_name = os.environ.get("TG_DRIVERS_BACKEND", "").strip()
        remote = os.environ.get("REMOTE", "").strip()
        if not backend_name:
            backend_name = "remote" if remote else "sysfs"
        key = (vendor, wanted, base_class, backend_name, remote, sysfs_root())
        if refresh or key not in self._cache:
            backend = _backends.get(backend_name)
            if backend is None:
                raise ValueError(
                    f"unknown discovery backend TG_DRIVERS_BACKEND={backend_name!r}; registered: "
                    f"{registered_backends()}"
                )
            self._cache[key] = list(backend(vendor, wanted, base_class))
        return list(self._cache[key])


list_devices = _ListDevices()

register_backend("sysfs", _sysfs_backend)
register_backend("remote", _remote_backend)


def open_device(
    devpref: str, index: int, vendor: int, devices: Iterable[tuple[int, Iterable[int]]], base_class: int | None = None
) -> PCIDevice:
    """Open the ``index``-th device that :func:`list_devices` finds, with lock prefix ``devpref``.

    Raises :class:`DeviceNotFoundError` (``"<DEVPREF>:<index> does not exist (<N> device(s) available)"``).
    """
    if not isinstance(index, int) or isinstance(index, bool):
        raise TypeError(f"device index must be an int, got {index!r}")
    found = list_devices(vendor, devices, base_class)
    if not 0 <= index < len(found):
        names = ", ".join(name for _, name in found)
        listing = f": {names}" if names else ""
        raise DeviceNotFoundError(
            f"{devpref.upper()}:{index} does not exist ({len(found)} device(s) available{listing})"
        )
    factory, name = found[index]
    return factory(devpref, name)
