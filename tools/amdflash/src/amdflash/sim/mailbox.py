"""Model of the early PSP boot-firmware flash mailbox: query commands and the START/DATA/END item state machine."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

READY = 0x80000000


class PSPModel:
    """State of the PSP mailbox. `doorbell` runs the pending command; see `SimulatedNavi31` for the registers."""

    def __init__(
        self,
        mode: str,
        items: list[tuple[int, int]],
        values: dict[int, int],
    ):
        self.mode = mode
        self.items = list(items)
        self.values = dict(values)
        self.command = READY
        self.data = 0
        self.step = 0
        self.in_transfer = False
        self.expected = 0
        self.buffer = bytearray()
        self.log: list[tuple[int, int, int, int]] = []
        self.received: list[tuple[int, bytes]] = []
        self.counts: dict[int, int] = {}
        self.fail: dict[tuple[int, int], int] = {}
        self.stall: set[tuple[int, int]] = set()
        self.stalled = False
        self.abort_on: Callable[[tuple[Any, ...]], None] | None = None

    def read_command(self) -> int:
        """Value of the COMMAND register."""
        return 0 if self.mode == "not_ready" else self.command

    def write_command(self, value: int) -> None:
        """Host write to COMMAND."""
        if self.mode != "not_ready":
            self.command = value

    def doorbell(self) -> str | None:
        """Run the command written to COMMAND. Returns a violation message on doorbell misuse, else None."""
        if self.mode == "not_ready":
            return None
        if self.command & READY:
            return "doorbell without command"
        if self.stalled:
            return None
        cmd = (self.command >> 16) & 0xFF
        n = self.counts.get(cmd, 0) + 1
        self.counts[cmd] = n
        data_in = self.data
        if self.abort_on is not None:
            try:
                self.abort_on(("psp", cmd, n))
            except BaseException:
                self.command = READY  # the command was not run; the mailbox stays usable
                raise
        if (cmd, n) in self.stall:
            self.stalled = True
            return None
        if (cmd, n) in self.fail:
            error, response = self.fail[(cmd, n)], 0
        else:
            error, response = self._handle(cmd, data_in)
        self.data = response if error == 0 else 0
        self.command = READY | (error & 0xFFFF)
        self.log.append((cmd, data_in, error, response))
        return None

    def _handle(self, cmd: int, data: int) -> tuple[int, int]:
        if cmd in (0x01, 0x06, 0x0B):
            return 0, self.values.get(cmd, 0)
        if self.mode == "sos_gated":
            return (0x0A, 0) if cmd == 0x07 else (0x0E, 0)
        if cmd == 0x07:
            if self.step < len(self.items):
                phase, item = self.items[self.step]
                return 0, (phase << 8) | item
            return 0x10, 0
        if cmd == 0x08:
            if self.in_transfer:
                return 0x11, 0
            if self.step >= len(self.items):
                return 0x10, 0
            size, item = data >> 8, data & 0xFF
            if item != self.items[self.step][1] or size == 0 or size % 4:
                return 0x03, 0
            self.in_transfer, self.expected, self.buffer = True, size, bytearray()
            return 0, 0
        if cmd == 0x09:
            if not self.in_transfer:
                return 0x10, 0
            if len(self.buffer) + 4 > self.expected:
                return 0x02, 0
            self.buffer += data.to_bytes(4, "little")
            return 0, 0
        if cmd == 0x0A:
            if not self.in_transfer:
                return 0x10, 0
            sent, item = data >> 8, data & 0xFF
            self.in_transfer = False
            if item != self.items[self.step][1] or sent != len(self.buffer) or sent != self.expected:
                self.buffer = bytearray()
                return 0x11, 0
            self.received.append((item, bytes(self.buffer)))
            self.buffer = bytearray()
            self.step += 1
            return 0, 0
        return 0x0E, 0
