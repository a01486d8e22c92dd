"""GMC: the GPU's memory hubs (MM hub for the engines outside graphics, GC hub for graphics/compute), amd.md 5.4.

Each hub gets the system aperture (the VRAM range, so firmware and rings can use FB addresses), default and
dummy pages, L1 TLB and L2 cache settings, and VM context 0 pointing at the memory manager's root page table (depth 3,
every protection fault reported). After page-table changes the HDP is flushed (the host's writes through BAR0 must
land before the GPU walks them) and the TLBs are invalidated on engine 17: on the MM hub inside its semaphore.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tg.runtime.amd.am.memory import VA_BASE, VA_SIZE

if TYPE_CHECKING:
    from tg.runtime.amd.am.device import AMDev

__all__ = ["GMC"]

FAULT_KINDS = ("pde0", "dummy_page", "range", "valid", "read", "write", "execute")
MTYPE_UC = 3


class GMC:
    """Memory hubs of one device."""

    def __init__(self, dev: AMDev) -> None:
        self.dev = dev
        self.fb_base = (dev.reg("MMMC_VM_FB_LOCATION_BASE").read() & 0xFFFFFF) << 24
        self.fb_end = (dev.reg("MMMC_VM_FB_LOCATION_TOP").read() & 0xFFFFFF) << 24
        self.vm_base, self.vm_end = VA_BASE, min(VA_BASE + VA_SIZE - 1, 0x7FFF_FFFF_FFFF)
        self.scratch_page = dev.mm.palloc(0x1000, boot=True)
        self.dummy_page = dev.mm.palloc(0x1000, boot=True)
        # the MM hub is set up at the first (full) boot and stays valid across partial boots
        self.hub_ready = {"MM": True, "GC": False}

    def init_hw(self) -> None:
        self.init_hub("MM")
        self.dev.log("GMC initialized (MM hub)")

    def init_hub(self, hub: str) -> None:
        """Apertures, caches and VM context 0 of ``hub`` (``MM`` or ``GC``)."""
        d, vm = self.dev, "MMVM" if hub == "MM" else "GCVM"
        mc = "MMMC" if hub == "MM" else "GCMC"
        d.reg(f"{mc}_VM_AGP_BASE").write(0)
        d.reg(f"{mc}_VM_AGP_BOT").write(0xFFFFFFFFFFFF >> 24)  # AGP off
        d.reg(f"{mc}_VM_AGP_TOP").write(0)
        d.reg(f"{mc}_VM_SYSTEM_APERTURE_LOW_ADDR").write(self.fb_base >> 18)
        d.reg(f"{mc}_VM_SYSTEM_APERTURE_HIGH_ADDR").write(self.fb_end >> 18)
        d.wreg_pair(f"{mc}_VM_SYSTEM_APERTURE_DEFAULT_ADDR_LSB", f"{mc}_VM_SYSTEM_APERTURE_DEFAULT_ADDR_MSB",
                    self.scratch_page >> 12)  # fmt: skip
        d.wreg_pair(f"{vm}_L2_PROTECTION_FAULT_DEFAULT_ADDR_LO32", f"{vm}_L2_PROTECTION_FAULT_DEFAULT_ADDR_HI32",
                    self.dummy_page >> 12)  # fmt: skip
        d.reg(f"{vm}_L2_PROTECTION_FAULT_CNTL2").update(active_page_migration_pte_read_retry=1)
        d.reg(f"{mc}_VM_MX_L1_TLB_CNTL").update(enable_l1_tlb=1, system_access_mode=3, enable_advanced_driver_model=1,
                                               system_aperture_unmapped_access=0, mtype=MTYPE_UC)  # fmt: skip
        d.reg(f"{vm}_L2_CNTL").update(enable_l2_cache=1, enable_default_page_out_to_system_memory=1,
                                      l2_pde0_cache_tag_generation_mode=0, pde_fault_classification=0,
                                      context1_identity_access_mode=1, identity_mode_fragment_size=0)  # fmt: skip
        d.reg(f"{vm}_L2_CNTL2").update(invalidate_all_l1_tlbs=1, invalidate_l2_cache=1)
        d.reg(f"{vm}_L2_CNTL3").write(l2_cache_4k_associativity=1, l2_cache_bigk_associativity=1, bank_select=9,
                                      l2_cache_bigk_fragment_size=6)  # fmt: skip
        d.reg(f"{vm}_L2_CNTL4").write(l2_cache_4k_partition_count=1)
        d.reg(f"{vm}_L2_CNTL5").write(walker_priority_client_id=0x1FF)
        d.wreg_pair(f"{vm}_CONTEXT0_PAGE_TABLE_START_ADDR_LO32", f"{vm}_CONTEXT0_PAGE_TABLE_START_ADDR_HI32",
                    self.vm_base >> 12)  # fmt: skip
        d.wreg_pair(f"{vm}_CONTEXT0_PAGE_TABLE_END_ADDR_LO32", f"{vm}_CONTEXT0_PAGE_TABLE_END_ADDR_HI32",
                    self.vm_end >> 12)  # fmt: skip
        d.wreg_pair(f"{vm}_CONTEXT0_PAGE_TABLE_BASE_ADDR_LO32", f"{vm}_CONTEXT0_PAGE_TABLE_BASE_ADDR_HI32",
                    d.mm.root | 1)  # fmt: skip
        faults = {f"{k}_protection_fault_enable_interrupt": 1 for k in FAULT_KINDS}
        faults |= {f"{k}_protection_fault_enable_default": 1 for k in FAULT_KINDS}
        d.reg(f"{vm}_CONTEXT0_CNTL").write(0x1800000, **faults, enable_context=1, page_table_depth=3,
                                           page_table_block_size=0)  # fmt: skip
        d.wreg_pair(
            f"{vm}_L2_CONTEXT1_IDENTITY_APERTURE_LOW_ADDR_LO32",
            f"{vm}_L2_CONTEXT1_IDENTITY_APERTURE_LOW_ADDR_HI32",
            0xFFFFFFFFF,
        )  # identity aperture off
        d.wreg_pair(f"{vm}_L2_CONTEXT1_IDENTITY_APERTURE_HIGH_ADDR_LO32",
                    f"{vm}_L2_CONTEXT1_IDENTITY_APERTURE_HIGH_ADDR_HI32", 0)  # fmt: skip
        d.wreg_pair(f"{vm}_L2_CONTEXT_IDENTITY_PHYSICAL_OFFSET_LO32", f"{vm}_L2_CONTEXT_IDENTITY_PHYSICAL_OFFSET_HI32",
                    0)  # fmt: skip
        for eng in range(18):
            d.wreg_pair(f"{vm}_INVALIDATE_ENG{eng}_ADDR_RANGE_LO32", f"{vm}_INVALIDATE_ENG{eng}_ADDR_RANGE_HI32",
                        0x1FFFFFFFFF)  # fmt: skip
        self.hub_ready[hub] = True

    def flush_hdp(self) -> None:
        """Make the host's earlier writes to VRAM visible to the GPU (the remapped HDP flush register)."""
        d = self.dev
        d.wreg(d.reg("BIF_BX0_REMAP_HDP_MEM_FLUSH_CNTL").read() // 4, 0)

    def flush_tlb(self, hub: str, vmid: int = 0) -> None:
        """Flush HDP, then invalidate ``hub``'s TLBs for ``vmid`` on engine 17 (skipped before the hub is set up)."""
        self.flush_hdp()
        if not self.hub_ready[hub]:
            return
        d, vm = self.dev, "MMVM" if hub == "MM" else "GCVM"
        if hub == "MM":
            sem = d.reg("MMVM_INVALIDATE_ENG17_SEM")
            d.wait(sem.read, 1, 1, "MM hub invalidation semaphore")
        d.reg(f"{vm}_INVALIDATE_ENG17_REQ").write(per_vmid_invalidate_req=1 << vmid, flush_type=0, invalidate_l2_ptes=1,
            invalidate_l2_pde0=1, invalidate_l2_pde1=1, invalidate_l2_pde2=1, invalidate_l1_ptes=1,
            clear_protection_fault_status_addr=0)  # fmt: skip
        ack = d.reg(f"{vm}_INVALIDATE_ENG17_ACK")
        d.wait(ack.read, 1 << vmid, 1 << vmid, f"{hub} hub TLB invalidation")
        if hub == "MM":
            d.reg("MMVM_INVALIDATE_ENG17_SEM").write(0)
            bank = d.reg("MMVM_L2_BANK_SELECT_RESERVED_CID2")
            bank.update(reserved_cache_private_invalidation=1)
            bank.read()  # the read-back completes the invalidation

    def fault_pending(self) -> bool:
        """Whether the GC hub holds an unreported protection fault."""
        return self.dev.reg("GCVM_L2_PROTECTION_FAULT_STATUS").read() != 0

    def fault(self) -> tuple[int, dict[str, int]]:
        """The GC hub's last protection fault: (virtual address, status fields); clears it."""
        d = self.dev
        status = d.reg("GCVM_L2_PROTECTION_FAULT_STATUS").fields()
        page = (
            d.reg("GCVM_L2_PROTECTION_FAULT_ADDR_HI32").read() << 32
            | d.reg("GCVM_L2_PROTECTION_FAULT_ADDR_LO32").read()
        )
        d.reg("GCVM_L2_PROTECTION_FAULT_CNTL").update(clear_protection_fault_status_addr=1)
        return page << 12, status
