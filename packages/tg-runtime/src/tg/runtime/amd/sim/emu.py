"""The RDNA3 wave32 emulator: run gfx1100 machine code on `GPUMemory` (amd.md section 4).

`dispatch` runs a grid the way the command processor would launch it (workgroups in z, y, x order, the waves of a
workgroup round-robin between barriers); `launch` is the test entry that takes a code object and host buffers. A code
image is decoded once and its basic blocks are translated to Python functions on first use (translate.py), cached by
the image's bytes, load address and float mode.
"""

from __future__ import annotations

import bisect
import struct
from collections.abc import Sequence

from tg.runtime.amd.program import CodeObject
from tg.runtime.amd.sim.blockgen import ENDPGM
from tg.runtime.amd.sim.decode import EmulatorError, Program, decode, decode_one
from tg.runtime.amd.sim.translate import Translation
from tg.runtime.amd.sim.wave import Ctx, GPUMemory, Wave
from tg.runtime.device import CompileError

__all__ = [
    "EmulatorError",
    "GPUMemory",
    "HostMemory",
    "Program",
    "decode",
    "dispatch",
    "launch",
    "pack_args",
    "run_code",
    "stats",
]

MAX_STEPS_BETWEEN_BARRIERS = 10**6
MAX_ROUNDS = 10**7
# counters of the dispatches since the last reset (wave-instructions, lane-ops = instructions x lanes of the wave)
stats = {"instructions": 0, "lane_ops": 0}

_TRANSLATIONS: dict[tuple[bytes, int, int, str], Translation] = {}


def translation(code: bytes, base: int, rsrc1: int, kernel: str = "") -> Translation:
    """The (cached) translation of the code image `code` loaded at `base`, for a kernel with float modes `rsrc1`."""
    key = (code, base, rsrc1, kernel)
    tr = _TRANSLATIONS.get(key)
    if tr is None:
        if len(_TRANSLATIONS) >= 64:
            _TRANSLATIONS.clear()
        tr = _TRANSLATIONS[key] = Translation(decode(code, base, kernel), Ctx(kernel, rsrc1))
    return tr


CODE_CHUNK = 4096
S_CODE_END = 0xBF9F0000  # LLVM pads the end of a code object's text with s_code_end
MAX_CODE_SCAN = 1 << 20  # bytes of a mapping read at once to find the end of the text (memories with `extent`)
_TEXT_ENDS: dict[bytes, int] = {}  # mapping bytes from an entry -> length of the text in them


def _read_some(mem: GPUMemory, va: int) -> bytes:
    for size in (CODE_CHUNK, 256, 16, 4):  # smaller reads near the end of a mapping
        try:
            return mem.read(va, size)
        except EmulatorError:
            continue
    return b""


def _scan_text(data: bytes, off: int, entry: int, kernel: str, complete: bool) -> tuple[int, bool]:
    """Decode the instructions of `data` (the bytes from `entry`) from `off` on: (offset reached, whether the text
    ended there). The text ends after LLVM's s_code_end padding or, when `data` is `complete` (the rest of the
    mapping), at its end; an incomplete `data` stops 12 bytes short of its end (the longest instruction) for more
    bytes. An undecodable word raises at once (as `decode` of a whole section does)."""
    while off < len(data) and (complete or off + 12 <= len(data)):
        try:
            inst = decode_one(data, off, entry + off, kernel)
        except EmulatorError as e:
            if complete and str(e).startswith("truncated"):  # cut off by the end of the mapping: the code ends here
                return off, True
            raise
        if inst.words[0] == S_CODE_END:
            return off + 4, True
        off += inst.size
    return off, complete


def code_in_memory(mem: GPUMemory, entry: int, kernel: str = "") -> tuple[bytes, int]:
    """(code bytes, their address) of the kernel at `entry` read from GPU memory: instructions are decoded from the
    entry on up to LLVM's `s_code_end` padding or the end of mapped memory; a word that does not decode raises at once.

    A memory with `extent(va)` (the end of the mapped run holding va: the mock GPUs') is read once up to that end (at
    most 1 MiB) and the text found in those bytes is remembered, so launching the same code again decodes nothing;
    any other memory is read in chunks of up to 4 KiB until the text ends."""
    extent = getattr(mem, "extent", None)
    if extent is not None:
        data = mem.read(entry, max(4, min(extent(entry), entry + MAX_CODE_SCAN) - entry))
        n = _TEXT_ENDS.get(data)
        if n is None:
            n = _scan_text(data, 0, entry, kernel, complete=True)[0]
            if len(_TEXT_ENDS) >= 64:
                _TEXT_ENDS.clear()
            _TEXT_ENDS[data] = n
    else:
        data, n, ended = b"", 0, False
        while not ended:
            chunk = _read_some(mem, entry + len(data))
            data += chunk
            n, ended = _scan_text(data, n, entry, kernel, complete=not chunk)
            if len(data) > 1 << 24:
                raise EmulatorError(f"the code of {kernel or 'the kernel'} at 0x{entry:x} has no end in 16 MiB")
    if n == 0:
        raise EmulatorError(f"no code mapped at the entry 0x{entry:x} of {kernel or 'the kernel'}")
    return data[:n], entry


def _run_wave(tr: Translation, w: Wave, pc: int) -> int:
    """Run until s_endpgm (returns ENDPGM) or s_barrier (returns -(resume pc + 2))."""
    blocks, block = tr.blocks, tr.block
    n = 0
    try:
        while pc >= 0:
            fn, count = blocks.get(pc) or block(pc)
            n += count
            pc = fn(w)
            if n > MAX_STEPS_BETWEEN_BARRIERS:
                raise EmulatorError(
                    f"wave {w.wave_id} of {w.kernel} ran {MAX_STEPS_BETWEEN_BARRIERS} instructions without a barrier "
                    f"or s_endpgm (pc=0x{pc:x}): infinite loop?"
                )
    except EmulatorError as e:
        inst = tr.program.by_pc.get(w.pc)
        if inst is None or str(e).endswith(inst.text):
            raise
        raise EmulatorError(f"{e}: {inst.text}") from None
    except Exception as e:  # a translator bug must not pass for a result: name where it happened
        inst = tr.program.by_pc.get(w.pc)
        raise EmulatorError(f"internal emulator error {type(e).__name__}: {e} at pc=0x{w.pc:x} in {w.kernel}: "
                            f"{inst.text if inst else '?'}") from e  # fmt: skip
    finally:
        stats["instructions"] += n
        stats["lane_ops"] += n * w.nlanes
    return pc


def dispatch(mem: GPUMemory, entry: int, rsrc1: int, rsrc2: int, user_data: Sequence[int],
             groups: tuple[int, int, int], local: tuple[int, int, int], lds_bytes: int, private_bytes: int, *,
             code: bytes | None = None, code_base: int = 0, kernel: str = "") -> None:  # fmt: skip
    """Run a grid of `groups` workgroups of `local` work-items starting at `entry` (amd.md 2.4 launch state).

    `code`/`code_base` give the code image (the kernel's text section) and its address; without them the code is
    read from `mem` at `entry` (`code_in_memory`). Raises EmulatorError for undecodable or unsupported instructions,
    bad memory accesses and runaway waves.
    """
    if code is None:
        code, code_base = code_in_memory(mem, entry, kernel)
    if not code_base <= entry < code_base + len(code):
        raise EmulatorError(f"entry 0x{entry:x} is outside the code image at 0x{code_base:x} ({len(code)} bytes)")
    tr = translation(code, code_base, rsrc1, kernel)
    user_sgprs = rsrc2 >> 1 & 0x1F
    tgid_en = [rsrc2 >> 7 & 1, rsrc2 >> 8 & 1, rsrc2 >> 9 & 1]
    tg_size_en = rsrc2 >> 10 & 1
    tid_comps = rsrc2 >> 11 & 3
    lx, ly, lz = local
    nthreads = lx * ly * lz
    if min(local) <= 0 or nthreads > 1024:
        raise EmulatorError(f"workgroup size {local} must have 1..1024 work-items")
    if min(groups) < 0:
        raise EmulatorError(f"grid {groups} has a negative dimension")
    nwaves = (nthreads + 31) // 32
    user = list(user_data) + [0] * max(0, user_sgprs - len(user_data))
    for gz in range(groups[2]):
        for gy in range(groups[1]):
            for gx in range(groups[0]):
                lds = bytearray(lds_bytes)
                waves = []
                for wid in range(nwaves):
                    nl = min(32, nthreads - 32 * wid)
                    w = Wave(mem, lds, private_bytes, nl, wid, (gx, gy, gz), kernel)
                    s = w.s
                    s[:user_sgprs] = user[:user_sgprs]
                    k = user_sgprs
                    for en, g in zip(tgid_en, (gx, gy, gz), strict=False):
                        if en:
                            s[k] = g
                            k += 1
                    if tg_size_en:
                        s[k] = nwaves << 6 | wid  # wave id in group [5:0], waves per group [11:6]
                    v0 = [0] * 32
                    for lane in range(nl):
                        t = 32 * wid + lane
                        x, y, z = t % lx, t // lx % ly, t // (lx * ly)
                        v0[lane] = x | (y << 10 if tid_comps >= 1 else 0) | (z << 20 if tid_comps >= 2 else 0)
                    w.v[0] = v0
                    waves.append(w)
                _run_group(tr, waves, entry)


def _run_group(tr: Translation, waves: list[Wave], entry: int) -> None:
    pcs = {w.wave_id: entry for w in waves}
    live = list(waves)
    rounds = 0
    while live:
        rounds += 1
        if rounds > MAX_ROUNDS:
            raise EmulatorError(f"workgroup {live[0].group} of {live[0].kernel} did not finish: infinite loop?")
        at_barrier = []
        for w in live:
            r = _run_wave(tr, w, pcs[w.wave_id])
            if r == ENDPGM:
                continue
            pcs[w.wave_id] = -r - 2
            at_barrier.append(w)
        live = at_barrier


# ---------------------------------------------------------------- test entry: host buffers as GPU memory


class HostMemory:
    """GPUMemory over host bytearrays placed at chosen virtual addresses (unit tests and `launch`)."""

    def __init__(self) -> None:
        self.starts: list[int] = []
        self.regions: list[tuple[int, bytearray]] = []

    def map(self, va: int, buf: bytearray) -> None:
        """Place `buf` at address `va` (it must not overlap a region already mapped)."""
        i = bisect.bisect(self.starts, va)
        if (i > 0 and self.starts[i - 1] + len(self.regions[i - 1][1]) > va) or (
            i < len(self.starts) and va + len(buf) > self.starts[i]
        ):
            raise ValueError(f"region at 0x{va:x} ({len(buf)} bytes) overlaps a mapped region")
        self.starts.insert(i, va)
        self.regions.insert(i, (va, buf))

    def _find(self, va: int, n: int) -> tuple[bytearray, int]:
        i = bisect.bisect(self.starts, va) - 1
        if i >= 0:
            base, buf = self.regions[i]
            if va + n <= base + len(buf):
                return buf, va - base
        raise EmulatorError(f"{n} bytes at 0x{va:x} are not mapped")

    def read(self, va: int, n: int) -> bytes:
        buf, off = self._find(va, n)
        return bytes(buf[off : off + n])

    def write(self, va: int, data: bytes) -> None:
        buf, off = self._find(va, len(data))
        buf[off : off + len(data)] = data


CODE_BASE = 0x7F00_0000_0000


def run_code(code: bytes, *, sgprs: dict[int, int] | None = None, vgprs: dict[int, Sequence[int]] | None = None,
             exec_mask: int = 0xFFFFFFFF, scc: int = 0, rsrc1: int = 0, lds_bytes: int = 0, scratch_bytes: int = 0,
             mem: GPUMemory | None = None) -> Wave:  # fmt: skip
    """Run machine code on one wave32 whose registers start as given, until s_endpgm; returns the wave.

    For instruction tests and experiments: `code` is raw instruction words (ending in s_endpgm), loaded at
    CODE_BASE; `sgprs`/`vgprs` set registers (a VGPR from a list of up to 32 lane values), `exec_mask` and `scc` the
    masks; rsrc1 gives the float modes (0: denormals kept, IEEE mode)."""
    w = Wave(mem or HostMemory(), bytearray(lds_bytes), scratch_bytes, 32, 0, (0, 0, 0), "run_code")
    for n, value in (sgprs or {}).items():
        w.s[n] = value & 0xFFFFFFFF
    for n, lanes in (vgprs or {}).items():
        if len(lanes) > 32:
            raise ValueError(f"v{n} has 32 lanes, got {len(lanes)} values")
        w.v[n] = [x & 0xFFFFFFFF for x in lanes] + [0] * (32 - len(lanes))
    w.s[126], w.scc = exec_mask & 0xFFFFFFFF, scc
    tr = translation(bytes(code), CODE_BASE, rsrc1, "run_code")
    if _run_wave(tr, w, CODE_BASE) != ENDPGM:
        raise EmulatorError("run_code: the code reached s_barrier (one wave has nothing to wait for)")
    return w


def launch(code_object: bytes, kernel: str, bufs: dict[int, bytearray], args: bytes,
           groups: tuple[int, int, int], local: tuple[int, int, int]) -> None:  # fmt: skip
    """Run `kernel` of a gfx1100 code object on host buffers mapped at their keys (GPU addresses); `args` is the
    kernarg segment (buffer addresses then variables, amd.md 2.4). Buffers are updated in place.

    The code object is checked and linked by tg.runtime.amd.program (a CompileError there becomes an EmulatorError)."""
    try:
        co = CodeObject(code_object, kernel)
        image = co.link(CODE_BASE)
    except CompileError as e:
        raise EmulatorError(str(e)) from e
    kd = co.descriptor
    text = co.elf.section(".text")
    if text is None:
        raise EmulatorError(f"code object of kernel {kernel} has no .text section")
    text_off = image.section_offsets[text.index]
    mem = HostMemory()
    for va, buf in bufs.items():
        mem.map(va, buf)
    kernarg_va = CODE_BASE - 0x1000_0000
    mem.map(kernarg_va, bytearray(args) + bytearray(max(0, kd.kernarg_size - len(args)) + 256))
    mem.map(CODE_BASE, bytearray(image.image))
    dispatch(mem, CODE_BASE + co.entry_offset, kd.compute_pgm_rsrc1, kd.compute_pgm_rsrc2,
             [kernarg_va & 0xFFFFFFFF, kernarg_va >> 32], groups, local, kd.group_segment_fixed_size,
             kd.private_segment_fixed_size, code=image.image[text_off : text_off + text.size],
             code_base=CODE_BASE + text_off, kernel=kernel)  # fmt: skip


def pack_args(addresses: Sequence[int], variables: Sequence[int] = ()) -> bytes:
    """Kernel arguments of amd.md 2.4: 8-byte buffer addresses, then int32 variables."""
    return struct.pack(f"<{len(addresses)}Q{len(variables)}i", *addresses, *variables)
