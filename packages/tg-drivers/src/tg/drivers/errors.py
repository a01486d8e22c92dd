"""Exceptions raised by tg.drivers.

Every class derives from :class:`TGDriversError` *and* from the builtin exception a generic caller would expect
(``RuntimeError`` or ``OSError``), so ``except RuntimeError`` keeps working for code that does not know this package.
Permission problems use the builtin :class:`PermissionError`; the helpers at the bottom build its messages, so every
backend gives the same hints.
"""

from __future__ import annotations

__all__ = [
    "LIBUSB_MISSING_MESSAGE",
    "NATIVE_PERMISSION_HINT",
    "ConnectionClosedError",
    "DeviceBusyError",
    "DeviceGoneError",
    "DeviceNotFoundError",
    "DriverBoundError",
    "LinkDownError",
    "MockAccessError",
    "NoPCIBusError",
    "PCIeCompletionError",
    "RemoteError",
    "TGDriversError",
    "UnsupportedFirmwareError",
    "libusb_missing_error",
    "native_permission_error",
    "usb_permission_error",
]


class TGDriversError(Exception):
    """Root of every exception defined by tg.drivers (used as a mixin next to a builtin base)."""


class NoPCIBusError(TGDriversError, RuntimeError):
    """The PCI sysfs tree (``/sys/bus/pci/devices``) does not exist: not Linux, or sysfs is not mounted."""


class DeviceNotFoundError(TGDriversError, RuntimeError):
    """A device index is out of range, or nothing matched a discovery filter."""


class DeviceBusyError(TGDriversError, RuntimeError):
    """The device lock is held by another process (or the USB interface is claimed elsewhere)."""


class DriverBoundError(TGDriversError, RuntimeError):
    """A kernel driver is bound to the device and unbinding was not requested, or unbinding failed."""


class UnsupportedFirmwareError(TGDriversError, RuntimeError):
    """The USB bridge does not run the custom ASM24 firmware (product string not ``custom...``/``AS2462...``)."""


class LinkDownError(TGDriversError, RuntimeError):
    """The PCIe link behind the USB bridge did not come up (LTSSM != 0x78) after power-on."""


class PCIeCompletionError(TGDriversError, RuntimeError):
    """A PCIe TLP completed with an error status (UR/CA/CRS) or kept failing after all retries.

    ``status`` is the 3-bit completion status, or ``None`` when the retries were exhausted.
    """

    def __init__(self, message: str, status: int | None = None, address: int | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.address = address


class DeviceGoneError(TGDriversError, OSError):
    """The USB device disappeared (``LIBUSB_ERROR_NO_DEVICE``)."""


class ShortReadError(TGDriversError, OSError):
    """A read returned fewer (or more) bytes than requested: a USB transfer cut short, a backend that dropped data.

    Never silently padded or truncated: a short register or flash read must not pass for real data.
    """


class RemoteError(TGDriversError, RuntimeError):
    """A remote PCI server answered with an error response (``"RPC failed: ..."``)."""


class ConnectionClosedError(TGDriversError, RuntimeError):
    """The remote peer closed the connection (``"Connection closed"``)."""


class MockAccessError(TGDriversError, RuntimeError):
    """An illegal access to a simulated device: out of range, unaligned, wrong width or an unmodelled register."""


NATIVE_PERMISSION_HINT = (
    "run as root, or give the Python binary the needed capabilities: "
    "sudo setcap 'cap_dac_override,cap_sys_rawio,cap_sys_admin,cap_ipc_lock=ep' <path to python> "
    "(cap_dac_override opens root-owned sysfs files, cap_sys_rawio maps BARs, cap_sys_admin covers config space past "
    "64 bytes, pagemap physical addresses, unbind/resize/reset, cap_ipc_lock covers locked DMA memory)"
)

LIBUSB_MISSING_MESSAGE = (
    "libusb-1.0 not found; install libusb-1.0-0 (Debian/Ubuntu) or libusb1 (Fedora), "
    "and the Python package libusb1 (pip install libusb1)"
)


def native_permission_error(what: str, path: str, cause: BaseException | None = None) -> PermissionError:
    """Build the PermissionError for a denied native PCI operation, with the capability hint."""
    detail = f" ({cause})" if cause is not None else ""
    return PermissionError(f"no permission to {what} ({path}){detail}: {NATIVE_PERMISSION_HINT}")


def usb_permission_error(bus_addr: str, vendor: int, product: int) -> PermissionError:
    """Build the PermissionError for a USB device the user may not open, with a udev rule to fix it."""
    return PermissionError(
        f"no permission to open USB device {bus_addr}: add a udev rule granting access to {vendor:04x}:{product:04x}, "
        f'e.g. SUBSYSTEM=="usb", ATTR{{idVendor}}=="{vendor:04x}", ATTR{{idProduct}}=="{product:04x}", MODE="0666" '
        "in /etc/udev/rules.d/99-tg-usb.rules (then replug the device), or run as root"
    )


def libusb_missing_error(cause: BaseException | None = None) -> OSError:
    """Build the OSError raised when the libusb1 binding or the libusb-1.0 system library is missing."""
    detail = f" ({cause})" if cause is not None else ""
    return OSError(LIBUSB_MISSING_MESSAGE + detail)
