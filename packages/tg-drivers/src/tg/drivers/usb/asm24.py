"""ASM24Controller: the custom-firmware protocol of the ASM24xx USB-to-PCIe bridge, and USBMMIO views over it.

Vendor requests (all through the transport's control endpoint):

=========  ====  ============================================================================================
bRequest   dir   meaning
=========  ====  ============================================================================================
``0xE4``   IN    read up to 255 bytes of controller XDATA at ``wValue``
``0xE5``   OUT   write one XDATA byte: address ``wValue``, value ``wIndex``
``0xF0``   OUT   issue a PCIe TLP (mode 0) or arm a streaming write (mode 1) / read (mode 2); 12-byte ``<III`` payload
``0xF0``   IN    the 8-byte completion of the last non-posted mode-0 TLP
``0xF2``   OUT   SRAM streaming engine (write, or read-arm with ``wValue`` bit 15)
``0xF3``   OUT   PCIe power (``wValue`` 1 = on)
=========  ====  ============================================================================================

Config space of the GPU behind the bridge is reached with type-1 config TLPs (bus > 0), BARs with memory TLPs or the
streaming engine, and the bridge's 512 KiB SRAM (bus address ``0x200000``) with the ``0xF2`` engine.
"""

from __future__ import annotations

import logging
import os
import struct
import time
from collections.abc import Callable
from typing import Any

from tg.drivers.errors import LinkDownError, PCIeCompletionError, ShortReadError
from tg.drivers.mmio import MMIOView

__all__ = [
    "LTSSM_L0",
    "SRAM_BUS_ADDR",
    "SRAM_SIZE",
    "SRAM_XDATA_WINDOW",
    "USBMMIO",
    "ASM24Controller",
    "completion_status_text",
]

log = logging.getLogger(__name__)

LTSSM_ADDR, LTSSM_L0 = 0xB450, 0x78
SRAM_SIZE, SRAM_BUS_ADDR, SRAM_XDATA_WINDOW = 0x80000, 0x200000, 0xF000
STREAM_CHUNK = 1 << 20  # streaming requests above this are split (the firmware's limit is undocumented)
XDATA_CHUNK = 0xFF
TLP_RETRIES = 10
LINK_WAIT_S, LINK_POLL_S = 2.0, 0.01

CFG_READ0, CFG_READ1, CFG_WRITE0, CFG_WRITE1 = 0x04, 0x05, 0x44, 0x45
MEM_READ64, MEM_WRITE64 = 0x20, 0x60


def completion_status_text(status: int, address: int) -> str:
    """The text for a non-zero 3-bit PCIe completion status."""
    return {0b001: f"Unsupported Request: {address:#x}", 0b010: "Config Retry", 0b100: "Completer Abort"}.get(
        status, f"Reserved (0b{status:03b})"
    )


def _is_posted(fmt_type: int) -> bool:
    """Memory writes and messages get no completion."""
    return (fmt_type & 0xDF) == 0x40 or (fmt_type & 0xB8) == 0x30


def _debug_level() -> int:
    raw = os.environ.get("DEBUG", "0")
    return int(raw) if raw.isdigit() else 0


class ASM24Controller:
    """The bridge protocol over a transport (:class:`~tg.drivers.usb.transport.USB3` or a simulator).

    On construction the PCIe link is brought up: if LTSSM (XDATA ``0xB450``) is not ``0x78`` the PCIe power is switched
    on and LTSSM polled for up to 2 s; otherwise :class:`LinkDownError`. ``sleep`` is injectable for tests.
    """

    def __init__(
        self, usb: Any, *, link_wait_s: float = LINK_WAIT_S, sleep: Callable[[float], None] = time.sleep
    ) -> None:
        self.usb = usb
        self._sleep = sleep
        ltssm = self.read(LTSSM_ADDR, 1)[0]
        if ltssm != LTSSM_L0:
            self.set_pcie_power(True)
            deadline = time.monotonic() + link_wait_s
            ltssm = self.read(LTSSM_ADDR, 1)[0]
            while ltssm != LTSSM_L0 and time.monotonic() < deadline:
                self._sleep(LINK_POLL_S)
                ltssm = self.read(LTSSM_ADDR, 1)[0]
        if ltssm != LTSSM_L0:
            raise LinkDownError(f"PCIe link not up (LTSSM=0x{ltssm:02X}), custom firmware not ready")

    def set_pcie_power(self, enabled: bool, timeout: int = 10000) -> None:
        """Switch PCIe power/link on or off (``0xF3``)."""
        self.usb.control_write(0xF3, value=int(bool(enabled)), timeout=timeout)

    # ---- XDATA -----------------------------------------------------------------------------------------------------
    @staticmethod
    def _check_xdata(addr: int, n: int) -> None:
        if not isinstance(addr, int) or addr < 0 or n < 0 or addr + n > 0x10000:
            raise ValueError(f"XDATA access of {n} bytes at {addr:#x} is outside the 64 KiB XDATA space")

    def read(self, base_addr: int, length: int) -> bytes:
        """Read controller XDATA with ``0xE4``, at most 255 bytes per request."""
        self._check_xdata(base_addr, length)
        out = bytearray()
        for off in range(0, length, XDATA_CHUNK):
            n = min(XDATA_CHUNK, length - off)
            got = bytes(self.usb.control_read(0xE4, n, value=base_addr + off))
            if len(got) != n:
                raise ShortReadError(f"XDATA read at {base_addr + off:#x} returned {len(got)} of {n} bytes")
            out += got
        return bytes(out)

    def write(self, base_addr: int, data: bytes) -> None:
        """Write controller XDATA with ``0xE5``, one request per byte."""
        self._check_xdata(base_addr, len(data))
        for off, byte in enumerate(bytes(data)):
            self.usb.control_write(0xE5, value=base_addr + off, index=byte)

    # ---- TLPs ------------------------------------------------------------------------------------------------------
    def _f0_out(self, fmt_type: int, byte_enable: int, address: int, value: int, mode: int = 0) -> None:
        payload = struct.pack("<III", address & 0xFFFFFFFF, address >> 32, value & 0xFFFFFFFF)
        self.usb.control_write(0xF0, value=fmt_type | (byte_enable << 8), index=mode & 0x3, data=payload, timeout=5000)

    def _f0_in(self) -> tuple[int, int, int]:
        data = bytes(self.usb.control_read(0xF0, 8, timeout=5000))
        if len(data) != 8:
            raise ShortReadError(f"TLP completion (0xF0 IN) returned {len(data)} of 8 bytes")
        return struct.unpack_from("<I", data)[0], (data[4] >> 5) & 0x7, data[7]

    def pcie_request(
        self, fmt_type: int, address: int, value: int | None = None, size: int = 4, retries: int = TLP_RETRIES
    ) -> int | None:
        """Issue one TLP of ``size`` (1..4) bytes that must not cross a dword; return the read data (reads only).

        Non-posted requests (reads, config writes) wait for the completion; a transport-level failure
        (``ret_status != 0``) is retried up to ``retries`` times, a completion error raises PCIeCompletionError.
        """
        if not isinstance(size, int) or not 1 <= size <= 4:
            raise ValueError(f"TLP size must be 1..4 bytes, got {size!r}")
        if not isinstance(address, int) or not 0 <= address < 1 << 64:
            raise ValueError(f"TLP address must be a 64-bit unsigned int, got {address!r}")
        offset = address & 3
        if offset + size > 4:
            raise ValueError(f"a {size}-byte TLP at {address:#x} would cross a dword boundary")
        if value is not None and not 0 <= value < 1 << (8 * size):
            raise ValueError(f"TLP value {value:#x} does not fit in {size} byte(s)")
        byte_enable = ((1 << size) - 1) << offset
        data_out = (value << (8 * offset)) if value is not None else 0
        if _debug_level() >= 5:
            log.debug("pcie_request fmt=%#x addr=%#x value=%s size=%d", fmt_type, address, value, size)
        for attempt in range(retries + 1):
            self._f0_out(fmt_type, byte_enable, address & ~3, data_out)
            if _is_posted(fmt_type):
                return None
            data, status, ret_status = self._f0_in()
            if ret_status == 0:
                break
            if attempt < retries:
                self._sleep(0.001)
        else:
            raise PCIeCompletionError(
                f"TLP error after retries: ret_status={ret_status}, address={address:#x}", status=None, address=address
            )
        if status:
            raise PCIeCompletionError(
                f"TLP completion status: {completion_status_text(status, address)}", status=status, address=address
            )
        if value is None:
            return (data >> (8 * offset)) & ((1 << (8 * size)) - 1)
        return None

    def pcie_cfg_req(
        self, byte_addr: int, bus: int = 1, dev: int = 0, fn: int = 0, value: int | None = None, size: int = 4
    ) -> int | None:
        """Config read (``value=None``) or write; bus 0 is the bridge itself (type 0), others are type 1."""
        for v, limit, what in (
            (byte_addr, 4096, "config offset"),
            (bus, 256, "bus"),
            (dev, 32, "device"),
            (fn, 8, "function"),
        ):
            if not isinstance(v, int) or not 0 <= v < limit:
                raise ValueError(f"{what} must be an int in 0..{limit - 1}, got {v!r}")
        fmt_type = (CFG_WRITE0 if value is not None else CFG_READ0) | int(bus > 0)
        address = (bus << 24) | (dev << 19) | (fn << 16) | byte_addr
        return self.pcie_request(fmt_type, address, value, size)

    # ---- streaming memory access -----------------------------------------------------------------------------------
    def pcie_mem_write(self, address: int, data: bytes) -> None:
        """Streaming memory write: ``0xF0`` mode 1 (dword count) then one bulk OUT, split at 1 MiB."""
        data = bytes(data)
        if len(data) % 4 or address % 4:
            raise ValueError(f"pcie_mem_write needs 4-byte aligned address and length, got {address:#x}+{len(data)}")
        for off in range(0, len(data), STREAM_CHUNK):
            chunk = data[off : off + STREAM_CHUNK]
            self._f0_out(MEM_WRITE64, 0x0F, address + off, len(chunk) // 4, mode=1)
            self.usb.bulk_write(chunk)

    def pcie_mem_read(self, address: int, nbytes: int) -> bytes:
        """Streaming memory read: ``0xF0`` mode 2 (dword count) then one bulk IN, split at 1 MiB."""
        if nbytes % 4 or address % 4:
            raise ValueError(f"pcie_mem_read needs 4-byte aligned address and length, got {address:#x}+{nbytes}")
        out = bytearray()
        for off in range(0, nbytes, STREAM_CHUNK):
            n = min(STREAM_CHUNK, nbytes - off)
            self._f0_out(MEM_READ64, 0x0F, address + off, n // 4, mode=2)
            got = bytes(self.usb.bulk_read(n, timeout=30000))
            if len(got) != n:
                raise ShortReadError(f"pcie_mem_read short read at {address + off:#x}: {len(got)} of {n} bytes")
            out += got
        return bytes(out)

    # ---- SRAM engine -----------------------------------------------------------------------------------------------
    def scsi_write(self, buf: bytes, slot_start: int = 0) -> None:
        """Write SRAM from 16 KiB slot ``slot_start``: ``0xF2`` (512-byte sectors, slot count) then bulk OUT."""
        buf = bytes(buf)
        padded = buf + bytes(-len(buf) % 512)
        if not 0 <= slot_start < SRAM_SIZE // 0x4000 or slot_start * 0x4000 + len(padded) > SRAM_SIZE:
            raise ValueError(f"SRAM write of {len(padded):#x} bytes at slot {slot_start} exceeds the 512 KiB SRAM")
        slots = -(-len(padded) // 0x4000)
        self.usb.control_write(0xF2, value=len(padded) // 512, index=(slot_start & 0xFF) | (slots << 8))
        self.usb.bulk_write(padded)

    def scsi_read_arm(self, size: int) -> None:
        """Arm an SRAM read of ``size`` bytes from slot 0 (``0xF2`` with ``wValue`` bit 15)."""
        if not 0 < size <= SRAM_SIZE:
            raise ValueError(f"SRAM read size must be in 1..{SRAM_SIZE:#x}, got {size:#x}")
        sectors, slots = -(-size // 512), -(-size // 0x4000)
        self.usb.control_write(0xF2, value=(sectors & 0x7FFF) | 0x8000, index=(slots & 0xFF) << 8)

    def scsi_read(self, size: int) -> bytes:
        """Bulk IN the armed SRAM data (the whole 512-byte sectors), returning its first ``size`` bytes.

        A transfer shorter than the armed sectors raises ``ShortReadError``: the tail would otherwise be missing data.
        """
        want = -(-size // 512) * 512
        data = bytes(self.usb.bulk_read(want, timeout=10000))
        if len(data) != want:
            raise ShortReadError(f"SRAM read returned {len(data):#x} of {want:#x} bytes (armed for {size:#x})")
        return data[:size]


class USBMMIO(MMIOView):
    """A view through the bridge: a BAR window at bus address ``addr`` (``pcimem=True``) or controller XDATA.

    * PCIe memory (``pcimem=True``): accesses must be 4-byte aligned with a length that is a multiple of 4
      (``dword_only``); each becomes one streaming read or write, so a 4-byte access is exactly one 32-bit TLP.
    * XDATA below ``0xF000``: ``0xE4`` reads / ``0xE5`` byte writes at ``addr + offset``.
    * The SRAM window (``addr >= 0xF000``, SRAM offset ``addr - 0xF000``, 512 KiB): reads arm the SRAM engine from
      slot 0 and return the requested part; writes go through the engine and must start on a 16 KiB slot boundary
      (the engine pads the data to 512-byte sectors with zeros). Offsets are never dropped silently.
    """

    def __init__(
        self,
        ctrl: ASM24Controller,
        addr: int,
        nbytes: int,
        fmt: str = "B",
        pcimem: bool = True,
        on_violation: Callable[[str], None] | None = None,
    ) -> None:
        super().__init__(nbytes, fmt, on_violation)
        if not isinstance(addr, int) or addr < 0:
            raise ValueError(f"USBMMIO address must be a non-negative int, got {addr!r}")
        if not pcimem:
            limit = SRAM_XDATA_WINDOW + SRAM_SIZE if addr >= SRAM_XDATA_WINDOW else SRAM_XDATA_WINDOW
            if addr + nbytes > limit:
                raise ValueError(
                    f"controller window [{addr:#x}, {addr + nbytes:#x}) exceeds {limit:#x} (XDATA below "
                    f"{SRAM_XDATA_WINDOW:#x}, SRAM window {SRAM_XDATA_WINDOW:#x}+{SRAM_SIZE:#x})"
                )
        self.ctrl, self.addr, self.pcimem = ctrl, addr, pcimem
        self.dword_only = pcimem

    def _rebase(self, off: int) -> None:
        self.addr += off

    def _sram_offset(self, off: int) -> int | None:
        if self.pcimem or self.addr < SRAM_XDATA_WINDOW:
            return None
        return self.addr - SRAM_XDATA_WINDOW + off

    def _read_bytes(self, off: int, n: int) -> bytes:
        if self.pcimem:
            return self.ctrl.pcie_mem_read(self.addr + off, n)
        sram = self._sram_offset(off)
        if sram is None:
            return self.ctrl.read(self.addr + off, n)
        self.ctrl.scsi_read_arm(sram + n)
        return self.ctrl.scsi_read(sram + n)[sram:]

    def _write_bytes(self, off: int, data: bytes) -> None:
        if self.pcimem:
            self.ctrl.pcie_mem_write(self.addr + off, data)
            return
        sram = self._sram_offset(off)
        if sram is None:
            self.ctrl.write(self.addr + off, data)
        elif sram % 0x4000:
            self._fail(ValueError(f"SRAM writes must start on a 16 KiB slot boundary, got SRAM offset {sram:#x}"))
        else:
            self.ctrl.scsi_write(data, slot_start=sram // 0x4000)

    def __repr__(self) -> str:
        kind = "pcimem" if self.pcimem else "xdata"
        return f"USBMMIO({kind} addr={self.addr:#x}, nbytes={self.nbytes:#x}, fmt={self.fmt!r})"
