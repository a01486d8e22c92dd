"""State of one wave32 and the small lane helpers the translated code calls.

Registers hold raw bits: `s` is the scalar file (SGPR 0-105, VCC_LO/HI at 106/107, M0 125, EXEC_LO/HI 126/127), `v` is
256 VGPRs, each a sequence of 32 lane values. A register's sequence is never changed in place: every write stores a new
list or tuple, so two registers may share one (a full-EXEC `v_mov_b32` is a reference copy).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from tg.runtime.amd.sim.decode import EmulatorError

VCC, M0, EXEC, NULL, SCC_SRC, LITERAL = 106, 125, 126, 124, 253, 255
FULL = 0xFFFFFFFF
ZEROS = (0,) * 32

# per EXEC (or other lane mask) value: the 32 lane bits, and the active lane numbers (cached: few distinct masks)
_BITS: dict[int, tuple[int, ...]] = {}
_LANES: dict[int, tuple[int, ...]] = {}


def lane_bits(mask: int) -> tuple[int, ...]:
    """The 32 bits of a lane mask, lane 0 first."""
    bits = _BITS.get(mask)
    if bits is None:
        bits = tuple(mask >> i & 1 for i in range(32))
        if len(_BITS) < 8192:
            _BITS[mask] = bits
    return bits


def lanes_of(mask: int) -> tuple[int, ...]:
    """The lane numbers set in a mask."""
    lanes = _LANES.get(mask)
    if lanes is None:
        lanes = tuple(i for i in range(32) if mask >> i & 1)
        if len(_LANES) < 8192:
            _LANES[mask] = lanes
    return lanes


def merge(new: Sequence[int], old: Sequence[int], mask: int) -> list[int]:
    """`new` in the lanes of `mask`, `old` elsewhere (a VGPR write under a partial EXEC)."""
    return [n if m else o for n, o, m in zip(new, old, lane_bits(mask), strict=False)]


POW2 = tuple(1 << i for i in range(32))


class GPUMemory(Protocol):
    """Byte-addressed GPU virtual memory the emulator reads and writes (amd.md 4.1)."""

    def read(self, va: int, n: int) -> bytes: ...

    def write(self, va: int, data: bytes) -> None: ...


class Wave:
    """Registers, masks and memories of one wave32."""

    __slots__ = ("group", "kernel", "lds", "mem", "nlanes", "pc", "s", "scc", "scratch", "v", "wave_id")

    def __init__(self, mem: GPUMemory, lds: bytearray, scratch_bytes: int, nlanes: int, wave_id: int,
                 group: tuple[int, int, int], kernel: str) -> None:  # fmt: skip
        self.s = [0] * 128
        self.v: list[Sequence[int]] = [ZEROS] * 256
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
    """What translating a kernel's instructions needs to know about it (float modes from rsrc1, its name)."""

    def __init__(self, kernel: str = "", rsrc1: int = 0) -> None:
        self.kernel = kernel
        float_mode = (rsrc1 >> 12) & 0xFF
        # FP_DENORM: bits 4-5 f32, 6-7 f16/f64 (0 = flush inputs and outputs)
        self.flush32 = ((float_mode >> 4) & 3) == 0 if rsrc1 else False
        self.flush16_64 = ((float_mode >> 6) & 3) == 0 if rsrc1 else False
        self.ieee = bool(rsrc1 >> 23 & 1)
        self.dx10_clamp = bool(rsrc1 >> 21 & 1)


def fault(w: Wave, lane: int, what: str) -> EmulatorError:
    """The error for a bad memory access of one lane, naming wave, group, pc and kernel."""
    gx, gy, gz = w.group
    return EmulatorError(f"lane {lane} of wave {w.wave_id} (group {gx},{gy},{gz}) {what}: pc=0x{w.pc:x} in {w.kernel}")
