"""The mock AM GPU (amd.md 6): a gfx1100 at register level, behind tg.drivers' MockPCIDevice (``MOCKPCI+AMD``) or
the mock USB bridge (``MOCKUSB+AMD``), for the AM driver to boot and drive.

- VRAM: lazily backed memory served as BAR0, with the IP discovery table 64 KiB below its end (GC 11.0.0, SDMA 6.0.0,
  MMHUB 3.0.0, NBIO 4.3.0, MP0/MP1 13.0.0, HDP 6.0.0, OSSSYS 6.0.0 at Navi31's bases; 6 SEs, 96 CUs, 64 KiB LDS,
  32 scratch slots); ``RCC_CONFIG_MEMSIZE`` gives its size.
- Registers (BAR5, 2 MiB; beyond it through the RSMU index/data pair; VRAM through MM_INDEX/MM_DATA): every
  register of tg.runtime.amd.regs at this GPU's bases is modelled as storage; the ones with behaviour have hooks:
  the PSP and SMU (tg.runtime.amd.sim.am_psp), hub invalidation (SEM acquire, REQ -> ACK, the TLB dropped), RLC
  bootload status and safe mode, GRBM register banks (HQD registers per me/pipe/queue, SH_MEM per VMID), HQD
  activation and dequeue, SDMA ring enable, the HDP flush remap, the GC hub fault registers, IH ring pointers.
  In strict mode any other register access is a violation (``violations``; tests assert none).
- Page tables: GPU virtual addresses go through the GC hub's context-0 tables (4 levels, 2 MiB/1 GiB ``PDE_PTE``
  pages, a TLB dropped on invalidation) to VRAM or, for ``SYSTEM`` pages, to host memory by DMA (the mock PCI
  device's system memory, or the USB bridge's SRAM/windows) or to another mock GPU's VRAM when the bus address lies
  in its BAR0 (each mock GPU's BAR0 sits at its own bus address: peer to peer); system-aperture addresses are VRAM
  offsets. An unmapped access sets the fault registers, posts a UTCL2 fault to the IH ring and raises EmulatorError
  to the engine.
- Engines: an activated HQD becomes a PM4 queue, an enabled SDMA ring an SDMA queue, executed by the same executors
  and RDNA3 emulator as MOCKKFD (tg.runtime.amd.sim.gpu); doorbell writes (BAR2) run them.
- ``fault_va`` (``TG_MOCKGPU_FAULT_VA`` on GPU 0) makes the first dispatch fault at that address (a UTCL2 fault in
  the interrupt ring, the queue stopped until the driver resets the command processor).
- ``SCRATCH_REG6/7`` and everything else persist across opens of one mock object; ``mode1_reset()`` (the SMU's debug
  message) returns to the power-on state. ``events`` lists firmware-level steps in order; ``cold=False`` starts as a
  board the kernel driver left running (sOS and SMU alive).
"""

from __future__ import annotations

import functools
import itertools
import mmap
import struct
import weakref
from collections.abc import Callable
from typing import Any

from tg.runtime.amd.am import discovery
from tg.runtime.amd.am.memory import ADDR_MASK, PTE, SHIFTS
from tg.runtime.amd.regs import table
from tg.runtime.amd.sim.am_psp import MockPSP, MockSMU
from tg.runtime.amd.sim.decode import EmulatorError

__all__ = ["GC_INFO", "IP_LAYOUT", "MockAMGPU", "served_device"]

#: IP -> (version, segment bases in dwords): Navi31's layout
IP_LAYOUT: dict[str, tuple[tuple[int, int, int], tuple[int, ...]]] = {
    "GC": ((11, 0, 0), (0x1260, 0xA000, 0x1C000, 0x2402C00)),
    "SDMA0": ((6, 0, 0), (0x1260, 0xA000, 0x1C000, 0x2402C00)),
    "MMHUB": ((3, 0, 0), (0x1A000, 0x2408800)),
    "NBIO": ((4, 3, 0), (0x0, 0x14, 0xD20, 0x10400, 0x241B000, 0x4040000)),
    "MP0": ((13, 0, 0), (0x16000, 0xDC0000, 0xE00000, 0xE40000, 0x243FC00)),
    "MP1": ((13, 0, 0), (0x16000, 0xDC0000, 0xE00000, 0xE40000, 0x243FC00)),
    "HDP": ((6, 0, 0), (0xF20, 0x240A400)),
    "OSSSYS": ((6, 0, 0), (0x10A0, 0x240A000)),
}
GC_INFO = {"gc_num_se": 6, "gc_num_wgp0_per_sa": 4, "gc_num_wgp1_per_sa": 0, "gc_num_sa_per_se": 2,
           "gc_num_rb_per_se": 4, "gc_num_gl2c": 24, "gc_wave_size": 32, "gc_max_waves_per_simd": 16,
           "gc_max_scratch_slots_per_cu": 32, "gc_lds_size": 64}  # fmt: skip
REG_BAR_BYTES = 2 << 20
DOORBELL_BAR_BYTES = 8 << 10
FB_BASE = 0x80_0000_0000  # where the memory controller puts VRAM (FB_LOCATION_BASE << 24)
MM_INDEX, MM_DATA, MM_INDEX_HI = 0x0, 0x1, 0x6
IH_CLIENT_GFX, UTCL2_FAULT = 0x0A, 0
IH_CLIENT_GRBM_CP, EOP_SOURCE = 0x14, 181
HQD_FIRST_NAME, HQD_LAST_NAME = "CP_MQD_BASE_ADDR", "CP_HQD_PQ_WPTR_HI"
BAR0_BUS_BASE, BAR0_BUS_STRIDE = 0x100_0000_0000, 0x10_0000_0000  # where the mock "BIOS" puts each GPU's BAR0
_bus: weakref.WeakValueDictionary[int, MockAMGPU] = weakref.WeakValueDictionary()  # BAR0 bus address -> GPU (P2P)
_bus_slots = itertools.count()


class MockAMGPU:
    """A mock gfx1100 for the AM driver (see the module docstring)."""

    def __init__(self, vram_mb: int = 512, *, strict: bool = True, cold: bool = True, emulate: bool = True,
                 name: str = "MOCKAM GPU 0", fault_va: int = 0) -> None:  # fmt: skip
        if vram_mb < 256 or vram_mb & (vram_mb - 1):
            raise ValueError(f"mock AM GPU VRAM must be a power of two of at least 256 MiB, got {vram_mb}")
        self.name, self.strict, self.emulate, self.fault_va = name, strict, emulate, fault_va
        self.bar0_bus = BAR0_BUS_BASE + BAR0_BUS_STRIDE * (next(_bus_slots) % 1024)
        _bus[self.bar0_bus] = self
        self.vram_size = vram_mb << 20
        self.vram = mmap.mmap(-1, self.vram_size)
        self.violations: list[str] = []
        self.events: list[str] = []
        self.addr: dict[str, int] = {}
        self.reads: dict[int, Callable[[], int]] = {}
        self.writes: dict[int, Callable[[int], None]] = {}
        self._bind()
        self.values: dict[int, int] = {}
        self.banked: dict[tuple[Any, int], int] = {}
        self.dma: tuple[Callable[[int, int], bytes], Callable[[int, bytes], None]] | None = None
        self.doorbells = bytearray(DOORBELL_BAR_BYTES)
        self.tlb: dict[int, tuple[int, bool, int]] = {}  # virtual page -> (physical page, system, page bytes)
        self.core: Any = None  # the shared MockGPU (executors + emulator), created with the first queue
        self.queues: dict[str, Any] = {}
        self.psp, self.smu = MockPSP(self), MockSMU(self)
        self._hooks()
        self.rlc_loaded = False
        self._power_on()
        if not cold:
            self.psp.sos_alive = self.smu.running = True
        blob = discovery.build({ip: v for ip, v in IP_LAYOUT.items()}, GC_INFO)
        at = self.vram_size - discovery.TABLE_OFFSET_FROM_END
        self.vram[at : at + len(blob)] = blob

    # ---- register file ---------------------------------------------------------------------------------------------

    def _bind(self) -> None:
        for ip, (version, bases) in IP_LAYOUT.items():
            if ip == "SDMA0":
                continue  # SDMA registers live in GC's table (gfx11)
            for name, spec in table("MP0" if ip.startswith("MP") else ip, version).items():
                if ip.startswith("MP") and not name.startswith(ip):
                    continue
                self.addr[name] = bases[spec.segment] + spec.offset
        self.known = set(self.addr.values()) | {MM_INDEX, MM_DATA, MM_INDEX_HI}
        first, last = self.addr[HQD_FIRST_NAME], self.addr[HQD_LAST_NAME]
        self.known |= set(range(first, last + 1))  # the HQD register image the driver writes as one block
        self.hqd = set(range(first, last + 1)) | {
            a for n, a in self.addr.items() if n.startswith(("CP_HQD_", "CP_MQD_"))
        }
        self.per_vmid = {self.addr["SH_MEM_CONFIG"], self.addr["SH_MEM_BASES"]}

    def on_read(self, name: str, fn: Callable[[], int]) -> None:
        self.reads[self.addr[name]] = fn

    def on_write(self, name: str, fn: Callable[[int], None]) -> None:
        self.writes[self.addr[name]] = fn

    def violation(self, msg: str) -> None:
        self.violations.append(f"{self.name}: {msg}")

    def _bank(self, addr: int) -> Any:
        if addr in self.hqd or addr in self.per_vmid:
            f = table("GC", (11, 0, 0))["GRBM_GFX_CNTL"].decode(self.values.get(self.addr["GRBM_GFX_CNTL"], 0))
            return (f["meid"], f["pipeid"], f["queueid"]) if addr in self.hqd else f["vmid"]
        return None

    def reg_value(self, name: str) -> int:
        """A register's stored value (its bank: the current GRBM selection)."""
        return self._load(self.addr[name])

    def set_reg_value(self, name: str, value: int) -> None:
        self._store(self.addr[name], value)

    def _load(self, addr: int) -> int:
        bank = self._bank(addr)
        return self.values.get(addr, 0) if bank is None else self.banked.get((bank, addr), 0)

    def _store(self, addr: int, value: int) -> None:
        bank = self._bank(addr)
        if bank is None:
            self.values[addr] = value & 0xFFFFFFFF
        else:
            self.banked[(bank, addr)] = value & 0xFFFFFFFF

    def rreg(self, addr: int) -> int:
        """Read the register at absolute dword ``addr``."""
        if (fn := self.reads.get(addr)) is not None:
            return fn() & 0xFFFFFFFF
        if addr not in self.known and self.strict:
            self.violation(f"read of unmodelled register {addr:#x}")
        return self._load(addr)

    def wreg(self, addr: int, value: int) -> None:
        """Write the register at absolute dword ``addr``."""
        value &= 0xFFFFFFFF
        if (fn := self.writes.get(addr)) is not None:
            fn(value)
            return
        if addr not in self.known and self.strict:
            self.violation(f"write of {value:#x} to unmodelled register {addr:#x}")
        self._store(addr, value)

    # ---- behaviour -------------------------------------------------------------------------------------------------

    def _hooks(self) -> None:
        a = self.addr
        self.reads[a["RCC_DEV0_EPF0_RCC_CONFIG_MEMSIZE"]] = lambda: self.vram_size >> 20
        self.reads[MM_DATA] = lambda: int.from_bytes(self.vram[self._mm_addr() : self._mm_addr() + 4], "little")
        self.writes[MM_DATA] = lambda v: self._vram_dword(self._mm_addr(), v)
        self.reads[a["BIF_BX_PF0_RSMU_DATA"]] = lambda: self.rreg(self.values.get(a["BIF_BX_PF0_RSMU_INDEX"], 0) // 4)
        self.writes[a["BIF_BX_PF0_RSMU_DATA"]] = lambda v: self.wreg(
            self.values.get(a["BIF_BX_PF0_RSMU_INDEX"], 0) // 4, v
        )
        self.reads[a["BIF_BX0_REMAP_HDP_MEM_FLUSH_CNTL"]] = lambda: a["BIF_BX_PF0_GPU_HDP_FLUSH_REQ"] * 4
        self.hdp_flushes = 0
        self.writes[a["BIF_BX_PF0_GPU_HDP_FLUSH_REQ"]] = lambda v: setattr(self, "hdp_flushes", self.hdp_flushes + 1)
        for hub in ("MM", "GC"):
            vm = f"{hub}VM"
            self.reads[a[f"{vm}_INVALIDATE_ENG17_ACK"]] = functools.partial(self._ack, vm)
            self.writes[a[f"{vm}_INVALIDATE_ENG17_REQ"]] = functools.partial(self._invalidate, vm)
        self.reads[a["MMVM_INVALIDATE_ENG17_SEM"]] = lambda: 1
        self.reads[a["CP_STAT"]] = lambda: 0
        self.reads[a["RLC_RLCS_BOOTLOAD_STATUS"]] = lambda: (1 << 31 | 1) if self.rlc_loaded else 0
        self.writes[a["RLC_SAFE_MODE"]] = lambda v: self._store(a["RLC_SAFE_MODE"], v & ~1)  # the RLC acks at once
        self.writes[a["CP_HQD_ACTIVE"]] = self._hqd_active
        self.writes[a["CP_HQD_DEQUEUE_REQUEST"]] = self._dequeue
        self.writes[a["GRBM_SOFT_RESET"]] = self._soft_reset
        self.writes[a["SDMA0_QUEUE0_RB_CNTL"]] = self._sdma_rb_cntl
        self.writes[a["GCVM_L2_PROTECTION_FAULT_CNTL"]] = self._fault_cntl

    def _power_on(self) -> None:
        """Register state of a board just powered on (or mode-1 reset)."""
        self.values.clear()
        self.banked.clear()
        self.tlb.clear()
        self.psp.power_on()
        self.smu.running = False
        self.rlc_loaded = False
        for q in list(self.queues):
            self._stop(q)
        for hub in ("MMMC", "GCMC"):
            self.set_reg_value(f"{hub}_VM_FB_LOCATION_BASE", FB_BASE >> 24)
            self.set_reg_value(f"{hub}_VM_FB_LOCATION_TOP", (FB_BASE + self.vram_size - 1) >> 24)

    def mode1_reset(self) -> None:
        """Reset the GPU to its power-on state (VRAM keeps its contents)."""
        self.events.append("smu mode1 reset")
        self._power_on()

    def _mm_addr(self) -> int:
        return (self.values.get(MM_INDEX_HI, 0) << 31 | self.values.get(MM_INDEX, 0) & 0x7FFFFFFF) % self.vram_size

    def _vram_dword(self, at: int, v: int) -> None:
        self.vram[at : at + 4] = v.to_bytes(4, "little")

    def mc_to_vram(self, mc: int) -> int:
        """The VRAM offset of a memory-controller (system aperture) address."""
        off = mc - FB_BASE
        if not 0 <= off < self.vram_size:
            self.violation(f"memory-controller address {mc:#x} is outside VRAM [{FB_BASE:#x}, +{self.vram_size:#x})")
            return 0
        return off

    def _ack(self, vm: str) -> int:
        return self.values.get(self.addr[f"{vm}_INVALIDATE_ENG17_REQ"], 0) & 0xFFFF  # per-VMID bits acknowledged

    def _invalidate(self, vm: str, v: int) -> None:
        self.values[self.addr[f"{vm}_INVALIDATE_ENG17_REQ"]] = v
        if vm == "GCVM":
            self.tlb.clear()

    # ---- page tables ------------------------------------------------------------------------------------------------

    def translate(self, va: int) -> tuple[int, bool, int] | None:
        """(physical address, is host memory, bytes left in the page) of GPU address ``va`` through the GC hub, or
        None when unmapped."""
        lo, hi = (
            self.reg_value("GCMC_VM_SYSTEM_APERTURE_LOW_ADDR") << 18,
            self.reg_value("GCMC_VM_SYSTEM_APERTURE_HIGH_ADDR") << 18,
        )
        if lo <= va < hi + (1 << 18) and hi:
            return va - FB_BASE, False, (1 << 18) - (va - FB_BASE) % (1 << 18)
        page = va >> 12
        if (hit := self.tlb.get(page)) is not None:
            base, system, size = hit
            return base + (va % size), system, size - va % size
        cntl = self.reg_value("GCVM_CONTEXT0_CNTL")
        if not cntl & 1:
            return None
        start = (self.reg_value("GCVM_CONTEXT0_PAGE_TABLE_START_ADDR_LO32") |
                 self.reg_value("GCVM_CONTEXT0_PAGE_TABLE_START_ADDR_HI32") << 32) << 12  # fmt: skip
        table_at = (self.reg_value("GCVM_CONTEXT0_PAGE_TABLE_BASE_ADDR_LO32") |
                    self.reg_value("GCVM_CONTEXT0_PAGE_TABLE_BASE_ADDR_HI32") << 32) & ADDR_MASK  # fmt: skip
        rel = va - start
        if rel < 0 or rel >= 1 << 48:
            return None
        for level, shift in enumerate(SHIFTS):
            idx = (rel >> shift) & 511
            (pte,) = struct.unpack_from("<Q", self.vram, table_at + 8 * idx)
            if not pte & PTE.VALID:
                return None
            if level == 3 or pte & PTE.PDE_PTE:
                size = 1 << shift
                base, system = (pte & ADDR_MASK) & ~(size - 1), bool(pte & PTE.SYSTEM)
                self.tlb[page] = (base, system, size)
                off = va % size
                return base + off, system, size - off
            table_at = pte & ADDR_MASK
        return None

    def fault(self, va: int, why: str) -> None:
        """Record a GC hub protection fault at ``va`` and post it to the IH ring."""
        self.set_reg_value("GCVM_L2_PROTECTION_FAULT_STATUS", table("GC", (11, 0, 0))["GCVM_L2_PROTECTION_FAULT_STATUS"]
                           .encode(mapping_error=1, more_faults=0))  # fmt: skip
        self.set_reg_value("GCVM_L2_PROTECTION_FAULT_ADDR_LO32", (va >> 12) & 0xFFFFFFFF)
        self.set_reg_value("GCVM_L2_PROTECTION_FAULT_ADDR_HI32", va >> 44)
        self.events.append(f"gc hub fault at {va:#x}: {why}")
        self.post_interrupt(IH_CLIENT_GFX, UTCL2_FAULT, ((va >> 12) & 0xFFFFFFFF, va >> 44 & 0xF, 0, 0))

    def _fault_cntl(self, v: int) -> None:
        self._store(self.addr["GCVM_L2_PROTECTION_FAULT_CNTL"], v & ~1)
        if v & 1:  # clear_protection_fault_status_addr
            for n in ("STATUS", "ADDR_LO32", "ADDR_HI32"):
                self.set_reg_value(f"GCVM_L2_PROTECTION_FAULT_{n}", 0)

    # ---- interrupts ------------------------------------------------------------------------------------------------

    def post_interrupt(self, client: int, source: int, context: tuple[int, int, int, int], ring: int = 0) -> None:
        """Append an 8-dword entry to IH ring 0 (dropped while the ring is disabled)."""
        cntl = self.reg_value("IH_RB_CNTL")
        if not cntl & 1:
            self.events.append(f"interrupt client {client:#x} source {source:#x} dropped (IH ring disabled)")
            return
        base = self.mc_to_vram((self.reg_value("IH_RB_BASE") | self.reg_value("IH_RB_BASE_HI") << 32) << 8)
        size = 4 << (cntl >> 1 & 0x1F)
        wptr = self.reg_value("IH_RB_WPTR") & 0x3FFFC
        entry = struct.pack("<8I", client | source << 8 | ring << 16, 0, 0, 0, *context)
        self.vram[base + wptr : base + wptr + 32] = entry
        wptr = (wptr + 32) % size
        overflow = int(wptr == self.reg_value("IH_RB_RPTR") % size)
        self.set_reg_value("IH_RB_WPTR", wptr | overflow)
        wb = self.reg_value("IH_RB_WPTR_ADDR_LO") | self.reg_value("IH_RB_WPTR_ADDR_HI") << 32
        if wb:
            self._vram_dword(self.mc_to_vram(wb), wptr | overflow)

    # ---- queues ----------------------------------------------------------------------------------------------------

    def _hqd_active(self, v: int) -> None:
        self._store(self.addr["CP_HQD_ACTIVE"], v)
        if not v & 1:
            return
        bank = self._bank(self.addr["CP_HQD_ACTIVE"])
        cntl = table("GC", (11, 0, 0))["CP_MEC_RS64_CNTL"].decode(self.reg_value("CP_MEC_RS64_CNTL"))
        if not self.rlc_loaded or not cntl["mec_pipe0_active"] or cntl["mec_halt"]:
            self.violation(f"compute queue {bank} activated while the MEC is not running (firmware loaded: "
                           f"{self.rlc_loaded}, CP_MEC_RS64_CNTL {cntl})")  # fmt: skip
        ring = (self.reg_value("CP_HQD_PQ_BASE") | self.reg_value("CP_HQD_PQ_BASE_HI") << 32) << 8
        rptr = self.reg_value("CP_HQD_PQ_RPTR_REPORT_ADDR") | self.reg_value("CP_HQD_PQ_RPTR_REPORT_ADDR_HI") << 32
        wptr = self.reg_value("CP_HQD_PQ_WPTR_POLL_ADDR") | self.reg_value("CP_HQD_PQ_WPTR_POLL_ADDR_HI") << 32
        size = 4 << ((self.reg_value("CP_HQD_PQ_CONTROL") & 0x3F) + 1)
        from tg.runtime.amd.sim.pm4_exec import PM4Executor

        self._start(f"COMPUTE{bank}", PM4Executor(self.gpu_core(), ring, size, rptr, wptr, name=f"HQD {bank}"))

    def _dequeue(self, v: int) -> None:
        bank = self._bank(self.addr["CP_HQD_ACTIVE"])
        self._stop(f"COMPUTE{bank}")
        self._store(self.addr["CP_HQD_ACTIVE"], 0)

    def _soft_reset(self, v: int) -> None:
        self._store(self.addr["GRBM_SOFT_RESET"], v)
        f = table("GC", (11, 0, 0))["GRBM_SOFT_RESET"].decode(v)
        if f["soft_reset_cp"] or f["soft_reset_cpc"]:
            for q in [q for q in self.queues if q.startswith("COMPUTE")]:
                self._stop(q)
            if self.core is not None:
                self.core.error = None  # the fault that stopped the command processor is gone with it
        if f["soft_reset_sdma0"]:
            self._stop("SDMA0")

    def _sdma_rb_cntl(self, v: int) -> None:
        self._store(self.addr["SDMA0_QUEUE0_RB_CNTL"], v)
        if not v & 1:
            self._stop("SDMA0")
            return
        ring = (self.reg_value("SDMA0_QUEUE0_RB_BASE") | self.reg_value("SDMA0_QUEUE0_RB_BASE_HI") << 32) << 8
        rptr = self.reg_value("SDMA0_QUEUE0_RB_RPTR_ADDR_LO") | self.reg_value("SDMA0_QUEUE0_RB_RPTR_ADDR_HI") << 32
        wptr = (
            self.reg_value("SDMA0_QUEUE0_RB_WPTR_POLL_ADDR_LO")
            | self.reg_value("SDMA0_QUEUE0_RB_WPTR_POLL_ADDR_HI") << 32
        )
        size = 4 << (v >> 1 & 0x1F)
        from tg.runtime.amd.sim.sdma_exec import SDMAExecutor

        self._start("SDMA0", SDMAExecutor(self.gpu_core(), ring, size, rptr, wptr, name="SDMA0"))

    def _start(self, key: str, q: Any) -> None:
        self._stop(key)
        self.queues[key] = q
        self.gpu_core().add_queue(q)
        self.events.append(f"queue {key} started")

    def _stop(self, key: str) -> None:
        q = self.queues.pop(key, None)
        if q is not None and self.core is not None:
            self.core.remove_queue(q)
            self.events.append(f"queue {key} stopped")

    def gpu_core(self) -> Any:
        """The command processor and emulator (tg.runtime.amd.sim.gpu.MockGPU) over this GPU's memory."""
        if self.core is None:
            from tg.runtime.amd.sim.gpu import MockGPU

            self.core = MockGPU(self.name, GPUMemory(self), emulate=self.emulate, fault_va=self.fault_va,
                                on_interrupt=self._end_of_pipe, on_fault=self.fault)  # fmt: skip
        return self.core

    def _end_of_pipe(self, ctxid: int) -> None:
        self.post_interrupt(IH_CLIENT_GRBM_CP, EOP_SOURCE, (ctxid, 0, 0, 0))

    def pump(self) -> None:
        """Run the queues until none moves."""
        if self.core is not None:
            self.core.pump()

    # ---- BARs ------------------------------------------------------------------------------------------------------

    def pci_device(self, devpref: str = "AM", pcibus: str = "mock:am:0", *, lock: bool = True) -> Any:
        """A MockPCIDevice exposing this GPU (BAR0 VRAM, BAR2 doorbells, BAR5 registers); GPU DMA goes to its
        system memory."""
        from tg.drivers.mock import BarSpec, MockPCIDevice

        dev = MockPCIDevice(devpref, pcibus, vendor=0x1002, device=0x744C, lock=lock, violations=self.violations,
                            bars={0: BarSpec(self.vram_size, is64=True, prefetch=True, backing=self.vram),
                                  2: BarSpec(DOORBELL_BAR_BYTES, is64=True, backing=_Doorbells(self)),
                                  5: BarSpec(REG_BAR_BYTES, backing=_Registers(self))})  # fmt: skip
        dev.write_config(0x10, self.bar0_bus & 0xFFFFFFFF, 4)  # BAR0 at this GPU's own bus address (peers reach it)
        dev.write_config(0x14, self.bar0_bus >> 32, 4)
        self.dma = (dev.dma_read, dev.dma_write)
        return dev

    @staticmethod
    def peer_of(bus: int) -> tuple[MockAMGPU, int] | None:
        """(GPU, VRAM offset) when bus address ``bus`` lies in a mock AM GPU's BAR0, else None."""
        gpu = _bus.get(bus - (bus - BAR0_BUS_BASE) % BAR0_BUS_STRIDE) if bus >= BAR0_BUS_BASE else None
        if gpu is None or bus - gpu.bar0_bus >= gpu.vram_size:
            return None
        return gpu, bus - gpu.bar0_bus

    def usb_bridge(self) -> Any:
        """A MockASM24Bridge with this GPU behind it; GPU DMA goes to the bridge's SRAM and windows."""
        from tg.drivers.mock import MockASM24Bridge

        bridge = MockASM24Bridge(self.pci_device("MOCKGPU", "mock:am:usb", lock=False), link_up=True)
        self.dma = (bridge.dma_read, bridge.dma_write)
        return bridge

    def __repr__(self) -> str:
        return f"<MockAMGPU {self.name} {self.vram_size >> 20} MiB, {len(self.queues)} queues>"


def served_device() -> Any:
    """Factory for ``tg-pci-server --mock-model tg.runtime.amd.sim.am_gpu:served_device``: one mock AM GPU
    (``TG_MOCKAM_VRAM_MB`` of VRAM, kernels emulated) behind a MockPCIDevice, unlocked, its DMA memory shareable with
    unix-socket clients. Its state lives in the server process, so a second client session finds the board booted
    (a partial boot). ``DEV=PCI+AMD REMOTE=...`` drives it like a real board (it needs firmware with tg's hashes)."""
    from tg.ir.helpers import TG_MOCKAM_VRAM_MB

    gpu = MockAMGPU(int(TG_MOCKAM_VRAM_MB.value), name="served mock AM GPU")
    dev = gpu.pci_device("AM", "mock:am:served", lock=False)
    dev.shared_sysmem = True  # MAP_SYSMEM_FD: a unix-socket client maps DMA memory itself
    dev.gpu = gpu  # the board stays alive as long as its device
    return dev


class GPUMemory:
    """GPU virtual memory of a mock AM GPU as its engines see it (tg.runtime.amd.sim.gpu.GPUMemory)."""

    def __init__(self, gpu: MockAMGPU) -> None:
        self.gpu = gpu
        self.last_fault: int | None = None

    def _pieces(self, va: int, n: int, verb: str) -> list[tuple[int, bool, int, int]]:
        out, pos = [], 0
        while pos < n:
            t = self.gpu.translate(va + pos)
            if t is None:
                self.last_fault = va + pos
                raise EmulatorError(f"{self.gpu.name}: {verb} {n} bytes at {va:#x}: page fault at {va + pos:#x} "
                                    f"(not mapped in the GC hub's page tables)")  # fmt: skip
            phys, system, left = t
            k = min(left, n - pos)
            out.append((phys, system, pos, k))
            pos += k
        return out

    def read(self, va: int, n: int) -> bytes:
        g, buf = self.gpu, bytearray(n)
        for phys, system, pos, k in self._pieces(va, n, "read"):
            if system and (peer := MockAMGPU.peer_of(phys)) is not None:  # another GPU's BAR0 (peer to peer)
                buf[pos : pos + k] = peer[0].vram[peer[1] : peer[1] + k]
            elif system:
                assert g.dma is not None
                buf[pos : pos + k] = g.dma[0](phys, k)
            else:
                buf[pos : pos + k] = g.vram[phys : phys + k]
        return bytes(buf)

    def write(self, va: int, data: bytes) -> None:
        g = self.gpu
        for phys, system, pos, k in self._pieces(va, len(data), "write"):
            if system and (peer := MockAMGPU.peer_of(phys)) is not None:
                peer[0].vram[peer[1] : peer[1] + k] = data[pos : pos + k]
            elif system:
                assert g.dma is not None
                g.dma[1](phys, bytes(data[pos : pos + k]))
            else:
                g.vram[phys : phys + k] = data[pos : pos + k]

    def extent(self, va: int) -> int:
        end = va
        for _ in range(256):
            t = self.gpu.translate(end)
            if t is None:
                break
            end += t[2]
        if end == va:
            self.last_fault = va
            raise EmulatorError(f"{self.gpu.name}: execute at {va:#x}: page fault (not mapped)")
        return end


class _Registers:
    """BAR5: dword register accesses."""

    def __init__(self, gpu: MockAMGPU) -> None:
        self.gpu, self.size = gpu, REG_BAR_BYTES

    def read(self, offset: int, size: int) -> bytes:
        if size % 4 or offset % 4:
            self.gpu.violation(f"register BAR read of {size} bytes at {offset:#x} (dword accesses only)")
            return bytes(size)
        return b"".join(self.gpu.rreg(offset // 4 + i).to_bytes(4, "little") for i in range(size // 4))

    def write(self, offset: int, data: bytes) -> None:
        if len(data) % 4 or offset % 4:
            self.gpu.violation(f"register BAR write of {len(data)} bytes at {offset:#x} (dword accesses only)")
            return
        for i in range(len(data) // 4):
            self.gpu.wreg(offset // 4 + i, int.from_bytes(data[4 * i : 4 * i + 4], "little"))


class _Doorbells:
    """BAR2: 64-bit doorbells; a write runs the queues."""

    def __init__(self, gpu: MockAMGPU) -> None:
        self.gpu, self.size = gpu, DOORBELL_BAR_BYTES

    def read(self, offset: int, size: int) -> bytes:
        return bytes(self.gpu.doorbells[offset : offset + size])

    def write(self, offset: int, data: bytes) -> None:
        self.gpu.doorbells[offset : offset + len(data)] = data
        self.gpu.pump()
