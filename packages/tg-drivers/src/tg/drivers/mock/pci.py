"""MockPCIDevice: a complete in-memory PCI function for tests and simulators.

It behaves like real hardware where generic code cares: config space with read-only ids, BAR registers that answer
the ``0xFFFFFFFF`` sizing probe and store assigned addresses, an optional Resizable BAR capability whose control
register really resizes the BAR, DMA-able "system memory" with fake bus addresses that a register model can reach
(``dma_read``/``dma_write``), device locks, and a discovery backend (:meth:`MockPCIDevice.make_backend`).

Every illegal access (outside a BAR, config space or allocation, or refused by a register model) raises and is
appended to ``violations``, so fuzzers and servers can assert that validation happened before the device was touched.
"""

from __future__ import annotations

import dataclasses
import itertools
import mmap
import os
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from tg.drivers.errors import MockAccessError
from tg.drivers.mmio import BufferMMIO, MMIOView, ModelMMIO
from tg.drivers.pci.base import PAGE_SIZE_4K, PCIDevice
from tg.drivers.pci.ids import device_matches, normalize_devices

__all__ = ["BarSpec", "MockPCIDevice"]

MIB = 1 << 20
REBAR_CAP_OFFSET = 0x100
REBAR_CAP_ID = 0x15
SYSMEM_PADDR_BASE = 0x1_0000_0000


@dataclasses.dataclass
class BarSpec:
    """One memory BAR of a mock device.

    ``size`` is a power of two >= 16. ``backing`` is ``None`` (zero-filled memory), a writable buffer of at least
    ``size`` bytes, or a :class:`~tg.drivers.mock.regmodel.RegisterModel` serving at least ``size`` bytes.
    """

    size: int
    is64: bool = False
    prefetch: bool = False
    backing: Any = None


def _is_model(obj: Any) -> bool:
    return hasattr(obj, "read") and hasattr(obj, "write") and hasattr(obj, "size") and not isinstance(obj, mmap.mmap)


class _Allocation:
    def __init__(self, mem: mmap.mmap, size: int, paddrs: list[int], view: MMIOView) -> None:
        # the view is kept so its id() stays unique while the allocation is alive
        self.mem, self.size, self.paddrs, self.view = mem, size, paddrs, view


class MockPCIDevice(PCIDevice):
    """An in-memory PCI device; see the module docstring. Defaults model a Navi31-like GPU (1002:744c).

    ``bars`` maps BAR index to :class:`BarSpec`. ``rebar`` maps a BAR index to the sizes (bytes, powers of two >= 1 MiB)
    its Resizable BAR capability supports; the BAR's current size must be one of them. ``violations`` may be passed
    in to share one list between several devices (e.g. every device a server opens). ``shared_sysmem=True`` enables
    :meth:`alloc_sysmem_shared` (memfd-backed DMA memory, for the remote server's ``MAP_SYSMEM_FD``).
    """

    _paddr_counter = itertools.count(SYSMEM_PADDR_BASE // PAGE_SIZE_4K)
    _paddr_lock = threading.Lock()

    def __init__(
        self,
        devpref: str = "MOCK",
        pcibus: str = "mock:0",
        *,
        vendor: int = 0x1002,
        device: int = 0x744C,
        class_code: int = 0x030000,
        revision: int = 0,
        subsystem: tuple[int, int] = (0, 0),
        bars: Mapping[int, BarSpec] | None = None,
        rebar: Mapping[int, Sequence[int]] | None = None,
        cfg_size: int = 4096,
        lock: bool = True,
        violations: list[str] | None = None,
        shared_sysmem: bool = False,
    ) -> None:
        super().__init__(devpref, pcibus)
        for value, what, limit in [
            (vendor, "vendor", 0xFFFF),
            (device, "device", 0xFFFF),
            (class_code, "class_code", 0xFFFFFF),
            (revision, "revision", 0xFF),
            (subsystem[0], "subsystem vendor", 0xFFFF),
            (subsystem[1], "subsystem id", 0xFFFF),
        ]:
            if not isinstance(value, int) or not 0 <= value <= limit:
                raise ValueError(f"{what} must be an int in 0..{limit:#x}, got {value!r}")
        if cfg_size not in (256, 4096):
            raise ValueError(f"cfg_size must be 256 or 4096, got {cfg_size!r}")
        self.vendor, self.device, self.class_code = vendor, device, class_code
        self.subsystem = subsystem
        self.cfg_size = cfg_size
        self.violations: list[str] = violations if violations is not None else []
        self.shared_sysmem = shared_sysmem
        self.reset_count = 0
        self.config_reads = 0
        self.config_writes = 0
        if bars is None:
            bars = {
                0: BarSpec(256 * MIB, is64=True, prefetch=True),
                2: BarSpec(2 * MIB, is64=True, prefetch=True),
                5: BarSpec(1 * MIB),
            }
        self.bars: dict[int, BarSpec] = {}
        self._bar_mem: dict[int, Any] = {}
        self._bar_addr: dict[int, int] = {}
        self._sizing: set[int] = set()  # BAR register dwords (0..5) currently in sizing mode
        self._validate_bars(bars)
        self._rebar: dict[int, list[int]] = {}
        self._validate_rebar(rebar or {})
        self._allocs: dict[int, _Allocation] = {}
        self._pages: dict[int, tuple[_Allocation, int]] = {}
        if lock:
            self._take_lock()
        self.config = bytearray(cfg_size)
        self._init_config(revision)

    # ---- construction ----------------------------------------------------------------------------------------------
    def _validate_bars(self, bars: Mapping[int, BarSpec]) -> None:
        used: set[int] = set()
        for idx, spec in sorted(bars.items()):
            self._check_bar_index(idx)
            if not isinstance(spec, BarSpec):
                raise TypeError(f"BAR {idx} must be described by a BarSpec, got {type(spec).__name__}")
            if not isinstance(spec.size, int) or spec.size < 16 or spec.size & (spec.size - 1):
                raise ValueError(f"BAR {idx} size must be a power of two >= 16, got {spec.size!r}")
            slots = {idx, idx + 1} if spec.is64 else {idx}
            if spec.is64 and idx == 5:
                raise ValueError("a 64-bit BAR cannot start at index 5 (it needs two BAR registers)")
            if slots & used:
                raise ValueError(f"BAR {idx} overlaps the register of another BAR (64-bit BARs use two registers)")
            used |= slots
            if spec.is64:
                addr = 0x40_0000_0000 + 0x10_0000_0000 * idx
            else:
                addr = -(-(0x8000_0000 + 0x1000_0000 * idx) // spec.size) * spec.size
                if addr + spec.size > 1 << 32:
                    raise ValueError(f"32-bit BAR {idx} of {spec.size:#x} bytes does not fit below 4 GiB")
            self.bars[idx], self._bar_addr[idx] = spec, addr
            self._bar_mem[idx] = self._make_backing(idx, spec.backing, spec.size)

    def _make_backing(self, idx: int, backing: Any, size: int) -> Any:
        if backing is None:
            return mmap.mmap(-1, size)  # zero-filled and lazily committed, so large BARs are cheap
        if _is_model(backing):
            if int(backing.size) < size:
                raise ValueError(f"BAR {idx} register model serves {backing.size:#x} bytes, the BAR needs {size:#x}")
            return backing
        try:
            nbytes = memoryview(backing).nbytes
        except TypeError as e:
            raise TypeError(
                f"BAR {idx} backing must be None, a buffer or a RegisterModel, got {type(backing).__name__}"
            ) from e
        if nbytes < size:
            raise ValueError(f"BAR {idx} backing buffer has {nbytes:#x} bytes, the BAR needs {size:#x}")
        return backing

    def _validate_rebar(self, rebar: Mapping[int, Sequence[int]]) -> None:
        if rebar and self.cfg_size < 4096:
            raise ValueError("a Resizable BAR capability needs the 4096-byte extended config space")
        for idx, sizes in rebar.items():
            if idx not in self.bars:
                raise ValueError(f"Resizable BAR entry for BAR {idx}, which does not exist")
            sizes = sorted(set(sizes))
            for s in sizes:
                if not isinstance(s, int) or s < MIB or s & (s - 1) or s > (1 << 47):
                    raise ValueError(f"resizable BAR sizes must be powers of two between 1 MiB and 128 TiB, got {s!r}")
            if self.bars[idx].size not in sizes:
                raise ValueError(f"BAR {idx} size {self.bars[idx].size:#x} is not among its resizable sizes")
            backing = self.bars[idx].backing
            if backing is not None and not _is_model(backing):
                raise ValueError(f"resizable BAR {idx} must not have a fixed buffer as backing")
            if _is_model(backing) and int(backing.size) < sizes[-1]:
                raise ValueError(f"BAR {idx} register model is smaller than its largest resizable size")
            self._rebar[idx] = sizes

    def _init_config(self, revision: int) -> None:
        cfg = self.config
        cfg[0:2] = self.vendor.to_bytes(2, "little")
        cfg[2:4] = self.device.to_bytes(2, "little")
        cfg[8:12] = ((self.class_code << 8) | revision).to_bytes(4, "little")
        cfg[0x0E] = 0  # header type 0
        cfg[0x2C:0x30] = (self.subsystem[0] | self.subsystem[1] << 16).to_bytes(4, "little")
        for j, idx in enumerate(sorted(self._rebar)):
            sizes = self._rebar[idx]
            cap = sum(1 << ((s // MIB).bit_length() - 1 + 4) for s in sizes)
            base = REBAR_CAP_OFFSET + 4 + 8 * j
            cfg[base : base + 4] = cap.to_bytes(4, "little")
            ctrl = idx | ((len(self._rebar) << 5) if j == 0 else 0) | self._rebar_field(self.bars[idx].size)
            cfg[base + 4 : base + 8] = ctrl.to_bytes(4, "little")
        if self._rebar:
            cfg[REBAR_CAP_OFFSET : REBAR_CAP_OFFSET + 4] = (REBAR_CAP_ID | (1 << 16)).to_bytes(4, "little")

    @staticmethod
    def _rebar_field(size: int) -> int:
        return ((size // MIB).bit_length() - 1) << 8

    # ---- violations ------------------------------------------------------------------------------------------------
    def _violation(self, message: str) -> None:
        self.violations.append(f"{self.pcibus}: {message}")

    def _raise_violation(self, message: str) -> None:
        self._violation(message)
        raise MockAccessError(message)

    # ---- config space ----------------------------------------------------------------------------------------------
    def _bar_of_register(self, reg: int) -> tuple[int, bool] | None:
        """Map BAR register ``reg`` (0..5) to ``(bar index, is upper dword)``."""
        if reg in self.bars:
            return reg, False
        if reg - 1 in self.bars and self.bars[reg - 1].is64:
            return reg - 1, True
        return None

    def _cfg_dword(self, dw: int) -> int:
        if 0x10 <= dw < 0x28:
            reg = (dw - 0x10) // 4
            found = self._bar_of_register(reg)
            if found is None:
                return 0
            idx, upper = found
            spec = self.bars[idx]
            if upper:
                value = -spec.size if reg in self._sizing else self._bar_addr[idx]
                return (value >> 32) & 0xFFFFFFFF
            type_bits = (0x4 if spec.is64 else 0) | (0x8 if spec.prefetch else 0)
            value = -spec.size if reg in self._sizing else self._bar_addr[idx]
            return (value & 0xFFFFFFF0) | type_bits
        return int.from_bytes(self.config[dw : dw + 4], "little")

    def _cfg_store_dword(self, dw: int, value: int) -> None:
        if dw in (0x00, 0x08, 0x0C, 0x2C) or (dw == REBAR_CAP_OFFSET and self._rebar):
            if dw == 0x0C:  # cache line / latency are writable, header type is not
                self.config[0x0C:0x0E] = value.to_bytes(4, "little")[0:2]
            return
        if 0x10 <= dw < 0x28:
            reg = (dw - 0x10) // 4
            found = self._bar_of_register(reg)
            if found is None:
                return
            idx, upper = found
            if value == 0xFFFFFFFF:
                self._sizing.add(reg)
                return
            self._sizing.discard(reg)
            size, addr = self.bars[idx].size, self._bar_addr[idx]
            if upper:
                addr = (addr & 0xFFFFFFFF) | (value << 32)
            else:
                addr = (addr & ~0xFFFFFFFF) | (value & 0xFFFFFFF0)
            self._bar_addr[idx] = addr & ~(size - 1)
            return
        rebar_j = self._rebar_ctrl_index(dw)
        if rebar_j is not None:
            self._write_rebar_ctrl(dw, rebar_j, value)
            return
        if REBAR_CAP_OFFSET < dw < REBAR_CAP_OFFSET + 4 + 8 * len(self._rebar):
            return  # REBAR capability words are read-only
        self.config[dw : dw + 4] = value.to_bytes(4, "little")

    def _rebar_ctrl_index(self, dw: int) -> int | None:
        if not self._rebar:
            return None
        j, rem = divmod(dw - (REBAR_CAP_OFFSET + 8), 8)
        return j if rem == 0 and 0 <= j < len(self._rebar) else None

    def _write_rebar_ctrl(self, dw: int, j: int, value: int) -> None:
        idx = sorted(self._rebar)[j]
        n = (value >> 8) & 0x1F
        new_size = MIB << n
        if new_size not in self._rebar[idx]:
            self._violation(f"REBAR ctrl of BAR {idx} set to unsupported size {new_size:#x}; ignored")
            return
        old = int.from_bytes(self.config[dw : dw + 4], "little")
        self.config[dw : dw + 4] = ((old & ~0x1F00) | (n << 8)).to_bytes(4, "little")
        self._set_bar_size(idx, new_size)

    def _set_bar_size(self, idx: int, size: int) -> None:
        spec = self.bars[idx]
        if size == spec.size:
            return
        spec.size = size
        self._bar_addr[idx] &= ~(size - 1)
        if spec.backing is None:  # the old contents are lost, as on hardware; existing views keep the old memory
            self._bar_mem[idx] = mmap.mmap(-1, size)

    def read_config(self, offset: int, size: int) -> int:
        """Read config space (little-endian); BAR registers answer sizing probes like hardware."""
        self._check_config_recorded(offset, size)
        self.config_reads += 1
        raw = b"".join(self._cfg_dword(dw).to_bytes(4, "little") for dw in range(offset & ~3, offset + size, 4))
        lo = offset & 3
        return int.from_bytes(raw[lo : lo + size], "little")

    def write_config(self, offset: int, value: int, size: int) -> None:
        """Write config space; ids are read-only, BAR/REBAR registers behave like hardware."""
        self._check_config_recorded(offset, size, value)
        self.config_writes += 1
        data = value.to_bytes(size, "little")
        pos = offset
        while pos < offset + size:
            dw = pos & ~3
            hi = min(offset + size - dw, 4)
            merged = bytearray(self._cfg_dword(dw).to_bytes(4, "little"))
            merged[pos - dw : hi] = data[pos - offset : pos - offset + hi - (pos - dw)]
            self._cfg_store_dword(dw, int.from_bytes(merged, "little"))
            pos = dw + hi

    def _check_config_recorded(self, offset: int, size: int, value: int | None = None) -> None:
        try:
            self._check_config(offset, size, value)
        except (ValueError, TypeError) as e:
            self._violation(f"config: {e}")
            raise

    # ---- BARs ------------------------------------------------------------------------------------------------------
    def bar_info(self, bar: int) -> tuple[int, int]:
        """``(bus address, size)``; the address follows what was programmed into the BAR registers."""
        self._check_bar_index(bar)
        if bar not in self.bars:
            return (0, 0)
        return (self._bar_addr[bar], self.bars[bar].size)

    def map_bar(self, bar: int, off: int = 0, addr: int = 0, size: int | None = None, fmt: str = "B") -> MMIOView:
        """A bounds-checked view of ``[off, off+size)`` of the BAR; ``addr`` is ignored."""
        self._check_open()
        try:
            off, size = self._bar_window(bar, off, size, fmt)
        except ValueError as e:
            self._violation(f"map_bar: {e}")
            raise
        mem = self._bar_mem[bar]
        bar_size = self.bars[bar].size
        view: MMIOView
        if _is_model(mem):
            view = ModelMMIO(mem, 0, bar_size, on_violation=self._violation)
        else:
            view = BufferMMIO(memoryview(mem).cast("B")[:bar_size], on_violation=self._violation)
        return view.view(off, size, fmt)

    def resize_bar(self, bar: int) -> None:
        """Set the BAR to its largest Resizable BAR size (through the REBAR control register)."""
        self._check_open()
        self._check_bar_index(bar)
        if bar not in self._rebar:
            raise RuntimeError(
                f"Cannot resize BAR {bar}: it has no Resizable BAR capability. "
                "Ensure the resizable BAR option is enabled."
            )
        j = sorted(self._rebar).index(bar)
        dw = REBAR_CAP_OFFSET + 8 + 8 * j
        ctrl = self.read_config(dw, 4)
        self.write_config(dw, (ctrl & ~0x1F00) | self._rebar_field(self._rebar[bar][-1]), 4)

    def reset(self) -> None:
        """Count the reset and call ``reset()`` on every register model behind a BAR."""
        self._check_open()
        self.reset_count += 1
        for mem in self._bar_mem.values():
            if _is_model(mem) and callable(getattr(mem, "reset", None)):
                mem.reset()

    # ---- system memory and DMA -------------------------------------------------------------------------------------
    @classmethod
    def _take_paddrs(cls, npages: int, contiguous: bool) -> list[int]:
        with cls._paddr_lock:
            if contiguous:
                first = next(cls._paddr_counter)
                for _ in range(npages - 1):
                    next(cls._paddr_counter)
                return [(first + i) * PAGE_SIZE_4K for i in range(npages)]
            # scattered pages (one page gap between them) catch code that wrongly assumes contiguity
            pages = []
            for _ in range(npages):
                pages.append(next(cls._paddr_counter) * PAGE_SIZE_4K)
                next(cls._paddr_counter)
            return pages

    def alloc_sysmem(self, size: int, vaddr: int = 0, contiguous: bool = False) -> tuple[MMIOView, list[int]]:
        """Zero-filled memory with fake page-aligned bus addresses (one per 4 KiB page); ``vaddr`` is ignored."""
        self._check_open()
        self._check_sysmem(size, contiguous)
        npages = -(-size // PAGE_SIZE_4K)
        return self._register_sysmem(mmap.mmap(-1, npages * PAGE_SIZE_4K), size, contiguous)

    def alloc_sysmem_shared(self, size: int, contiguous: bool = False) -> tuple[int, MMIOView, list[int]]:
        """Like :meth:`alloc_sysmem`, backed by a memfd another process can map: ``(fd, view, paddrs)``.

        The caller owns (and must close) ``fd``; the allocation itself is released by :meth:`free_sysmem`.
        Used by the remote server's ``MAP_SYSMEM_FD``; only enabled with ``shared_sysmem=True`` (otherwise it raises
        NotImplementedError, like a device without shareable DMA memory).
        """
        self._check_open()
        if not self.shared_sysmem:
            raise NotImplementedError(
                f"shared system memory is not supported by {self.pcibus} (construct the mock with shared_sysmem=True)"
            )
        self._check_sysmem(size, contiguous)
        length = -(-size // PAGE_SIZE_4K) * PAGE_SIZE_4K
        fd = os.memfd_create("tg-mock-sysmem", os.MFD_CLOEXEC)
        try:
            os.ftruncate(fd, length)
            view, paddrs = self._register_sysmem(mmap.mmap(fd, length), size, contiguous)
        except BaseException:
            os.close(fd)
            raise
        return fd, view, paddrs

    def _register_sysmem(self, mem: mmap.mmap, size: int, contiguous: bool) -> tuple[MMIOView, list[int]]:
        paddrs = self._take_paddrs(-(-size // PAGE_SIZE_4K), contiguous)
        view = BufferMMIO(memoryview(mem)[:size], on_violation=self._violation)
        alloc = _Allocation(mem, size, paddrs, view)
        self._allocs[id(view)] = alloc
        for i, paddr in enumerate(paddrs):
            self._pages[paddr] = (alloc, i * PAGE_SIZE_4K)
        return view, paddrs

    def free_sysmem(self, view: MMIOView) -> None:
        """Forget an allocation: its bus addresses stop resolving for DMA."""
        alloc = self._allocs.pop(id(view), None)
        if alloc is None:
            raise ValueError("free_sysmem: this view was not returned by alloc_sysmem of this device (or was freed)")
        for paddr in alloc.paddrs:
            self._pages.pop(paddr, None)

    def _dma_pieces(self, paddr: int, n: int) -> Iterable[tuple[_Allocation, int, int, int]]:
        pos = 0
        while pos < n:
            page = (paddr + pos) & ~(PAGE_SIZE_4K - 1)
            within = (paddr + pos) - page
            found = self._pages.get(page)
            if found is None:
                self._raise_violation(f"DMA to unmapped bus address {paddr + pos:#x}")
                return
            alloc, page_off = found
            chunk = min(n - pos, PAGE_SIZE_4K - within)
            if page_off + within + chunk > alloc.size:
                self._raise_violation(f"DMA past the end of an allocation at bus address {paddr + pos:#x}")
            yield alloc, page_off + within, pos, chunk
            pos += chunk

    def dma_read(self, paddr: int, n: int) -> bytes:
        """Read ``n`` bytes of system memory at bus address ``paddr``, as a bus-mastering device would."""
        out = bytearray(n)
        for alloc, off, pos, chunk in self._dma_pieces(paddr, n):
            out[pos : pos + chunk] = alloc.mem[off : off + chunk]
        return bytes(out)

    def dma_write(self, paddr: int, data: bytes) -> None:
        """Write ``data`` to system memory at bus address ``paddr``, as a bus-mastering device would."""
        pieces = list(self._dma_pieces(paddr, len(data)))  # validate the whole range before writing any of it
        for alloc, off, pos, chunk in pieces:
            alloc.mem[off : off + chunk] = data[pos : pos + chunk]

    # ---- lifecycle and discovery -----------------------------------------------------------------------------------
    def _close(self) -> None:
        self._allocs.clear()
        self._pages.clear()

    @classmethod
    def make_backend(
        cls, configs: Sequence[Mapping[str, Any]]
    ) -> Callable[[int, Any, int | None], list[tuple[Callable[..., PCIDevice], str]]]:
        """A discovery backend (for ``register_backend`` or a remote server) serving mock devices.

        Each config is a dict of :class:`MockPCIDevice` keyword arguments; ``pcibus`` defaults to ``"mock:<i>"``.
        The backend filters with the usual vendor/device/class rule and returns ``(factory, pcibus)`` pairs, where
        ``factory(devpref, pcibus)`` opens a new MockPCIDevice (register models in the config are shared, like
        hardware that outlives the process that opened it).
        """
        entries: list[tuple[str, dict[str, Any]]] = []
        for i, config in enumerate(configs):
            kwargs = dict(config)
            pcibus = kwargs.pop("pcibus", f"mock:{i}")
            kwargs.pop("devpref", None)
            entries.append((pcibus, kwargs))

        def backend(
            vendor: int, devices: Any, base_class: int | None = None
        ) -> list[tuple[Callable[..., PCIDevice], str]]:
            wanted = normalize_devices(devices)
            found = []
            for pcibus, kwargs in entries:
                dev_vendor, dev_device = kwargs.get("vendor", 0x1002), kwargs.get("device", 0x744C)
                if device_matches(
                    dev_vendor, dev_device, kwargs.get("class_code", 0x030000), vendor, wanted, base_class
                ):
                    found.append((_MockFactory(kwargs), pcibus))
            return sorted(found, key=lambda item: item[1])

        return backend


class _MockFactory:
    """``factory(devpref, pcibus) -> MockPCIDevice`` with fixed keyword arguments (picklable and printable)."""

    def __init__(self, kwargs: dict[str, Any]) -> None:
        self.kwargs = kwargs

    def __call__(self, devpref: str, pcibus: str) -> MockPCIDevice:
        return MockPCIDevice(devpref, pcibus, **self.kwargs)

    def __repr__(self) -> str:
        return f"MockPCIDevice.factory({self.kwargs!r})"
