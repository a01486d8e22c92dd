"""Firmware of the AM driver (amd.md 5.10): the linux-firmware files a gfx1100 board needs, checked by sha256, and
parsed into what the PSP loads.

Files are looked for in ``TG_AMD_FW_DIR``, then ``/lib/firmware/amdgpu`` (plain, or ``.zst`` on Python >= 3.14 where
the standard library decompresses it); ``TG_AMD_FW_FETCH=1`` downloads a missing one from linux-firmware at a pinned
commit. Every file's sha256 must be the committed one (a different linux-firmware release is refused rather than
booted blind). Missing files raise FileNotFoundError listing every missing file and every place looked in.

Parsing follows the common header and its versioned headers (Linux ``amdgpu_ucode.h``): the PSP sOS file's component
table (key database, SPL table, system/SoC/interface/debug/RAS drivers, sOS, TOC), the SMU image, SDMA's two
threads, the MEC's RS64 code, stack and start address, the IMU's instruction and data RAM images, the RLC's lists.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import pathlib
import sys
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field

from tg.runtime.amd.regs import defs

__all__ = ["FIRMWARE", "FW_COMMIT", "SYSTEM_DIR", "Firmware", "FirmwareFiles"]

SYSTEM_DIR = pathlib.Path("/lib/firmware/amdgpu")
FW_COMMIT = "0a6871b19abf5d6e024b5d208b101ae53e7fa0de"  # linux-firmware commit the hashes below come from
FW_URL = "https://gitlab.com/kernel-firmware/linux-firmware/-/raw/{commit}/amdgpu/{name}"

#: gfx1100 (GC 11.0.0, PSP/SMU 13.0.0, SDMA 6.0.0) firmware files and their sha256 at FW_COMMIT
FIRMWARE: dict[str, str] = {
    "psp_13_0_0_sos.bin": "4a51299f6d0a15bbba9694419f7891e6accc01dbd2dd67c06add7bfd75a45ac6",
    "smu_13_0_0.bin": "93e46a5526f19dcc3d13bfd9e23f88bc8eee52138bfe9caf0951b4eef5e49914",
    "sdma_6_0_0.bin": "82cd01a24171af12de6c7ac4ee7471aa2dfcf51f9677e7bae9cd4c75e07761ee",
    "gc_11_0_0_mec.bin": "1dd1de8ecf5455ea4719c502b64b32ac18763d5601128c01b4a4a36211a122c2",
    "gc_11_0_0_imu.bin": "b4f8fc056b45709a6abf48e7885fb1b4ab8d3cc092cbfa2c554a78564a6403bc",
    "gc_11_0_0_rlc.bin": "dabd49039772d02f5fd5e48dc21d35ad52a6b1283b470dabca86ca159c4c7c8e",
}


class FirmwareFiles:
    """Where firmware blobs come from: the file system (``dirs``, then the download when ``fetch``), or ``blobs`` given
    directly (the mocks' fake firmware). Each blob is checked against ``hashes``."""

    def __init__(
        self,
        dirs: list[pathlib.Path] | None = None,
        *,
        fetch: bool = False,
        blobs: Mapping[str, bytes] | None = None,
        hashes: Mapping[str, str] | None = None,
    ) -> None:
        if dirs is None:
            from tg.ir.helpers import TG_AMD_FW_DIR, TG_AMD_FW_FETCH

            dirs = [pathlib.Path(d) for d in str(TG_AMD_FW_DIR.value).split(os.pathsep) if d] + [SYSTEM_DIR]
            fetch = fetch or bool(int(TG_AMD_FW_FETCH.value))
        self.dirs, self.fetch, self.blobs = dirs, fetch, dict(blobs or {})
        self.hashes = dict(FIRMWARE if hashes is None else hashes)

    def find(self, name: str) -> bytes | None:
        """The bytes of ``name`` from the first place that has it (unchecked), or None."""
        if name in self.blobs:
            return self.blobs[name]
        for d in self.dirs:
            if (d / name).is_file():
                return (d / name).read_bytes()
            if (d / f"{name}.zst").is_file() and sys.version_info >= (3, 14):
                import compression.zstd  # type: ignore[import-not-found]

                return bytes(compression.zstd.decompress((d / f"{name}.zst").read_bytes()))
        return None

    def where(self) -> str:
        """The places looked in, for error messages."""
        places = [f"{d} (plain{', .zst' if sys.version_info >= (3, 14) else ''})" for d in self.dirs]
        places.append(f"linux-firmware@{FW_COMMIT[:12]} (TG_AMD_FW_FETCH=1)" if self.fetch else
                      "no download (TG_AMD_FW_FETCH=0)")  # fmt: skip
        return "; ".join(places)

    def load_all(self, names: list[str]) -> dict[str, bytes]:
        """Every file of ``names``, checked; FileNotFoundError listing all the missing ones."""
        found = {n: b for n in names if (b := self.find(n)) is not None}
        missing = [n for n in names if n not in found]
        if missing and self.fetch:
            for n in list(missing):
                found[n] = self._download(n)
                missing.remove(n)
        if missing:
            raise FileNotFoundError(
                f"AM: firmware file(s) {', '.join(missing)} not found; looked in {self.where()}. Install "
                f"linux-firmware (Debian: firmware-amd-graphics), point TG_AMD_FW_DIR at a directory holding them, or "
                f"set TG_AMD_FW_FETCH=1 to download them (linux-firmware commit {FW_COMMIT[:12]})")  # fmt: skip
        for n, blob in found.items():
            want = self.hashes.get(n)
            got = hashlib.sha256(blob).hexdigest()
            if want is None or got != want:
                raise ValueError(f"AM: firmware {n} has sha256 {got}, tg expects {want} (linux-firmware commit "
                                 f"{FW_COMMIT[:12]}); a different firmware release is not booted. Looked in "
                                 f"{self.where()}")  # fmt: skip
        return found

    def _download(self, name: str) -> bytes:
        url = FW_URL.format(commit=FW_COMMIT, name=name)
        try:
            with urllib.request.urlopen(url, timeout=60) as r:
                return bytes(r.read())
        except OSError as e:
            raise FileNotFoundError(f"AM: firmware {name} is not installed and downloading {url} failed: {e}") from e


def _hdr(cls: type[ctypes.Structure], blob: bytes, name: str) -> ctypes.Structure:
    if len(blob) < ctypes.sizeof(cls):
        raise ValueError(f"AM: firmware {name} is {len(blob)} bytes, shorter than its header {cls.__name__}")
    return cls.from_buffer_copy(blob)


def _slice(blob: bytes, off: int, size: int, name: str, what: str) -> bytes:
    if off < 0 or size < 0 or off + size > len(blob):
        raise ValueError(
            f"AM: firmware {name}: {what} [{off:#x}, {off + size:#x}) lies outside the {len(blob)}-byte file"
        )
    return blob[off : off + size]


@dataclass
class Firmware:
    """Parsed firmware: ``sos[psp_fw_type]`` (sOS components), ``smu`` (the SMU image), ``ip`` ((GFX_FW_TYPE ids,
    image) in PSP load order), ``mec_start`` (the MEC's RS64 start address)."""

    sos: dict[int, bytes] = field(default_factory=dict)
    smu: tuple[list[int], bytes] | None = None
    ip: list[tuple[list[int], bytes]] = field(default_factory=list)
    mec_start: int = 0
    versions: dict[str, tuple[int, int]] = field(default_factory=dict)

    @classmethod
    def load(cls, files: FirmwareFiles, ip_versions: Mapping[str, tuple[int, int, int]]) -> Firmware:
        """Read and parse the firmware for a GPU with these IP versions."""

        def v(ip: str) -> str:
            return "_".join(map(str, ip_versions[ip]))

        names = {
            "sos": f"psp_{v('MP0')}_sos.bin",
            "smu": f"smu_{v('MP1')}.bin",
            "sdma": f"sdma_{v('SDMA0')}.bin",
            "mec": f"gc_{v('GC')}_mec.bin",
            "imu": f"gc_{v('GC')}_imu.bin",
            "rlc": f"gc_{v('GC')}_rlc.bin",
        }
        blobs = files.load_all(list(names.values()))
        fw = cls()
        for key, n in names.items():
            common = _hdr(defs.common_firmware_header, blobs[n], n)
            fw.versions[key] = (common.header_version_major, common.header_version_minor)
        fw._sos(blobs[names["sos"]], names["sos"])
        fw._smu(blobs[names["smu"]], names["smu"])
        fw._sdma(blobs[names["sdma"]], names["sdma"])
        fw._mec(blobs[names["mec"]], names["mec"])
        fw._imu(blobs[names["imu"]], names["imu"])
        fw._rlc(blobs[names["rlc"]], names["rlc"])
        return fw

    def _need(self, name: str, key: str, major: int) -> None:
        if self.versions[key][0] != major:
            raise ValueError(f"AM: firmware {name} has header version {self.versions[key]}; tg parses {major}.x")

    def _sos(self, blob: bytes, name: str) -> None:
        self._need(name, "sos", 2)
        h = _hdr(defs.psp_firmware_header_v2_0, blob, name)
        base = h.header.ucode_array_offset_bytes
        desc_size = ctypes.sizeof(defs.psp_fw_bin_desc)
        for i in range(h.psp_fw_bin_count):
            off = ctypes.sizeof(defs.psp_firmware_header_v2_0) + i * desc_size
            d = defs.psp_fw_bin_desc.from_buffer_copy(_slice(blob, off, desc_size, name, f"component {i}"))
            self.sos[d.fw_type] = _slice(blob, base + d.offset_bytes, d.size_bytes, name, f"component {d.fw_type}")

    def _smu(self, blob: bytes, name: str) -> None:
        h = _hdr(defs.smc_firmware_header_v1_0, blob, name).header
        self.smu = ([defs.GFX_FW_TYPE_SMU], _slice(blob, h.ucode_array_offset_bytes, h.ucode_size_bytes, name, "image"))

    def _sdma(self, blob: bytes, name: str) -> None:
        self._need(name, "sdma", 2)
        h = _hdr(defs.sdma_firmware_header_v2_0, blob, name)
        self.ip.append(([defs.GFX_FW_TYPE_SDMA_UCODE_TH1], _slice(blob, h.ctl_ucode_offset, h.ctl_ucode_size_bytes,
                                                                name, "thread 1")))  # fmt: skip
        self.ip.append(
            (
                [defs.GFX_FW_TYPE_SDMA_UCODE_TH0],
                _slice(
                    blob,
                    h.header.ucode_array_offset_bytes,
                    h.ctx_ucode_size_bytes,
                    name,
                    "thread 0",
                ),
            )
        )

    def _mec(self, blob: bytes, name: str) -> None:
        self._need(name, "mec", 2)
        h = _hdr(defs.gfx_firmware_header_v2_0, blob, name)
        code = _slice(blob, h.header.ucode_array_offset_bytes, h.ucode_size_bytes, name, "RS64 code")
        self.ip.append(([defs.GFX_FW_TYPE_RS64_MEC], code))
        stack = _slice(blob, h.data_offset_bytes, h.data_size_bytes, name, "stack")
        self.ip.append(([defs.GFX_FW_TYPE_RS64_MEC_P0_STACK], stack))
        self.mec_start = h.ucode_start_addr_lo | h.ucode_start_addr_hi << 32

    def _imu(self, blob: bytes, name: str) -> None:
        h = _hdr(defs.imu_firmware_header_v1_0, blob, name)
        off, isz, dsz = h.header.ucode_array_offset_bytes, h.imu_iram_ucode_size_bytes, h.imu_dram_ucode_size_bytes
        self.ip.append(([defs.GFX_FW_TYPE_IMU_I], _slice(blob, off, isz, name, "instruction RAM")))
        self.ip.append(([defs.GFX_FW_TYPE_IMU_D], _slice(blob, off + isz, dsz, name, "data RAM")))

    def _rlc(self, blob: bytes, name: str) -> None:
        self._need(name, "rlc", 2)
        minor = self.versions["rlc"][1]
        h3 = defs.rlc_firmware_header_v2_3.from_buffer_copy(blob.ljust(ctypes.sizeof(defs.rlc_firmware_header_v2_3)))
        h2, h1, h0 = h3.v2_2, h3.v2_2.v2_1, h3.v2_2.v2_1.v2_0
        if minor >= 1:
            for kind, f in (("LIST_SRM_CNTL", "cntl"), ("LIST_GPM_MEM", "gpm"), ("LIST_SRM_MEM", "srm")):
                off, size = (
                    getattr(h1, f"save_restore_list_{f}_offset_bytes"),
                    getattr(h1, f"save_restore_list_{f}_size_bytes"),
                )
                self.ip.append(
                    ([getattr(defs, f"GFX_FW_TYPE_RLC_RESTORE_{kind}")], _slice(blob, off, size, name, kind))
                )
        if minor >= 2:
            for kind, f in (("IRAM", "iram"), ("DRAM_BOOT", "dram")):
                off, size = getattr(h2, f"rlc_{f}_ucode_offset_bytes"), getattr(h2, f"rlc_{f}_ucode_size_bytes")
                self.ip.append(([getattr(defs, f"GFX_FW_TYPE_RLC_{kind}")], _slice(blob, off, size, name, kind)))
        if minor >= 3:
            for kind in ("P", "V"):
                off, size = (
                    getattr(h3, f"rlc{kind.lower()}_ucode_offset_bytes"),
                    getattr(h3, f"rlc{kind.lower()}_ucode_size_bytes"),
                )
                self.ip.append(
                    ([getattr(defs, f"GFX_FW_TYPE_RLC_{kind}")], _slice(blob, off, size, name, f"RLC {kind}"))
                )
        hdr = h0.header
        self.ip.append(([defs.GFX_FW_TYPE_RLC_G], _slice(blob, hdr.ucode_array_offset_bytes, hdr.ucode_size_bytes, name,
                                                          "RLC G")))  # fmt: skip
