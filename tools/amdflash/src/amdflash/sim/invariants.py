"""Invariant checks on a `SimulatedNavi31` for tests (spec §11.9, §13.3)."""

from __future__ import annotations

from amdflash import regs
from amdflash.romsw import DEFAULT_PRESCALE, persistent_rom_cntl
from amdflash.sim.board import SimulatedNavi31
from amdflash.util import bswap32


def assert_registers_restored(
    board: SimulatedNavi31, expect_rom_cntl: int | None = None, *, prescale: int = DEFAULT_PRESCALE
) -> None:
    """After a `romsw` command: GPIO and PAGE_MIRROR back to their initial values, ROM_SW idle, and ROM_CNTL holding
    only the documented persistent change (or `expect_rom_cntl` when given)."""
    initial = board.initial_regs
    for off in (regs.GPIO_PAD_MASK, regs.GPIO_PAD_A, regs.GPIO_PAD_EN, regs.PAGE_MIRROR_CNTL):
        assert board.regs[off] == initial[off], f"register {off:#x} = {board.regs[off]:#x}, initial {initial[off]:#x}"
    assert board.rom_sw_cntl == 0, f"ROM_SW_CNTL left at {board.rom_sw_cntl:#x}"
    assert board.done == 0, "ROM_SW_STATUS left non-zero"
    if expect_rom_cntl is None:
        expect_rom_cntl = persistent_rom_cntl(initial[regs.ROM_CNTL], prescale)
    got = board.regs[regs.ROM_CNTL]
    assert got == expect_rom_cntl, f"ROM_CNTL = {got:#x}, expected {expect_rom_cntl:#x}"


def assert_fw_dump_restored(board: SimulatedNavi31, initial_cntl: int, initial_index: int) -> None:
    """After `fw dump`: ROM_INDEX and ROM_CNTL hold the byte-swapped initial values (the original tools' behaviour)."""
    assert board.regs[regs.ROM_INDEX] == bswap32(initial_index), f"ROM_INDEX = {board.regs[regs.ROM_INDEX]:#x}"
    assert board.regs[regs.ROM_CNTL] == bswap32(initial_cntl), f"ROM_CNTL = {board.regs[regs.ROM_CNTL]:#x}"


def assert_no_violations(board: SimulatedNavi31) -> None:
    """The simulator recorded no illegal access."""
    assert not board.violations, f"simulator violations: {board.violations}"
