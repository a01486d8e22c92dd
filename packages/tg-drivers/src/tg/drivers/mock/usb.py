"""MockASM24Bridge: a simulated ASM24 USB-to-PCIe bridge (custom firmware) with a mock GPU behind it.

It implements the USB3 transport API, so :class:`~tg.drivers.usb.asm24.ASM24Controller` and
:class:`~tg.drivers.usb.usbpci.USBPCIDevice` run unchanged on top of it, decoding the same vendor requests and TLPs a
real bridge gets:

* XDATA (64 KiB) with LTSSM at ``0xB450`` (``0x78`` once PCIe is powered with ``0xF3``) and the DMA windows
  ``0xA000`` (bus ``0x820000``, 4 KiB), ``0xB800`` (bus ``0x822000``), ``0xB000`` (bus ``0x800000``, 512 B) and
  ``0xF000`` (the first 4 KiB of SRAM);
* 512 KiB SRAM at bus address ``0x200000``, filled and drained by the ``0xF2`` engine;
* a PCIe topology of four PCI-PCI bridges (buses 0..3, dev 0 fn 0, type-1 headers) and the GPU at bus 4 dev 0 fn 0,
  whose config space and BARs come from a wrapped :class:`~tg.drivers.mock.pci.MockPCIDevice`; any other target
  completes with Unsupported Request;
* memory TLPs and streaming transfers decoded against the BAR addresses programmed into the GPU (memory decoding must
  be enabled in its COMMAND register).

Fault injection: ``fail_next_completions`` (``ret_status=1`` for the next n completions), ``completion_status``
(``{dword address: status}``), ``link_never_up``, ``short_reads`` (every bulk IN and control IN delivers at most that
many bytes, as a USB stack that ends a transfer with a short packet would). ``tlps`` records every mode-0 TLP as
``(fmt_type, address, byte_enable, value)``; ``requests`` every vendor request as ``(bRequest, wValue, wIndex, len)``
(both keep the last ``log_size`` entries).
A GPU register model can reach bridge memory by DMA through :meth:`dma_read`/:meth:`dma_write`.
"""

from __future__ import annotations

import itertools
import struct
from collections import deque
from typing import Any

from tg.drivers.errors import MockAccessError
from tg.drivers.mock.pci import BarSpec, MockPCIDevice

__all__ = ["MockASM24Bridge", "MockUSBContext"]

LTSSM_ADDR, LTSSM_L0 = 0xB450, 0x78
SRAM_SIZE, SRAM_BUS = 0x80000, 0x200000
UR, CA, CRS = 0b001, 0b100, 0b010
GPU_BUS = 4


class MockASM24Bridge:
    """A simulated bridge; see the module docstring. ``gpu`` defaults to a Navi31-like MockPCIDevice.

    The default GPU (1002:744c) has BAR0 256 MiB (64-bit, prefetchable), BAR2 8 KiB and BAR5 1 MiB (32-bit), with a
    Resizable BAR capability on BAR0 (256 MiB, 512 MiB, 1 GiB; memory is committed lazily).
    """

    def __init__(
        self,
        gpu: MockPCIDevice | None = None,
        *,
        link_up: bool = False,
        link_never_up: bool = False,
        product: str = "custom ASM2464PD",
        fail_next_completions: int = 0,
        completion_status: dict[int, int] | None = None,
        short_reads: int | None = None,
        log_size: int = 100_000,
    ) -> None:
        if gpu is None:
            gpu = MockPCIDevice(
                "MOCKGPU",
                "mock:usbgpu",
                lock=False,
                rebar={0: [256 << 20, 512 << 20, 1 << 30]},
                bars={0: BarSpec(256 << 20, is64=True, prefetch=True), 2: BarSpec(8 << 10), 5: BarSpec(1 << 20)},
            )
        self.gpu = gpu
        self.product = product
        self.link_never_up = link_never_up
        self.fail_next_completions = fail_next_completions
        self.completion_status: dict[int, int] = dict(completion_status or {})
        #: fault: IN transfers are cut to at most this many bytes (None: complete transfers)
        self.short_reads = short_reads
        self.xdata = bytearray(0x10000)
        self.sram = bytearray(SRAM_SIZE)
        self.sysbuf = bytearray(0x1000)  # XDATA 0xA000, bus 0x820000
        self.cq_buf = bytearray(0x1000)  # XDATA 0xB800, bus 0x822000
        self.low_buf = bytearray(0x200)  # XDATA 0xB000, bus 0x800000
        self.bridges = [self._bridge_config() for _ in range(GPU_BUS)]
        self.tlps: deque[tuple[int, int, int, int]] = deque(maxlen=log_size)
        self.requests: deque[tuple[int, int, int, int]] = deque(maxlen=log_size)
        self.violations = gpu.violations
        self._completion: bytes | None = None
        self._stream: tuple[str, int, int] | None = None  # (kind, address, nbytes)
        self._tags = itertools.count(1)
        self._async: dict[int, bytes] = {}
        self._bar_views: dict[int, Any] = {}
        if link_up and not link_never_up:
            self.xdata[LTSSM_ADDR] = LTSSM_L0

    @staticmethod
    def _bridge_config() -> bytearray:
        cfg = bytearray(4096)
        cfg[0:4] = (0x1B21 | (0x2463 << 16)).to_bytes(4, "little")  # ASMedia PCIe bridge ids
        cfg[8:12] = (0x060400 << 8).to_bytes(4, "little")
        cfg[0x0E] = 0x01  # type-1 header
        return cfg

    @property
    def ltssm(self) -> int:
        """The link state byte at XDATA ``0xB450``."""
        return self.xdata[LTSSM_ADDR]

    def _bad(self, message: str) -> None:
        self.violations.append(f"usb bridge: {message}")
        raise MockAccessError(message)

    # ---- XDATA with DMA windows ------------------------------------------------------------------------------------
    def _xdata_target(self, addr: int) -> tuple[bytearray, int]:
        for base, size, buf in (
            (0xA000, 0x1000, self.sysbuf),
            (0xB800, 0x800, self.cq_buf),
            (0xB000, 0x200, self.low_buf),
            (0xF000, 0x1000, self.sram),
        ):
            if base <= addr < base + size:
                return buf, addr - base
        return self.xdata, addr

    def _xdata_read(self, addr: int, n: int) -> bytes:
        out = bytearray()
        for a in range(addr, addr + n):
            buf, off = self._xdata_target(a & 0xFFFF)
            out.append(buf[off])
        return bytes(out)

    # ---- the USB3 API ----------------------------------------------------------------------------------------------
    def control_write(
        self, request: int, value: int = 0, index: int = 0, data: bytes = b"", timeout: int = 1000
    ) -> None:
        """A vendor control OUT, decoded like the custom firmware does."""
        data = bytes(data)
        self.requests.append((request, value, index, len(data)))
        if not (0 <= value <= 0xFFFF and 0 <= index <= 0xFFFF) or len(data) > 0x1000:
            self._bad(f"malformed control OUT {request:#x}: wValue={value:#x} wIndex={index:#x} len={len(data)}")
        if request == 0xE5:
            if index > 0xFF:
                self._bad(f"0xE5 byte value {index:#x} does not fit in a byte")
            buf, off = self._xdata_target(value)
            buf[off] = index
        elif request == 0xF3:
            self.xdata[LTSSM_ADDR] = LTSSM_L0 if value == 1 and not self.link_never_up else 0
        elif request == 0xF0:
            if len(data) != 12:
                self._bad(f"0xF0 OUT needs a 12-byte payload, got {len(data)}")
            self._f0(value & 0xFF, value >> 8, index, *struct.unpack("<III", data))
        elif request == 0xF2:
            self._f2(value, index)
        else:
            self._bad(f"unknown vendor request {request:#x}")

    def control_read(self, request: int, length: int, value: int = 0, index: int = 0, timeout: int = 1000) -> bytes:
        """A vendor control IN: ``0xE4`` XDATA reads and ``0xF0`` completions."""
        return self._cut(self._control_read(request, length, value, index))

    def _cut(self, data: bytes) -> bytes:
        return data if self.short_reads is None else data[: self.short_reads]

    def _control_read(self, request: int, length: int, value: int, index: int) -> bytes:
        self.requests.append((request, value, index, length))
        if request == 0xE4:
            if not 0 < length <= 0xFF:
                self._bad(f"0xE4 read length must be 1..255, got {length}")
            return self._xdata_read(value, length)
        if request == 0xF0:
            if length != 8:
                self._bad(f"0xF0 IN must read 8 bytes, got {length}")
            if self._completion is None:
                self._bad("0xF0 IN without a pending non-posted TLP")
            cpl, self._completion = self._completion, None
            assert cpl is not None
            if self.fail_next_completions > 0:
                self.fail_next_completions -= 1
                return cpl[:7] + b"\x01"
            return cpl
        self._bad(f"unknown vendor request {request:#x} (IN)")
        return b""

    def bulk_write(self, payload: bytes, timeout: int = 1000) -> None:
        """Bulk OUT: the data phase of an armed streaming write (``0xF0`` mode 1 or ``0xF2``)."""
        payload = bytes(payload)
        stream, self._stream = self._stream, None
        if stream is None or stream[0] not in ("mem_write", "sram_write"):
            self._bad(f"bulk OUT of {len(payload)} bytes without an armed write")
            return
        kind, addr, nbytes = stream
        if len(payload) != nbytes:
            self._bad(f"bulk OUT of {len(payload)} bytes, {nbytes} were armed")
        if kind == "sram_write":
            self.sram[addr : addr + nbytes] = payload
        else:
            self._mem_access(addr, nbytes, payload)

    def bulk_read(self, length: int, timeout: int = 1000) -> bytes:
        """Bulk IN: the data phase of an armed streaming read (``0xF0`` mode 2 or ``0xF2`` read-arm)."""
        return self._cut(self._bulk_read(length))

    def _bulk_read(self, length: int) -> bytes:
        stream, self._stream = self._stream, None
        if stream is None or stream[0] not in ("mem_read", "sram_read"):
            self._bad(f"bulk IN of {length} bytes without an armed read")
            return b""
        kind, addr, nbytes = stream
        if length != nbytes:
            self._bad(f"bulk IN of {length} bytes, {nbytes} were armed")
        if kind == "sram_read":
            return bytes(self.sram[:nbytes])
        return self._mem_access(addr, nbytes, None)

    def bulk_write_async(self, payload: bytes, timeout: int = 10000) -> int:
        """Performed at once; returns a tag for :meth:`bulk_wait`."""
        self.bulk_write(payload, timeout)
        tag = next(self._tags)
        self._async[tag] = b""
        return tag

    def control_write_async(
        self, request: int, value: int = 0, index: int = 0, data: bytes = b"", timeout: int = 1000
    ) -> int:
        """Performed at once; returns a tag for :meth:`bulk_wait`."""
        self.control_write(request, value, index, data, timeout)
        tag = next(self._tags)
        self._async[tag] = b""
        return tag

    def control_read_async(
        self, request: int, length: int, value: int = 0, index: int = 0, timeout: int = 1000
    ) -> tuple[int, memoryview]:
        """Performed at once; returns ``(tag, data)``."""
        data = self.control_read(request, length, value, index, timeout)
        tag = next(self._tags)
        self._async[tag] = data
        return tag, memoryview(data)

    def bulk_wait(self, tag: int) -> None:
        """Complete an async transfer (they already happened)."""
        if self._async.pop(tag, None) is None:
            self._bad(f"bulk_wait on unknown tag {tag}")

    def close(self) -> None:
        """Nothing to release (the transport API has close on real devices)."""

    # ---- TLP engine ------------------------------------------------------------------------------------------------
    def _complete(self, data: int, status: int) -> None:
        self._completion = struct.pack("<IBBBB", data & 0xFFFFFFFF, (status & 7) << 5, 0, 0, 0)

    def _f0(self, fmt_type: int, byte_enable: int, mode: int, addr_lo: int, addr_hi: int, value: int) -> None:
        address = (addr_hi << 32) | addr_lo
        if mode in (1, 2):
            if (mode, fmt_type) not in ((1, 0x60), (2, 0x20)) or byte_enable != 0x0F or address % 4:
                self._bad(f"malformed streaming request mode={mode} fmt={fmt_type:#x} be={byte_enable:#x}")
            self._stream = ("mem_write" if mode == 1 else "mem_read", address, value * 4)
            return
        if mode != 0:
            self._bad(f"unknown 0xF0 mode {mode}")
        self.tlps.append((fmt_type, address, byte_enable, value))
        if not 0 < byte_enable <= 0xF:
            self._bad(f"TLP byte enables {byte_enable:#x} are invalid")
        if fmt_type in (0x04, 0x05, 0x44, 0x45):
            self._config_tlp(fmt_type, address, byte_enable, value)
        elif fmt_type == 0x20:
            status = self.completion_status.get(address, 0) or (0 if self._decode(address, 4) else UR)
            data = int.from_bytes(self._mem_access(address, 4, None), "little") if status == 0 else 0xFFFFFFFF
            self._complete(self._mask(data, byte_enable) if status == 0 else data, status)
        elif fmt_type == 0x60:  # posted: no completion, an undecoded write is dropped like on a real bus
            if self._decode(address, 4):
                self._masked_mem_write(address, byte_enable, value)
            else:
                self.violations.append(f"usb bridge: posted memory write to undecoded address {address:#x} dropped")
        else:
            self._complete(0, UR)

    @staticmethod
    def _mask(data: int, byte_enable: int) -> int:
        return sum(((data >> (8 * i)) & 0xFF) << (8 * i) for i in range(4) if byte_enable >> i & 1)

    def _config_tlp(self, fmt_type: int, address: int, byte_enable: int, value: int) -> None:
        bus, dev, fn, reg = address >> 24 & 0xFF, address >> 19 & 0x1F, address >> 16 & 0x7, address & 0xFFC
        write = bool(fmt_type & 0x40)
        status = self.completion_status.get(address, 0)
        if (fmt_type & 1) != int(bus > 0):
            self.violations.append(f"usb bridge: type-{fmt_type & 1} config TLP to bus {bus}")
            status = status or UR
        if dev or fn or bus > GPU_BUS or (bus == GPU_BUS and reg >= self.gpu.cfg_size):
            status = status or UR
        if status:
            self._complete(0xFFFFFFFF if not write else 0, status)
            return
        lanes = [i for i in range(4) if byte_enable >> i & 1]
        lo, hi = lanes[0], lanes[-1] + 1
        if bus == GPU_BUS:
            if write:
                self.gpu.write_config(reg + lo, (value >> (8 * lo)) & ((1 << (8 * (hi - lo))) - 1), hi - lo)
                self._complete(0, 0)
            else:
                self._complete(self.gpu.read_config(reg, 4), 0)
            return
        cfg = self.bridges[bus]
        if write:
            data = value.to_bytes(4, "little")
            for i in lanes:
                if reg + i >= 0x0C or reg + i in (0x04, 0x05, 0x06, 0x07):  # ids and class are read-only
                    cfg[reg + i] = data[i]
            self._complete(0, 0)
        else:
            self._complete(int.from_bytes(cfg[reg : reg + 4], "little"), 0)

    # ---- memory decode ---------------------------------------------------------------------------------------------
    def _decode(self, address: int, n: int) -> tuple[int, int] | None:
        """``(bar, offset)`` of the GPU BAR containing ``[address, address+n)``, if memory decoding is on."""
        if not self.gpu.config[0x04] & 0x2:  # COMMAND.MEMORY, read without counting a config access
            return None
        for bar in self.gpu.bars:
            base, size = self.gpu.bar_info(bar)
            if base <= address and address + n <= base + size:
                return bar, address - base
        return None

    def _bar_view(self, bar: int) -> Any:
        size = self.gpu.bars[bar].size
        cached = self._bar_views.get(bar)
        if cached is None or cached.nbytes != size:
            cached = self._bar_views[bar] = self.gpu.map_bar(bar)
        return cached

    def _mem_access(self, address: int, n: int, data: bytes | None) -> bytes:
        found = self._decode(address, n)
        if found is None:
            self._bad(
                f"memory {'write' if data is not None else 'read'} of {n} bytes at {address:#x} hits no enabled GPU BAR"
            )
            return b""
        bar, off = found
        view = self._bar_view(bar)
        if data is None:
            return view.read32(off).to_bytes(4, "little") if n == 4 else view.read(off, n)
        if n == 4:
            view.write32(off, int.from_bytes(data, "little"))
        else:
            view.write(off, data)
        return b""

    def _masked_mem_write(self, address: int, byte_enable: int, value: int) -> None:
        if byte_enable == 0xF:
            self._mem_access(address, 4, value.to_bytes(4, "little"))
            return
        found = self._decode(address, 4)
        assert found is not None
        bar, off = found
        view = self._bar_view(bar)
        data = value.to_bytes(4, "little")
        for i in range(4):
            if byte_enable >> i & 1:
                view.write(off + i, data[i : i + 1])

    # ---- SRAM engine -----------------------------------------------------------------------------------------------
    def _f2(self, value: int, index: int) -> None:
        slots = index >> 8
        if value & 0x8000:
            sectors = value & 0x7FFF
            if index & 0xFF or not sectors or sectors * 512 > SRAM_SIZE or slots != -(-sectors * 512 // 0x4000):
                self._bad(f"malformed SRAM read-arm wValue={value:#x} wIndex={index:#x}")
            self._stream = ("sram_read", 0, sectors * 512)
            return
        start = (index & 0xFF) * 0x4000
        nbytes = value * 512
        if not value or start + nbytes > SRAM_SIZE or slots != -(-nbytes // 0x4000):
            self._bad(f"malformed SRAM write wValue={value:#x} wIndex={index:#x}")
        self._stream = ("sram_write", start, nbytes)

    # ---- DMA from the GPU side -------------------------------------------------------------------------------------
    def _dma_target(self, paddr: int, n: int) -> tuple[bytearray, int]:
        for base, buf in (
            (SRAM_BUS, self.sram),
            (0x820000, self.sysbuf),
            (0x822000, self.cq_buf),
            (0x800000, self.low_buf),
        ):
            if base <= paddr and paddr + n <= base + len(buf):
                return buf, paddr - base
        self._bad(f"DMA of {n} bytes at bus address {paddr:#x} hits no bridge memory")
        raise AssertionError("unreachable")

    def dma_read(self, paddr: int, n: int) -> bytes:
        """What the GPU reads by DMA at bridge bus address ``paddr`` (SRAM or a small system buffer)."""
        buf, off = self._dma_target(paddr, n)
        return bytes(buf[off : off + n])

    def dma_write(self, paddr: int, data: bytes) -> None:
        """A GPU DMA write into bridge memory at bus address ``paddr``."""
        buf, off = self._dma_target(paddr, len(data))
        buf[off : off + len(data)] = data


class MockUSBContext:
    """Registry of simulated bridges listed by ``USB3.list_devices`` when ``TG_DRIVERS_BACKEND=mock``."""

    _devices: list[tuple[int, int, MockASM24Bridge, str]] = []
    _counter = itertools.count()

    @classmethod
    def register(cls, bridge: MockASM24Bridge, vendor: int = 0xADD1, product: int = 0x0001) -> str:
        """Make ``bridge`` discoverable under ``(vendor, product)``; returns its name ``"usb:mock-<n>"``."""
        name = f"usb:mock-{next(cls._counter)}"
        cls._devices.append((vendor, product, bridge, name))
        return name

    @classmethod
    def list_devices(cls, vendor: int, product: int) -> list[tuple[Any, str]]:
        """``(bridge, name)`` for the registered bridges with these ids."""
        return [(bridge, name) for v, p, bridge, name in cls._devices if (v, p) == (vendor, product)]

    @classmethod
    def clear(cls) -> None:
        """Forget every registered bridge."""
        cls._devices.clear()
