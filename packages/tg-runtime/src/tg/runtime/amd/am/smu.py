"""SMU, the system management unit (MP1 13.0.0, amd.md 5.6): power, clocks, features, and the mode-1 reset.

Mailbox: clear the response (``C2PMSG_90``), write the argument (``C2PMSG_82``) and the message (``C2PMSG_66``), wait
for response 1 (10 s; 100 ms for the alive probe), read the result from ``C2PMSG_82``. The mode-1 reset goes through
the debug mailbox (``C2PMSG_75`` message, ``C2PMSG_53`` argument, ``C2PMSG_54`` response, message 2).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tg.runtime.amd.regs import defs

if TYPE_CHECKING:
    from tg.runtime.amd.am.device import AMDev

__all__ = ["SMU"]

DEBUG_MODE1_RESET = 2
CLOCKS = (defs.PPCLK_UCLK, defs.PPCLK_FCLK, defs.PPCLK_SOCCLK, defs.PPCLK_GFXCLK)
MSG_NAMES = {v: k.removeprefix("PPSMC_MSG_") for k, v in vars(defs).items() if k.startswith("PPSMC_MSG_")}


class SMU:
    """The SMU of one device."""

    def __init__(self, dev: AMDev) -> None:
        self.dev = dev
        self.driver_table = dev.mm.palloc(0x4000, boot=True)
        self._levels: dict[int, list[int]] | None = None

    def init_hw(self) -> None:
        table = self.dev.mc_addr(self.driver_table)
        self.send(defs.PPSMC_MSG_SetDriverDramAddrHigh, table >> 32)
        self.send(defs.PPSMC_MSG_SetDriverDramAddrLow, table & 0xFFFFFFFF)
        self.send(defs.PPSMC_MSG_EnableAllSmuFeatures, 0)
        self.dev.log("SMU initialized")

    def send(self, msg: int, arg: int, *, timeout_ms: int = 10000, debug: bool = False) -> int:
        """Send a message, wait for its response; the value the SMU returns in the argument register."""
        d = self.dev
        resp, argr, msgr = (54, 53, 75) if debug else (90, 82, 66)
        d.reg(f"MP1_SMN_C2PMSG_{resp}").write(0)
        d.reg(f"MP1_SMN_C2PMSG_{argr}").write(arg)
        d.reg(f"MP1_SMN_C2PMSG_{msgr}").write(msg)
        name = "debug Mode1Reset" if debug else MSG_NAMES.get(msg, hex(msg))
        d.wait(d.reg(f"MP1_SMN_C2PMSG_{resp}").read, 0xFFFFFFFF, 1, f"SMU message {name}", timeout_ms)
        return d.reg(f"MP1_SMN_C2PMSG_{argr}").read()

    def is_alive(self) -> bool:
        """Whether the SMU answers (a previous driver left it running)."""
        try:
            self.send(defs.PPSMC_MSG_GetSmuVersion, 0, timeout_ms=100)
        except TimeoutError:
            return False
        return self.dev.reg("MP1_SMN_C2PMSG_90").read() != 0

    def mode1_reset(self) -> None:
        """Reset the whole GPU except the PCIe link (the caller waits for it to settle)."""
        self.send(DEBUG_MODE1_RESET, 0, debug=True)

    def levels(self) -> dict[int, list[int]]:
        """The DPM frequency levels (MHz) of each clock."""
        if self._levels is None:
            self._levels = {}
            for clk in CLOCKS:
                count = self.send(defs.PPSMC_MSG_GetDpmFreqByIndex, clk << 16 | 0xFF) & 0x7FFFFFFF
                self._levels[clk] = [self.send(defs.PPSMC_MSG_GetDpmFreqByIndex, clk << 16 | i) & 0x7FFFFFFF
                                     for i in range(count)]  # fmt: skip
        return self._levels

    def set_clocks(self, level: int | None) -> None:
        """Pin every clock to DPM ``level`` (-1 = highest, 0 = lowest); None lets the SMU choose (power limit)."""
        for clk in CLOCKS:
            if level is None:
                self.send(defs.PPSMC_MSG_SetSoftMinByFreq, clk << 16)
                self.send(defs.PPSMC_MSG_SetSoftMaxByFreq, clk << 16 | 0xFFFF)
                continue
            values = self.levels().get(clk) or []
            if not values:
                continue
            self.send(defs.PPSMC_MSG_SetSoftMinByFreq, clk << 16 | values[level])
            self.send(defs.PPSMC_MSG_SetSoftMaxByFreq, clk << 16 | values[level])

    def set_power_limit(self, watts: float) -> None:
        """The board's power limit (AM_POWER_LIMIT)."""
        self.send(defs.PPSMC_MSG_SetPptLimit, max(round(watts), 1))
        self.dev.log(f"power limit {max(round(watts), 1)} W")
