"""Fake gfx1100 firmware for the mock AM GPU (amd.md 5.10): header-valid files with small recognisable payloads.

Each file has the common header and the versioned header the AM driver parses (PSP sOS v2.0 with every component
and a TOC, SMU v1.0, SDMA v2.0, MEC RS64 v2.0 with a start address, IMU v1.0, RLC v2.3 with every list), and
payloads whose bytes name what they are (``b"fake:gc_11_0_0_mec.bin:code"`` repeated), so the mock PSP can check that
what the driver asked it to load is what the file holds. :func:`firmware_files` returns a FirmwareFiles serving them
with their own sha256 table: the real hash check runs, against the fake files.
"""

from __future__ import annotations

import ctypes
import hashlib
from functools import cache

from tg.runtime.amd.am.firmware import FirmwareFiles
from tg.runtime.amd.regs import defs

__all__ = ["MEC_START", "SOS_COMPONENTS", "fake_blobs", "firmware_files", "payload"]

MEC_START = 0x3_0000_0000  # RS64 start address of the fake MEC image
PAYLOAD_BYTES = 512
SOS_COMPONENTS = (defs.PSP_FW_TYPE_PSP_KDB, defs.PSP_FW_TYPE_PSP_SPL, defs.PSP_FW_TYPE_PSP_SYS_DRV,
                  defs.PSP_FW_TYPE_PSP_SOC_DRV, defs.PSP_FW_TYPE_PSP_INTF_DRV, defs.PSP_FW_TYPE_PSP_DBG_DRV,
                  defs.PSP_FW_TYPE_PSP_RAS_DRV, defs.PSP_FW_TYPE_PSP_SOS, defs.PSP_FW_TYPE_PSP_TOC)  # fmt: skip


def payload(name: str, part: str, size: int = PAYLOAD_BYTES) -> bytes:
    """The recognisable payload of one part of a fake file."""
    tag = f"fake:{name}:{part};".encode()
    return (tag * (size // len(tag) + 1))[:size]


def _common(hdr: ctypes.Structure, total: int, array_off: int, size: int, major: int, minor: int) -> None:
    c = hdr.header
    c.size_bytes, c.header_size_bytes = total, ctypes.sizeof(hdr)
    c.header_version_major, c.header_version_minor = major, minor
    c.ucode_array_offset_bytes, c.ucode_size_bytes = array_off, size


def _file(hdr: ctypes.Structure, parts: list[bytes]) -> tuple[bytes, list[int]]:
    """Header followed by the parts at 256-byte aligned offsets; returns the blob and the parts' offsets."""
    off = -(-ctypes.sizeof(hdr) // 256) * 256
    offsets, body = [], bytearray()
    for p in parts:
        offsets.append(off + len(body))
        body += p + bytes(-len(p) % 256)
    return bytes(hdr) + bytes(off - ctypes.sizeof(hdr)) + bytes(body), offsets


def _sos(name: str) -> bytes:
    n = len(SOS_COMPONENTS)
    hsize = ctypes.sizeof(defs.psp_firmware_header_v2_0) + n * ctypes.sizeof(defs.psp_fw_bin_desc)
    array_off = -(-hsize // 256) * 256
    parts = [payload(name, f"component{t}") for t in SOS_COMPONENTS]
    descs, body = bytearray(), bytearray()
    for t, p in zip(SOS_COMPONENTS, parts, strict=True):
        descs += bytes(defs.psp_fw_bin_desc(fw_type=t, fw_version=1, offset_bytes=len(body), size_bytes=len(p)))
        body += p
    hdr = defs.psp_firmware_header_v2_0(psp_fw_bin_count=n)
    _common(hdr, array_off + len(body), array_off, len(body), 2, 0)
    head = bytes(hdr) + bytes(descs)
    return head + bytes(array_off - len(head)) + bytes(body)


def _simple(cls: type[ctypes.Structure], name: str, major: int, minor: int) -> bytes:
    hdr = cls()
    blob, (off,) = _file(hdr, [payload(name, "image")])
    _common(hdr, len(blob), off, PAYLOAD_BYTES, major, minor)
    return bytes(hdr) + blob[ctypes.sizeof(hdr) :]


def _sdma(name: str) -> bytes:
    hdr = defs.sdma_firmware_header_v2_0()
    blob, (ctx, ctl) = _file(hdr, [payload(name, "thread0"), payload(name, "thread1")])
    _common(hdr, len(blob), ctx, PAYLOAD_BYTES, 2, 0)
    hdr.ctx_ucode_size_bytes, hdr.ctl_ucode_offset, hdr.ctl_ucode_size_bytes = PAYLOAD_BYTES, ctl, PAYLOAD_BYTES
    return bytes(hdr) + blob[ctypes.sizeof(hdr) :]


def _mec(name: str) -> bytes:
    hdr = defs.gfx_firmware_header_v2_0()
    blob, (code, stack) = _file(hdr, [payload(name, "code"), payload(name, "stack")])
    _common(hdr, len(blob), code, PAYLOAD_BYTES, 2, 0)
    hdr.ucode_size_bytes, hdr.ucode_offset_bytes = PAYLOAD_BYTES, code
    hdr.data_size_bytes, hdr.data_offset_bytes = PAYLOAD_BYTES, stack
    hdr.ucode_start_addr_lo, hdr.ucode_start_addr_hi = MEC_START & 0xFFFFFFFF, MEC_START >> 32
    return bytes(hdr) + blob[ctypes.sizeof(hdr) :]


def _imu(name: str) -> bytes:
    hdr = defs.imu_firmware_header_v1_0()
    blob, (iram,) = _file(hdr, [payload(name, "iram") + payload(name, "dram")])
    _common(hdr, len(blob), iram, 2 * PAYLOAD_BYTES, 1, 0)
    hdr.imu_iram_ucode_size_bytes = hdr.imu_dram_ucode_size_bytes = PAYLOAD_BYTES
    return bytes(hdr) + blob[ctypes.sizeof(hdr) :]


RLC_LISTS = [("save_restore_list_cntl", "list_cntl"), ("save_restore_list_gpm", "list_gpm"),
             ("save_restore_list_srm", "list_srm"), ("rlc_iram_ucode", "iram"), ("rlc_dram_ucode", "dram"),
             ("rlcp_ucode", "p"), ("rlcv_ucode", "v")]  # fmt: skip


def _rlc(name: str) -> bytes:
    hdr = defs.rlc_firmware_header_v2_3()
    parts = [payload(name, "g")] + [payload(name, part) for _, part in RLC_LISTS]
    blob, offsets = _file(hdr, parts)
    h0 = hdr.v2_2.v2_1.v2_0
    _common(h0, len(blob), offsets[0], PAYLOAD_BYTES, 2, 3)
    for (prefix, _), off in zip(RLC_LISTS, offsets[1:], strict=True):
        target = hdr if prefix.startswith("rlcp") or prefix.startswith("rlcv") else (
            hdr.v2_2 if prefix.startswith("rlc_") else hdr.v2_2.v2_1)  # fmt: skip
        setattr(target, f"{prefix}_offset_bytes", off)
        setattr(target, f"{prefix}_size_bytes", PAYLOAD_BYTES)
    return bytes(hdr) + blob[ctypes.sizeof(hdr) :]


@cache
def fake_blobs() -> dict[str, bytes]:
    """The fake gfx1100 firmware files by name."""
    return {"psp_13_0_0_sos.bin": _sos("psp_13_0_0_sos.bin"),
            "smu_13_0_0.bin": _simple(defs.smc_firmware_header_v1_0, "smu_13_0_0.bin", 1, 0),
            "sdma_6_0_0.bin": _sdma("sdma_6_0_0.bin"), "gc_11_0_0_mec.bin": _mec("gc_11_0_0_mec.bin"),
            "gc_11_0_0_imu.bin": _imu("gc_11_0_0_imu.bin"), "gc_11_0_0_rlc.bin": _rlc("gc_11_0_0_rlc.bin")}  # fmt: skip


def firmware_files() -> FirmwareFiles:
    """A FirmwareFiles serving the fake files, checked against their own sha256."""
    blobs = fake_blobs()
    return FirmwareFiles([], blobs=blobs, hashes={n: hashlib.sha256(b).hexdigest() for n, b in blobs.items()})
