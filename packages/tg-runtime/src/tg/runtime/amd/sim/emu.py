"""The RDNA3 wave32 emulator: run gfx1100 machine code on `GPUMemory` (amd.md section 4).

`dispatch` runs a grid the way the command processor would launch it (workgroups in z, y, x order, waves of a
workgroup round-robin between barriers); `launch` is the test entry that takes a code object and host buffers.
Instructions are decoded and compiled to closures once per code image (cached by its bytes and load address).
"""

from __future__ import annotations

import bisect
import struct
from collections.abc import Callable, Sequence

from tg.runtime.amd.sim.codeobj import load_code_object
from tg.runtime.amd.sim.decode import EmulatorError, Instruction, Program, decode
from tg.runtime.amd.sim.exec_memory import compile_ds, compile_flat
from tg.runtime.amd.sim.exec_scalar import ENDPGM, compile_scalar
from tg.runtime.amd.sim.exec_valu import compile_valu
from tg.runtime.amd.sim.wave import Ctx, GPUMemory, Wave

__all__ = ["EmulatorError", "GPUMemory", "HostMemory", "decode", "dispatch", "launch", "stats"]

MAX_STEPS_BETWEEN_BARRIERS = 10**6
MAX_ROUNDS = 10**7
Step = Callable[[Wave], int]
# counters of the last dispatches (instructions, lane-ops) for benchmarks
stats = {"instructions": 0, "lane_ops": 0}


def _compile(inst: Instruction, ctx: Ctx) -> Step:
    """The closure running `inst` on a wave and returning the next pc."""
    enc, nxt = inst.encoding, inst.pc + inst.size
    if enc in ("SOP1", "SOP2", "SOPC", "SOPK", "SOPP", "SMEM"):
        return compile_scalar(inst, ctx)
    if enc == "MUBUF":  # only the cache invalidates decode; the simulation is coherent
        return lambda w: nxt
    if enc == "DS":
        body = compile_ds(inst, ctx)
    elif enc == "FLAT":
        body = compile_flat(inst, ctx)
    else:
        body = compile_valu(inst, ctx)

    def step(w: Wave) -> int:
        body(w)
        return nxt

    return step


class CompiledProgram:
    """Instructions of a code image compiled lazily (first execution) into closures, by pc."""

    def __init__(self, program: Program, ctx: Ctx) -> None:
        self.program, self.ctx = program, ctx
        self.steps: dict[int, Step] = {}

    def step_at(self, pc: int) -> Step:
        step = self.steps.get(pc)
        if step is None:
            inst = self.program.by_pc.get(pc)
            if inst is None:
                raise EmulatorError(f"jump to pc=0x{pc:x}, not the start of an instruction in {self.ctx.kernel}")
            step = self.steps[pc] = _compile(inst, self.ctx)
        return step


_PROGRAMS: dict[tuple[bytes, int, int], CompiledProgram] = {}


def _program_for(mem: GPUMemory, entry: int, rsrc1: int, kernel: str, code: bytes | None, base: int) -> CompiledProgram:
    if code is None:  # read the code from GPU memory: up to the end of its page run, decoded lazily below
        raise EmulatorError("dispatch without a code image: pass code= (the loader's text bytes) and code_base=")
    key = (code, base, rsrc1)
    prog = _PROGRAMS.get(key)
    if prog is None:
        if len(_PROGRAMS) > 64:
            _PROGRAMS.clear()
        prog = _PROGRAMS[key] = CompiledProgram(decode(code, base, kernel), Ctx(kernel, rsrc1))
    return prog


def _run_wave(prog: CompiledProgram, w: Wave, pc: int) -> int:
    """Run until s_endpgm (returns ENDPGM) or s_barrier (returns -(resume pc + 2))."""
    steps = prog.steps
    step_at = prog.step_at
    n = 0
    try:
        while pc >= 0:
            w.pc = pc
            step = steps.get(pc) or step_at(pc)
            pc = step(w)
            n += 1
            if n > MAX_STEPS_BETWEEN_BARRIERS:
                raise EmulatorError(
                    f"wave {w.wave_id} of {w.kernel} ran {MAX_STEPS_BETWEEN_BARRIERS} instructions without a barrier "
                    f"or s_endpgm (pc=0x{w.pc:x}): infinite loop?"
                )
    except EmulatorError as e:
        inst = prog.program.by_pc.get(w.pc)
        if inst is None or str(e).endswith(inst.text):
            raise
        raise EmulatorError(f"{e}: {inst.text}") from None
    finally:
        stats["instructions"] += n
        stats["lane_ops"] += n * w.nlanes
    return pc


def dispatch(mem: GPUMemory, entry: int, rsrc1: int, rsrc2: int, user_data: Sequence[int],
             groups: tuple[int, int, int], local: tuple[int, int, int], lds_bytes: int, private_bytes: int, *,
             code: bytes | None = None, code_base: int = 0, kernel: str = "") -> None:  # fmt: skip
    """Run a grid of `groups` workgroups of `local` work-items starting at `entry` (amd.md 2.4 launch state).

    `code`/`code_base` give the code image and its address (the mocks pass the uploaded image). Raises EmulatorError
    for undecodable or unsupported instructions, bad memory accesses and runaway waves.
    """
    prog = _program_for(mem, entry, rsrc1, kernel, code, code_base)
    user_sgprs = rsrc2 >> 1 & 0x1F
    tgid_en = [rsrc2 >> 7 & 1, rsrc2 >> 8 & 1, rsrc2 >> 9 & 1]
    tg_size_en = rsrc2 >> 10 & 1
    tid_comps = rsrc2 >> 11 & 3
    lx, ly, lz = local
    nthreads = lx * ly * lz
    if nthreads <= 0 or nthreads > 1024:
        raise EmulatorError(f"workgroup size {local} must have 1..1024 work-items")
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
                    v0 = w.v[0]
                    for lane in range(nl):
                        t = 32 * wid + lane
                        x, y, z = t % lx, t // lx % ly, t // (lx * ly)
                        v0[lane] = x | (y << 10 if tid_comps >= 1 else 0) | (z << 20 if tid_comps >= 2 else 0)
                    waves.append(w)
                _run_group(prog, waves, entry)


def _run_group(prog: CompiledProgram, waves: list[Wave], entry: int) -> None:
    pcs = {w.wave_id: entry for w in waves}
    live = list(waves)
    rounds = 0
    while live:
        rounds += 1
        if rounds > MAX_ROUNDS:
            raise EmulatorError(f"workgroup {live[0].group} of {live[0].kernel} did not finish: infinite loop?")
        at_barrier = []
        for w in live:
            r = _run_wave(prog, w, pcs[w.wave_id])
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
        i = bisect.bisect(self.starts, va)
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


def launch(code_object: bytes, kernel: str, bufs: dict[int, bytearray], args: bytes,
           groups: tuple[int, int, int], local: tuple[int, int, int]) -> None:  # fmt: skip
    """Run `kernel` of a gfx1100 code object on host buffers mapped at their keys (GPU addresses); `args` is the
    kernarg segment (buffer addresses then variables, amd.md 2.4). Buffers are updated in place."""
    img = load_code_object(code_object)
    if kernel not in img.kernels:
        raise EmulatorError(f"code object has no kernel {kernel!r}; it has {sorted(img.kernels)}")
    k = img.kernels[kernel]
    mem = HostMemory()
    for va, buf in bufs.items():
        mem.map(va, buf)
    kernarg_va = CODE_BASE - 0x1000_0000
    kernargs = bytearray(args) + bytearray(max(0, k.kernarg_size - len(args)) + 256)
    mem.map(kernarg_va, kernargs)
    mem.map(CODE_BASE, bytearray(img.image))
    props = k.code_properties
    if props & 0x77:
        raise EmulatorError(f"kernel {kernel}: unsupported kernel ABI feature (kernel_code_properties=0x{props:x})")
    user_data = [kernarg_va & 0xFFFFFFFF, kernarg_va >> 32]
    text = img.image[img.text_offset : img.text_offset + img.text_size]
    dispatch(mem, CODE_BASE + k.entry, k.rsrc1, k.rsrc2, user_data, groups, local, k.group_segment_size,
             k.private_segment_size, code=text, code_base=CODE_BASE + img.text_offset, kernel=kernel)  # fmt: skip


def pack_args(addresses: Sequence[int], variables: Sequence[int] = ()) -> bytes:
    """Kernel arguments of amd.md 2.4: 8-byte buffer addresses, then int32 variables."""
    return struct.pack(f"<{len(addresses)}Q{len(variables)}i", *addresses, *variables)
