"""Behavioural model of the GD25LQ16E SPI flash: status registers, WEL/BUSY, protection, erase and AND-programming."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

FLASH_SIZE = 0x200000
SECTOR = 0x1000
READ_STATUS_OPS = (0x05, 0x35, 0x15)


class GD25Model:
    """The flash array and its command decoder. `execute` is called once per ROM_SW transaction.

    Simplification: any non-zero BP field, or SR2.CMP, protects the whole array.
    """

    def __init__(
        self,
        flash: bytes,
        *,
        jedec: bytes,
        sr1: int,
        sr2: int,
        sr3: int,
        sfdp: bytes,
        busy_reads: int,
    ):
        self.flash = bytearray(flash)
        self.jedec = bytes(jedec)
        self.sr1 = sr1 & 0xFC  # BUSY and WEL are kept separately
        self.sr2 = sr2
        self.sr3 = sr3
        self.sfdp = bytes(sfdp)
        self.busy_reads = busy_reads
        self.wel = False
        self.busy_remaining = 0
        self.erase_count = 0
        self.program_count = 0
        self.wrsr_count = 0
        self.wrsr_log: list[tuple[int, int, int, int]] = []  # (sr1, sr2) before and after each applied WRSR
        self.drop_program: set[int] = set()
        self.abort_on: Callable[[tuple[Any, ...]], None] | None = None

    @property
    def busy(self) -> bool:
        """True while an erase/program/WRSR is in progress."""
        return self.busy_remaining > 0

    @property
    def protected_all(self) -> bool:
        """True if BP != 0 or CMP is set (the simulator treats both as full-array protection)."""
        return bool((self.sr1 >> 2) & 0x1F) or bool(self.sr2 & 0x40)

    def _event(self, *event: Any) -> None:
        if self.abort_on is not None:
            self.abort_on(tuple(event))

    def _start_busy(self) -> None:
        self.busy_remaining = self.busy_reads
        if self.busy_reads == 0:
            self.wel = False

    def execute(self, opcode: int, addr_bytes: bytes, tx: bytes, rx_len: int) -> bytes:
        """Run one command; return `rx_len` captured bytes (0xFF where the command returns nothing)."""
        ff = b"\xff" * rx_len
        if self.busy_remaining > 0 and opcode not in READ_STATUS_OPS:
            return ff
        full_addr = len(addr_bytes) == 3
        addr = int.from_bytes(addr_bytes, "big") & (FLASH_SIZE - 1) if full_addr else 0
        if opcode == 0x9F:
            if not rx_len:
                return b""
            reps = rx_len // len(self.jedec) + 1
            return (self.jedec * reps)[:rx_len]
        if opcode == 0x05:
            if not rx_len:
                return b""
            if self.busy_remaining > 0:
                value = self.sr1 | 0x03
                self.busy_remaining -= 1
                if self.busy_remaining == 0:
                    self.wel = False
            else:
                value = self.sr1 | (0x02 if self.wel else 0)
            return bytes([value]) * rx_len
        if opcode == 0x35:
            return bytes([self.sr2]) * rx_len
        if opcode == 0x15:
            return bytes([self.sr3]) * rx_len
        if opcode == 0x06:
            self.wel = True
            return ff
        if opcode == 0x04:
            self.wel = False
            return ff
        if opcode == 0x01:
            if self.wel and tx:
                self._event("wrsr", bytes(tx))
                before = (self.sr1, self.sr2)
                self.sr1 = (self.sr1 & 0x03) | (tx[0] & 0xFC)
                if len(tx) >= 2:
                    self.sr2 = (self.sr2 & ~0x43 & 0xFF) | (tx[1] & 0x43)
                self.wrsr_count += 1
                self.wrsr_log.append((*before, self.sr1, self.sr2))
                self._start_busy()
            return ff
        if opcode == 0x20:
            if self.wel and full_addr:
                base = addr & ~(SECTOR - 1)
                self._event("erase", base // SECTOR)
                if self.protected_all:
                    self.wel = False
                else:
                    self.flash[base : base + SECTOR] = b"\xff" * SECTOR
                    self.erase_count += 1
                    self._start_busy()
            return ff
        if opcode == 0x02:
            if self.wel and full_addr and tx:
                self._event("program", addr)
                if self.protected_all:
                    self.wel = False
                else:
                    if addr not in self.drop_program:
                        self._program(addr, tx[-256:])
                    self.program_count += 1
                    self._start_busy()
            return ff
        if opcode == 0x03:
            if not full_addr:
                return ff
            end = addr + rx_len
            if end <= FLASH_SIZE:
                return bytes(self.flash[addr:end])
            return bytes(self.flash[(addr + i) % FLASH_SIZE] for i in range(rx_len))
        if opcode == 0x5A:
            if not full_addr or not rx_len:
                return ff
            data = b"\xff" + self.sfdp[addr : addr + rx_len - 1]
            return data.ljust(rx_len, b"\xff")
        return ff

    def _program(self, addr: int, data: bytes) -> None:
        page = addr & ~0xFF
        start = addr & 0xFF
        flash = self.flash
        if start + len(data) <= 256:
            seg = flash[addr : addr + len(data)]
            flash[addr : addr + len(data)] = (int.from_bytes(seg, "big") & int.from_bytes(data, "big")).to_bytes(
                len(data), "big"
            )
            return
        for i, byte in enumerate(data):
            a = page | ((start + i) & 0xFF)
            flash[a] &= byte
