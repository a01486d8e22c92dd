"""Helpers for driving the CLI against the simulator in tests: an opener spy, a runner and the never-happen checks."""

from __future__ import annotations

import io
import itertools
import re
from dataclasses import dataclass, field
from typing import Any

from amdflash.settings import Settings
from amdflash.sim.board import SimulatedNavi31
from amdflash.sim.device import DirectSimDevice, make_sim_device

#: timeouts small enough that a stalled simulator fails fast, and no sleeping while the simulated flash is busy
FAST_SETTINGS = Settings(transaction_timeout=0.05, command_timeout=0.05, end_timeout=0.05, busy_poll_interval=0.0)


#: a plain progress line (`amdflash.progress`): `<desc>: <percent>% (<done>/<total>, <rate>/s[, <n>s left])`
PROGRESS_LINE = re.compile(r"^[\w .-]+: \d{1,3}% \(.*/s(, \d+s left)?\)$")


@dataclass
class Result:
    """Outcome of one CLI invocation: `err` is stderr without the progress lines, `raw_err` all of it."""

    code: int
    out: str
    raw_err: str

    @property
    def lines(self) -> list[str]:
        """stdout split into lines."""
        return self.out.splitlines()

    @property
    def err(self) -> str:
        """stderr without progress lines (warnings, hints and errors only)."""
        return "".join(line for line in self.raw_err.splitlines(True) if not PROGRESS_LINE.match(line.rstrip("\n")))

    @property
    def progress(self) -> list[str]:
        """The progress lines of stderr."""
        return [line for line in self.raw_err.splitlines() if PROGRESS_LINE.match(line)]


@dataclass
class SimOpener:
    """An opener for `main(opener=...)` that serves `board` through a fresh `MockPCIDevice` and records each call."""

    board: SimulatedNavi31
    direct: bool = False  # serve a `DirectSimDevice` instead of a MockPCIDevice (fast path for bulk transfers)
    calls: list[tuple[int, str]] = field(default_factory=list)
    devices: list[Any] = field(default_factory=list)

    def __call__(self, index: int, transport: str) -> Any:
        self.calls.append((index, transport))
        dev = DirectSimDevice(self.board) if self.direct else make_sim_device(self.board)
        self.devices.append(dev)
        return dev


def run_cli(opener: Any, *argv: str, settings: Settings = FAST_SETTINGS) -> Result:
    """Run `amdflash` in-process; `opener` may be a board (wrapped in a `SimOpener`) or any opener callable."""
    from amdflash.cli import main

    out, err = io.StringIO(), io.StringIO()
    if isinstance(opener, SimulatedNavi31):
        opener = SimOpener(opener)
    code = main(list(argv), opener=opener, stdout=out, stderr=err, settings=settings)
    return Result(code, out.getvalue(), err.getvalue())


def never_happen(board: SimulatedNavi31, *, writes_allowed: bool = True) -> None:
    """Assert the spec's never-happen list on the simulator after a scenario.

    * no simulator violation (which covers ROM_DATA block reads and unrestored ROM_SW-state triggers);
    * the first SPI commands are the two RDID captures of the JEDEC check, and nothing but bare triggers precede them;
    * every WRSR changed nothing but SR2.CMP;
    * with `writes_allowed=False`: no erase, program or WRSR at all;
    * never a second END_TRANSFER without a START_TRANSFER in between.
    """
    assert board.violations == [], board.violations
    marks = [*board.session_marks, len(board.transactions)]
    for lo, hi in itertools.pairwise(marks):
        session = board.transactions[lo:hi]
        effective = [t for t in session if t.control != 0 and t.opcode >= 0]
        if effective:
            assert [t.opcode for t in effective[:2]] == [0x9F, 0x9F][: len(effective)], effective[:2]
        first_rdid = next((i for i, t in enumerate(session) if t.opcode == 0x9F), None)
        if first_rdid is not None:  # before it: only the pre-clear trigger of whatever opcode was left in COMMAND
            assert all(t.control == 0 for t in session[:first_rdid]), session[:first_rdid]
    effective = [t for t in board.transactions if t.control != 0 and t.opcode >= 0]
    for sr1_before, sr2_before, sr1_after, sr2_after in board.wrsr_log:
        assert sr1_after == sr1_before, f"WRSR changed SR1 {sr1_before:#04x} -> {sr1_after:#04x}"
        assert (sr2_before ^ sr2_after) & ~0x40 == 0, f"WRSR changed SR2 {sr2_before:#04x} -> {sr2_after:#04x}"
    if not writes_allowed:
        assert (board.erase_count, board.program_count, board.wrsr_count) == (0, 0, 0)
        assert not [t for t in effective if t.opcode in (0x01, 0x02, 0x20)]
    last = None
    for cmd, *_ in board.psp_log:
        if cmd == 0x0A:
            assert last != 0x0A, "second END_TRANSFER after a rejected END"
            last = 0x0A
        elif cmd == 0x08:
            last = 0x08
