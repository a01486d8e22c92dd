"""`SimulatedNavi31`: a register model of the Navi31 BAR5 registers amdflash uses (ROM_SW engine, ROM aperture,
PSP mailbox) wired to a simulated GD25LQ16E.

It implements the tg.drivers `RegisterModel` protocol (`size`, `read`, `write`, `reset`), so it can back BAR5 of a
`MockPCIDevice`. One register access costs a few microseconds: dispatch is a dict lookup on the offset.
"""

from __future__ import annotations

import collections
from array import array
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from amdflash import regs
from amdflash.sim.config import SimConfig
from amdflash.sim.flash import GD25Model
from amdflash.sim.mailbox import PSPModel
from tg.drivers.errors import MockAccessError

WINDOW_START = regs.ROM_SW_DATA
WINDOW_END = regs.ROM_SW_DATA + regs.ROM_SW_DATA_SIZE
PLAIN_REGS = (
    regs.ROM_CNTL,
    regs.PAGE_MIRROR_CNTL,
    regs.ROM_INDEX,
    regs.ROM_SW_COMMAND,
    regs.GPIO_PAD_MASK,
    regs.GPIO_PAD_A,
    regs.GPIO_PAD_EN,
)
GPIO_REGS = (regs.GPIO_PAD_MASK, regs.GPIO_PAD_A, regs.GPIO_PAD_EN)


@dataclass(frozen=True)
class Txn:
    """One ROM_SW trigger (any write to ROM_SW_CNTL), as decoded by the engine."""

    opcode: int
    addr_bytes: bytes
    tx: bytes
    rx_len: int
    rx_data: bytes
    control: int = 0


class SimulatedNavi31:
    """The simulated board's BAR5 (size 0x100000). State is public for assertions; see the spec §11."""

    size = regs.BAR5_SIZE

    def __init__(self, config: SimConfig | None = None):
        self.config = config = config if config is not None else SimConfig()
        self.strict = config.strict
        self.romsw_mode = config.romsw
        self.aperture_mode = config.rom_aperture
        self.initial_regs = {off: config.initial_regs.get(off, 0) for off in PLAIN_REGS}
        self.chip = GD25Model(
            config.flash,
            jedec=config.jedec,
            sr1=config.sr1,
            sr2=config.sr2,
            sr3=config.sr3,
            sfdp=config.sfdp,
            busy_reads=config.busy_reads,
        )
        self.chip.drop_program = config.drop_program
        self.chip.abort_on = config.abort_on
        self.psp = PSPModel(config.psp, config.psp_items, config.psp_values)
        self.psp.fail = config.psp_fail
        self.psp.stall = config.psp_stall
        self.psp.abort_on = config.abort_on
        self.stall_after_txns = config.stall_after_txns
        self.violations: list[str] = []
        self.transactions: list[Txn] = []
        self.reg_log: collections.deque[tuple[str, int, int, int]] | None = (
            collections.deque(maxlen=config.reg_log) if config.reg_log else None
        )
        self.rom_data_reads = 0
        self.session_marks: list[int] = []  # index into `transactions` where each device session began
        #: called as `hook("r"|"w", offset)` before every BAR5 access is served, e.g. to send the process a SIGINT
        #: at an exact step of a transaction (tests of the interrupt handling)
        self.access_hook: Callable[[str, int], None] | None = None
        self._reset_registers()
        self._readers: dict[int, Callable[[], int]] = {
            regs.ROM_CNTL: self._read_rom_cntl,
            regs.ROM_SW_CNTL: lambda: self.rom_sw_cntl,
            regs.ROM_SW_STATUS: self._read_status,
            regs.ROM_DATA: self._read_rom_data,
            regs.PSP_COMMAND: self.psp.read_command,
            regs.PSP_COMMAND_DATA: lambda: self.psp.data,
            regs.PSP_DOORBELL: lambda: 0,
        }
        for off in PLAIN_REGS:
            if off != regs.ROM_CNTL:
                self._readers[off] = lambda off=off: self.regs[off]  # type: ignore[misc]
        self._writers: dict[int, Callable[[int], None]] = {
            regs.ROM_CNTL: self._write_rom_cntl,
            regs.ROM_SW_CNTL: self._write_rom_sw_cntl,
            regs.ROM_SW_STATUS: self._write_status,
            regs.ROM_DATA: self._write_rom_data,
            regs.PSP_COMMAND: self.psp.write_command,
            regs.PSP_COMMAND_DATA: self._write_psp_data,
            regs.PSP_DOORBELL: self._write_doorbell,
        }
        for off in PLAIN_REGS:
            if off != regs.ROM_CNTL:
                self._writers[off] = lambda v, off=off: self.regs.__setitem__(off, v)  # type: ignore[misc]

    # --- convenient views of the state -------------------------------------------------------------------------------
    @property
    def flash(self) -> bytearray:
        """The flash array (mutable)."""
        return self.chip.flash

    @flash.setter
    def flash(self, data: bytes) -> None:
        if len(data) != len(self.chip.flash):
            raise ValueError("simulated flash must be exactly 0x200000 bytes")
        self.chip.flash[:] = data

    sr1 = property(lambda self: self.chip.sr1, lambda self, v: setattr(self.chip, "sr1", v & 0xFC))
    sr2 = property(lambda self: self.chip.sr2, lambda self, v: setattr(self.chip, "sr2", v))
    sr3 = property(lambda self: self.chip.sr3, lambda self, v: setattr(self.chip, "sr3", v))
    wel = property(lambda self: self.chip.wel)
    busy = property(lambda self: self.chip.busy)
    erase_count = property(lambda self: self.chip.erase_count)
    program_count = property(lambda self: self.chip.program_count)
    wrsr_count = property(lambda self: self.chip.wrsr_count)
    wrsr_log = property(lambda self: self.chip.wrsr_log)
    psp_log = property(lambda self: self.psp.log)
    psp_received = property(lambda self: self.psp.received)

    @property
    def abort_on(self) -> Callable[[tuple[Any, ...]], None] | None:
        """Fault hook called before erase/program/WRSR/PSP commands are applied."""
        return self.chip.abort_on

    @abort_on.setter
    def abort_on(self, fn: Callable[[tuple[Any, ...]], None] | None) -> None:
        self.chip.abort_on = fn
        self.psp.abort_on = fn

    @property
    def drop_program(self) -> set[int]:
        """Page-program start addresses that are silently not applied."""
        return self.chip.drop_program

    @drop_program.setter
    def drop_program(self, addrs: set[int]) -> None:
        self.chip.drop_program = set(addrs)

    def mark_session(self) -> None:
        """Note that a new device session (one CLI invocation) starts here; used by the never-happen checks."""
        self.session_marks.append(len(self.transactions))

    # --- RegisterModel protocol --------------------------------------------------------------------------------------
    def reset(self) -> None:
        """Device reset: registers back to their initial values; the flash keeps its contents."""
        self._reset_registers()

    def read(self, offset: int, size: int) -> bytes:
        """Serve a read of `size` bytes at BAR5 `offset`."""
        if size == 4:
            return self.read32(offset).to_bytes(4, "little")
        if self.access_hook is not None:
            self.access_hook("r", offset)
        return self._read_window_or_general(offset, size)

    def _read_window_or_general(self, offset: int, size: int) -> bytes:
        if WINDOW_START <= offset and offset + size <= WINDOW_END and not (offset | size) & 3:
            data = bytes(self.window[offset - WINDOW_START : offset - WINDOW_START + size])
            if self.reg_log is not None:
                self.reg_log.append(("r", offset, size, int.from_bytes(data, "little")))
            return data
        return self._read_general(offset, size)

    def write(self, offset: int, data: bytes) -> None:
        """Serve a write of `data` at BAR5 `offset`."""
        if len(data) == 4:
            self.write32(offset, int.from_bytes(data, "little"))
            return
        if self.access_hook is not None:
            self.access_hook("w", offset)
        self._write_window_or_general(offset, data)

    def _write_window_or_general(self, offset: int, data: bytes) -> None:
        size = len(data)
        if WINDOW_START <= offset and offset + size <= WINDOW_END and not (offset | size) & 3:
            if self.reg_log is not None:
                self.reg_log.append(("w", offset, size, int.from_bytes(data, "little")))
            self.window[offset - WINDOW_START : offset - WINDOW_START + size] = data
            return
        self._write_general(offset, bytes(data))

    def read32(self, offset: int) -> int:
        """A 32-bit read as an int (`read` of 4 bytes comes here; the direct accessor calls it without the bytes)."""
        if self.access_hook is not None:
            self.access_hook("r", offset)
        reader = self._readers.get(offset)
        if reader is None:
            return int.from_bytes(self._read_window_or_general(offset, 4), "little")
        value = reader()
        if self.reg_log is not None:
            self.reg_log.append(("r", offset, 4, value))
        return value

    def write32(self, offset: int, value: int) -> None:
        """A 32-bit write of the u32 `value` (`write` of 4 bytes comes here; the direct accessor calls it directly)."""
        if self.access_hook is not None:
            self.access_hook("w", offset)
        writer = self._writers.get(offset)
        if writer is None:
            self._write_window_or_general(offset, value.to_bytes(4, "little"))
            return
        if self.reg_log is not None:
            self.reg_log.append(("w", offset, 4, value))
        writer(value)

    # --- slow paths: block or odd-width accesses ---------------------------------------------------------------------
    def _violation(self, message: str) -> None:
        self.violations.append(message)
        if self.strict:
            raise MockAccessError(message)

    def _is_modelled(self, dword: int) -> bool:
        return dword in self._readers or WINDOW_START <= dword < WINDOW_END

    def _check_pieces(self, offset: int, size: int, what: str) -> None:
        if size <= 0:
            self._violation(f"empty {what} at {offset:#x}")
        start, end = offset & ~3, (offset + size + 3) & ~3
        for dword in range(start, end, 4):
            if not self._is_modelled(dword):
                self._violation(f"{what} of unmodelled offset {dword:#x}")
            elif (offset > dword or offset + size < dword + 4) and not WINDOW_START <= dword < WINDOW_END:
                self._violation(f"sub-dword {what} of register {dword:#x} (offset {offset:#x} size {size})")
        if start <= regs.ROM_DATA < end and size > 4:
            self._violation(f"ROM_DATA block {what} ({size} bytes at {offset:#x})")

    def _read_general(self, offset: int, size: int) -> bytes:
        self._check_pieces(offset, size, "read")
        start, end = offset & ~3, (offset + size + 3) & ~3
        out = bytearray()
        for dword in range(start, end, 4):
            if WINDOW_START <= dword < WINDOW_END:
                out += self.window[dword - WINDOW_START : dword - WINDOW_START + 4]
            else:
                reader = self._readers.get(dword)
                out += (reader() if reader is not None else 0).to_bytes(4, "little")
        data = bytes(out[offset - start : offset - start + size])
        if self.reg_log is not None:
            self.reg_log.append(("r", offset, size, int.from_bytes(data, "little")))
        return data

    def _write_general(self, offset: int, data: bytes) -> None:
        size = len(data)
        self._check_pieces(offset, size, "write")
        if self.reg_log is not None:
            self.reg_log.append(("w", offset, size, int.from_bytes(data, "little")))
        start, end = offset & ~3, (offset + size + 3) & ~3
        for dword in range(start, end, 4):
            lo, hi = max(offset, dword), min(offset + size, dword + 4)
            if WINDOW_START <= dword < WINDOW_END:
                self.window[lo - WINDOW_START : hi - WINDOW_START] = data[lo - offset : hi - offset]
                continue
            reader, writer = self._readers.get(dword), self._writers.get(dword)
            if writer is None:
                continue
            current = bytearray((reader() if reader is not None else 0).to_bytes(4, "little"))
            current[lo - dword : hi - dword] = data[lo - offset : hi - offset]
            writer(int.from_bytes(current, "little"))

    # --- register behaviour ------------------------------------------------------------------------------------------
    def _reset_registers(self) -> None:
        self.regs: dict[int, int] = dict(self.initial_regs)
        self.window = bytearray(regs.ROM_SW_DATA_SIZE)
        self.rom_sw_cntl = 0
        self.done = 0
        self.pending = 0
        self.last_capture = bytes(256)

    def _read_rom_cntl(self) -> int:
        if self.aperture_mode == "unavailable":
            return regs.ROM_CNTL_ABSENT
        return self.regs[regs.ROM_CNTL]

    def _write_rom_cntl(self, value: int) -> None:
        if self.aperture_mode != "unavailable":
            self.regs[regs.ROM_CNTL] = value

    def _read_status(self) -> int:
        return regs.ROM_SW_STATUS_GATED if self.romsw_mode == "gated" else self.done

    def _write_status(self, value: int) -> None:
        if self.romsw_mode != "gated":
            self.done = value & 1

    def _read_rom_data(self) -> int:
        index = self.regs[regs.ROM_INDEX] & 0xFFFFFF
        length = 0x100000 if self.aperture_mode == "mirror_1mib" else 0x200000
        flash = self.chip.flash
        self.regs[regs.ROM_INDEX] = (index + 4) & 0xFFFFFF
        self.rom_data_reads += 1
        if index % length + 4 <= length:
            i = index % length
            return int.from_bytes(flash[i : i + 4], "little")
        return int.from_bytes(bytes(flash[(index + k) % length] for k in range(4)), "little")

    def _write_rom_data(self, value: int) -> None:
        self._violation(f"write to ROM_DATA ({value:#010x})")

    def _write_psp_data(self, value: int) -> None:
        if self.psp.mode != "not_ready":
            self.psp.data = value

    def _write_doorbell(self, value: int) -> None:
        if value:
            problem = self.psp.doorbell()
            if problem is not None:
                self._violation(problem)

    def _write_rom_sw_cntl(self, value: int) -> None:
        self.rom_sw_cntl = value
        if self.romsw_mode == "gated":
            return
        if self.strict:
            self._check_trigger(value)
        ntx = len(self.transactions)
        if self.romsw_mode == "stalled" or (self.stall_after_txns is not None and ntx >= self.stall_after_txns):
            self.pending += 1
            self.transactions.append(Txn(-1, b"", b"", 0, b"", value))
            return
        self._run_transaction(value)
        self.done = 1

    def _check_trigger(self, value: int) -> None:
        if value & regs.ROM_SW_CNTL_RETURN_DATA_EN_PUBLIC:
            self._violation("RETURN_DATA_EN written at bit 18; Navi31 uses bit 19")
        if value & 0xFFFF > 256:
            self._violation(f"ROM_SW_CNTL data size {value & 0xFFFF} exceeds 256")
        if value & regs.ROM_SW_CNTL_RETURN_DATA_EN and value & 0xFFFF == 0:
            self._violation("ROM_SW_CNTL requests RX with a data size of 0")
        r = self.regs
        if any(r[g] & regs.GPIO_SPI_PADS for g in GPIO_REGS):
            self._violation("ROM_SW transaction started while a GPIO register still claims the SPI pads")
        if r[regs.PAGE_MIRROR_CNTL] & 0x0E000000 != regs.PAGE_MIRROR_ROMSW:
            self._violation("ROM_SW transaction started without PAGE_MIRROR_CNTL ENABLE|USAGE=1")
        if self.aperture_mode != "unavailable" and r[regs.ROM_CNTL] & 0xF != 0x8:
            self._violation("ROM_SW transaction started without ROM_CNTL low nibble = 8")

    def _run_transaction(self, value: int) -> None:
        data_size = value & 0xFFFF
        cmd_bytes = ((value >> 16) & 3) + 1
        rx = bool(value & regs.ROM_SW_CNTL_RETURN_DATA_EN)
        command = self.regs[regs.ROM_SW_COMMAND]
        opcode = command & 0xFF
        addr_bytes = ((command >> 8) & 0xFFFFFF).to_bytes(3, "big")[: cmd_bytes - 1]
        size = min(data_size, 256)
        if rx:
            capture = self.chip.execute(opcode, addr_bytes, b"", size)
            previous = self.last_capture
            padded = previous + b"\0" * (-len(previous) % 4)
            self.window[: len(padded)] = padded[: len(self.window)]
            self.last_capture = capture
            self.transactions.append(Txn(opcode, addr_bytes, b"", size, capture, value))
            return
        tx = b""
        if size:
            words = array("I", self.window[: (size + 3) & ~3])
            words.byteswap()
            tx = words.tobytes()[:size]
        # append first so that a fault raised by the flash model still leaves the trigger on record
        self.transactions.append(Txn(opcode, addr_bytes, tx, 0, b"", value))
        self.chip.execute(opcode, addr_bytes, tx, 0)
