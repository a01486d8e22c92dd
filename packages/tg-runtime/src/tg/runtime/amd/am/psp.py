"""PSP, the platform security processor (MP0 13.0.0, amd.md 5.5): it authenticates and loads every firmware.

Bootloader stage (sOS not running, ``C2PMSG_81 == 0``): each sOS component in turn is copied into the 1 MiB-aligned
message buffer, its address >> 20 written to ``C2PMSG_36`` and the load command to ``C2PMSG_35`` once that
register's bit 31 says the bootloader is ready; after the sOS itself, ``C2PMSG_81`` turns non-zero. Then the ring:
an old one is destroyed, the new one's address and size go to ``C2PMSG_69/70/71`` and ``C2PMSG_64 = 2 << 16``
(kernel-mode ring). A command is a 1 KiB ``psp_gfx_cmd_resp`` in the command buffer and a 64-byte frame in the ring
(command and fence addresses, fence value = write pointer + 1); ``C2PMSG_67`` moves the write pointer; the PSP writes
the fence and the response status (must be 0). Commands used: LOAD_TOC (gives the TMR size), SETUP_TMR, LOAD_IP_FW
(SMU first, then SDMA, MEC, IMU, RLC) and AUTOLOAD_RLC.
"""

from __future__ import annotations

import ctypes
from typing import TYPE_CHECKING

from tg.runtime.amd.regs import defs

if TYPE_CHECKING:
    from tg.runtime.amd.am.device import AMDev

__all__ = ["PSP", "PSPError"]

RING_BYTES = 0x10000
MAX_TMR = 0x1300000
SOS_COMPONENTS = [  # (firmware component, bootloader command), in load order
    (defs.PSP_FW_TYPE_PSP_KDB, defs.PSP_BL__LOAD_KEY_DATABASE),
    (defs.PSP_FW_TYPE_PSP_SPL, defs.PSP_BL__LOAD_TOS_SPL_TABLE),
    (defs.PSP_FW_TYPE_PSP_SYS_DRV, defs.PSP_BL__LOAD_SYSDRV),
    (defs.PSP_FW_TYPE_PSP_SOC_DRV, defs.PSP_BL__LOAD_SOCDRV),
    (defs.PSP_FW_TYPE_PSP_INTF_DRV, defs.PSP_BL__LOAD_INTFDRV),
    (defs.PSP_FW_TYPE_PSP_DBG_DRV, defs.PSP_BL__LOAD_DBGDRV),
    (defs.PSP_FW_TYPE_PSP_RAS_DRV, defs.PSP_BL__LOAD_RASDRV),
    (defs.PSP_FW_TYPE_PSP_SOS, defs.PSP_BL__LOAD_SOSDRV),
]
CMD_NAMES = {defs.GFX_CMD_ID_LOAD_TOC: "LOAD_TOC", defs.GFX_CMD_ID_SETUP_TMR: "SETUP_TMR",
             defs.GFX_CMD_ID_LOAD_IP_FW: "LOAD_IP_FW", defs.GFX_CMD_ID_AUTOLOAD_RLC: "AUTOLOAD_RLC"}  # fmt: skip
FW_NAMES = {v: k.removeprefix("GFX_FW_TYPE_") for k, v in vars(defs).items() if k.startswith("GFX_FW_TYPE_")}


class PSPError(RuntimeError):
    """The PSP refused a command (its id and status are in the message)."""


class PSP:
    """The PSP of one device."""

    def __init__(self, dev: AMDev) -> None:
        self.dev = dev
        mm = dev.mm
        self.msg1 = mm.palloc(defs.PSP_1_MEG, defs.PSP_1_MEG, boot=True)
        self.cmd = mm.palloc(defs.PSP_CMD_BUFFER_SIZE, boot=True)
        self.fence = mm.palloc(defs.PSP_FENCE_BUFFER_SIZE, boot=True, zero=True)
        self.ring = mm.palloc(RING_BYTES, boot=True)
        self.tmr = mm.palloc(MAX_TMR, defs.PSP_TMR_ALIGNMENT, boot=True)
        self.tmr_size = 0

    def c2pmsg(self, n: int) -> int:
        return self.dev.reg(f"MP0_SMN_C2PMSG_{n}").read()

    def set_c2pmsg(self, n: int, value: int) -> None:
        self.dev.reg(f"MP0_SMN_C2PMSG_{n}").write(value)

    def is_sos_alive(self) -> bool:
        return self.c2pmsg(81) != 0

    def init_hw(self) -> None:
        d, fw = self.dev, self.dev.fw
        if not self.is_sos_alive():
            for comp, cmd in SOS_COMPONENTS:
                if comp in fw.sos:
                    self._bootloader_load(comp, cmd)
            d.wait(lambda: int(self.is_sos_alive()), 1, 1, "sOS start (C2PMSG_81 != 0)")
        self._ring_create()
        if defs.PSP_FW_TYPE_PSP_TOC in fw.sos:
            self._write_msg(fw.sos[defs.PSP_FW_TYPE_PSP_TOC])
            resp = self._submit(
                defs.GFX_CMD_ID_LOAD_TOC,
                "cmd_load_toc",
                toc_phy_addr_lo=d.mc_addr(self.msg1) & 0xFFFFFFFF,
                toc_phy_addr_hi=d.mc_addr(self.msg1) >> 32,
                toc_size=len(fw.sos[defs.PSP_FW_TYPE_PSP_TOC]),
            )
            self.tmr_size = resp.resp.tmr_size
            if self.tmr_size > MAX_TMR:
                raise PSPError(f"AM {d.name}: the PSP asks for a {self.tmr_size:#x}-byte TMR, tg reserves {MAX_TMR:#x}")
        if fw.smu is not None:
            self._load_ip_fw(*fw.smu)
        tmr = d.mc_addr(self.tmr)
        setup = self._command(defs.GFX_CMD_ID_SETUP_TMR, "cmd_setup_tmr", buf_phy_addr_lo=tmr & 0xFFFFFFFF,
                            buf_phy_addr_hi=tmr >> 32, system_phy_addr_lo=self.tmr & 0xFFFFFFFF,
                            system_phy_addr_hi=self.tmr >> 32, buf_size=self.tmr_size)  # fmt: skip
        setup.cmd.cmd_setup_tmr.bitfield.virt_phy_addr = 1
        self._ring_submit(setup)
        for types, image in fw.ip:
            self._load_ip_fw(types, image)
        self._submit(defs.GFX_CMD_ID_AUTOLOAD_RLC)
        d.log("PSP initialized: firmware loaded, RLC autoload started")

    # ---- bootloader ------------------------------------------------------------------------------------------------

    def _wait_bootloader(self) -> None:
        self.dev.wait(lambda: self.c2pmsg(35), 0x80000000, 0x80000000, "PSP bootloader ready (C2PMSG_35 bit 31)")

    def _bootloader_load(self, comp: int, cmd: int) -> None:
        self._wait_bootloader()
        name = next((k for k, v in vars(defs).items() if k.startswith("PSP_FW_TYPE_PSP_") and v == comp), str(comp))
        self.dev.log(f"PSP bootloader: loading sOS component {name.removeprefix('PSP_FW_TYPE_PSP_')}")
        self._write_msg(self.dev.fw.sos[comp])
        self.set_c2pmsg(36, self.dev.mc_addr(self.msg1) >> 20)
        self.set_c2pmsg(35, cmd)
        if cmd != defs.PSP_BL__LOAD_SOSDRV:
            self._wait_bootloader()

    def _write_msg(self, data: bytes) -> None:
        if len(data) > defs.PSP_1_MEG:
            raise PSPError(f"AM {self.dev.name}: a firmware image of {len(data)} bytes exceeds the 1 MiB PSP buffer")
        padded = data + bytes(-len(data) % 16 + 16)  # some bootloaders copy in 16-byte units past the end
        self.dev.vram.write(self.msg1, padded)
        self.dev.gmc.flush_hdp()

    # ---- ring ------------------------------------------------------------------------------------------------------

    def _ring_create(self) -> None:
        d = self.dev
        if self.c2pmsg(71) != 0:  # a ring from an earlier session
            self.set_c2pmsg(64, defs.GFX_CTRL_CMD_ID_DESTROY_RINGS)
            d.delay(0.02)
        d.wait(lambda: self.c2pmsg(64), 0x80000000, 0x80000000, "sOS ready for a ring (C2PMSG_64 bit 31)")
        ring = d.mc_addr(self.ring)
        self.set_c2pmsg(69, ring & 0xFFFFFFFF)
        self.set_c2pmsg(70, ring >> 32)
        self.set_c2pmsg(71, RING_BYTES)
        self.set_c2pmsg(64, defs.PSP_RING_TYPE__KM << 16)
        d.delay(0.02)
        d.wait(lambda: self.c2pmsg(64), 0x8000FFFF, 0x80000000, "PSP ring creation (C2PMSG_64)")

    def _command(self, cmd_id: int, part: str | None = None, **fields: int) -> defs.psp_gfx_cmd_resp:
        cmd = defs.psp_gfx_cmd_resp(cmd_id=cmd_id)
        if part is not None:
            sub = getattr(cmd.cmd, part)
            for k, v in fields.items():
                setattr(sub, k, v)
        return cmd

    def _submit(self, cmd_id: int, part: str | None = None, **fields: int) -> defs.psp_gfx_cmd_resp:
        return self._ring_submit(self._command(cmd_id, part, **fields))

    def _ring_submit(self, cmd: defs.psp_gfx_cmd_resp) -> defs.psp_gfx_cmd_resp:
        d = self.dev
        wptr = self.c2pmsg(67)
        cmd_mc, fence_mc = d.mc_addr(self.cmd), d.mc_addr(self.fence)
        frame = defs.psp_gfx_rb_frame(fence_value=wptr + 1, cmd_buf_addr_lo=cmd_mc & 0xFFFFFFFF,
                                      cmd_buf_addr_hi=cmd_mc >> 32, fence_addr_lo=fence_mc & 0xFFFFFFFF,
                                      fence_addr_hi=fence_mc >> 32)  # fmt: skip
        d.vram.write(self.cmd, bytes(cmd))
        d.vram.write(self.ring + (wptr * 4) % RING_BYTES, bytes(frame))
        d.gmc.flush_hdp()
        self.set_c2pmsg(67, wptr + ctypes.sizeof(frame) // 4)
        name = CMD_NAMES.get(cmd.cmd_id, hex(cmd.cmd_id))
        d.wait(lambda: int.from_bytes(d.vram.read(self.fence, 4), "little"), 0xFFFFFFFF, (wptr + 1) & 0xFFFFFFFF,
               f"PSP command {name}: fence")  # fmt: skip
        resp = defs.psp_gfx_cmd_resp.from_buffer_copy(d.vram.read(self.cmd, ctypes.sizeof(cmd)))
        if resp.resp.status != 0:
            raise PSPError(
                f"AM {d.name}: PSP command {name} ({cmd.cmd_id:#x}) failed with status {resp.resp.status:#x}"
            )
        return resp

    def _load_ip_fw(self, types: list[int], image: bytes) -> None:
        self._write_msg(image)
        msg = self.dev.mc_addr(self.msg1)
        for t in types:
            self.dev.log(f"PSP: loading firmware {FW_NAMES.get(t, t)} ({len(image)} bytes)")
            self._submit(defs.GFX_CMD_ID_LOAD_IP_FW, "cmd_load_ip_fw", fw_phy_addr_lo=msg & 0xFFFFFFFF,
                         fw_phy_addr_hi=msg >> 32, fw_size=len(image), fw_type=t)  # fmt: skip
