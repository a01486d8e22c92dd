"""GFX 11: the MEC (compute micro engine) and its compute queue, tg's ``COMPUTE:0`` (amd.md 5.7).

Init waits for the RLC autoload the PSP started, sets up the GC hub and, on a full boot, starts the MEC's RS64 core
at its firmware's start address, enables RLC/SRM/SPM, routes doorbells, gives every VMID 64-bit unaligned shader
memory with the LDS and scratch apertures of the ISA (shared base 0x1, private base 0x2: 0x1000_0000_0000_0000 and
0x2000_0000_0000_0000), sets the MEC doorbell range and activates pipe 0. A partial boot only resets the MEC.

A compute queue is an MQD (v11 compute memory queue descriptor) in VRAM plus the same values in the HQD registers
of me 1 / pipe 0 / queue 0 (selected through ``GRBM_GFX_CNTL``); ``CP_HQD_ACTIVE = 1`` starts it. Its doorbell is
index 3 (BAR2 byte 24).
"""

from __future__ import annotations

import ctypes
from typing import TYPE_CHECKING

from tg.runtime.amd.regs import defs

if TYPE_CHECKING:
    from tg.runtime.amd.am.device import AMDev

__all__ = ["GFX", "ComputeRing"]

SH_MEM_ADDRESS_MODE_64, SH_MEM_ALIGNMENT_MODE_UNALIGNED = 0, 3
MQD_HEADER = 0xC0310800
MQD_REGS_FIRST = 0x80  # the MQD's dword index of cp_mqd_base_addr_lo: the HQD register image starts there
RING_QUEUE = 0


class ComputeRing(tuple[int, int, int, int, int, int]):
    """(ring, ring bytes, rptr address, wptr address, EOP buffer, EOP bytes): what re-creates the queue."""


class GFX:
    """Graphics/compute core of one device (one XCC)."""

    doorbell_index = defs.AMDGPU_NAVI10_DOORBELL_MEC_RING0

    def __init__(self, dev: AMDev) -> None:
        self.dev = dev
        self.mqd = [dev.mm.palloc(0x1000, boot=True) for _ in range(2)]
        self.ring: ComputeRing | None = None

    def select(self, me: int = 0, pipe: int = 0, queue: int = 0, vmid: int = 0) -> None:
        """Route the banked registers (HQD, SH_MEM) to one queue / VMID."""
        self.dev.reg("GRBM_GFX_CNTL").write(meid=me, pipeid=pipe, vmid=vmid, queueid=queue)

    def init_hw(self) -> None:
        d = self.dev
        d.wait(
            lambda: int(
                d.reg("CP_STAT").read() == 0 and d.reg("RLC_RLCS_BOOTLOAD_STATUS").fields()["bootload_complete"] == 1
            ),
            1,
            1,
            "RLC autoload (CP_STAT idle, RLC_RLCS_BOOTLOAD_STATUS.bootload_complete)",
        )
        d.gmc.init_hub("GC")
        if d.partial_boot:
            self.reset_mec()
            d.log("GFX: MEC reset (partial boot)")
            return
        self._config_mec()
        d.reg("TCP_CNTL").write(d.reg("TCP_CNTL").read() | 0x20000000)  # the kernel's golden setting for gfx11
        d.reg("RLC_CNTL").write(1)
        d.reg("RLC_SRM_CNTL").update(srm_enable=1, auto_incr_addr=1)
        d.reg("RLC_SPM_MC_CNTL").write(0xF)
        d.doorbell_enable(port=0, awid=0x3, awaddr_31_28=0x3)
        d.doorbell_enable(port=3, awid=0x6, awaddr_31_28=0x3)
        d.reg("GRBM_CNTL").update(read_timeout=0xFF)
        for vmid in range(16):
            self.select(vmid=vmid)
            d.reg("SH_MEM_CONFIG").write(initial_inst_prefetch=3, address_mode=SH_MEM_ADDRESS_MODE_64,
                                         alignment_mode=SH_MEM_ALIGNMENT_MODE_UNALIGNED)  # fmt: skip
            d.reg("SH_MEM_BASES").write(shared_base=0x1, private_base=0x2)
        self.select()
        d.reg("CP_MEC_DOORBELL_RANGE_LOWER").write(0)
        d.reg("CP_MEC_DOORBELL_RANGE_UPPER").write(0xF8)
        self._enable_mec()
        d.log("GFX initialized (MEC running)")

    def _config_mec(self) -> None:
        d = self.dev
        self.select(me=1, pipe=0)
        d.wreg_pair("CP_MEC_RS64_PRGRM_CNTR_START", "CP_MEC_RS64_PRGRM_CNTR_START_HI", d.fw.mec_start >> 2)
        self.select()
        d.reg("CP_MEC_RS64_CNTL").update(mec_pipe0_reset=1)
        d.reg("CP_MEC_RS64_CNTL").update(mec_pipe0_reset=0)

    def _enable_mec(self) -> None:
        self.dev.reg("CP_MEC_RS64_CNTL").update(mec_pipe0_reset=0, mec_pipe0_active=1, mec_halt=0)
        self.dev.delay(0.05)

    def reset_mec(self) -> None:
        """Dequeue, soft-reset the CP and restart the MEC (the compute ring must be set up again)."""
        d = self.dev
        self.dequeue()
        d.reg("GRBM_SOFT_RESET").write(soft_reset_cp=1, soft_reset_cpc=1)
        d.delay(0.05)
        d.reg("GRBM_SOFT_RESET").write(0)
        self._config_mec()
        self._enable_mec()

    def dequeue(self) -> None:
        """Stop active compute queues (waves are reset; no wait for them when the device faulted)."""
        d = self.dev
        for q in range(2):
            self.select(me=1, pipe=0, queue=q)
            if d.reg("CP_HQD_ACTIVE").read() & 1:
                d.reg("CP_HQD_DEQUEUE_REQUEST").write(2)  # 2: reset waves
                d.reg("SPI_COMPUTE_QUEUE_RESET").write(1)
                if not d.is_err_state:
                    d.wait(d.reg("CP_HQD_ACTIVE").read, 1, 0, f"compute queue {q} dequeue")
        self.select()

    def fini_hw(self) -> None:
        self.dequeue()

    def setup_ring(self, ring: int, ring_bytes: int, rptr_addr: int, wptr_addr: int, eop: int, eop_bytes: int) -> int:
        """Start the compute queue on a ring (GPU addresses); its doorbell index (u64 doorbells)."""
        d = self.dev
        for n, what in ((ring_bytes, "ring"), (eop_bytes, "EOP buffer")):
            if n & (n - 1) or n < 256:
                raise ValueError(f"a compute {what} must be a power of two of at least 256 bytes, got {n}")
        self.select(me=1, pipe=0, queue=RING_QUEUE)
        mqd_mc = d.mc_addr(self.mqd[RING_QUEUE])
        r = {n: d.reg(n).spec for n in ("CP_HQD_PERSISTENT_STATE", "CP_HQD_PQ_DOORBELL_CONTROL", "CP_HQD_PQ_CONTROL",
                                        "CP_HQD_IB_CONTROL", "CP_MQD_CONTROL", "CP_HQD_EOP_CONTROL")}  # fmt: skip
        m = defs.v11_compute_mqd(
            header=MQD_HEADER,
            cp_mqd_base_addr_lo=mqd_mc & 0xFFFFFFFF,
            cp_mqd_base_addr_hi=mqd_mc >> 32,
            cp_hqd_pipe_priority=0x2,
            cp_hqd_queue_priority=0xF,
            cp_hqd_quantum=0x111,
            cp_hqd_persistent_state=r["CP_HQD_PERSISTENT_STATE"].encode(preload_size=0x55, preload_req=1),
            cp_hqd_pq_base_lo=(ring >> 8) & 0xFFFFFFFF,
            cp_hqd_pq_base_hi=ring >> 40,
            cp_hqd_pq_rptr_report_addr_lo=rptr_addr & 0xFFFFFFFF,
            cp_hqd_pq_rptr_report_addr_hi=rptr_addr >> 32,
            cp_hqd_pq_wptr_poll_addr_lo=wptr_addr & 0xFFFFFFFF,
            cp_hqd_pq_wptr_poll_addr_hi=wptr_addr >> 32,
            cp_hqd_pq_doorbell_control=r["CP_HQD_PQ_DOORBELL_CONTROL"].encode(
                doorbell_offset=self.doorbell_index * 2, doorbell_en=1
            ),
            cp_hqd_pq_control=r["CP_HQD_PQ_CONTROL"].encode(
                rptr_block_size=5, unord_dispatch=0, queue_size=(ring_bytes // 4).bit_length() - 2
            ),
            cp_hqd_ib_control=r["CP_HQD_IB_CONTROL"].encode(min_ib_avail_size=0x3),
            cp_hqd_hq_status0=0x20004000,
            cp_mqd_control=r["CP_MQD_CONTROL"].encode(priv_state=1),
            cp_hqd_vmid=0,
            cp_hqd_aql_control=0,
            cp_hqd_eop_base_addr_lo=(eop >> 8) & 0xFFFFFFFF,
            cp_hqd_eop_base_addr_hi=eop >> 40,
            cp_hqd_eop_control=r["CP_HQD_EOP_CONTROL"].encode(eop_size=(eop_bytes // 4).bit_length() - 2),
        )
        for se in range(8):
            setattr(m, f"compute_static_thread_mgmt_se{se}", 0xFFFFFFFF)
        d.vram.write(self.mqd[RING_QUEUE], bytes(m))
        words = (ctypes.c_uint32 * (ctypes.sizeof(m) // 4)).from_buffer_copy(m)
        first, last = d.reg("CP_MQD_BASE_ADDR").addr, d.reg("CP_HQD_PQ_WPTR_HI").addr
        for i, addr in enumerate(range(first, last + 1)):
            d.wreg(addr, words[MQD_REGS_FIRST + i])
        d.reg("CP_HQD_ACTIVE").write(1)
        d.gmc.flush_hdp()
        self.select()
        self.ring = ComputeRing((ring, ring_bytes, rptr_addr, wptr_addr, eop, eop_bytes))
        return self.doorbell_index

    def set_clock_gating(self) -> None:
        """Enter RLC safe mode, enable coarse/medium grain clock gating and CP idle interrupts, leave safe mode."""
        d = self.dev
        d.reg("RLC_SAFE_MODE").write(message=1, cmd=1)
        d.wait(d.reg("RLC_SAFE_MODE").read, 1, 0, "RLC safe mode entry")
        d.reg("RLC_CGCG_CGLS_CTRL").update(
            cgcg_gfx_idle_threshold=0x36, cgcg_en=1, cgls_rep_compansat_delay=0xF, cgls_en=1
        )
        d.reg("CP_RB_WPTR_POLL_CNTL").update(poll_frequency=0x100, idle_poll_count=0x90)
        d.reg("CP_INT_CNTL").update(cntx_busy_int_enable=1, cntx_empty_int_enable=1, cmp_busy_int_enable=1)
        d.reg("SDMA0_RLC_CGCG_CTRL").update(cgcg_int_enable=1)
        d.reg("SDMA1_RLC_CGCG_CTRL").update(cgcg_int_enable=1)
        d.reg("RLC_CGTT_MGCG_OVERRIDE").update(
            perfmon_clock_state=1,
            gfxip_repeater_fgcg_override=0,
            gfxip_fgcg_override=0,
            grbm_cgtt_sclk_override=0,
            rlc_cgtt_sclk_override=0,
            gfxip_mgcg_override=0,
            gfxip_cgls_override=0,
            gfxip_cgcg_override=0,
        )
        d.reg("RLC_SAFE_MODE").write(message=0, cmd=1)
