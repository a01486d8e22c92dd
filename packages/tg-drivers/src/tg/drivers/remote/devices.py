"""Which devices a remote PCI server serves: device providers (discovery backends, or fixed devices) and the
allowlist that restricts what PROBE reports and sessions open."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from tg.drivers.pci.base import PCIDevice

__all__ = [
    "SERVER_DEVPREF",
    "DeviceFactory",
    "DeviceFilter",
    "DeviceProvider",
    "StaticProvider",
    "parse_allow",
    "restrict_filter",
]

DeviceFilter = tuple[tuple[int, tuple[int, ...]], ...]
DeviceFactory = Callable[[str, str], "PCIDevice"]

SERVER_DEVPREF = "SV"  # lock prefix of devices opened by the server (tinygrad's serve.py uses the same)


class DeviceProvider(Protocol):
    """A discovery backend `(vendor, devices, base_class) -> [(factory, name), ...]`; `factory(devpref, name)` opens."""

    def __call__(
        self, vendor: int, devices: DeviceFilter, base_class: int | None
    ) -> Sequence[tuple[DeviceFactory, str]]: ...


def parse_allow(spec: str) -> tuple[int, int | None]:
    """Parse an allowlist entry `VENDOR[:DEVICE]` (hex, `0x` optional) into `(vendor, device or None)`."""
    parts = spec.strip().split(":")
    try:
        if len(parts) == 1:
            vendor, device = int(parts[0], 16), None
        elif len(parts) == 2:
            vendor, device = int(parts[0], 16), int(parts[1], 16)
        else:
            raise ValueError
    except ValueError:
        raise ValueError(f"allowlist entry must be VENDOR[:DEVICE] in hex (e.g. 1002:744c), got {spec!r}") from None
    if not 0 <= vendor <= 0xFFFF or (device is not None and not 0 <= device <= 0xFFFF):
        raise ValueError(f"allowlist ids must be 16-bit, got {spec!r}")
    return vendor, device


def restrict_filter(vendor: int, devices: DeviceFilter, allow: Sequence[tuple[int, int | None]]) -> DeviceFilter | None:
    """Intersect a PROBE filter with the allowlist; `None` when nothing of `vendor` is allowed."""
    if not allow:
        return devices
    entries = [dev for ven, dev in allow if ven == vendor]
    if not entries:
        return None
    if None in entries:
        return devices
    exact = tuple(dev for dev in entries if dev is not None and any((dev & m) in ids for m, ids in devices))
    return ((0xFFFF, exact),) if exact else None


class _SharedFactory:
    """`factory(devpref, name)` that hands out one already-open device."""

    def __init__(self, dev: PCIDevice) -> None:
        self.dev = dev

    def __call__(self, devpref: str, name: str) -> PCIDevice:
        return self.dev


class StaticProvider:
    """A device provider over already-open devices that outlive sessions (e.g. a simulated board).

    PROBE filtering reads vendor, device and class from each device's config space. Sessions never close these
    devices; their state (BAR contents, a simulated flash) persists across client connections.
    """

    def __init__(self, devices: Sequence[PCIDevice]) -> None:
        self.devices = list(devices)

    def __call__(self, vendor: int, devices: DeviceFilter, base_class: int | None) -> list[tuple[DeviceFactory, str]]:
        """Devices matching `vendor`, one of the `(mask, ids)` groups and (if given) the base class."""
        out: list[tuple[DeviceFactory, str]] = []
        for dev in self.devices:
            if dev.read_config(0, 2) != vendor:
                continue
            device_id = dev.read_config(2, 2)
            if not any((device_id & mask) in ids for mask, ids in devices):
                continue
            if base_class is not None and dev.read_config(0x0B, 1) != base_class:
                continue
            out.append((_SharedFactory(dev), dev.pcibus))
        return out

    def is_shared(self, dev: object) -> bool:
        """True for the devices this provider serves (sessions must not close them)."""
        return any(dev is d for d in self.devices)
