"""`make_sim_device`: a tg.drivers `MockPCIDevice` (Navi31 ids) whose BAR5 is served by a `SimulatedNavi31`."""

from __future__ import annotations

from typing import Any

from amdflash import regs
from amdflash.sim.board import SimulatedNavi31


def make_sim_device(board: SimulatedNavi31, *, pcibus: str = "sim:0", lock: bool = True) -> Any:
    """Build a `MockPCIDevice("AM", pcibus, 1002:744c)` with BAR0 16 MiB 64-bit prefetchable, BAR2 8 KiB and BAR5 the
    board. A fresh device per CLI invocation shares the board, so the board's state persists across invocations."""
    from tg.drivers.mock import BarSpec, MockPCIDevice

    bars = {
        0: BarSpec(16 << 20, is64=True, prefetch=True),
        2: BarSpec(0x2000),
        5: BarSpec(regs.BAR5_SIZE, backing=board),
    }
    return MockPCIDevice(
        regs.LOCK_PREFIX,
        pcibus,
        vendor=regs.AMD_VENDOR_ID,
        device=regs.NAVI31_DEVICE_ID,
        bars=bars,
        lock=lock,
    )
