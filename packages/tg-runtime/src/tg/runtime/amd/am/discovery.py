"""The IP discovery table an AMD GPU keeps at the end of its VRAM (amd.md 5.3): which IP blocks it has, their versions
and register base addresses, harvested instances and the graphics core's shape.

Layout (Linux ``include/discovery.h``): a binary header (signature 0x28211407) with a table list; the IP discovery
table (``'IPDS'``) lists dies, each a die header followed by IP entries (hardware id, instance, version, base addresses,
32- or 64-bit); the harvest table (``'HARV'``) lists disabled instances; the GC table holds SE/SA/CU counts, LDS and
scratch sizes. :func:`parse` reads it, :func:`build` writes one (the mock GPU's).
"""

from __future__ import annotations

import ctypes
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field

from tg.runtime.amd.regs import defs

__all__ = ["HW_IDS", "TABLE_BYTES", "TABLE_OFFSET_FROM_END", "Discovery", "DiscoveryError", "build", "parse"]

TABLE_OFFSET_FROM_END = 64 << 10  # the table starts 64 KiB below the end of VRAM
TABLE_BYTES = 10 << 10  # and is at most 10 KiB

#: IP name -> hardware id in the discovery table (NBIO's is the NBIF id on these parts)
HW_IDS = {"GC": defs.GC_HWID, "SDMA0": defs.SDMA0_HWID, "MMHUB": defs.MMHUB_HWID, "NBIO": defs.NBIF_HWID,
          "MP0": defs.MP0_HWID, "MP1": defs.MP1_HWID, "HDP": defs.HDP_HWID, "OSSSYS": defs.OSSSYS_HWID}  # fmt: skip
_IP_OF_HW = {v: k for k, v in HW_IDS.items()}


class DiscoveryError(RuntimeError):
    """The discovery table is missing or malformed (wrong signature, offsets outside the table)."""


@dataclass
class Discovery:
    """What the table says: ``versions[ip]`` (major, minor, revision), ``bases[ip][instance]`` (segment base
    addresses, in dwords), ``harvested[ip]`` (disabled instances), ``gc`` (the GC info fields)."""

    versions: dict[str, tuple[int, int, int]] = field(default_factory=dict)
    bases: dict[str, dict[int, tuple[int, ...]]] = field(default_factory=dict)
    harvested: dict[str, set[int]] = field(default_factory=dict)
    gc: dict[str, int] = field(default_factory=dict)
    gc_version: tuple[int, int] = (0, 0)

    def props(self) -> dict[str, int]:
        """The device facts the AMD device uses (the names of KFD's topology properties, amd.md 3.1)."""
        g = self.gc
        if self.gc_version[0] >= 2:
            cu_per_sa, sa_per_se = g["gc_num_cu_per_sh"], g["gc_num_sh_per_se"]
        else:
            cu_per_sa, sa_per_se = 2 * (g["gc_num_wgp0_per_sa"] + g["gc_num_wgp1_per_sa"]), g["gc_num_sa_per_se"]
        xccs = len([i for i in self.bases.get("GC", {0: ()}) if i not in self.harvested.get("GC", set())]) or 1
        arrays = sa_per_se * g["gc_num_se"] * xccs
        major, minor, rev = self.versions["GC"]
        return {
            "cu_per_simd_array": cu_per_sa,
            "simd_count": 2 * cu_per_sa * arrays,
            "simd_per_cu": 2,
            "array_count": arrays,
            "simd_arrays_per_engine": sa_per_se,
            "num_xcc": xccs,
            "max_slots_scratch_cu": g["gc_max_scratch_slots_per_cu"],
            "max_waves_per_simd": g["gc_max_waves_per_simd"],
            "lds_size_in_kb": g["gc_lds_size"],
            "wave_front_size": g["gc_wave_size"],
            "gfx_target_version": major * 10000 + minor * 100 + rev,
        }


def _struct(cls: type[ctypes.Structure], blob: bytes, off: int, what: str) -> ctypes.Structure:
    if off <= 0 or off + ctypes.sizeof(cls) > len(blob):
        raise DiscoveryError(f"discovery table: {what} at byte {off:#x} lies outside the {len(blob)}-byte table")
    return cls.from_buffer_copy(blob, off)


def parse(blob: bytes) -> Discovery:
    """Read a discovery table (DiscoveryError when it is not one)."""
    bhdr: defs.binary_header = defs.binary_header.from_buffer_copy(blob)
    if bhdr.binary_signature != defs.BINARY_SIGNATURE:
        raise DiscoveryError(
            f"discovery table: binary signature {bhdr.binary_signature:#010x}, expected "
            f"{defs.BINARY_SIGNATURE:#010x} (is VRAM readable? is this an AMD GPU after POST?)"
        )
    ihdr: defs.ip_discovery_header = _struct(defs.ip_discovery_header, blob, bhdr.table_list[defs.IP_DISCOVERY].offset,
                                             "the IP discovery header")  # type: ignore[assignment]  # fmt: skip
    if ihdr.signature != defs.DISCOVERY_TABLE_SIGNATURE:
        raise DiscoveryError(f"discovery table: IP table signature {ihdr.signature:#010x}, expected "
                             f"{defs.DISCOVERY_TABLE_SIGNATURE:#010x} ('IPDS')")  # fmt: skip
    out = Discovery()
    word = 8 if ihdr.base_addr_64_bit else 4
    for d in range(min(ihdr.num_dies, 16)):
        die_off = ihdr.die_info[d].die_offset
        dhdr: defs.die_header = _struct(defs.die_header, blob, die_off, f"die {d}")  # type: ignore[assignment]
        off = die_off + ctypes.sizeof(defs.die_header)
        for _ in range(dhdr.num_ips):
            ip: defs.ip_v4 = _struct(defs.ip_v4, blob, off, "an IP entry")  # type: ignore[assignment]
            start = off + ctypes.sizeof(defs.ip_v4)
            end = start + word * ip.num_base_address
            if end > len(blob):
                raise DiscoveryError(f"discovery table: IP entry at {off:#x} runs past the table")
            bases = struct.unpack_from(f"<{ip.num_base_address}{'Q' if word == 8 else 'I'}", blob, start)
            name = _IP_OF_HW.get(ip.hw_id)
            if name is not None:
                out.bases.setdefault(name, {})[ip.instance_number] = tuple(bases)
                out.versions[name] = (ip.major, ip.minor, ip.revision)
            off = end
    harv_off = bhdr.table_list[defs.HARVEST_INFO].offset
    if harv_off and harv_off + ctypes.sizeof(defs.harvest_table) <= len(blob):
        harv: defs.harvest_table = defs.harvest_table.from_buffer_copy(blob, harv_off)
        if harv.header.signature == defs.HARVEST_TABLE_SIGNATURE:
            for entry in harv.list:
                if (name := _IP_OF_HW.get(entry.hw_id)) is not None:
                    out.harvested.setdefault(name, set()).add(entry.number_instance)
    gc_off = bhdr.table_list[defs.GC].offset
    ghdr: defs.gpu_info_header = _struct(defs.gpu_info_header, blob, gc_off, "the GC info")  # type: ignore[assignment]
    cls: type[ctypes.Structure] = defs.gc_info_v2_1 if ghdr.version_major >= 2 else defs.gc_info_v1_0
    if ghdr.version_major == 2 and ghdr.version_minor == 0:
        cls = defs.gc_info_v2_0
    gc = _struct(cls, blob, gc_off, "the GC info")
    out.gc = {n: int(getattr(gc, n)) for n, *_ in cls._fields_ if n != "header"}
    out.gc_version = (ghdr.version_major, ghdr.version_minor)
    missing = [ip for ip in ("GC", "SDMA0", "MMHUB", "NBIO", "MP0", "MP1", "HDP", "OSSSYS") if ip not in out.versions]
    if missing:
        raise DiscoveryError(f"discovery table lists no {', '.join(missing)} (found {', '.join(out.versions)})")
    return out


def build(ips: Mapping[str, tuple[tuple[int, int, int], tuple[int, ...]]], gc: Mapping[str, int]) -> bytes:
    """A discovery table (one die, 32-bit bases, GC info v1.0) listing ``ips`` (name -> (version, bases))."""
    ip_data = bytearray()
    for name, ((major, minor, rev), bases) in ips.items():
        entry = defs.ip_v4(hw_id=HW_IDS[name], instance_number=0, num_base_address=len(bases), major=major,
                           minor=minor, revision=rev)  # fmt: skip
        ip_data += bytes(entry) + struct.pack(f"<{len(bases)}I", *bases)
    ip_off = ctypes.sizeof(defs.binary_header)
    die_off = ip_off + ctypes.sizeof(defs.ip_discovery_header)
    gc_off = die_off + ctypes.sizeof(defs.die_header) + len(ip_data)
    ihdr = defs.ip_discovery_header(signature=defs.DISCOVERY_TABLE_SIGNATURE, version=4, num_dies=1)
    ihdr.die_info[0].die_offset = die_off
    g = defs.gc_info_v1_0(**gc)
    g.header.table_id, g.header.version_major, g.header.version_minor = defs.GC_TABLE_ID, 1, 0
    g.header.size = ctypes.sizeof(g)
    bhdr = defs.binary_header(binary_signature=defs.BINARY_SIGNATURE, version_major=1)
    bhdr.table_list[defs.IP_DISCOVERY].offset = ip_off
    bhdr.table_list[defs.GC].offset = gc_off
    blob = bytes(bhdr) + bytes(ihdr) + bytes(defs.die_header(num_ips=len(ips))) + bytes(ip_data) + bytes(g)
    if len(blob) > TABLE_BYTES:
        raise ValueError(f"discovery table of {len(blob)} bytes exceeds {TABLE_BYTES}")
    return blob
