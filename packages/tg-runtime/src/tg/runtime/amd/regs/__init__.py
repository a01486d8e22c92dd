"""AMD GPU register tables and interface layouts, generated from the Linux amdgpu headers (scripts/gen_amd_regs.py).

Per IP version (amd.md 5.2) a table ``name -> RegSpec(offset, segment, fields)``; the absolute dword address of a
register is its IP's base address for ``segment`` (from the discovery table) plus ``offset``. :mod:`.defs` holds the
constants and ctypes layouts (discovery table, firmware headers, PSP ring frames and commands, the v11 compute MQD).
Only what the AM driver and its mock use is kept; the generator's name lists grow with the driver.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from functools import cache

__all__ = ["TABLES", "RegSpec", "table"]

#: (IP, version) -> module of generated data; MP0 and MP1 share the MP header
TABLES: dict[tuple[str, tuple[int, int, int]], str] = {
    ("GC", (11, 0, 0)): "gc_11_0_0",
    ("MMHUB", (3, 0, 0)): "mmhub_3_0_0",
    ("NBIO", (4, 3, 0)): "nbio_4_3_0",
    ("MP0", (13, 0, 0)): "mp_13_0_0",
    ("MP1", (13, 0, 0)): "mp_13_0_0",
    ("OSSSYS", (6, 0, 0)): "osssys_6_0_0",
    ("HDP", (6, 0, 0)): "hdp_6_0_0",
}


@dataclass(frozen=True)
class RegSpec:
    """A register: dword ``offset`` within segment ``segment`` of its IP, bit ``fields`` (name -> (low, high))."""

    name: str
    offset: int
    segment: int
    fields: dict[str, tuple[int, int]]

    def encode(self, **values: int) -> int:
        """The register value with these fields set (others 0); unknown fields or values too wide raise."""
        out = 0
        for name, value in values.items():
            lo, hi = self.field(name)
            if not 0 <= value < 1 << (hi - lo + 1):
                raise ValueError(f"{self.name}.{name} is {hi - lo + 1} bits wide; {value:#x} does not fit")
            out |= value << lo
        return out

    def decode(self, value: int) -> dict[str, int]:
        """Every field's value in ``value``."""
        return {n: (value >> lo) & ((1 << (hi - lo + 1)) - 1) for n, (lo, hi) in self.fields.items()}

    def mask(self, *names: str) -> int:
        """The bits of the named fields."""
        out = 0
        for n in names:
            lo, hi = self.field(n)
            out |= ((1 << (hi - lo + 1)) - 1) << lo
        return out

    def field(self, name: str) -> tuple[int, int]:
        """(low bit, high bit) of field ``name``."""
        f = self.fields.get(name)
        if f is None:
            raise KeyError(f"{self.name} has no field {name!r}; its fields: {', '.join(self.fields)}")
        return f


@cache
def table(ip: str, version: tuple[int, int, int]) -> dict[str, RegSpec]:
    """The register table of ``ip`` at ``version``: the newest generated one with the same major version that is not
    newer (as the kernel picks register headers). Raises NotImplementedError naming what exists otherwise."""
    candidates = sorted(v for (name, v) in TABLES if name == ip and v[0] == version[0] and v <= version)
    if not candidates:
        have = sorted(f"{name} {'.'.join(map(str, v))}" for name, v in TABLES)
        raise NotImplementedError(f"no register table for {ip} {'.'.join(map(str, version))}; tg has: "
                                  f"{', '.join(have)}")  # fmt: skip
    mod = importlib.import_module(f"{__name__}.{TABLES[(ip, candidates[-1])]}")
    return {name: RegSpec(name, off, seg, fields) for name, (off, seg, fields) in mod.REGS.items()}
