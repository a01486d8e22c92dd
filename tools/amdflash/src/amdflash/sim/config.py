"""`SimConfig`: everything the simulated Navi31 board can be configured with, including fault injection."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from amdflash import regs

FLASH_SIZE = 0x200000
ROMSW_MODES = ("ready", "gated", "stalled")
APERTURE_MODES = ("raw", "mirror_1mib", "unavailable")
PSP_MODES = ("early", "not_ready", "sos_gated")

# Synthetic item order (the real Navi31 order is unknown): phase 0, phase 1, then the terminal phase 2.
DEFAULT_PSP_ITEMS: tuple[tuple[int, int], ...] = (
    *((0, item) for item in range(0x01, 0x08)),
    *((1, item) for item in range(0x80, 0x8A)),
    (2, 0x08),
)

# Deliberately non-trivial values, so that save/restore bugs show up.
DEFAULT_INITIAL_REGS: dict[int, int] = {
    regs.ROM_CNTL: 0x07000002,
    regs.PAGE_MIRROR_CNTL: 0x08000000,
    regs.ROM_INDEX: 0x00001234,
    regs.GPIO_PAD_MASK: 0x00000F80,
    regs.GPIO_PAD_A: 0x00000780,
    regs.GPIO_PAD_EN: 0x00000300,
}


def default_sfdp() -> bytes:
    """A synthetic 256-byte SFDP space: header "SFDP" rev 1.6 with one parameter header, the rest 0xFF."""
    table = bytearray(b"\xff" * 256)
    table[0:8] = bytes([0x53, 0x46, 0x44, 0x50, 0x06, 0x01, 0x00, 0xFF])
    table[8:16] = bytes([0x00, 0x06, 0x01, 0x09, 0x30, 0x00, 0x00, 0xFF])
    return bytes(table)


@dataclass
class SimConfig:
    """Configuration of `SimulatedNavi31`. Every field is optional; the defaults model a blank, stalled-PBL board."""

    flash: bytes = b"\xff" * FLASH_SIZE
    jedec: bytes = bytes([0xC8, 0x60, 0x15])
    sr1: int = 0x00
    sr2: int = 0x00
    sr3: int = 0x00
    sfdp: bytes = field(default_factory=default_sfdp)
    romsw: str = "ready"
    rom_aperture: str = "raw"
    psp: str = "early"
    psp_items: list[tuple[int, int]] = field(default_factory=lambda: list(DEFAULT_PSP_ITEMS))
    psp_values: dict[int, int] = field(default_factory=lambda: {0x01: 0x0, 0x06: 0x0, 0x0B: 0x0})
    busy_reads: int = 1
    initial_regs: dict[int, int] = field(default_factory=lambda: dict(DEFAULT_INITIAL_REGS))
    strict: bool = True
    reg_log: int = 0  # size of the access ring buffer; 0 disables logging
    #: the board's PCI subsystem ids (config space 0x2C): which board it is, checked against an image's VBIOS
    subsystem: tuple[int, int] = (0x1002, 0x0E3A)
    # fault injection
    stall_after_txns: int | None = None
    drop_program: set[int] = field(default_factory=set)
    abort_on: Callable[[tuple[Any, ...]], None] | None = None
    psp_fail: dict[tuple[int, int], int] = field(default_factory=dict)
    psp_stall: set[tuple[int, int]] = field(default_factory=set)

    def __post_init__(self) -> None:
        if len(self.flash) != FLASH_SIZE:
            raise ValueError(f"simulated flash must be exactly {FLASH_SIZE:#x} bytes, got {len(self.flash):#x}")
        if not self.jedec:
            raise ValueError("jedec must not be empty")
        for name, value, modes in (
            ("romsw", self.romsw, ROMSW_MODES),
            ("rom_aperture", self.rom_aperture, APERTURE_MODES),
            ("psp", self.psp, PSP_MODES),
        ):
            if value not in modes:
                raise ValueError(f"{name} must be one of {modes}, got {value!r}")
        for name in ("sr1", "sr2", "sr3"):
            if not 0 <= getattr(self, name) <= 0xFF:
                raise ValueError(f"{name} must be 0..0xff")
        if self.busy_reads < 0:
            raise ValueError(f"busy_reads must be >= 0, got {self.busy_reads}")
