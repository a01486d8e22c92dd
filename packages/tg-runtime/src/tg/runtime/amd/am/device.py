"""AMDev: one AMD GPU driven from user space through a tg.drivers ``PCIDevice`` (amd.md 5.1, 5.3).

Bring-up, in order:

1. map the BARs (0 VRAM, 2 doorbells as u64, 5 registers as u32); VRAM size from ``RCC_CONFIG_MEMSIZE``; read the
   discovery table (64 KiB below the end of VRAM) through BAR0 when it reaches that far, else through
   ``MM_INDEX/MM_INDEX_HI/MM_DATA``;
2. parse it and bind the register tables of each IP to its bases;
3. software init: memory manager, firmware, the IP blocks' boot-region allocations (always the same addresses);
4. boot mode: ``SCRATCH_REG7 == 0xA0000008`` (AM's tag) and ``AM_RESET != 1`` means the previous AM session left
   the board running, so only GFX and SDMA are re-initialised (a *partial* boot) - unless ``SCRATCH_REG6 != 0``
   (that session did not finish cleanly) or a GC fault is pending. A full boot first resets a board whose PSP and
   SMU already run (bus mastering off, SMU mode-1 reset, 500 ms, bus mastering on) and then brings up SOC, GMC, IH,
   PSP (firmware), SMU;
5. always: GFX, SDMA, clocks, clock gating, then ``SCRATCH_REG7 = tag`` and ``SCRATCH_REG6 = 1`` (running).

``fini()`` dequeues the compute queue, stops SDMA, lowers clocks, drains the interrupt ring and writes
``SCRATCH_REG6 = error_state`` (0: the next session may boot partially). Destructive steps run inside
``tg.drivers.interrupts.critical()`` so a Ctrl-C lands between steps; an interrupted or failed boot leaves
``SCRATCH_REG6 = 1``, so the next session does a full boot. Registers beyond the BAR5 window go through
``BIF_BX_PF0_RSMU_INDEX/DATA``. ``DEBUG>=2`` logs each bring-up step.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Any

from tg.runtime.amd.am import discovery
from tg.runtime.amd.am.firmware import Firmware, FirmwareFiles
from tg.runtime.amd.am.memory import MemoryManager
from tg.runtime.amd.regs import RegSpec, table

__all__ = ["AM_TAG", "AMDev", "Reg"]

AM_TAG = 0xA0000008  # SCRATCH_REG7 after an AM boot
RCC_CONFIG_MEMSIZE = 0xDE3  # dword, readable before the IP bases are known: VRAM size in MiB
MM_INDEX, MM_DATA, MM_INDEX_HI = 0x0, 0x1, 0x6
PCI_COMMAND, PCI_COMMAND_MASTER = 0x04, 0x4
#: IP -> table name used for its registers (MP0 and MP1 share MP's header)
IP_TABLES = ("GC", "MMHUB", "NBIO", "MP0", "MP1", "OSSSYS", "HDP")


def _critical() -> AbstractContextManager[Any]:
    try:
        from tg.drivers.interrupts import critical

        return critical()
    except ImportError:  # tg-drivers absent: a mock without it has nothing destructive to protect
        return nullcontext()


class Reg:
    """A register of one device: ``read()``, ``write(value, **fields)``, ``update(**fields)`` (read-modify-write),
    ``fields()`` (decoded), ``addr`` (absolute dword)."""

    __slots__ = ("addr", "dev", "spec")

    def __init__(self, dev: AMDev, spec: RegSpec, addr: int) -> None:
        self.dev, self.spec, self.addr = dev, spec, addr

    def read(self) -> int:
        return self.dev.rreg(self.addr)

    def write(self, value: int = 0, **fields: int) -> None:
        self.dev.wreg(self.addr, value | self.spec.encode(**fields))

    def update(self, **fields: int) -> None:
        self.write(self.read() & ~self.spec.mask(*fields) & 0xFFFFFFFF, **fields)

    def fields(self) -> dict[str, int]:
        return self.spec.decode(self.read())

    def __repr__(self) -> str:
        return f"<{self.spec.name} at dword {self.addr:#x}>"


class AMDev:
    """The AM driver for one GPU (see the module docstring). ``firmware`` is where firmware comes from (default: the
    file system, TG_AMD_FW_DIR, TG_AMD_FW_FETCH); ``reset`` forces a full boot (AM_RESET); ``hw_delays=False`` skips
    the settle times real hardware needs (a simulated GPU answers at once)."""

    def __init__(self, pci_dev: Any, *, firmware: FirmwareFiles | None = None, reset: bool | None = None,
                 hw_delays: bool = True) -> None:  # fmt: skip
        from tg.ir.helpers import AM_POWER_LIMIT, AM_RESET

        self.pci_dev, self.name, self.hw_delays = pci_dev, str(pci_dev.pcibus), hw_delays
        self.is_err_state = False
        self.errors: list[str] = []  # what the interrupt handler found (for hang messages)
        self.vram = pci_dev.map_bar(0)
        self.doorbells = pci_dev.map_bar(2, fmt="Q")
        self.mmio = pci_dev.map_bar(5, fmt="I")
        self.mmio_dwords = self.mmio.nbytes // 4
        self._discover()
        self._bind_registers()
        from tg.runtime.amd.am.gfx import GFX
        from tg.runtime.amd.am.gmc import GMC
        from tg.runtime.amd.am.ih import IH
        from tg.runtime.amd.am.psp import PSP
        from tg.runtime.amd.am.sdma import SDMA
        from tg.runtime.amd.am.smu import SMU

        self.mm = MemoryManager(self.vram_window(), self.vram_size, on_change=self._flush_tlbs)
        self.fw = Firmware.load(firmware or FirmwareFiles(), self.ip_versions)
        self.gmc, self.ih, self.psp, self.smu = GMC(self), IH(self), PSP(self), SMU(self)
        self.gfx, self.sdma = GFX(self), SDMA(self)

        reset = bool(int(AM_RESET.value)) if reset is None else reset
        self.partial_boot = self.reg("SCRATCH_REG7").read() == AM_TAG and not reset
        if self.partial_boot and (self.reg("SCRATCH_REG6").read() != 0 or self.gmc.fault_pending()):
            self.log("the previous session did not finish cleanly (SCRATCH_REG6) or a fault is pending: full boot")
            self.partial_boot = False
        self.log(f"{'partial' if self.partial_boot else 'full'} boot, VRAM {self.vram_size >> 20} MiB, "
                  f"GC {'.'.join(map(str, self.ip_versions['GC']))}")  # fmt: skip
        self.reg("SCRATCH_REG6").write(1)  # in progress: a crash from here on makes the next session boot fully
        if not self.partial_boot:
            if self.psp.is_sos_alive() and self.smu.is_alive():
                self._mode1_reset()
            self._set_bus_master(True)
            for step in (self._init_soc, self.gmc.init_hw, self.ih.init_hw, self.psp.init_hw, self.smu.init_hw):
                with _critical():
                    step()
        self.mm.booting = False
        with _critical():
            self.gfx.init_hw()
            self.sdma.init_hw()
        power = float(AM_POWER_LIMIT.value)
        if power > 0:
            self.smu.set_power_limit(power)
            self.smu.set_clocks(None)
        else:
            self.smu.set_clocks(-1)
        self._clock_gating()
        self.reg("SCRATCH_REG7").write(AM_TAG)
        self.reg("SCRATCH_REG6").write(1)
        self.log("boot done")

    # ---- registers -------------------------------------------------------------------------------------------------

    def log(self, msg: str) -> None:
        """Bring-up progress at DEBUG>=2 (the IP blocks report through their device, so they never import this
        module)."""
        from tg.ir.helpers import DEBUG

        if DEBUG.value >= 2:
            print(f"am {self.name}: {msg}")

    def _discover(self) -> None:
        self.vram_size = self.rreg(RCC_CONFIG_MEMSIZE) << 20
        if self.vram_size == 0:
            raise RuntimeError(f"AM {self.name}: RCC_CONFIG_MEMSIZE reads 0: the GPU is not posted or not an AMD GPU")
        self.large_bar = self.vram.nbytes >= self.vram_size
        off = self.vram_size - discovery.TABLE_OFFSET_FROM_END
        blob = (
            self.vram.read(off, discovery.TABLE_BYTES)
            if self.large_bar
            else self._read_vram(off, discovery.TABLE_BYTES)
        )
        self.disc = discovery.parse(blob)
        self.ip_versions = dict(self.disc.versions)
        self.log("discovery: " + ", ".join(f"{ip} {'.'.join(map(str, v))}" for ip, v in self.ip_versions.items()))

    def _bind_registers(self) -> None:
        self.regs: dict[str, Reg] = {}
        for ip in IP_TABLES:
            bases = self.disc.bases[ip][0]
            for name, spec in table("MP0" if ip.startswith("MP") else ip, self.ip_versions[ip]).items():
                if ip.startswith("MP") and not name.startswith(ip):
                    continue
                if spec.segment < len(bases):
                    self.regs[name] = Reg(self, spec, bases[spec.segment] + spec.offset)

    def reg(self, name: str) -> Reg:
        """The register ``name`` (KeyError naming it when the tables lack it)."""
        r = self.regs.get(name)
        if r is None:
            raise KeyError(f"AM {self.name}: no register {name} in the tables of tg.runtime.amd.regs "
                           f"(extend scripts/gen_amd_regs.py's name list)")  # fmt: skip
        return r

    def rreg(self, addr: int) -> int:
        """Read the register at absolute dword ``addr`` (indirectly beyond the BAR5 window)."""
        if addr < self.mmio_dwords:
            return int(self.mmio[addr])
        self.mmio[self.reg("BIF_BX_PF0_RSMU_INDEX").addr] = addr * 4
        return int(self.mmio[self.reg("BIF_BX_PF0_RSMU_DATA").addr])

    def wreg(self, addr: int, value: int) -> None:
        """Write the register at absolute dword ``addr`` (indirectly beyond the BAR5 window)."""
        if addr < self.mmio_dwords:
            self.mmio[addr] = value & 0xFFFFFFFF
            return
        self.mmio[self.reg("BIF_BX_PF0_RSMU_INDEX").addr] = addr * 4
        self.mmio[self.reg("BIF_BX_PF0_RSMU_DATA").addr] = value & 0xFFFFFFFF

    def wreg_pair(self, lo: str, hi: str, value: int) -> None:
        """Write a 64-bit value into a low/high register pair."""
        self.reg(lo).write(value & 0xFFFFFFFF)
        self.reg(hi).write(value >> 32)

    def wait(self, read: Callable[[], int], mask: int, value: int, what: str, timeout_ms: int = 10000) -> int:
        """Poll ``read() & mask == value``; TimeoutError naming ``what`` and the last value after ``timeout_ms``."""
        end = time.perf_counter() + timeout_ms / 1000
        while True:
            v = read()
            if v & mask == value:
                return v
            if time.perf_counter() > end:
                raise TimeoutError(f"AM {self.name}: {what}: read {v:#x} (& {mask:#x}), waited for {value:#x} for "
                                   f"{timeout_ms} ms")  # fmt: skip
            time.sleep(0.0001)

    def delay(self, seconds: float) -> None:
        """A settle time the hardware needs (skipped with ``hw_delays=False``)."""
        if self.hw_delays:
            time.sleep(seconds)

    # ---- VRAM ------------------------------------------------------------------------------------------------------

    def _read_vram(self, off: int, n: int) -> bytes:
        """VRAM bytes through MM_INDEX/MM_INDEX_HI/MM_DATA (where BAR0 does not reach)."""
        out = []
        for addr in range(off, off + n, 4):
            self.wreg(MM_INDEX_HI, addr >> 31)
            self.wreg(MM_INDEX, (addr & 0x7FFFFFFF) | 0x80000000)
            out.append(self.rreg(MM_DATA))
        return struct.pack(f"<{len(out)}I", *out)

    def vram_window(self) -> Any:
        """A byte view of VRAM for the driver's own structures (boot region, page tables): BAR0."""
        return self.vram

    def mc_addr(self, paddr: int) -> int:
        """The GPU's system-aperture address of VRAM offset ``paddr`` (what firmware and rings are given)."""
        return self.gmc.fb_base + paddr

    def _flush_tlbs(self) -> None:
        self.gmc.flush_tlb("GC")
        self.gmc.flush_tlb("MM")

    # ---- steps -----------------------------------------------------------------------------------------------------

    def _set_bus_master(self, on: bool) -> None:
        cmd = self.pci_dev.read_config(PCI_COMMAND, 2)
        cmd = cmd | PCI_COMMAND_MASTER if on else cmd & ~PCI_COMMAND_MASTER
        self.pci_dev.write_config(PCI_COMMAND, cmd, 2)
        self.pci_dev.read_config(PCI_COMMAND, 2)  # flush the posted write

    def _mode1_reset(self) -> None:
        self.log("sOS and SMU are running (a previous driver): mode-1 reset")
        with _critical():
            self._set_bus_master(False)
            self.smu.mode1_reset()
            self.delay(0.5)

    def _init_soc(self) -> None:
        self.reg("RCC_DEV0_EPF2_STRAP2").update(strap_no_soft_reset_dev0_f2=0)
        self.reg("RCC_DEV0_EPF0_RCC_DOORBELL_APER_EN").write(1)
        self.log("SOC initialized")

    def doorbell_enable(self, port: int, awid: int, awaddr_31_28: int, offset: int = 0, size: int = 0) -> None:
        """Route a doorbell range to an engine (S2A doorbell entry ``port``)."""
        p = f"s2a_doorbell_port{port}"
        self.reg(f"S2A_DOORBELL_ENTRY_{port}_CTRL").write(**{f"{p}_enable": 1, f"{p}_awid": awid,
            f"{p}_range_size": size, f"{p}_awaddr_31_28_value": awaddr_31_28, f"{p}_range_offset": offset})  # fmt: skip

    def _clock_gating(self) -> None:
        self.reg("HDP_MEM_POWER_CTRL").update(atomic_mem_power_ctrl_en=1, atomic_mem_power_ds_en=1)
        self.gfx.set_clock_gating()

    # ---- lifecycle -------------------------------------------------------------------------------------------------

    def fini(self) -> None:
        """Stop the engines and record how this session ended (SCRATCH_REG6 = 0 when clean)."""
        self.log("finalizing")
        with _critical():
            self.sdma.fini_hw()
            self.gfx.fini_hw()
            self.smu.set_clocks(0)
            self.ih.handle()
            self.reg("SCRATCH_REG6").write(int(self.is_err_state))

    def recover(self, force: bool = False) -> bool:
        """After a fault: drain interrupts, reset the MEC and clear the error state (the caller re-creates its compute
        ring). Whether anything was done."""
        if not force and not self.is_err_state:
            return False
        self.log("recovering: drain interrupts, reset the MEC")
        with _critical():
            self.ih.handle()
            self.gfx.reset_mec()
        self.is_err_state = False
        self.errors.clear()
        return True
