"""`make_sim_device`: a tg.drivers `MockPCIDevice` (Navi31 ids) whose BAR5 is served by a `SimulatedNavi31`."""

from __future__ import annotations

from typing import Any

from amdflash import regs
from amdflash.sim.board import SimulatedNavi31


def make_sim_device(board: SimulatedNavi31, *, pcibus: str = "sim:0", lock: bool = True) -> Any:
    """Build a `MockPCIDevice("AM", pcibus, 1002:744c)` with BAR0 16 MiB 64-bit prefetchable, BAR2 8 KiB and BAR5 the
    board. A fresh device per CLI invocation shares the board, so the board's state persists across invocations."""
    from tg.drivers.mock import BarSpec, MockPCIDevice

    board.mark_session()
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
        subsystem=board.config.subsystem,
        bars=bars,
        lock=lock,
    )


class DirectSimDevice:
    """A minimal stand-in for a `PCIDevice` whose BAR5 calls the board directly (no MMIO view layer, no lock).

    Only for tests that move megabytes through the simulator, where the mock device's per-access cost dominates.
    """

    def __init__(self, board: SimulatedNavi31):
        from amdflash.sim.accessor import ModelBar5

        board.mark_session()
        self.board = board
        self.bar5 = ModelBar5(board)
        self.closed = False

    def map_bar(self, bar: int, off: int = 0, addr: int = 0, size: int | None = None, fmt: str = "B") -> Any:
        """BAR5 only; the whole BAR."""
        if bar != regs.BAR5_INDEX or off or size not in (None, regs.BAR5_SIZE):
            raise ValueError("DirectSimDevice maps only the whole of BAR5")
        return self.bar5

    def close(self) -> None:
        """Nothing to release."""
        self.closed = True


def served_device() -> Any:
    """Factory for `tg-pci-server --mock-model amdflash.sim:served_device`: one simulated board, unlocked.

    The board starts from the state file named by `AMDFLASH_SIM_STATE` if set (see `amdflash --sim-state`), else from
    `build_ifwi(int(AMDFLASH_SIM_SEED))` if that is set, else blank. Its state lives in the server process.
    """
    import os

    from amdflash.sim.config import SimConfig
    from amdflash.sim.images import build_ifwi
    from amdflash.sim.state import boot_psp_mode, load_board

    state = os.environ.get("AMDFLASH_SIM_STATE")
    seed = os.environ.get("AMDFLASH_SIM_SEED")
    if state:
        board = load_board(state)
    elif seed:
        board = SimulatedNavi31(SimConfig(flash=build_ifwi(int(seed, 0))))
    else:
        board = SimulatedNavi31(SimConfig(psp=boot_psp_mode(SimConfig().flash)))
    return make_sim_device(board, lock=False)
