"""BumpAllocator, device locks and the exception hierarchy."""

from __future__ import annotations

import multiprocessing
import os
import stat

import pytest

from tg.drivers import errors
from tg.drivers.alloc import BumpAllocator
from tg.drivers.errors import DeviceBusyError
from tg.drivers.lock import acquire_device_lock, lock_dir, lock_name


def test_bump_allocator_alignment_and_base() -> None:
    a = BumpAllocator(0x1000, base=0x200000, wrap=False)
    assert a.alloc(3) == 0x200000
    assert a.alloc(16, alignment=64) == 0x200040
    assert a.alloc(0x10) == 0x200050


def test_bump_allocator_exhaustion_and_wrap() -> None:
    a = BumpAllocator(0x100, wrap=False)
    a.alloc(0xF0)
    with pytest.raises(RuntimeError, match="Out of memory"):
        a.alloc(0x20)
    w = BumpAllocator(0x100, wrap=True)
    assert w.alloc(0xF0) == 0
    assert w.alloc(0x20) == 0  # wrapped to the start
    with pytest.raises(RuntimeError, match="Out of memory"):
        w.alloc(0x101)  # larger than the whole space, even with wrap
    for bad in [(-1,), (1, 0)]:
        with pytest.raises(ValueError):
            w.alloc(*bad)
    with pytest.raises(ValueError):
        BumpAllocator(0)


def _try_lock(name: str, lockdir: str, queue: multiprocessing.Queue[str]) -> None:
    os.environ["TG_DRIVERS_LOCK_DIR"] = lockdir
    try:
        lk = acquire_device_lock(name)
        queue.put("acquired")
        lk.release()
    except DeviceBusyError as e:
        queue.put(f"busy: {e}")


def _hold_lock_and_die(name: str, lockdir: str) -> None:
    os.environ["TG_DRIVERS_LOCK_DIR"] = lockdir
    acquire_device_lock(name)
    os._exit(0)  # the kernel must drop the lock


def _run(target: object, *args: object) -> str:
    ctx = multiprocessing.get_context("fork")
    q: multiprocessing.Queue[str] = ctx.Queue()
    p = ctx.Process(target=target, args=(*args, q))  # type: ignore[arg-type]
    p.start()
    p.join(30)
    return q.get(timeout=5)


def test_lock_excludes_other_process_and_is_released(_isolated_lock_dir: str) -> None:
    name = lock_name("AM", "0000:03:00.0")
    assert name == "am_0000:03:00.0.lock"
    lk = acquire_device_lock(name)
    msg = _run(_try_lock, name, _isolated_lock_dir)
    assert msg.startswith("busy: Failed to acquire lock file am_0000:03:00.0.lock")
    assert "sudo lsof" in msg
    lk.release()
    lk.release()  # idempotent
    assert _run(_try_lock, name, _isolated_lock_dir) == "acquired"


def test_lock_released_on_process_death(_isolated_lock_dir: str) -> None:
    ctx = multiprocessing.get_context("fork")
    p = ctx.Process(target=_hold_lock_and_die, args=("sv_x.lock", _isolated_lock_dir))
    p.start()
    p.join(30)
    with acquire_device_lock("sv_x.lock") as lk:
        assert lk.held


def test_lock_same_process_second_open_is_busy() -> None:
    with acquire_device_lock("t_dev.lock"), pytest.raises(DeviceBusyError):
        acquire_device_lock("t_dev.lock")


def test_lock_file_mode_and_umask_unchanged(_isolated_lock_dir: str) -> None:
    old = os.umask(0o022)
    try:
        with acquire_device_lock("mode.lock") as lk:
            assert stat.S_IMODE(os.stat(lk.path).st_mode) == 0o666
            assert os.path.dirname(lk.path) == lock_dir() == _isolated_lock_dir
        assert os.umask(0o022) == 0o022
    finally:
        os.umask(old)


def test_unwritable_lock_file_names_the_fix(_isolated_lock_dir: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A lock file left by another user (mode 0644) gives a PermissionError saying what to do, not a bare errno."""
    path = os.path.join(_isolated_lock_dir, "am_0000:03:00.0.lock")
    real_open = os.open

    def deny(file: str, flags: int, mode: int = 0o777) -> int:
        if file == path:
            raise PermissionError(13, "Permission denied", file)
        return real_open(file, flags, mode)

    monkeypatch.setattr(os, "open", deny)  # root ignores file modes, so simulate the other user's file
    with pytest.raises(PermissionError, match=r"lock file .*am_0000:03:00.0.lock.*chmod 666.*TG_DRIVERS_LOCK_DIR"):
        acquire_device_lock("am_0000:03:00.0.lock")


def test_missing_lock_directory_is_named(tmp_path: object, monkeypatch: pytest.MonkeyPatch) -> None:
    missing = os.path.join(str(tmp_path), "no-such-dir")
    monkeypatch.setenv("TG_DRIVERS_LOCK_DIR", missing)
    with pytest.raises(FileNotFoundError, match=rf"lock directory {missing} does not exist.*TG_DRIVERS_LOCK_DIR"):
        acquire_device_lock("am_x.lock")


def test_lock_names_are_validated() -> None:
    with pytest.raises(ValueError):
        acquire_device_lock("../x")
    with pytest.raises(ValueError):
        lock_name("AM", "a/b")


def test_error_hierarchy_has_builtin_bases() -> None:
    runtime = [
        "NoPCIBusError",
        "DeviceNotFoundError",
        "DeviceBusyError",
        "DriverBoundError",
        "UnsupportedFirmwareError",
        "LinkDownError",
        "PCIeCompletionError",
        "RemoteError",
        "ConnectionClosedError",
        "MockAccessError",
    ]
    for name in runtime:
        cls = getattr(errors, name)
        assert issubclass(cls, errors.TGDriversError) and issubclass(cls, RuntimeError), name
    assert issubclass(errors.DeviceGoneError, OSError) and issubclass(errors.DeviceGoneError, errors.TGDriversError)
    e = errors.PCIeCompletionError("TLP completion status: Completer Abort", status=4, address=0x10)
    assert (e.status, e.address) == (4, 0x10)


def test_permission_and_libusb_messages() -> None:
    e = errors.native_permission_error("open the device", "/sys/bus/pci/devices/x/enable")
    assert isinstance(e, PermissionError) and "cap_sys_admin" in str(e) and "setcap" in str(e)
    u = errors.usb_permission_error("usb:3-2", 0xADD1, 0x0001)
    assert "usb:3-2" in str(u) and 'ATTR{idVendor}=="add1"' in str(u) and "root" in str(u)
    m = errors.libusb_missing_error()
    assert isinstance(m, OSError) and "libusb-1.0 not found; install libusb-1.0-0" in str(m)
