"""`GD25LQ16E`: the 2 MiB GigaDevice SPI flash on Navi31 boards, driven through `Navi31SPI`.

Every read is issued twice with the same opcode and address (a "prime", then the real read) because the ROM_SW RX
window shows the capture of the previous RX transaction.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Protocol

from amdflash.romsw import Transfer

FLASH_SIZE = 0x200000
SECTOR_SIZE = 0x1000
SECTOR_COUNT = FLASH_SIZE // SECTOR_SIZE
PAGE_SIZE = 0x100
MAX_READ = 0x100
JEDEC_ID = bytes([0xC8, 0x60, 0x15])

OP_WRSR = 0x01
OP_PP = 0x02
OP_READ = 0x03
OP_WRDI = 0x04
OP_RDSR1 = 0x05
OP_WREN = 0x06
OP_RDSR3 = 0x15
OP_SE = 0x20
OP_RDSR2 = 0x35
OP_SFDP = 0x5A
OP_RDID = 0x9F

SR1_BUSY = 0x01
SR1_WEL = 0x02
SR2_CMP = 0x40

READS_PER_PROGRAM = 8  # 256-byte reads sent back to back (2 KiB, 16 transactions, one round trip remotely)
ERASE_TIMEOUT = 2.0
PROGRAM_TIMEOUT = 1.0
WRSR_TIMEOUT = 1.0


class SPITransport(Protocol):
    """What the flash driver needs from the engine: SPI transactions, alone or back to back."""

    def transfer(
        self,
        opcode: int,
        address: int = 0,
        address_len: int = 0,
        data_out: bytes = b"",
        data_in: int = 0,
        timeout: float | None = None,
    ) -> bytes:
        """Run one transaction; see `Navi31SPI.transfer`."""
        ...

    def transfer_many(self, transfers: Sequence[Transfer], timeout: float | None = None) -> list[bytes]:
        """Run transactions back to back (one round trip remotely); see `Navi31SPI.transfer_many`."""
        ...


def has_jedec(raw: bytes) -> bool:
    """True if the GD25LQ16E id `C8 60 15` occurs anywhere in the capture, searched cyclically."""
    raw = bytes(raw)
    return JEDEC_ID in raw + raw[:2]


class GD25LQ16E:
    """Algorithms of the GD25LQ16E flash: status, identification, erase, program, read."""

    def __init__(self, spi: SPITransport, *, busy_poll_interval: float = 0.002):
        self.spi = spi
        self.busy_poll_interval = busy_poll_interval

    def read_register(self, op: int, count: int = 1) -> bytes:
        """Read `count` bytes of a register-like command (prime with max(2, count) bytes, then the real read)."""
        return self.spi.transfer_many([Transfer(op, data_in=max(2, count)), Transfer(op, data_in=count)])[1]

    def status(self, op: int = OP_RDSR1) -> int:
        """One status register (RDSR-1 by default)."""
        return self.read_register(op)[0]

    def rdid(self) -> bytes:
        """The 4-byte JEDEC capture."""
        return self.read_register(OP_RDID, 4)

    def sfdp(self, count: int = 20) -> bytes:
        """`count` bytes of SFDP space from address 0 (the capture starts with the dummy byte)."""
        read = Transfer(OP_SFDP, address=0, address_len=3, data_in=count)
        return self.spi.transfer_many([read, read])[1]

    def wait_idle(self, timeout: float = 2.0) -> int:
        """Poll SR1 until BUSY clears and return it; TimeoutError after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        polls = 0
        while True:
            expired = time.monotonic() >= deadline  # decided before the poll: a descheduled process still polls once
            sr1 = self.status()
            if not sr1 & SR1_BUSY:
                return sr1
            if expired:
                raise TimeoutError(f"flash remained busy for {timeout}s")
            polls += 1
            # the second poll follows at once (a status read is itself a transaction's worth of time): short
            # operations finish without a sleep; only then is the CPU given up between polls
            if polls > 1 and self.busy_poll_interval > 0:
                time.sleep(self.busy_poll_interval)

    def _issue_and_wait(self, command: Transfer, timeout: float) -> None:
        """Send `command` and its first SR1 poll back to back (one round trip remotely); poll on while BUSY."""
        sr1 = self.spi.transfer_many([command, Transfer(OP_RDSR1, data_in=2), Transfer(OP_RDSR1, data_in=1)])[2][0]
        if sr1 & SR1_BUSY:
            self.wait_idle(timeout)

    def write_enable(self) -> None:
        """WREN, then check that WEL is set."""
        sr1 = self.spi.transfer_many([Transfer(OP_WREN), Transfer(OP_RDSR1, data_in=2), Transfer(OP_RDSR1, data_in=1)])[
            2
        ][0]
        if not sr1 & SR1_WEL:
            raise RuntimeError(f"WREN failed (SR1=0x{sr1:02x})")

    def clear_cmp(self) -> bool:
        """Clear SR2.CMP only (BP/SRP/QE preserved). Returns False if CMP was already clear."""
        sr1 = self.status()
        sr2 = self.status(OP_RDSR2)
        if not sr2 & SR2_CMP:
            return False
        self.write_enable()
        self._issue_and_wait(Transfer(OP_WRSR, data_out=bytes([sr1 & 0xFC, sr2 & ~SR2_CMP & 0xFF])), WRSR_TIMEOUT)
        sr2 = self.status(OP_RDSR2)
        if sr2 & SR2_CMP:
            raise RuntimeError(f"failed to clear CMP (SR2=0x{sr2:02x})")
        return True

    def erase_sector(self, addr: int, timeout: float = ERASE_TIMEOUT) -> None:
        """Erase the 4 KiB sector at `addr` (must be aligned)."""
        if addr % SECTOR_SIZE:
            raise ValueError("sector address is not 4 KiB aligned")
        self.write_enable()
        self._issue_and_wait(Transfer(OP_SE, address=addr, address_len=3), timeout)

    def program_page(self, addr: int, data: bytes, timeout: float = PROGRAM_TIMEOUT) -> None:
        """Program 1..256 bytes at `addr` without crossing a 256-byte page."""
        if not 1 <= len(data) <= PAGE_SIZE or (addr & 0xFF) + len(data) > PAGE_SIZE:
            raise ValueError("page program crosses a 256-byte boundary")
        self.write_enable()
        self._issue_and_wait(Transfer(OP_PP, address=addr, address_len=3, data_out=bytes(data)), timeout)

    def read(self, addr: int, count: int) -> bytes:
        """Read `count` bytes at `addr` in chunks of up to 256 bytes."""
        if addr < 0 or count < 0 or addr + count > FLASH_SIZE:
            raise ValueError("read outside 2 MiB flash")
        out = bytearray()
        chunks = [(a, min(MAX_READ, addr + count - a)) for a in range(addr, addr + count, MAX_READ)]
        for i in range(0, len(chunks), READS_PER_PROGRAM):  # each chunk: a prime, then the real read
            reads = [Transfer(OP_READ, a, 3, data_in=n) for a, n in chunks[i : i + READS_PER_PROGRAM]]
            results = self.spi.transfer_many([t for read in reads for t in (read, read)])
            out += b"".join(results[1::2])
        return bytes(out)
