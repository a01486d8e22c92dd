"""USB3 on libusb1: what users see without libusb, libusb error mapping, product checks, transfer checks.

A fake ``usb1`` module stands in for the binding, so these tests need no USB hardware (or libusb).
"""

from __future__ import annotations

import importlib.abc
import sys
import types
from typing import Any

import pytest

from tg.drivers.errors import DeviceBusyError, DeviceGoneError, UnsupportedFirmwareError
from tg.drivers.usb import USB3, transport


@pytest.fixture(autouse=True)
def _fresh_usb_state(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(USB3, "_context", None)
    monkeypatch.setattr(USB3, "_list_cache", {})


class _RaisingFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name == "usb1":
            raise OSError("libusb-1.0.so.0: cannot open shared object file")
        return None


def test_missing_python_binding(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "usb1", None)  # type: ignore[arg-type]
    with pytest.raises(OSError, match=r"libusb-1.0 not found; install libusb-1.0-0 \(Debian/Ubuntu\)"):
        USB3.list_devices(0xADD1, 1)


def test_missing_system_library(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "usb1", raising=False)
    monkeypatch.setattr(sys, "meta_path", [_RaisingFinder(), *sys.meta_path])
    with pytest.raises(OSError, match=r"libusb-1.0 not found.*cannot open shared object"):
        transport.import_usb1()


class FakeUSBError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(f"LIBUSB_ERROR {value}")
        self.value = value


class FakeHandle:
    def __init__(self, product: str, fail: dict[str, int] | None = None) -> None:
        self.product, self.fail, self.calls = product, fail or {}, []  # type: ignore[var-annotated]
        self.short = False

    def _maybe_fail(self, name: str) -> None:
        self.calls.append(name)
        if name in self.fail:
            raise FakeUSBError(self.fail[name])

    def getProduct(self) -> str:
        self._maybe_fail("getProduct")
        return self.product

    def kernelDriverActive(self, interface: int) -> bool:
        self._maybe_fail("kernelDriverActive")
        return True

    def detachKernelDriver(self, interface: int) -> None:
        self._maybe_fail("detachKernelDriver")

    def resetDevice(self) -> None:
        self._maybe_fail("resetDevice")

    def setConfiguration(self, c: int) -> None:
        self._maybe_fail("setConfiguration")

    def claimInterface(self, i: int) -> None:
        self._maybe_fail("claimInterface")

    def setInterfaceAltSetting(self, i: int, alt: int) -> None:
        self._maybe_fail("setInterfaceAltSetting")

    def releaseInterface(self, i: int) -> None:
        self.calls.append("releaseInterface")

    def close(self) -> None:
        self.calls.append("close")

    def controlWrite(self, rt: int, req: int, value: int, index: int, data: bytes, timeout: int) -> int:
        self._maybe_fail("controlWrite")
        self.calls.append(("controlWrite", rt, req, value, index, data, timeout))
        return len(data) - (1 if self.short else 0)

    def controlRead(self, rt: int, req: int, value: int, index: int, length: int, timeout: int) -> bytes:
        self._maybe_fail("controlRead")
        self.calls.append(("controlRead", rt, req, value, index, length, timeout))
        return bytes(length - (1 if self.short else 0))

    def bulkWrite(self, ep: int, data: bytes, timeout: int) -> int:
        self._maybe_fail("bulkWrite")
        self.calls.append(("bulkWrite", ep, len(data)))
        return len(data) - (1 if self.short else 0)

    def bulkRead(self, ep: int, length: int, timeout: int) -> bytes:
        self._maybe_fail("bulkRead")
        self.calls.append(("bulkRead", ep, length))
        return bytes(length)

    def getTransfer(self) -> FakeTransfer:
        return FakeTransfer(self)


class FakeTransfer:
    """Completes when the context handles events; ``status``/``short`` simulate failures."""

    submitted: list[FakeTransfer] = []

    def __init__(self, handle: FakeHandle) -> None:
        self.handle, self.status, self.short = handle, 0, False

    def setBulk(self, ep: int, data: bytes, callback: Any, user_data: int, timeout: int) -> None:
        self.kind, self.length, self.callback, self.user_data = ("bulk", ep), len(data), callback, user_data
        self.buffer = bytes(data)

    def setControl(
        self, rt: int, req: int, value: int, index: int, data: Any, callback: Any, user_data: int, timeout: int
    ) -> None:
        self.kind, self.callback, self.user_data = ("control", rt, req, value, index), callback, user_data
        self.length = data if isinstance(data, int) else len(data)
        self.buffer = bytes(range(self.length)) if isinstance(data, int) else bytes(data)

    def submit(self) -> None:
        FakeTransfer.submitted.append(self)

    def getUserData(self) -> int:
        return self.user_data

    def getStatus(self) -> int:
        return self.status

    def getActualLength(self) -> int:
        return self.length - (1 if self.short else 0)

    def getBuffer(self) -> bytes:
        return self.buffer


class FakeDevice:
    def __init__(self, handle: FakeHandle, vid: int = 0xADD1, pid: int = 1, open_error: int | None = None) -> None:
        self.handle, self.vid, self.pid, self.open_error = handle, vid, pid, open_error

    def getBusNumber(self) -> int:
        return 3

    def getDeviceAddress(self) -> int:
        return 7

    def getVendorID(self) -> int:
        return self.vid

    def getProductID(self) -> int:
        return self.pid

    def open(self) -> FakeHandle:
        if self.open_error is not None:
            raise FakeUSBError(self.open_error)
        return self.handle


@pytest.fixture
def fake_usb1(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    mod = types.ModuleType("usb1")
    mod.USBError = FakeUSBError  # type: ignore[attr-defined]
    devices: list[FakeDevice] = []

    class Context:
        def open(self) -> None:
            pass

        def setDebug(self, level: int) -> None:
            pass

        def getDeviceIterator(self, skip_on_error: bool = False) -> list[FakeDevice]:
            return devices

        def handleEvents(self) -> None:
            if FakeTransfer.submitted:
                t = FakeTransfer.submitted.pop(0)
                t.callback(t)

    mod.USBContext = Context  # type: ignore[attr-defined]
    mod.devices = devices  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "usb1", mod)
    return mod


def test_binding_present_but_system_library_missing(fake_usb1: Any) -> None:
    # libusb1 imports fine but cannot find libusb-1.0 when the context opens (the normal state after `pip install`)
    def missing(self: Any) -> None:
        raise FileNotFoundError(2, "cannot find a suitable libusb-1.0")

    fake_usb1.USBContext.open = missing
    with pytest.raises(OSError, match=r"libusb-1.0 not found; install libusb-1.0-0 .*cannot find a suitable"):
        USB3.list_devices(0xADD1, 1)


def test_list_devices_filters_and_names(fake_usb1: Any) -> None:
    fake_usb1.devices.extend([FakeDevice(FakeHandle("custom")), FakeDevice(FakeHandle("x"), pid=2)])
    found = USB3.list_devices(0xADD1, 1)
    assert [name for _, name in found] == ["usb:3-7"]
    fake_usb1.devices.clear()
    assert len(USB3.list_devices(0xADD1, 1)) == 1  # memoised
    USB3.cache_clear()
    assert USB3.list_devices(0xADD1, 1) == []
    with pytest.raises(ValueError, match="vendor id"):
        USB3.list_devices(-1, 1)


def test_open_sequence(fake_usb1: Any) -> None:
    handle = FakeHandle("custom_fw 1.2")
    usb = USB3(FakeDevice(handle))
    assert usb.product == "custom_fw 1.2"
    assert [c for c in handle.calls if isinstance(c, str)] == [
        "getProduct",
        "kernelDriverActive",
        "detachKernelDriver",
        "resetDevice",
        "setConfiguration",
        "claimInterface",
        "setInterfaceAltSetting",
    ]
    usb.close()
    usb.close()
    assert handle.calls[-2:] == ["releaseInterface", "close"]


def test_unsupported_firmware(fake_usb1: Any) -> None:
    handle = FakeHandle("ASM2464 stock")
    with pytest.raises(UnsupportedFirmwareError, match=r"'ASM2464 stock'.*custom ASM24 firmware"):
        USB3(FakeDevice(handle))
    assert "claimInterface" not in handle.calls and handle.calls[-1] == "close"
    USB3(FakeDevice(FakeHandle("AS2462 custom")))  # the other accepted prefix


@pytest.mark.parametrize(
    ("code", "exc", "text"),
    [
        (-3, PermissionError, r"no permission to open USB device usb:3-7: add a udev rule .*add1.*or run as root"),
        (-4, DeviceGoneError, "is gone"),
        (-6, DeviceBusyError, "busy"),
        (-7, TimeoutError, "timed out"),
        (-1, RuntimeError, "libusb_open: LIBUSB_ERROR -1"),
    ],
)
def test_libusb_errors_are_typed(fake_usb1: Any, code: int, exc: type[Exception], text: str) -> None:
    with pytest.raises(exc, match=text):
        USB3(FakeDevice(FakeHandle("custom"), open_error=code))


def test_transfers_and_their_checks(fake_usb1: Any) -> None:
    handle = FakeHandle("custom")
    usb = USB3(FakeDevice(handle))
    usb.control_write(0xF0, 0x1234, 1, b"\x00" * 12, timeout=5000)
    assert handle.calls[-1] == ("controlWrite", 0x40, 0xF0, 0x1234, 1, b"\x00" * 12, 5000)
    assert usb.control_read(0xE4, 8, value=0xB450) == bytes(8)
    assert handle.calls[-1][:6] == ("controlRead", 0xC0, 0xE4, 0xB450, 0, 8)
    usb.bulk_write(b"abcd")
    assert handle.calls[-1] == ("bulkWrite", 0x02, 4)
    assert usb.bulk_read(16) == bytes(16) and handle.calls[-1] == ("bulkRead", 0x81, 16)
    with pytest.raises(ValueError, match="4096"):
        usb.control_write(0xF0, data=bytes(4097))
    handle.short = True
    with pytest.raises(RuntimeError, match="short write: 3/4"):
        usb.bulk_write(b"abcd")
    with pytest.raises(RuntimeError, match="short read"):
        usb.control_read(0xE4, 4)
    handle.fail["bulkRead"] = -7
    with pytest.raises(TimeoutError):
        usb.bulk_read(4)
    handle.fail["controlWrite"] = -4
    with pytest.raises(DeviceGoneError):
        usb.control_write(0xE5, 1, 2)


def test_async_transfers(fake_usb1: Any) -> None:
    FakeTransfer.submitted.clear()
    usb = USB3(FakeDevice(FakeHandle("custom")))
    t1 = usb.bulk_write_async(b"payload")
    t2 = usb.control_write_async(0xF0, 1, 2, b"\x00" * 12)
    t3, data = usb.control_read_async(0xF0, 8)
    assert len(FakeTransfer.submitted) == 3 and FakeTransfer.submitted[1].kind == ("control", 0x40, 0xF0, 1, 2)
    usb.bulk_wait(t3)  # handles events until t3 is done (t1 and t2 complete on the way)
    usb.bulk_wait(t1)
    usb.bulk_wait(t2)
    assert bytes(data) == bytes(range(8))
    bad = usb.bulk_write_async(b"xyz")
    FakeTransfer.submitted[0].short = True
    with pytest.raises(RuntimeError, match="async bulk OUT failed: status=-1"):
        usb.bulk_wait(bad)
    with pytest.raises(RuntimeError, match="async bulk OUT failed"):  # the error latches
        usb.bulk_wait(usb.bulk_write_async(b"ok"))
