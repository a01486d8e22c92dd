"""SDMA 6.0, the copy engine (amd.md 5.8): engine setup and queue 0's ring (tg's ``COPY:0``).

Init: watchdog, UTCL1 policy, un-halt, trap interrupts, the doorbell port. A ring: minor pointer updates on while
the pointers are reset, ring base >> 8, read-pointer write-back and write-pointer poll addresses, the doorbell (index
256: BAR2 byte 0x800) enabled, then ``RB_CNTL`` (enable, size log2(dwords), write-back, privileged) and IB enable.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tg.runtime.amd.regs import defs

if TYPE_CHECKING:
    from tg.runtime.amd.am.device import AMDev

__all__ = ["SDMA"]

Q = "SDMA0_QUEUE0"


class SDMA:
    """SDMA engine 0 of one device."""

    doorbell_index = defs.AMDGPU_NAVI10_DOORBELL_sDMA_ENGINE0

    def __init__(self, dev: AMDev) -> None:
        self.dev = dev
        self.ring: tuple[int, int, int, int] | None = None

    def init_hw(self) -> None:
        d = self.dev
        d.reg("SDMA0_WATCHDOG_CNTL").update(queue_hang_count=100)  # 10 s in 100 ms units
        d.reg("SDMA0_UTCL1_CNTL").update(resp_mode=3, redo_delay=9)
        d.reg("SDMA0_UTCL1_PAGE").update(rd_l2_policy=2, wr_l2_policy=3, llc_noalloc=1)
        d.reg("SDMA0_F32_CNTL").update(halt=0, th1_reset=0)
        d.reg("SDMA0_CNTL").update(trap_enable=1)
        d.doorbell_enable(port=2, awid=0xE, awaddr_31_28=0x3, offset=self.doorbell_index * 2, size=4)
        d.log("SDMA initialized")

    def setup_ring(self, ring: int, ring_bytes: int, rptr_addr: int, wptr_addr: int) -> int:
        """Start queue 0 on a ring (GPU addresses); its doorbell index (u64 doorbells)."""
        d = self.dev
        if ring_bytes & (ring_bytes - 1) or ring_bytes < 256:
            raise ValueError(f"an SDMA ring must be a power of two of at least 256 bytes, got {ring_bytes}")
        d.reg(f"{Q}_MINOR_PTR_UPDATE").write(1)
        d.wreg_pair(f"{Q}_RB_RPTR", f"{Q}_RB_RPTR_HI", 0)
        d.wreg_pair(f"{Q}_RB_WPTR", f"{Q}_RB_WPTR_HI", 0)
        d.wreg_pair(f"{Q}_RB_BASE", f"{Q}_RB_BASE_HI", ring >> 8)
        d.wreg_pair(f"{Q}_RB_RPTR_ADDR_LO", f"{Q}_RB_RPTR_ADDR_HI", rptr_addr)
        d.wreg_pair(f"{Q}_RB_WPTR_POLL_ADDR_LO", f"{Q}_RB_WPTR_POLL_ADDR_HI", wptr_addr)
        d.reg(f"{Q}_DOORBELL_OFFSET").update(offset=self.doorbell_index * 2)
        d.reg(f"{Q}_DOORBELL").update(enable=1)
        d.reg(f"{Q}_MINOR_PTR_UPDATE").write(0)
        d.reg(f"{Q}_RB_CNTL").write(rb_vmid=0, rptr_writeback_enable=1, rptr_writeback_timer=4, f32_wptr_poll_enable=1,
                                    rb_enable=1, rb_priv=1, rb_size=(ring_bytes // 4).bit_length() - 1)  # fmt: skip
        d.reg(f"{Q}_IB_CNTL").update(ib_enable=1)
        self.ring = (ring, ring_bytes, rptr_addr, wptr_addr)
        return self.doorbell_index

    def fini_hw(self) -> None:
        """Stop the ring and reset the engine."""
        d = self.dev
        if self.ring is not None:
            d.reg(f"{Q}_RB_CNTL").update(rb_enable=0)
            d.reg(f"{Q}_IB_CNTL").update(ib_enable=0)
            d.reg(f"{Q}_DOORBELL").update(enable=0)
            d.reg(f"{Q}_DOORBELL_OFFSET").update(offset=0)
            self.ring = None
        d.reg("GRBM_SOFT_RESET").write(soft_reset_sdma0=1)
        d.delay(0.01)
        d.reg("GRBM_SOFT_RESET").write(0)
