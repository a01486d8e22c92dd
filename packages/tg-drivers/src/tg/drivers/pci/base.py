"""PCIDevice: the interface shared by native (sysfs), USB-bridge, remote and mock PCI devices.

Implementations validate arguments with the ``_check_*`` helpers here *before* they touch the device, so every
backend rejects the same bad input with the same message.
"""

from __future__ import annotations

import abc

from tg.drivers.lock import DeviceLock, acquire_device_lock, lock_name
from tg.drivers.mmio import FORMATS, MMIOView

__all__ = ["PAGE_SIZE_4K", "PCIDevice"]

PAGE_SIZE_4K = 0x1000
#: physically contiguous system memory is limited to one 2 MiB huge page
MAX_CONTIGUOUS_SYSMEM = 2 << 20


class PCIDevice(abc.ABC):
    """A PCI function: config space, BARs, reset and DMA-able system memory.

    Attributes: ``pcibus`` (a stable identifier such as ``"0000:03:00.0"``, ``"usb:3-2"`` or
    ``"remote:host:port:bus:idx"``), ``peer_group`` (devices of one group can do P2P; informational), ``devpref`` (the
    short prefix used for the lock file) and ``cfg_size`` (4096 for PCIe config space, 256 for legacy).

    Concrete devices take the device lock (:meth:`_take_lock`) before touching the device and release it in
    :meth:`close`, which is idempotent; a device is also a context manager.
    """

    pcibus: str
    peer_group: str
    devpref: str
    cfg_size: int = 4096

    def __init__(self, devpref: str, pcibus: str, *, peer_group: str | None = None) -> None:
        if not isinstance(devpref, str) or not devpref:
            raise ValueError(f"device prefix must be a non-empty string, got {devpref!r}")
        if not isinstance(pcibus, str) or not pcibus:
            raise ValueError(f"pcibus must be a non-empty string, got {pcibus!r}")
        self.devpref, self.pcibus = devpref, pcibus
        self.peer_group = peer_group if peer_group is not None else pcibus
        self._lock: DeviceLock | None = None
        self._bar_info_cache: dict[int, tuple[int, int]] = {}
        self.closed = False

    # ---- locking / lifecycle -------------------------------------------------------------------------------------
    def _take_lock(self) -> None:
        """Acquire ``"{devpref}_{pcibus}.lock"``; raises DeviceBusyError when another process holds it."""
        self._lock = acquire_device_lock(lock_name(self.devpref, self.pcibus))

    def _release_lock(self) -> None:
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    def close(self) -> None:
        """Release mappings, allocations and the device lock. Idempotent; subclasses extend ``_close``."""
        if self.closed:
            return
        self.closed = True
        try:
            self._close()
        finally:
            self._release_lock()

    def _close(self) -> None:  # noqa: B027 - an optional hook, deliberately not abstract
        """Backend-specific cleanup, run once by :meth:`close` before the lock is released."""

    def __enter__(self) -> PCIDevice:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            if not getattr(self, "closed", True):
                self.close()
        except Exception:
            pass

    def _check_open(self) -> None:
        if self.closed:
            raise RuntimeError(f"{type(self).__name__} {self.pcibus} is closed")

    # ---- validation helpers ----------------------------------------------------------------------------------------
    def _check_config(self, offset: int, size: int, value: int | None = None) -> None:
        """Validate a config-space access: size in {1,2,4}, inside ``cfg_size``, value fitting in ``size`` bytes."""
        self._check_open()
        if not isinstance(offset, int) or not isinstance(size, int):
            raise TypeError(f"config offset and size must be ints, got {offset!r} and {size!r}")
        if size not in (1, 2, 4):
            raise ValueError(f"config access size must be 1, 2 or 4, got {size}")
        if offset < 0 or offset + size > self.cfg_size:
            raise ValueError(
                f"config access of {size} bytes at {offset:#x} is outside the {self.cfg_size:#x}-byte "
                f"config space of {self.pcibus}"
            )
        if value is not None:
            if not isinstance(value, int) or isinstance(value, bool):
                raise TypeError(f"config value must be an int, got {type(value).__name__}")
            if not 0 <= value < 1 << (8 * size):
                raise ValueError(f"config value {value:#x} does not fit in {size} byte(s)")

    @staticmethod
    def _check_bar_index(bar: int) -> None:
        if not isinstance(bar, int) or isinstance(bar, bool) or not 0 <= bar <= 5:
            raise ValueError(f"BAR index must be an int in 0..5, got {bar!r}")

    def _bar_window(self, bar: int, off: int, size: int | None, fmt: str) -> tuple[int, int]:
        """Validate a ``map_bar`` request against ``bar_info``; return ``(off, size)`` with the default size filled."""
        self._check_bar_index(bar)
        if fmt not in FORMATS:
            raise ValueError(f"unsupported MMIO format {fmt!r}; expected one of {sorted(FORMATS)}")
        _, bar_size = self.bar_info(bar)
        if bar_size == 0:
            raise ValueError(f"BAR {bar} of {self.pcibus} is absent (size 0)")
        if not isinstance(off, int) or off < 0:
            raise ValueError(f"BAR offset must be a non-negative int, got {off!r}")
        if size is None:
            size = bar_size - off
        if not isinstance(size, int) or size < 0 or off + size > bar_size:
            raise ValueError(f"BAR {bar} window [{off:#x}, {off + (size or 0):#x}) exceeds the BAR size {bar_size:#x}")
        return off, size

    @staticmethod
    def _check_sysmem(size: int, contiguous: bool) -> None:
        if not isinstance(size, int) or isinstance(size, bool) or size <= 0:
            raise ValueError(f"system memory size must be a positive int, got {size!r}")
        if contiguous and size > MAX_CONTIGUOUS_SYSMEM:
            raise ValueError(f"contiguous system memory is limited to 2 MiB, {size:#x} bytes requested")

    # ---- the interface ---------------------------------------------------------------------------------------------
    @abc.abstractmethod
    def read_config(self, offset: int, size: int) -> int:
        """Read ``size`` (1, 2 or 4) bytes of config space at ``offset``, little-endian."""

    @abc.abstractmethod
    def write_config(self, offset: int, value: int, size: int) -> None:
        """Write ``value`` as ``size`` little-endian bytes of config space at ``offset``."""

    def write_config_flush(self, offset: int, value: int, size: int) -> None:
        """Write config space, then read the same location back so the write has reached the device."""
        self.write_config(offset, value, size)
        self.read_config(offset, size)

    @abc.abstractmethod
    def bar_info(self, bar: int) -> tuple[int, int]:
        """``(bus_address, size)`` of BAR ``bar`` (0..5); an absent BAR has size 0."""

    @abc.abstractmethod
    def map_bar(self, bar: int, off: int = 0, addr: int = 0, size: int | None = None, fmt: str = "B") -> MMIOView:
        """A view of bytes ``[off, off+size)`` of the BAR (``size=None``: to the end of the BAR)."""

    @abc.abstractmethod
    def resize_bar(self, bar: int) -> None:
        """Resize the BAR to the largest size its Resizable BAR capability advertises."""

    @abc.abstractmethod
    def reset(self) -> None:
        """Function-level reset."""

    @abc.abstractmethod
    def alloc_sysmem(self, size: int, vaddr: int = 0, contiguous: bool = False) -> tuple[MMIOView, list[int]]:
        """Allocate DMA-able host memory; return a byte view and one bus address per 4 KiB page."""

    @abc.abstractmethod
    def free_sysmem(self, view: MMIOView) -> None:
        """Release memory returned by :meth:`alloc_sysmem` (a no-op where the backend cannot free)."""

    def __repr__(self) -> str:
        state = " closed" if self.closed else ""
        return f"<{type(self).__name__} {self.pcibus}{state}>"
