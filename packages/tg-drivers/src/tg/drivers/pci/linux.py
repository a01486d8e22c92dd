"""LinuxPCIDevice: a PCI function driven from user space through sysfs (and, optionally, VFIO for interrupts).

Config space is ``<dev>/config``, BARs are mmaps of ``<dev>/resource<N>``, BAR sizes come from ``<dev>/resource``,
resizing goes through ``<dev>/resource<N>_resize`` and reset through ``<dev>/reset``. The library never shells out and
never calls sudo: when something needs privileges the error says what to run or which capability to grant.
Destructive steps (unbinding the kernel driver, removing sibling functions) only happen when asked for.
"""

from __future__ import annotations

import fcntl
import logging
import mmap
import os
import re
import select
import struct

from tg.drivers.errors import DeviceNotFoundError, DriverBoundError, NoPCIBusError, native_permission_error
from tg.drivers.mmio import HostMMIO, MMIOView
from tg.drivers.pci.base import PCIDevice
from tg.drivers.pci.sysfs import sysfs_root
from tg.drivers.pci.sysmem import (
    MADV_DONTFORK,
    MAP_FIXED,
    MAP_SHARED,
    PROT_READ,
    PROT_WRITE,
    alloc_locked_memory,
    alloc_locked_shared,
    libc,
)

__all__ = ["VFIO_DEV_ROOT", "LinuxPCIDevice"]

log = logging.getLogger(__name__)

_BUS_RE = re.compile(r"^[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$")

#: where the VFIO character devices live (tests point this elsewhere)
VFIO_DEV_ROOT = "/dev/vfio"
VFIO_NOIOMMU_IOMMU = 8
VFIO_CHECK_EXTENSION, VFIO_SET_IOMMU = 0x3B65, 0x3B66
VFIO_GROUP_SET_CONTAINER, VFIO_GROUP_GET_DEVICE_FD, VFIO_DEVICE_SET_IRQS = 0x3B68, 0x3B6A, 0x3B6E
VFIO_IRQ_SET_DATA_EVENTFD, VFIO_IRQ_SET_ACTION_TRIGGER, VFIO_PCI_MSI_IRQ_INDEX = 1 << 2, 1 << 5, 1

_vfio_container: int | None = None


def _write_sysfs(path: str, value: str, what: str) -> None:
    try:
        with open(path, "w") as f:
            f.write(value)
    except PermissionError as e:
        raise native_permission_error(what, path, e) from e


def _open_vfio_container() -> int | None:
    """The process-wide VFIO container in no-IOMMU mode, or None when VFIO is unavailable."""
    global _vfio_container
    if _vfio_container is not None:
        return _vfio_container
    module = os.path.join(sysfs_root(), "module", "vfio")
    if not os.path.isdir(module):
        log.warning("VFIO requested but the vfio module is not loaded (run `sudo modprobe vfio-pci disable_idle_d3=1`)")
        return None
    try:
        with open(os.path.join(module, "parameters", "enable_unsafe_noiommu_mode"), "w") as f:
            f.write("1")
        fd = os.open(os.path.join(VFIO_DEV_ROOT, "vfio"), os.O_RDWR | os.O_CLOEXEC)
        try:
            fcntl.ioctl(fd, VFIO_CHECK_EXTENSION, VFIO_NOIOMMU_IOMMU)
        except OSError:
            os.close(fd)
            raise
    except OSError as e:
        log.warning("VFIO requested but unavailable (%s); using the sysfs path without interrupts", e)
        return None
    _vfio_container = fd
    return fd


class _Allocation:
    """Owner of a DMA view: ``closed`` once the memory is freed or its device is closed (views then refuse access)."""

    def __init__(self, device: PCIDevice) -> None:
        self.device, self.freed = device, False

    @property
    def closed(self) -> bool:
        return self.freed or self.device.closed


class LinuxPCIDevice(PCIDevice):
    """A PCI function opened through sysfs; ``pcibus`` is its address, e.g. ``"0000:03:00.0"``.

    Constructor steps: take the lock ``"{devpref}_{pcibus}.lock"``; check access (``enable`` must be writable); refuse
    a bound kernel driver unless ``unbind_driver=True``; remove sibling functions 1..7 only with
    ``remove_siblings=True``; set up VFIO interrupts when ``use_vfio`` is true (``None``: env ``VFIO=1``), else enable
    the device; open ``config``. ``irq_poller``/``irq_fd`` are set when VFIO is active.
    """

    def __init__(
        self,
        devpref: str,
        pcibus: str,
        *,
        unbind_driver: bool = False,
        remove_siblings: bool = False,
        use_vfio: bool | None = None,
    ) -> None:
        super().__init__(devpref, pcibus)
        if not _BUS_RE.match(pcibus):
            raise ValueError(f"PCI bus address must look like 0000:03:00.0, got {pcibus!r}")
        devdir = os.path.join(sysfs_root(), "bus", "pci", "devices")
        if not os.path.isdir(devdir):
            raise NoPCIBusError(f"no PCI bus: {devdir} does not exist")
        self.path = os.path.join(devdir, pcibus)
        if not os.path.isdir(self.path):
            raise DeviceNotFoundError(f"PCI device {pcibus} does not exist ({self.path} is missing)")
        self._cfg_fd = -1
        self._bar_fds: dict[int, int] = {}
        self._mappings: list[tuple[int, int]] = []
        self._sysmem: dict[int, tuple[int, int, _Allocation]] = {}
        self.irq_fd: int | None = None
        self.irq_poller: select.poll | None = None
        self._vfio_fds: list[int] = []
        self._take_lock()
        try:
            self._setup(unbind_driver, remove_siblings, use_vfio)
        except BaseException:
            self.close()
            raise

    def _setup(self, unbind_driver: bool, remove_siblings: bool, use_vfio: bool | None) -> None:
        enable = os.path.join(self.path, "enable")
        try:
            with open(enable, "r+"):
                pass
        except PermissionError as e:
            raise native_permission_error(f"open PCI device {self.pcibus}", enable, e) from e
        self._handle_driver(unbind_driver)
        if remove_siblings:
            for fn in range(1, 8):
                sibling = os.path.join(os.path.dirname(self.path), f"{self.pcibus[:-1]}{fn}")
                if os.path.isdir(sibling):
                    _write_sysfs(os.path.join(sibling, "remove"), "1", f"remove sibling function {fn}")
        if use_vfio is None:
            use_vfio = os.environ.get("VFIO", "") == "1"
        if not (use_vfio and self._setup_vfio()):
            _write_sysfs(enable, "1", f"enable PCI device {self.pcibus}")
        config = os.path.join(self.path, "config")
        try:
            self._cfg_fd = os.open(config, os.O_RDWR | os.O_SYNC | os.O_CLOEXEC)
        except PermissionError as e:
            raise native_permission_error("open config space", config, e) from e
        size = os.fstat(self._cfg_fd).st_size
        self.cfg_size = 256 if size == 256 else 4096

    def _handle_driver(self, unbind_driver: bool) -> None:
        link = os.path.join(self.path, "driver")
        if not os.path.lexists(link):
            return
        driver = os.path.basename(os.readlink(link))
        if not unbind_driver:
            raise DriverBoundError(
                f"kernel driver {driver!r} is bound to {self.pcibus}; unbind it first with "
                f"`echo {self.pcibus} | sudo tee /sys/bus/pci/drivers/{driver}/unbind` "
                "(or pass unbind_driver=True; unbinding a display GPU's driver tears down the display)"
            )
        try:
            _write_sysfs(os.path.join(link, "unbind"), self.pcibus, f"unbind driver {driver}")
        except OSError as e:
            raise DriverBoundError(f"Driver {driver!r} is bound to {self.pcibus} and unbinding failed: {e}") from e
        if os.path.lexists(link):
            raise DriverBoundError(f"Driver is bound to {self.pcibus}")

    def _setup_vfio(self) -> bool:
        container = _open_vfio_container()
        if container is None:
            return False
        try:
            _write_sysfs(os.path.join(self.path, "driver_override"), "vfio-pci", "set driver_override")
            _write_sysfs(os.path.join(sysfs_root(), "bus", "pci", "drivers_probe"), self.pcibus, "probe vfio-pci")
            group = os.path.basename(os.readlink(os.path.join(self.path, "iommu_group")))
            group_fd = os.open(os.path.join(VFIO_DEV_ROOT, f"noiommu-{group}"), os.O_RDWR | os.O_CLOEXEC)
            self._vfio_fds.append(group_fd)
            fcntl.ioctl(group_fd, VFIO_GROUP_SET_CONTAINER, struct.pack("i", container))
            try:
                fcntl.ioctl(container, VFIO_SET_IOMMU, VFIO_NOIOMMU_IOMMU)
            except OSError:
                pass  # succeeds only once per container
            # a mutable buffer makes ioctl return the syscall's result, which is the new device fd
            device_fd = fcntl.ioctl(group_fd, VFIO_GROUP_GET_DEVICE_FD, bytearray(self.pcibus.encode() + b"\0"), True)
            self._vfio_fds.append(device_fd)
            self.irq_fd = os.eventfd(0, os.EFD_CLOEXEC)
            self.irq_poller = select.poll()
            self.irq_poller.register(self.irq_fd, select.POLLIN)
            irqs = struct.pack(
                "<IIIIIi",
                24,
                VFIO_IRQ_SET_DATA_EVENTFD | VFIO_IRQ_SET_ACTION_TRIGGER,
                VFIO_PCI_MSI_IRQ_INDEX,
                0,
                1,
                self.irq_fd,
            )
            fcntl.ioctl(device_fd, VFIO_DEVICE_SET_IRQS, irqs)
        except OSError as e:
            log.warning("VFIO setup of %s failed (%s); using the sysfs path without interrupts", self.pcibus, e)
            return False
        return True

    # ---- config space ----------------------------------------------------------------------------------------------
    def read_config(self, offset: int, size: int) -> int:
        """Read ``size`` bytes of config space at ``offset`` (little-endian) with ``pread``."""
        self._check_config(offset, size)
        data = os.pread(self._cfg_fd, size, offset)
        if len(data) != size:
            raise PermissionError(
                f"config space of {self.pcibus} is readable only up to byte {offset + len(data):#x} for this process "
                f"(unprivileged readers see the first 64 bytes): needs cap_sys_admin or root"
            )
        return int.from_bytes(data, "little")

    def write_config(self, offset: int, value: int, size: int) -> None:
        """Write ``value`` as ``size`` little-endian bytes at ``offset`` with ``pwrite``."""
        self._check_config(offset, size, value)
        written = os.pwrite(self._cfg_fd, value.to_bytes(size, "little"), offset)
        if written != size:
            raise OSError(f"short config write to {self.pcibus}: {written} of {size} bytes at {offset:#x}")

    # ---- BARs ------------------------------------------------------------------------------------------------------
    def bar_info(self, bar: int) -> tuple[int, int]:
        """``(bus address, size)`` from the sysfs ``resource`` file; an absent BAR is ``(0, 0)``. Cached."""
        self._check_bar_index(bar)
        if bar not in self._bar_info_cache:
            with open(os.path.join(self.path, "resource")) as f:
                lines = f.read().splitlines()
            info = (0, 0)
            if bar < len(lines):
                fields = lines[bar].split()
                start, end = int(fields[0], 16), int(fields[1], 16)
                if not (start == 0 and end == 0) and end >= start:
                    info = (start, end - start + 1)
            self._bar_info_cache[bar] = info
        return self._bar_info_cache[bar]

    def _bar_fd(self, bar: int) -> int:
        if bar not in self._bar_fds:
            path = os.path.join(self.path, f"resource{bar}")
            try:
                self._bar_fds[bar] = os.open(path, os.O_RDWR | os.O_SYNC | os.O_CLOEXEC)
            except PermissionError as e:
                raise native_permission_error(f"map BAR {bar}", path, e) from e
        return self._bar_fds[bar]

    def map_bar(self, bar: int, off: int = 0, addr: int = 0, size: int | None = None, fmt: str = "B") -> MMIOView:
        """mmap bytes ``[off, off+size)`` of the BAR (page-aligned internally); ``addr`` requests a fixed address."""
        self._check_open()
        off, size = self._bar_window(bar, off, size, fmt)
        page = mmap.PAGESIZE
        start = off - off % page
        delta = off - start
        if addr and addr % page != delta % page:
            raise ValueError(f"fixed mapping address {addr:#x} must have the page offset of the BAR offset {off:#x}")
        length = max(delta + size, 1)
        flags = MAP_SHARED | (MAP_FIXED if addr else 0)
        lib = libc()
        base = lib.map(addr - delta if addr else 0, length, PROT_READ | PROT_WRITE, flags, self._bar_fd(bar), start)
        lib.madvise(base, length, MADV_DONTFORK)  # forked children must not inherit device mappings
        self._mappings.append((base, length))
        return HostMMIO(base + delta, size, fmt, owner=self)

    def resize_bar(self, bar: int) -> None:
        """Select the largest size in ``resource<bar>_resize`` (needs no bound driver and CAP_SYS_ADMIN)."""
        self._check_open()
        self._check_bar_index(bar)
        path = os.path.join(self.path, f"resource{bar}_resize")
        try:
            with open(path) as f:
                mask = int(f.read().strip() or "0", 16)
            if mask == 0:
                raise OSError(f"{path} lists no supported sizes")
            with open(path, "w") as f:
                f.write(str(mask.bit_length() - 1))
        except OSError as e:
            raise RuntimeError(f"Cannot resize BAR {bar}: {e}. Ensure the resizable BAR option is enabled.") from e
        except ValueError as e:
            raise RuntimeError(f"Cannot resize BAR {bar}: unreadable {path}: {e}") from e
        self._bar_info_cache.pop(bar, None)

    def reset(self) -> None:
        """Function-level reset by writing ``1`` to the sysfs ``reset`` file."""
        self._check_open()
        path = os.path.join(self.path, "reset")
        if not os.path.exists(path):
            raise RuntimeError(f"{self.pcibus} has no reset method ({path} does not exist)")
        _write_sysfs(path, "1", f"reset {self.pcibus}")

    # ---- system memory ---------------------------------------------------------------------------------------------
    def alloc_sysmem(self, size: int, vaddr: int = 0, contiguous: bool = False) -> tuple[MMIOView, list[int]]:
        """Locked host memory and its bus addresses (one per 4 KiB page); see :mod:`tg.drivers.pci.sysmem`."""
        self._check_open()
        self._check_sysmem(size, contiguous)
        view, paddrs, length = alloc_locked_memory(size, vaddr, contiguous)
        owner = _Allocation(self)
        view.owner = owner
        self._sysmem[id(view)] = (view.addr, length, owner)
        return view, paddrs

    def alloc_sysmem_shared(self, size: int, contiguous: bool = False) -> tuple[int, MMIOView, list[int]]:
        """Locked memfd-backed memory for the remote server's ``MAP_SYSMEM_FD``: ``(fd, view, paddrs)``.

        The caller owns ``fd``; :meth:`free_sysmem` unmaps the view. Contiguous allocations larger than a page are
        not supported here (use :meth:`alloc_sysmem`).
        """
        self._check_open()
        self._check_sysmem(size, contiguous)
        if contiguous and size > mmap.PAGESIZE:
            raise NotImplementedError("contiguous shared system memory is not supported; use alloc_sysmem")
        fd, view, paddrs, length = alloc_locked_shared(size)
        owner = _Allocation(self)
        view.owner = owner
        self._sysmem[id(view)] = (view.addr, length, owner)
        return fd, view, paddrs

    def free_sysmem(self, view: MMIOView) -> None:
        """Unmap memory returned by :meth:`alloc_sysmem`; the view must not be used afterwards."""
        found = self._sysmem.pop(id(view), None)
        if found is None:
            raise ValueError("free_sysmem: this view was not returned by alloc_sysmem of this device (or was freed)")
        addr, length, alloc = found
        alloc.freed = True
        libc().unmap(addr, length)

    # ---- lifecycle -------------------------------------------------------------------------------------------------
    def _close(self) -> None:
        for base, length in [*self._mappings, *((a, n) for a, n, _ in self._sysmem.values())]:
            try:
                libc().unmap(base, length)
            except OSError as e:
                log.warning("unmapping %#x bytes at %#x of %s failed: %s", length, base, self.pcibus, e)
        self._mappings.clear()
        self._sysmem.clear()
        fds = [*self._bar_fds.values(), *self._vfio_fds]
        if self._cfg_fd >= 0:
            fds.append(self._cfg_fd)
        if self.irq_fd is not None:
            fds.append(self.irq_fd)
        for fd in fds:
            try:
                os.close(fd)
            except OSError:
                pass
        self._bar_fds.clear()
        self._vfio_fds.clear()
        self._cfg_fd, self.irq_fd, self.irq_poller = -1, None, None
