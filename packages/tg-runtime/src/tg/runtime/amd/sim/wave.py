"""State of one wave32 and the operand readers/writers the compiled instructions use.

Registers hold raw bits: `s` is the scalar file (SGPR 0-105, VCC_LO/HI at 106/107, M0 125, EXEC_LO/HI 126/127), `v`
is 256 VGPRs of 32 lanes each (a list per register, replaced whole on full-EXEC writes). Readers are built once per
instruction (closures over register numbers), so executing an instruction is a few list operations.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from tg.runtime.amd.sim.decode import EmulatorError
from tg.runtime.amd.sim.ops import numerics as N

VCC, M0, EXEC, NULL, SCC_SRC, LITERAL = 106, 125, 126, 124, 253, 255
FULL = 0xFFFFFFFF
INLINE_F32 = {240: 0x3F000000, 241: 0xBF000000, 242: 0x3F800000, 243: 0xBF800000, 244: 0x40000000, 245: 0xC0000000,
              246: 0x40800000, 247: 0xC0800000, 248: 0x3E22F983}  # fmt: skip
INLINE_F16 = {240: 0x3800, 241: 0xB800, 242: 0x3C00, 243: 0xBC00, 244: 0x4000, 245: 0xC000, 246: 0x4400, 247: 0xC400,
              248: 0x3118}  # fmt: skip
INLINE_F64 = {240: 0x3FE0000000000000, 241: 0xBFE0000000000000, 242: 0x3FF0000000000000, 243: 0xBFF0000000000000,
              244: 0x4000000000000000, 245: 0xC000000000000000, 246: 0x4010000000000000, 247: 0xC010000000000000,
              248: 0x3FC45F306DC9C882}  # fmt: skip

# lane index lists per EXEC value (cached: kernels use few distinct masks)
_LANES: dict[int, list[int]] = {}


def lanes_of(mask: int) -> list[int]:
    lanes = _LANES.get(mask)
    if lanes is None:
        lanes = [i for i in range(32) if mask >> i & 1]
        if len(_LANES) < 4096:
            _LANES[mask] = lanes
    return lanes


class GPUMemory(Protocol):
    """Byte-addressed GPU virtual memory the emulator reads and writes (amd.md 4.1)."""

    def read(self, va: int, n: int) -> bytes: ...

    def write(self, va: int, data: bytes) -> None: ...


class Wave:
    """Registers, masks and memories of one wave32."""

    __slots__ = ("group", "kernel", "lane_ids", "lds", "mem", "nlanes", "pc", "s", "scc", "scratch", "v", "wave_id")

    def __init__(self, mem: GPUMemory, lds: bytearray, scratch_bytes: int, nlanes: int, wave_id: int,
                 group: tuple[int, int, int], kernel: str) -> None:  # fmt: skip
        self.s = [0] * 128
        self.v = [[0] * 32 for _ in range(256)]
        self.scc = 0
        self.nlanes = nlanes
        self.lds = lds
        self.scratch = [bytearray(scratch_bytes) for _ in range(32)] if scratch_bytes else []
        self.mem = mem
        self.wave_id = wave_id
        self.group = group
        self.kernel = kernel
        self.pc = 0
        self.s[EXEC] = (1 << nlanes) - 1

    @property
    def exec_mask(self) -> int:
        return self.s[EXEC]


class Ctx:
    """What compiling an instruction needs to know about its kernel (float modes, name)."""

    def __init__(self, kernel: str = "", rsrc1: int = 0) -> None:
        self.kernel = kernel
        float_mode = (rsrc1 >> 12) & 0xFF
        # FP_DENORM: bits 4-5 f32, 6-7 f16/f64 (0 = flush inputs and outputs)
        self.flush32 = ((float_mode >> 4) & 3) == 0 if rsrc1 else False
        self.flush16_64 = ((float_mode >> 6) & 3) == 0 if rsrc1 else False
        self.ieee = bool(rsrc1 >> 23 & 1)
        self.dx10_clamp = bool(rsrc1 >> 21 & 1)


# ---------------------------------------------------------------- scalar operands


def const_value(src: int, width: int, literal: int | None, kind: str = "b") -> int | None:
    """Value of a constant operand (inline integer/float or literal) of `width` bits, or None for a register."""
    mask = (1 << width) - 1
    if 128 <= src <= 192:
        return src - 128
    if 193 <= src <= 208:
        return (192 - src) & mask
    if 240 <= src <= 248:
        if width == 64:
            return INLINE_F64[src]
        if width == 16 and kind == "f":
            return INLINE_F16[src]
        return INLINE_F32[src] & mask
    if src == LITERAL:
        lit = literal or 0
        if width == 64:
            return (lit << 32) if kind == "f" else lit
        return lit & mask
    if src == NULL:
        return 0
    return None


def sreader(src: int, width: int, literal: int | None) -> Callable[[Wave], int]:
    """Reader of a scalar source (SGPR, special register, SCC or constant) as an unsigned int of `width` bits."""
    c = const_value(src, width, literal)
    if c is not None:
        return lambda w: c
    if src == SCC_SRC:
        return lambda w: w.scc
    if src >= 128:
        raise EmulatorError(f"unsupported scalar operand {src}")
    if width == 64:
        return lambda w: w.s[src] | w.s[src + 1] << 32
    return lambda w: w.s[src]


def swriter(dst: int, width: int) -> Callable[[Wave, int], None]:
    if dst == NULL:
        return lambda w, v: None
    if dst >= 128:
        raise EmulatorError(f"unsupported scalar destination {dst}")
    if width == 64:

        def write64(w: Wave, v: int) -> None:
            w.s[dst] = v & FULL
            w.s[dst + 1] = v >> 32 & FULL

        return write64

    def write32(w: Wave, v: int) -> None:
        w.s[dst] = v & FULL

    return write32


# ---------------------------------------------------------------- vector operands


def vreader(src: int, width: int, literal: int | None, half: int = 0, kind: str = "b") -> Callable[[Wave], list[int]]:
    """Reader of a VALU source as 32 raw values of `width` bits (16: the half `half` of a VGPR or the low bits)."""
    c = const_value(src, width, literal, kind)
    if c is not None:
        vals = [c] * 32
        return lambda w: vals
    if src >= 256:
        n = src - 256
        if width == 32:
            return lambda w: w.v[n]
        if width == 64:
            return lambda w: [lo | hi << 32 for lo, hi in zip(w.v[n], w.v[n + 1], strict=False)]
        if half:
            return lambda w: [x >> 16 for x in w.v[n]]
        return lambda w: [x & 0xFFFF for x in w.v[n]]
    if src == SCC_SRC:
        return lambda w: [w.scc] * 32
    read = sreader(src, 64 if width == 64 else 32, literal)
    if width == 16:
        if half:
            return lambda w: [read(w) >> 16] * 32
        return lambda w: [read(w) & 0xFFFF] * 32
    return lambda w: [read(w)] * 32


def vwriter(dst: int, width: int, half: int = 0) -> Callable[[Wave, list[int]], None]:
    """Writer of 32 lane results into VGPR `dst` (pair for 64 bits, a half for 16 bits), active lanes only."""
    if width == 32:

        def write32(w: Wave, res: list[int]) -> None:
            ex = w.s[EXEC]
            if ex == FULL:
                w.v[dst] = res if type(res) is list else list(res)
            elif ex:
                reg = w.v[dst] = w.v[dst][:]
                for i in lanes_of(ex):
                    reg[i] = res[i]

        return write32
    if width == 64:

        def write64(w: Wave, res: list[int]) -> None:
            ex = w.s[EXEC]
            if ex == FULL:
                w.v[dst] = [x & FULL for x in res]
                w.v[dst + 1] = [x >> 32 for x in res]
            elif ex:
                lo = w.v[dst] = w.v[dst][:]
                hi = w.v[dst + 1] = w.v[dst + 1][:]
                for i in lanes_of(ex):
                    lo[i] = res[i] & FULL
                    hi[i] = res[i] >> 32

        return write64
    keep, shift = (0x0000FFFF, 16) if half else (0xFFFF0000, 0)

    def write16(w: Wave, res: list[int]) -> None:
        ex = w.s[EXEC]
        reg = w.v[dst]
        if ex == FULL:
            w.v[dst] = [(o & keep) | (r & 0xFFFF) << shift for o, r in zip(reg, res, strict=False)]
        elif ex:
            reg = w.v[dst] = reg[:]
            for i in lanes_of(ex):
                reg[i] = (reg[i] & keep) | (res[i] & 0xFFFF) << shift

    return write16


def to_domain(kind: str, width: int, flush: bool) -> Callable[[list[int]], list]:
    """Converter of raw bits to the values a lane function takes: floats, signed or unsigned ints."""
    if kind == "f":
        if flush:
            return lambda bits: [0.0 * x if N.is_denormal(x, width) else x for x in N.bits_to_floats(bits, width)]
        return lambda bits: N.bits_to_floats(bits, width)
    if kind == "i":
        sign, full = 1 << (width - 1), 1 << width
        return lambda bits: [x - full if x & sign else x for x in bits]
    return lambda bits: bits


def from_domain(kind: str, width: int, flush: bool) -> Callable[[list], list[int]]:
    if kind == "f":
        if flush:
            return lambda vals: N.floats_to_bits([0.0 * x if N.is_denormal(x, width) else x for x in vals], width)
        return lambda vals: N.floats_to_bits(vals, width)
    mask = (1 << width) - 1
    return lambda vals: [x & mask for x in vals]


def fault(w: Wave, lane: int, what: str) -> EmulatorError:
    gx, gy, gz = w.group
    return EmulatorError(f"lane {lane} of wave {w.wave_id} (group {gx},{gy},{gz}) {what}: pc=0x{w.pc:x} in {w.kernel}")
