"""USB3: the libusb-1.0 transport to an ASM24xx bridge running the custom firmware.

Built on the ``libusb1`` Python package (``import usb1``), imported only when USB is used: without it, or without
the ``libusb-1.0`` system library, opening or listing USB devices raises ``OSError("libusb-1.0 not found; ...")``.
libusb failures become typed errors: access denied -> ``PermissionError`` (with a udev rule), device gone ->
:class:`DeviceGoneError`, timeout -> ``TimeoutError``, busy -> :class:`DeviceBusyError`, anything else ->
``RuntimeError("<operation>: <libusb error>")``.

Any object with the same methods (``product``, ``control_write``, ``control_read``, ``bulk_write``, ``bulk_read``,
the async variants and ``bulk_wait``) can stand in for a USB3; :class:`~tg.drivers.mock.usb.MockASM24Bridge` does.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import struct
import threading
from collections.abc import Callable, Iterator
from typing import Any, Protocol

from tg.drivers.errors import (
    DeviceBusyError,
    DeviceGoneError,
    UnsupportedFirmwareError,
    libusb_missing_error,
    usb_permission_error,
)

__all__ = [
    "BRIDGE_USB_IDS",
    "USB3",
    "USBTransport",
    "import_usb1",
]

#: (vendor, product) of the custom ASM24 bridge firmware, in the order tinygrad's AMD USB interface queries them
BRIDGE_USB_IDS: tuple[tuple[int, int], ...] = ((0xADD1, 0x0001), (0x3801, 0x0001))

EP_BULK_OUT, EP_BULK_IN = 0x02, 0x81
VENDOR_OUT, VENDOR_IN = 0x40, 0xC0
CONTROL_MAX = 0x1000
SUPPORTED_PRODUCTS = ("custom", "AS2462")

LIBUSB_ERROR_ACCESS, LIBUSB_ERROR_NO_DEVICE, LIBUSB_ERROR_BUSY, LIBUSB_ERROR_TIMEOUT = -3, -4, -6, -7


class USBTransport(Protocol):
    """What :class:`~tg.drivers.usb.asm24.ASM24Controller` needs from a transport (USB3 or a simulator)."""

    product: str

    def control_write(
        self, request: int, value: int = 0, index: int = 0, data: bytes = b"", timeout: int = 1000
    ) -> None: ...

    def control_read(self, request: int, length: int, value: int = 0, index: int = 0, timeout: int = 1000) -> bytes: ...

    def bulk_write(self, payload: bytes, timeout: int = 1000) -> None: ...

    def bulk_read(self, length: int, timeout: int = 1000) -> bytes: ...


def import_usb1() -> Any:
    """Import the libusb1 binding, turning a missing package or system library into the documented OSError."""
    try:
        import usb1
    except (ImportError, OSError) as e:
        raise libusb_missing_error(e) from e
    return usb1


def _translate(e: Exception, what: str, bus_addr: str = "?", ids: tuple[int, int] = (0, 0)) -> Exception:
    """Map a libusb1 exception to the typed error users see."""
    code = getattr(e, "value", None)
    if code == LIBUSB_ERROR_ACCESS:
        return usb_permission_error(bus_addr, *ids)
    if code == LIBUSB_ERROR_NO_DEVICE:
        return DeviceGoneError(f"{what}: USB device {bus_addr} is gone (disconnected?)")
    if code == LIBUSB_ERROR_TIMEOUT:
        return TimeoutError(f"{what}: USB transfer timed out")
    if code == LIBUSB_ERROR_BUSY:
        return DeviceBusyError(f"{what}: USB device {bus_addr} is busy (claimed by another process or driver)")
    return RuntimeError(f"{what}: {e}")


@contextlib.contextmanager
def _libusb_call(what: str, bus_addr: str = "?", ids: tuple[int, int] = (0, 0)) -> Iterator[None]:
    usb1 = import_usb1()
    try:
        yield
    except usb1.USBError as e:
        raise _translate(e, what, bus_addr, ids) from e


class USB3:
    """An opened ASM24 bridge: vendor control requests and bulk transfers on EP 0x02 (OUT) / 0x81 (IN).

    ``dev`` is a ``usb1.USBDevice`` from :meth:`list_devices`. Opening checks the product string (``custom...`` or
    ``AS2462...``; else :class:`UnsupportedFirmwareError`), detaches a kernel driver (then resets the device), selects
    configuration 1 and claims interface 0, alt setting 0.
    """

    _context: Any = None
    _list_cache: dict[tuple[int, int], list[tuple[Any, str]]] = {}
    _ctx_lock = threading.Lock()

    @classmethod
    def context(cls) -> Any:
        """The process-wide libusb context, created on first use (libusb log level 4 at ``DEBUG>=6``)."""
        with cls._ctx_lock:
            if cls._context is None:
                usb1 = import_usb1()
                with _libusb_call("libusb_init"):
                    ctx = usb1.USBContext()
                    try:
                        ctx.open()
                    except OSError as e:  # the binding is installed but the libusb-1.0 system library is not
                        raise libusb_missing_error(e) from e
                    debug = os.environ.get("DEBUG", "0")
                    if debug.isdigit() and int(debug) >= 6:
                        ctx.setDebug(4)
                cls._context = ctx
            return cls._context

    @classmethod
    def list_devices(cls, vendor: int, product: int) -> list[tuple[Any, str]]:
        """``(device, "usb:<bus>-<address>")`` for every attached device with these ids (memoised).

        With ``TG_DRIVERS_BACKEND=mock`` the registered simulated bridges are listed instead
        (:class:`~tg.drivers.mock.usb.MockUSBContext`).
        """
        for value, what in ((vendor, "vendor"), (product, "product")):
            if not isinstance(value, int) or not 0 <= value <= 0xFFFF:
                raise ValueError(f"USB {what} id must be an int in 0..0xffff, got {value!r}")
        if os.environ.get("TG_DRIVERS_BACKEND", "").strip() == "mock":
            from tg.drivers.mock.usb import MockUSBContext

            return MockUSBContext.list_devices(vendor, product)
        key = (vendor, product)
        if key not in cls._list_cache:
            ctx = cls.context()
            found = []
            with _libusb_call("libusb_get_device_list"):
                for dev in ctx.getDeviceIterator(skip_on_error=True):
                    if (dev.getVendorID(), dev.getProductID()) == key:
                        found.append((dev, f"usb:{dev.getBusNumber()}-{dev.getDeviceAddress()}"))
            cls._list_cache[key] = found
        return list(cls._list_cache[key])

    @classmethod
    def cache_clear(cls) -> None:
        """Forget memoised device lists (after hot-plugging)."""
        cls._list_cache.clear()

    def __init__(self, dev: Any) -> None:
        import_usb1()
        self.bus_addr = f"usb:{dev.getBusNumber()}-{dev.getDeviceAddress()}"
        self.ids = (dev.getVendorID(), dev.getProductID())
        self._pending: dict[int, tuple[Any, Any, int]] = {}
        self._tags = itertools.count(1)
        self._async_error = 0
        with self._call("libusb_open"):
            self.handle = dev.open()
        try:
            with self._call("read product string"):
                self.product: str = self.handle.getProduct() or ""
            if not self.product.startswith(SUPPORTED_PRODUCTS):
                raise UnsupportedFirmwareError(
                    f"USB device {self.bus_addr} reports product {self.product!r}: the bridge must run the custom "
                    "ASM24 firmware (product string starting with 'custom' or 'AS2462')"
                )
            with self._call("detach kernel driver"):
                if self.handle.kernelDriverActive(0):
                    self.handle.detachKernelDriver(0)
                    self.handle.resetDevice()
            with self._call("claim interface 0"):
                self.handle.setConfiguration(1)
                self.handle.claimInterface(0)
                self.handle.setInterfaceAltSetting(0, 0)
        except BaseException:
            self.close()
            raise

    def _call(self, what: str) -> contextlib.AbstractContextManager[None]:
        return _libusb_call(what, self.bus_addr, self.ids)

    def close(self) -> None:
        """Release the interface and close the handle (idempotent)."""
        handle, self.handle = getattr(self, "handle", None), None
        if handle is not None:
            with contextlib.suppress(Exception):
                handle.releaseInterface(0)
            with contextlib.suppress(Exception):
                handle.close()

    # ---- synchronous transfers -------------------------------------------------------------------------------------
    def control_write(
        self, request: int, value: int = 0, index: int = 0, data: bytes = b"", timeout: int = 1000
    ) -> None:
        """Vendor control OUT (``bmRequestType=0x40``); all of ``data`` (at most 4096 bytes) must be sent."""
        if len(data) > CONTROL_MAX:
            raise ValueError(f"control transfer data is limited to {CONTROL_MAX} bytes, got {len(data)}")
        with self._call(f"control OUT {request:#04x}"):
            sent = self.handle.controlWrite(VENDOR_OUT, request, value, index, bytes(data), timeout)
        if sent != len(data):
            raise RuntimeError(f"control OUT {request:#04x} short write: {sent}/{len(data)} bytes")

    def control_read(self, request: int, length: int, value: int = 0, index: int = 0, timeout: int = 1000) -> bytes:
        """Vendor control IN (``bmRequestType=0xC0``) of exactly ``length`` (<= 4096) bytes."""
        if not 0 <= length <= CONTROL_MAX:
            raise ValueError(f"control transfer length must be in 0..{CONTROL_MAX}, got {length}")
        with self._call(f"control IN {request:#04x}"):
            data = bytes(self.handle.controlRead(VENDOR_IN, request, value, index, length, timeout))
        if len(data) != length:
            raise RuntimeError(f"control IN {request:#04x} short read: {len(data)}/{length} bytes")
        return data

    def bulk_write(self, payload: bytes, timeout: int = 1000) -> None:
        """Bulk OUT on EP 0x02; a short write is an error."""
        with self._call("bulk OUT 0x02 failed"):
            sent = self.handle.bulkWrite(EP_BULK_OUT, bytes(payload), timeout)
        if sent != len(payload):
            raise RuntimeError(f"bulk OUT short write: {sent}/{len(payload)} bytes")

    def bulk_read(self, length: int, timeout: int = 1000) -> bytes:
        """Bulk IN on EP 0x81; returns what arrived (callers needing an exact length check it)."""
        with self._call("bulk IN 0x81 failed"):
            return bytes(self.handle.bulkRead(EP_BULK_IN, length, timeout))

    # ---- asynchronous transfers ------------------------------------------------------------------------------------
    def _on_done(self, transfer: Any) -> None:
        tag = transfer.getUserData()
        _, _, expected = self._pending.pop(tag, (None, None, 0))
        if transfer.getStatus() != 0 or transfer.getActualLength() != expected:
            self._async_error = self._async_error or transfer.getStatus() or -1

    def _submit(self, setup: Callable[[Any, int], None], keep: Any, expected: int) -> int:
        tag = next(self._tags)
        with self._call("async submit failed"):
            transfer = self.handle.getTransfer()
            setup(transfer, tag)
            self._pending[tag] = (transfer, keep, expected)
            transfer.submit()
        return tag

    def bulk_write_async(self, payload: bytes, timeout: int = 10000) -> int:
        """Queue a bulk OUT without waiting; returns a tag for :meth:`bulk_wait`."""
        data = bytes(payload)
        return self._submit(lambda t, tag: t.setBulk(EP_BULK_OUT, data, self._on_done, tag, timeout), data, len(data))

    def control_write_async(
        self, request: int, value: int = 0, index: int = 0, data: bytes = b"", timeout: int = 1000
    ) -> int:
        """Queue a vendor control OUT; returns a tag for :meth:`bulk_wait`."""
        raw = bytes(data)
        return self._submit(
            lambda t, tag: t.setControl(VENDOR_OUT, request, value, index, raw, self._on_done, tag, timeout),
            raw,
            len(raw),
        )

    def control_read_async(
        self, request: int, length: int, value: int = 0, index: int = 0, timeout: int = 1000
    ) -> tuple[int, Any]:
        """Queue a vendor control IN; returns ``(tag, buffer)`` where the data lands by :meth:`bulk_wait`."""
        holder: dict[str, Any] = {}

        def setup(t: Any, tag: int) -> None:
            t.setControl(VENDOR_IN, request, value, index, length, self._on_done, tag, timeout)
            holder["t"] = t

        tag = self._submit(setup, holder, length)
        return tag, _AsyncBuffer(holder, length)

    def bulk_wait(self, tag: int) -> None:
        """Handle libusb events until transfer ``tag`` completed; raise if any async transfer failed (latched)."""
        ctx = self.context()
        while tag in self._pending:
            with self._call("libusb_handle_events"):
                ctx.handleEvents()
        if self._async_error:
            raise RuntimeError(f"async bulk OUT failed: status={self._async_error}")


class _AsyncBuffer:
    """The data of a completed async control IN (read it after ``bulk_wait``)."""

    def __init__(self, holder: dict[str, Any], length: int) -> None:
        self._holder, self.length = holder, length

    def tobytes(self) -> bytes:
        """The received bytes."""
        return bytes(self._holder["t"].getBuffer()[: self.length])

    def __bytes__(self) -> bytes:
        return self.tobytes()


def pack_setup(request_type: int, request: int, value: int, index: int, length: int) -> bytes:
    """The 8-byte USB setup packet ``<BBHHH`` used by control transfers."""
    return struct.pack("<BBHHH", request_type, request, value, index, length)
