"""The mock AM GPU's firmware processors: the PSP (bootloader, sOS ring, firmware loading) and the SMU mailbox.

They act on register writes as the real ones would, instantly: the PSP bootloader is always ready, takes sOS
components from the message buffer and starts the sOS on LOAD_SOSDRV; the sOS creates its ring, executes the frames
``C2PMSG_67`` announces (LOAD_TOC answers a TMR size, SETUP_TMR, LOAD_IP_FW records the image, AUTOLOAD_RLC completes
the RLC bootload once the MEC, RLC and SDMA firmware are in), writes each fence and a response status (non-zero for
a command the sOS would refuse: firmware before the TMR, an unknown command). The SMU answers messages only once
its firmware was loaded; the debug mailbox's mode-1 reset returns the GPU to its power-on state.
Every step is appended to ``gpu.events`` (what boot tests check the order of).
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
from typing import TYPE_CHECKING

from tg.runtime.amd.regs import defs

if TYPE_CHECKING:
    from tg.runtime.amd.sim.am_gpu import MockAMGPU

__all__ = ["MockPSP", "MockSMU"]

TMR_SIZE = 0x1000000
STATUS_REFUSED = 0xFFFF0007
BL_NAMES: dict[int, str] = {}
for _k, _v in vars(defs).items():
    if _k.startswith("PSP_BL__"):
        BL_NAMES.setdefault(_v, _k.removeprefix("PSP_BL__"))
CMD_NAMES = {v: k.removeprefix("GFX_CMD_ID_") for k, v in vars(defs).items() if k.startswith("GFX_CMD_ID_")}
FW_NAMES = {v: k.removeprefix("GFX_FW_TYPE_") for k, v in vars(defs).items() if k.startswith("GFX_FW_TYPE_")}
REQUIRED_FOR_AUTOLOAD = {defs.GFX_FW_TYPE_RS64_MEC, defs.GFX_FW_TYPE_RLC_G, defs.GFX_FW_TYPE_SDMA_UCODE_TH0}
DPM_MHZ = {defs.PPCLK_GFXCLK: [500, 2500], defs.PPCLK_SOCCLK: [500, 1200], defs.PPCLK_UCLK: [96, 1250],
           defs.PPCLK_FCLK: [400, 1900]}  # fmt: skip


class MockPSP:
    """The PSP of a mock AM GPU."""

    def __init__(self, gpu: MockAMGPU) -> None:
        self.gpu = gpu
        self.power_on()
        for n in (35, 64, 67, 81):
            gpu.on_read(f"MP0_SMN_C2PMSG_{n}", functools.partial(self._read, n))
        for n in (35, 64, 67):
            gpu.on_write(f"MP0_SMN_C2PMSG_{n}", functools.partial(self._write, n))

    def power_on(self) -> None:
        self.sos_alive = False
        self.ring: tuple[int, int] | None = None  # (VRAM offset, bytes)
        self.wptr = 0
        self.tmr = False
        self.loaded: dict[int, str] = {}  # GFX_FW_TYPE -> sha256 of the image
        self.components: list[int] = []

    def _read(self, n: int) -> int:
        if n == 35:
            return 0x80000000  # the bootloader is always ready
        if n == 81:
            return 0x3A0000 if self.sos_alive else 0  # sOS version when running
        if n == 64:
            return 0x80000000 if self.sos_alive else 0  # ready, last ring command status 0
        return self.wptr

    def _write(self, n: int, v: int) -> None:
        g = self.gpu
        if n == 35:
            if self.sos_alive:
                g.violation(f"PSP bootloader command {v:#x} while the sOS is already running")
                return
            name = BL_NAMES.get(v, hex(v))
            src = g.mc_to_vram(g.reg_value("MP0_SMN_C2PMSG_36") << 20)
            self.components.append(v)
            g.events.append(f"psp bootloader {name} ({g.vram[src : src + 8].hex()})")
            if v == defs.PSP_BL__LOAD_SOSDRV:
                self.sos_alive = True
        elif n == 64:
            if v == defs.GFX_CTRL_CMD_ID_DESTROY_RINGS:
                self.ring = None
                g.set_reg_value("MP0_SMN_C2PMSG_71", 0)
                g.events.append("psp ring destroyed")
            elif v == defs.PSP_RING_TYPE__KM << 16:
                if not self.sos_alive:
                    g.violation("PSP ring created before the sOS runs")
                    return
                mc = g.reg_value("MP0_SMN_C2PMSG_69") | g.reg_value("MP0_SMN_C2PMSG_70") << 32
                self.ring, self.wptr = (g.mc_to_vram(mc), g.reg_value("MP0_SMN_C2PMSG_71")), 0
                g.events.append("psp ring created")
            else:
                g.violation(f"unknown PSP ring control command {v:#x} in C2PMSG_64")
        else:
            self._frames(v)

    def _frames(self, new_wptr: int) -> None:
        g = self.gpu
        if self.ring is None:
            g.violation("PSP frame submitted (C2PMSG_67) without a ring")
            return
        base, size = self.ring
        frame_dw = ctypes.sizeof(defs.psp_gfx_rb_frame) // 4
        while self.wptr < new_wptr:
            off = base + (self.wptr * 4) % size
            frame = defs.psp_gfx_rb_frame.from_buffer_copy(g.vram[off : off + 4 * frame_dw])
            cmd_at = g.mc_to_vram(frame.cmd_buf_addr_lo | frame.cmd_buf_addr_hi << 32)
            cmd = defs.psp_gfx_cmd_resp.from_buffer_copy(g.vram[cmd_at : cmd_at + ctypes.sizeof(defs.psp_gfx_cmd_resp)])
            cmd.resp.status = self._command(cmd)
            g.vram[cmd_at : cmd_at + ctypes.sizeof(cmd)] = bytes(cmd)
            fence = g.mc_to_vram(frame.fence_addr_lo | frame.fence_addr_hi << 32)
            g.vram[fence : fence + 4] = frame.fence_value.to_bytes(4, "little")
            self.wptr += frame_dw

    def _command(self, cmd: defs.psp_gfx_cmd_resp) -> int:
        g = self.gpu
        name = CMD_NAMES.get(cmd.cmd_id, hex(cmd.cmd_id))
        if cmd.cmd_id == defs.GFX_CMD_ID_LOAD_TOC:
            cmd.resp.tmr_size = TMR_SIZE
            g.events.append("psp LOAD_TOC")
        elif cmd.cmd_id == defs.GFX_CMD_ID_SETUP_TMR:
            t = cmd.cmd.cmd_setup_tmr
            if t.buf_size < TMR_SIZE or not t.bitfield.virt_phy_addr:
                g.events.append(f"psp SETUP_TMR refused (size {t.buf_size:#x})")
                return STATUS_REFUSED
            self.tmr = True
            g.events.append("psp SETUP_TMR")
        elif cmd.cmd_id == defs.GFX_CMD_ID_LOAD_IP_FW:
            f = cmd.cmd.cmd_load_ip_fw
            fw_name = FW_NAMES.get(f.fw_type, hex(f.fw_type))
            if not self.tmr and f.fw_type != defs.GFX_FW_TYPE_SMU:
                g.events.append(f"psp LOAD_IP_FW {fw_name} refused (no TMR)")
                return STATUS_REFUSED
            src = g.mc_to_vram(f.fw_phy_addr_lo | f.fw_phy_addr_hi << 32)
            self.loaded[f.fw_type] = hashlib.sha256(bytes(g.vram[src : src + f.fw_size])).hexdigest()
            g.events.append(f"psp LOAD_IP_FW {fw_name}")
            if f.fw_type == defs.GFX_FW_TYPE_SMU:
                g.smu.running = True
        elif cmd.cmd_id == defs.GFX_CMD_ID_AUTOLOAD_RLC:
            missing = REQUIRED_FOR_AUTOLOAD - set(self.loaded)
            if missing:
                g.events.append(f"psp AUTOLOAD_RLC refused (missing {', '.join(FW_NAMES[m] for m in missing)})")
                return STATUS_REFUSED
            g.rlc_loaded = True
            g.events.append("psp AUTOLOAD_RLC")
        else:
            g.events.append(f"psp {name} refused")
            return STATUS_REFUSED
        return 0


class MockSMU:
    """The SMU mailbox of a mock AM GPU."""

    def __init__(self, gpu: MockAMGPU) -> None:
        self.gpu = gpu
        self.running = False
        self.clocks: dict[int, tuple[int, int]] = {}
        self.power_limit = 0
        gpu.on_write("MP1_SMN_C2PMSG_66", self._message)
        gpu.on_write("MP1_SMN_C2PMSG_75", self._debug_message)

    def _message(self, msg: int) -> None:
        g = self.gpu
        g.set_reg_value("MP1_SMN_C2PMSG_66", msg)
        if not self.running:
            return  # no firmware: no response (the driver's wait times out)
        arg = g.reg_value("MP1_SMN_C2PMSG_82")
        result = arg
        if msg == defs.PPSMC_MSG_GetSmuVersion:
            result = 0x004E1A00
        elif msg == defs.PPSMC_MSG_GetDpmFreqByIndex:
            levels = DPM_MHZ.get(arg >> 16, [])
            idx = arg & 0xFFFF
            result = len(levels) if idx == 0xFF else (levels[idx] if idx < len(levels) else 0)
        elif msg in (defs.PPSMC_MSG_SetSoftMinByFreq, defs.PPSMC_MSG_SetSoftMaxByFreq):
            lo, hi = self.clocks.get(arg >> 16, (0, 0))
            self.clocks[arg >> 16] = (
                (arg & 0xFFFF, hi) if msg == defs.PPSMC_MSG_SetSoftMinByFreq else (lo, arg & 0xFFFF)
            )
        elif msg == defs.PPSMC_MSG_SetPptLimit:
            self.power_limit = arg
        g.set_reg_value("MP1_SMN_C2PMSG_82", result)
        g.set_reg_value("MP1_SMN_C2PMSG_90", 1)

    def _debug_message(self, msg: int) -> None:
        g = self.gpu
        if not self.running or msg != 2:
            g.violation(f"SMU debug message {msg:#x} ({'no SMU firmware' if not self.running else 'unknown'})")
            return
        g.mode1_reset()
        g.set_reg_value("MP1_SMN_C2PMSG_54", 1)
