"""`Navi31SPI`: the raw SMUIO ROM_SW engine, which shifts arbitrary SPI opcodes to the flash."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass

from amdflash import regs
from amdflash.util import RegisterAccessor
from tg.drivers.interrupts import critical
from tg.drivers.regprog import ProgramResult, RegisterProgram, run_program

log = logging.getLogger(__name__)

MAX_TRANSFER = 256
DEFAULT_PRESCALE = 8
TRANSACTION_TIMEOUT = 2.0

# Chip-erase opcodes complete in one byte. Every ROM_SW_CNTL write re-sends the opcode left in ROM_SW_COMMAND as a
# bare 1-byte command (the pre-clear and the restore of each transaction), so these must never be placed there.
ONE_BYTE_DESTRUCTIVE_OPCODES = frozenset({0x60, 0xC7})

# Saved at the start of every transaction, then set up as (register, and-mask, or-value) in this order.
SAVED_REGISTERS = (regs.GPIO_PAD_MASK, regs.GPIO_PAD_A, regs.GPIO_PAD_EN, regs.PAGE_MIRROR_CNTL, regs.ROM_CNTL)
SETUP = (
    (regs.GPIO_PAD_MASK, ~regs.GPIO_SPI_PADS, 0),  # release the SPI pads from GPIO use
    (regs.GPIO_PAD_A, ~regs.GPIO_SPI_PADS, 0),
    (regs.GPIO_PAD_EN, ~regs.GPIO_SPI_PADS, 0),
    (regs.PAGE_MIRROR_CNTL, regs.PAGE_MIRROR_CLEAR, regs.PAGE_MIRROR_ROMSW),  # ENABLE | USAGE=1
    (regs.ROM_CNTL, ~0xF, 0x8),  # low nibble 8
)

# The order in which `transfer` restores what it set up: the engine first (ROM_SW_CNTL, ROM_SW_STATUS), then the clock,
# the page mirror and the GPIO pads.
RESTORE_ORDER = (
    regs.ROM_SW_CNTL,
    regs.ROM_SW_STATUS,
    regs.ROM_CNTL,
    regs.PAGE_MIRROR_CNTL,
    regs.GPIO_PAD_A,
    regs.GPIO_PAD_EN,
    regs.GPIO_PAD_MASK,
)

GATED_HINT = "; the ROM_SW engine is gated — raw access only works while the PSP boot loader is stalled"


def check_prescale(prescale: int) -> int:
    """Return `prescale` if it is a valid SPI clock prescaler (0..15), else raise ValueError."""
    if not isinstance(prescale, int) or not 0 <= prescale <= 15:
        raise ValueError("prescale must be 0..15")
    return prescale


def persistent_rom_cntl(old: int, prescale: int) -> int:
    """The ROM_CNTL value the raw path writes once and leaves behind: override + prescaler + bit 0."""
    return (old & 0xE0FFFFFF) | regs.ROM_CNTL_PRESCALE_OVERRIDE | (prescale << regs.ROM_CNTL_PRESCALE_SHIFT) | 1


@dataclass(frozen=True)
class Transfer:
    """One SPI transaction: opcode, `address_len` (0..3) address bytes, then TX `data_out` or RX `data_in` bytes."""

    opcode: int
    address: int = 0
    address_len: int = 0
    data_out: bytes = b""
    data_in: int = 0

    def check(self) -> None:
        """ValueError for a transaction the engine cannot (or must not) run."""
        if self.data_out and self.data_in:
            raise ValueError("simultaneous TX and RX is unsupported")
        if self.opcode & 0xFF in ONE_BYTE_DESTRUCTIVE_OPCODES:
            raise ValueError(
                f"opcode {self.opcode & 0xFF:#04x} is a 1-byte destructive command; "
                "stale ROM_SW triggers would repeat it"
            )
        if self.address_len not in (0, 1, 2, 3):
            raise ValueError("address_len must be 0..3")
        if not 0 <= (len(self.data_out) or self.data_in) <= MAX_TRANSFER:
            raise ValueError("transfer data must be <= 256 bytes")


@dataclass
class _Plan:
    """Where one transaction's ops and values sit in a register program."""

    transfer: Transfer
    first: int  # index of its first op
    saved: dict[int, int]  # register -> value slot of its saved value
    setup: list[tuple[int, int]]  # (op index, register) of each set-up write
    cleared: int  # value slot of the ROM_SW_STATUS check after clearing
    cleared_op: int
    block: int | None  # block index of the RX window read
    end: int  # one past its last op (the restore)

    def data(self, ran: ProgramResult) -> bytes:
        """The RX bytes of a transaction that ran completely."""
        return b"" if self.block is None else ran.blocks[self.block][: self.transfer.data_in]

    def setup_done(self, ran: ProgramResult) -> dict[int, int]:
        """Register -> saved value, for the set-up writes of this transaction that ran."""
        return {
            off: 0 if off in (regs.ROM_SW_CNTL, regs.ROM_SW_STATUS) else ran.values[self.saved[off]]
            for index, off in self.setup
            if index < ran.executed
        }


@dataclass(frozen=True)
class _Template:
    """The register program of one transaction shape, built once; the command and TX words are filled in per use."""

    program: RegisterProgram
    saved: dict[int, int]
    setup: list[tuple[int, int]]
    cleared: int
    cleared_op: int
    command_op: int  # the ROM_SW_COMMAND write; the TX words follow it
    block: int | None


def _build_template(address_len: int, data_in: int, data_out: int) -> _Template:
    """Set-up, trigger, first poll, RX read and restore of a transaction with `data_out` TX or `data_in` RX bytes."""
    prog = RegisterProgram()
    saved = {off: prog.read32(off) for off in SAVED_REGISTERS}
    setup = [(prog.write32_from(off, saved[off], and_mask, or_value), off) for off, and_mask, or_value in SETUP]
    # ROM_SW_CNTL/STATUS are restored to 0 (their idle value); every ROM_SW_CNTL write triggers the engine, so that
    # restore happens only once the pads, mirror and clock above are set up
    setup += [(prog.write32(off, 0), off) for off in (regs.ROM_SW_CNTL, regs.ROM_SW_STATUS)]
    cleared = prog.expect32(regs.ROM_SW_STATUS, 0xFFFFFFFF, 0)
    cleared_op = len(prog.ops) - 1
    command_op = prog.write32(regs.ROM_SW_COMMAND, 0)
    for i in range(0, data_out, 4):
        prog.write32(regs.ROM_SW_DATA + i, 0)
    count = data_out or data_in
    control = (address_len << 16) | (regs.ROM_SW_CNTL_RETURN_DATA_EN if data_in else 0) | count
    prog.write32(regs.ROM_SW_CNTL, control)
    prog.read32(regs.ROM_SW_CNTL)  # flush the posted write
    prog.expect32(regs.ROM_SW_STATUS, regs.ROM_SW_STATUS_DONE, regs.ROM_SW_STATUS_DONE)  # the first poll
    block = prog.read(regs.ROM_SW_DATA, (data_in + 3) & ~3) if data_in else None
    for off in RESTORE_ORDER:
        if off in (regs.ROM_SW_CNTL, regs.ROM_SW_STATUS):
            prog.write32(off, 0)
        else:
            prog.write32_from(off, saved[off])
    return _Template(prog, saved, setup, cleared, cleared_op, command_op, block)


_TEMPLATES: dict[tuple[int, int, int], _Template] = {}


def _plan(prog: RegisterProgram, t: Transfer) -> _Plan:
    """Append one transaction (set-up, trigger, first poll, RX read, restore) to `prog`: its shape's template, with
    the command and TX words of `t` (building the ~30 ops afresh for every 256-byte read was a fifth of its cost)."""
    key = (t.address_len, t.data_in, len(t.data_out))
    tmpl = _TEMPLATES.get(key)
    if tmpl is None:
        tmpl = _TEMPLATES[key] = _build_template(*key)
    writes = {tmpl.command_op: ((t.address & 0xFFFFFF) << 8) | (t.opcode & 0xFF)}
    out = t.data_out
    for i in range(0, len(out), 4):
        writes[tmpl.command_op + 1 + i // 4] = int.from_bytes(out[i : i + 4].ljust(4, b"\0"), "big")
    first, slot, block = prog.extend(tmpl.program, writes)
    return _Plan(
        t,
        first,
        {off: s + slot for off, s in tmpl.saved.items()},
        [(index + first, off) for index, off in tmpl.setup],
        tmpl.cleared + slot,
        tmpl.cleared_op + first,
        None if tmpl.block is None else tmpl.block + block,
        first + len(tmpl.program.ops),
    )


def _plan_at(plans: list[_Plan], op: int) -> _Plan:
    """The transaction that op index `op` belongs to."""
    return next(p for p in plans if p.first <= op < p.end)


class Navi31SPI:
    """Driver of the ROM_SW engine over a BAR5 register accessor.

    Construction writes ROM_CNTL once (override bit, prescaler, bit 0); that write is deliberately not restored, so
    a usable prescaler is selected instead of inheriting a possibly unusable boot-loader value.
    """

    def __init__(
        self,
        bar5: RegisterAccessor,
        prescale: int = DEFAULT_PRESCALE,
        *,
        timeout: float = TRANSACTION_TIMEOUT,
        poll_interval: float = 0.001,
    ):
        check_prescale(prescale)
        self.bar5 = bar5
        self.prescale = prescale
        self.timeout = timeout
        self.poll_interval = poll_interval
        with critical():
            bar5.write32(regs.ROM_CNTL, persistent_rom_cntl(bar5.read32(regs.ROM_CNTL), prescale))

    def transfer(
        self,
        opcode: int,
        address: int = 0,
        address_len: int = 0,
        data_out: bytes = b"",
        data_in: int = 0,
        timeout: float | None = None,
    ) -> bytes:
        """Run one SPI transaction: opcode, `address_len` address bytes, then TX `data_out` or RX `data_in` bytes.

        Returns the RX window (which shows the *previous* RX transaction's capture) or b"" for non-RX transactions.
        Every register the set-up wrote (and only those) is restored, whatever happens; SIGINT/SIGTERM are deferred
        until the restore is done (`tg.drivers.interrupts.critical`). `timeout=None` uses the instance default (2 s
        unless configured).
        """
        return self.transfer_many([Transfer(opcode, address, address_len, data_out, data_in)], timeout)[0]

    def transfer_many(self, transfers: Sequence[Transfer], timeout: float | None = None) -> list[bytes]:
        """Run transactions back to back, each exactly as `transfer` would (set-up, trigger, poll, read, restore).

        They form one register program (`tg.drivers.regprog`): one round trip over the remote transport, op by op in
        the same order elsewhere. A transaction not done at its first poll finishes op by op, then the rest follow.
        """
        for t in transfers:
            t.check()
        with critical():  # a Ctrl-C waits until the registers are restored
            return self._run(list(transfers), self.timeout if timeout is None else timeout)

    def _run(self, transfers: list[Transfer], timeout: float) -> list[bytes]:
        prog = RegisterProgram()
        plans = [_plan(prog, t) for t in transfers]
        try:
            ran = run_program(self.bar5, prog)
        except BaseException as exc:
            partial: ProgramResult | None = getattr(exc, "program_result", None)  # how far a local run got
            if partial is None:  # a remote program failed: what ran is unknown
                log.error("ROM_SW transaction failed before its register values were known; nothing to restore")
            else:
                self._restore(_plan_at(plans, max(partial.executed - 1, 0)).setup_done(partial), False)
            raise
        done = [p for p in plans if p.end <= ran.executed]
        results = [p.data(ran) for p in done]
        if len(done) == len(plans):
            return results
        plan = plans[len(done)]  # stopped at one of its checks
        completed = False
        try:
            if ran.executed - 1 == plan.cleared_op:
                status = ran.values[plan.cleared]
                raise RuntimeError(f"ROM_SW_STATUS did not clear (status={status:#010x}){GATED_HINT}")
            self._wait_done(timeout)  # not done at the first poll: keep polling, then read the window
            size = (plan.transfer.data_in + 3) & ~3
            raw = bytes(self.bar5.read(regs.ROM_SW_DATA, size)) if plan.transfer.data_in else b""
            completed = True
        finally:
            self._restore(plan.setup_done(ran), completed)
        results.append(raw[: plan.transfer.data_in])
        rest = transfers[len(results) :]
        return results + (self._run(rest, timeout) if rest else [])

    def _restore(self, saved: dict[int, int], completed: bool) -> None:
        """Undo exactly the set-up writes that happened, in the fixed restore order; keep going past failures."""
        writes = [(off, saved[off]) for off in RESTORE_ORDER if off in saved]
        poster = getattr(self.bar5, "post_writes", None)
        if poster is not None and poster(writes):  # remote: one posted request
            return
        first_error: BaseException | None = None
        for off in RESTORE_ORDER:
            if off not in saved:
                continue
            try:
                self.bar5.write32(off, saved[off])
            except BaseException as exc:  # never mask the original exception; log and keep restoring
                log.error("failed to restore register %#x: %s", off, exc)
                first_error = first_error or exc
        if completed and first_error is not None:
            raise first_error

    def _wait_done(self, timeout: float) -> None:
        bar = self.bar5
        deadline = time.monotonic() + timeout
        while True:
            status = bar.read32(regs.ROM_SW_STATUS)
            if status & regs.ROM_SW_STATUS_DONE:
                return
            if time.monotonic() >= deadline:
                raise TimeoutError(
                    f"ROM_SW transaction timeout (status={status:#x}); engine may be gated after SOS boot"
                )
            time.sleep(self.poll_interval)
