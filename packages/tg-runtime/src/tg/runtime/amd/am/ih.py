"""IH, the interrupt handler rings (OSSSYS 6.0, amd.md 5.9): the GPU writes an 8-dword entry per interrupt.

Entry (Linux ``amdgpu_ih.h``): dw0 ``client[7:0] source[15:8] ring[23:16] vmid[27:24]``, dw1-2 timestamp, dw3
``pasid[15:0] node[23:16]``, dw4-7 context data. End-of-pipe and SDMA trap interrupts only wake the host (ignored);
SQ errors, UTCL2/VM faults (address from the GC hub's fault registers) and unknown sources put the device in its error
state, with a line for the hang message.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from tg.runtime.amd.regs import defs

if TYPE_CHECKING:
    from tg.runtime.amd.am.device import AMDev

__all__ = ["IH", "IHEntry"]

RING_BYTES = 256 << 10
ENTRY_DWORDS = 8
#: (client, source) pairs that only wake the host
BENIGN = {(defs.SOC21_IH_CLIENTID_GRBM_CP, defs.GFX_11_0_0__SRCID__CP_EOP_INTERRUPT),
          (defs.SOC21_IH_CLIENTID_GFX, defs.GFX_11_0_0__SRCID__CP_EOP_INTERRUPT)}  # fmt: skip
SQ_ERRORS = ("EDC_FUE", "ILLEGAL_INST", "MEMVIOL", "EDC_FED")


@dataclass(frozen=True)
class IHEntry:
    """A decoded interrupt entry."""

    client: int
    source: int
    ring: int
    vmid: int
    context: tuple[int, int, int, int]

    @classmethod
    def decode(cls, dw: list[int]) -> IHEntry:
        return cls(dw[0] & 0xFF, dw[0] >> 8 & 0xFF, dw[0] >> 16 & 0xFF, dw[0] >> 24 & 0xF, (dw[4], dw[5], dw[6], dw[7]))


class IH:
    """The interrupt rings of one device (ring 0 gets interrupts, ring 1 is the overflow ring)."""

    def __init__(self, dev: AMDev) -> None:
        self.dev = dev
        mm = dev.mm
        self.rings = [
            (mm.palloc(RING_BYTES, boot=True), mm.palloc(0x1000, boot=True), suffix) for suffix in ("", "_RING1")
        ]
        self.ring_dwords = RING_BYTES // 4

    def init_hw(self) -> None:
        d = self.dev
        for ring, wptr_page, suf in self.rings:
            d.wreg_pair(f"IH_RB_BASE{suf}", f"IH_RB_BASE_HI{suf}", d.mc_addr(ring) >> 8)
            extra = {"wptr_overflow_enable": 1, "rptr_rearm": 1} if not suf else {"rb_full_drain_enable": 1}
            d.reg(f"IH_RB_CNTL{suf}").write(
                mc_space=4,
                wptr_overflow_clear=1,
                rb_size=(self.ring_dwords - 1).bit_length(),
                mc_snoop=1,
                mc_ro=0,
                mc_vmid=0,
                **extra,
            )
            if not suf:
                d.wreg_pair("IH_RB_WPTR_ADDR_LO", "IH_RB_WPTR_ADDR_HI", d.mc_addr(wptr_page))
            d.reg(f"IH_RB_WPTR{suf}").write(0)
            d.reg(f"IH_RB_RPTR{suf}").write(0)
            d.reg(f"IH_DOORBELL_RPTR{suf}").write(enable=0)
        d.reg("IH_STORM_CLIENT_LIST_CNTL").update(client18_is_storm_client=1)
        d.reg("IH_INT_FLOOD_CNTL").update(flood_cntl_enable=1)
        d.reg("IH_MSI_STORM_CTRL").update(delay=3)
        for _, _, suf in self.rings:
            d.reg(f"IH_RB_CNTL{suf}").update(rb_enable=1, **({"enable_intr": 1} if not suf else {}))
        d.log("IH initialized")

    def entries(self) -> list[IHEntry]:
        """The entries written since the last read; the read pointer (bytes, like the write pointer) moves past them."""
        d = self.dev
        ring = self.rings[0][0]
        wptr = d.reg("IH_RB_WPTR").read()
        end = (wptr & d.reg("IH_RB_WPTR").spec.mask("offset")) % RING_BYTES
        rptr = d.reg("IH_RB_RPTR").read() % RING_BYTES
        out = []
        while rptr != end:
            raw = d.vram.read(ring + rptr, 4 * ENTRY_DWORDS)
            out.append(IHEntry.decode([int.from_bytes(raw[4 * i : 4 * i + 4], "little") for i in range(ENTRY_DWORDS)]))
            rptr = (rptr + 4 * ENTRY_DWORDS) % RING_BYTES
        d.reg("IH_RB_RPTR").write(end)
        if wptr & 1:  # rb_overflow: entries were lost; clear the flag
            d.reg("IH_RB_WPTR").update(rb_overflow=0)
            d.reg("IH_RB_CNTL").update(wptr_overflow_clear=1)
            d.reg("IH_RB_CNTL").update(wptr_overflow_clear=0)
        return out

    def handle(self) -> list[str]:
        """Process pending interrupts; returns the error lines (also kept in ``dev.errors``, with the error state)."""
        d = self.dev
        found = []
        for e in self.entries():
            if (e.client, e.source) in BENIGN:
                continue
            if e.source == defs.GFX_11_0_0__SRCID__SQ_INTERRUPT_ID:
                enc = e.context[1] >> 6 & 3
                if enc != 2:
                    continue  # auto / wave messages, not errors
                found.append(f"SQ error {SQ_ERRORS[e.context[0] >> 21 & 3]} (ring {e.ring}, vmid {e.vmid})")
            elif e.client in (defs.SOC21_IH_CLIENTID_VMC, defs.SOC21_IH_CLIENTID_GFX) and e.source == 0:
                va, status = d.gmc.fault()
                kinds = [
                    k for k in ("permission_faults", "mapping_error", "range_fault", "walker_error") if status.get(k)
                ]
                found.append(
                    f"GPU page fault at {va:#x} ({', '.join(kinds) or 'not present'}; client "
                    f"{'GC' if e.client == defs.SOC21_IH_CLIENTID_GFX else 'MM'} hub, vmid {e.vmid})"
                )
            else:
                found.append(f"interrupt from client {e.client:#x} source {e.source:#x} ctx "
                             f"[{', '.join(f'{c:#x}' for c in e.context)}]")  # fmt: skip
        if found:
            d.is_err_state = True
            d.errors.extend(found)
        return found
