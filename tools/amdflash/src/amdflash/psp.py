"""`PSPFlashMailbox`: the early PSP boot-firmware flash mailbox (C2PMSG_115/116, doorbell C2PMSG_73)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sized
from typing import cast

from amdflash import regs
from amdflash.util import RegisterAccessor
from tg.drivers.interrupts import critical

GET_BOOT_PARTITION = 0x01
LIVE_ADDR_LO = 0x02
LIVE_ADDR_HI = 0x03
LIVE_UPDATE = 0x04
GET_FB_STATE = 0x06
GET_TRANSFER_TYPE = 0x07
START_TRANSFER = 0x08
DATA_TRANSFER = 0x09
END_TRANSFER = 0x0A
SPI_GET_MODEL_ID = 0x0B

COMMAND_TIMEOUT = 10.0
END_TIMEOUT = 60.0
GATED_ERROR = 0x0A

PSP_ERRORS: dict[int, str] = {
    0x01: "generic error",
    0x02: "out of bounds",
    0x03: "invalid parameter",
    0x04: "off-chip boot error",
    0x05: "address not set",
    0x06: "parse off-chip error",
    0x07: "address map error",
    0x08: "parse on-chip error",
    0x09: "full update error",
    0x0A: "partition update error",
    0x0B: "map on-chip error",
    0x0C: "write to SPI error",
    0x0D: "signature validation error",
    0x0E: "invalid command",
    0x0F: "signature not found",
    0x10: "state machine not initialized",
    0x11: "state machine transfer error",
    0x12: "initialization error",
}

PROBE_COMMANDS = (
    ("boot_partition", GET_BOOT_PARTITION),
    ("fb_state", GET_FB_STATE),
    ("model_id", SPI_GET_MODEL_ID),
    ("transfer_type", GET_TRANSFER_TYPE),
)


def describe_error(code: int) -> str:
    """The text of a PSP mailbox error code, or `unknown error`."""
    return PSP_ERRORS.get(code, "unknown error")


class PSPFlashMailbox:
    """Commands, queries and item streaming through the PSP flash mailbox."""

    def __init__(
        self,
        bar5: RegisterAccessor,
        *,
        poll_interval: float = 0.001,
        command_timeout: float = COMMAND_TIMEOUT,
        end_timeout: float = END_TIMEOUT,
        out: Callable[[str], None] = print,
    ):
        self.bar5 = bar5
        self.command_timeout = command_timeout
        self.end_timeout = end_timeout
        self.poll_interval = poll_interval
        self.out = out

    def command(self, cmd: int, data: int | None = None, timeout: float | None = None) -> tuple[int, int]:
        """Send one command and return `(error, response)`; raises if the mailbox is not ready or times out.

        `timeout=None` uses the instance default (10 s unless configured).
        """
        with critical():  # a Ctrl-C waits for the mailbox to answer (bounded by `timeout`)
            return self._command(cmd, data, self.command_timeout if timeout is None else timeout)

    def _command(self, cmd: int, data: int | None, timeout: float) -> tuple[int, int]:
        bar = self.bar5
        st = bar.read32(regs.PSP_COMMAND)
        if not st & regs.PSP_READY:
            raise RuntimeError(f"PSP mailbox is not ready before command {cmd:#x}: status={st:#010x}")
        if data is not None:
            bar.write32(regs.PSP_COMMAND_DATA, data & 0xFFFFFFFF)
        bar.write32(regs.PSP_COMMAND, (cmd << 16) & 0xFFFFFFFF)
        bar.write32(regs.PSP_DOORBELL, 1)
        deadline = time.monotonic() + timeout
        while not bar.read32(regs.PSP_COMMAND) & regs.PSP_READY:
            if time.monotonic() >= deadline:
                raise TimeoutError(f"PSP mailbox command {cmd:#x} timed out")
            time.sleep(self.poll_interval)
        value = bar.read32(regs.PSP_COMMAND)
        return value & 0xFFFF, bar.read32(regs.PSP_COMMAND_DATA)

    def require(self, cmd: int, data: int | None = None, timeout: float | None = None, name: str = "") -> int:
        """Like `command`, but a non-zero error raises `RuntimeError`; returns the response."""
        error, response = self.command(cmd, data, timeout)
        if error:
            raise RuntimeError(f"PSP {name or hex(cmd)} failed: error={error:#x} ({describe_error(error)})")
        return response

    def probe(self) -> list[tuple[str, int, int]]:
        """Run the four read-only queries; returns `(name, error, response)` for each."""
        return [(name, *self.command(cmd)) for name, cmd in PROBE_COMMANDS]

    def stream(
        self,
        payload: bytes | Sized,
        item: int,
        transfer_type: int | None = None,
        progress: Callable[[int, int], None] | None = None,
    ) -> int:
        """Stream one item (START, one DATA per dword, END). Returns the number of bytes sent.

        `progress(sent, size)` is called after every 4 KiB (and at the end).

        On any failure after START, a single best-effort END with the partial count is sent, unless the whole
        payload was already sent (so a rejected complete END is never repeated).
        """
        size = len(payload)
        if size == 0:
            raise ValueError("payload is empty")
        if size > 0xFFFFFF:
            raise ValueError("payload exceeds the mailbox's 24-bit size field")
        if size % 4:
            raise ValueError("payload size must be divisible by four")
        if not 0 <= item <= 255:
            raise ValueError("item type must fit in eight bits")
        data = bytes(cast(bytes, payload))
        tt = self.require(GET_TRANSFER_TYPE, name="GET_TRANSFER_TYPE") if transfer_type is None else transfer_type
        self.out(f"firmware transfer_type={tt:#x}")
        if tt & 0xFF != item:
            raise RuntimeError(f"firmware requests item {tt & 0xFF:#x}, not {item:#x}")
        sent = 0
        start = time.monotonic()
        try:
            self.require(START_TRANSFER, (size << 8) | item, name="START_TRANSFER")
            for o in range(0, size, 4):
                word = int.from_bytes(data[o : o + 4], "little")
                self.require(DATA_TRANSFER, word, name=f"DATA_TRANSFER@{o:#x}")
                sent = o + 4
                if progress is not None and sent % 0x1000 == 0:
                    progress(sent, size)
            self.require(END_TRANSFER, (sent << 8) | item, timeout=self.end_timeout, name="END_TRANSFER")
        except BaseException:
            if sent != size:
                try:
                    self.command(END_TRANSFER, (sent << 8) | item, timeout=self.command_timeout)
                except Exception:  # best effort only; the original error is what matters
                    pass
            raise
        if progress is not None:
            progress(sent, size)
        self.out(f"stream complete: type={item:#x} size={sent:#x} elapsed={time.monotonic() - start:.1f}s")
        return sent
