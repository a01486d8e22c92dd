"""Compile scalar instructions (SOP1/SOP2/SOPC/SOPK/SOPP/SMEM) into closures returning the next pc.

Every compiled step returns the next program counter; `ENDPGM` (-1) ends the wave and `-(pc + 2)` parks it at a
barrier that resumes at `pc`.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

from tg.runtime.amd.sim.decode import EmulatorError, Instruction
from tg.runtime.amd.sim.ops.numerics import sext
from tg.runtime.amd.sim.ops.salu import BITSET, BRANCHES, SAVEEXEC, SOP1, SOP2, SOPC, SOPK, SOPP_NOPS
from tg.runtime.amd.sim.wave import EXEC, VCC, Ctx, Wave, sreader, swriter

ENDPGM = -1
Step = Callable[[Wave], int]


def unsupported(inst: Instruction, ctx: Ctx) -> EmulatorError:
    where = f" in {ctx.kernel}" if ctx.kernel else ""
    return EmulatorError(
        f"unsupported rdna3 instruction {inst.name} word=0x{inst.words[0]:08x} at pc=0x{inst.pc:x}{where}"
    )


def compile_scalar(inst: Instruction, ctx: Ctx) -> Step:
    f, name, nxt = inst.fields, inst.name, inst.pc + inst.size
    lit = inst.literal
    if inst.encoding == "SOP2":
        wd, w0, w1 = inst.widths
        fn = SOP2.get(name)
        if fn is None:
            raise unsupported(inst, ctx)
        a, b, wr = sreader(f["ssrc0"], 64 if w0 == 2 else 32, lit), sreader(f["ssrc1"], 64 if w1 == 2 else 32, lit), \
            swriter(f["sdst"], 64 if wd == 2 else 32)  # fmt: skip

        def sop2(w: Wave) -> int:
            res, scc = fn(a(w), b(w), w.scc)
            wr(w, res)
            if scc is not None:
                w.scc = scc
            return nxt

        return sop2
    if inst.encoding == "SOP1":
        wd, w0 = inst.widths
        width = 64 if w0 == 2 else 32
        if name in SOP1:
            fn1 = SOP1[name]
            a, wr = sreader(f["ssrc0"], width, lit), swriter(f["sdst"], 64 if wd == 2 else 32)

            def sop1(w: Wave) -> int:
                res, scc = fn1(a(w), w.scc)
                wr(w, res)
                if scc is not None:
                    w.scc = scc
                return nxt

            return sop1
        if name in BITSET:
            bit, bits = BITSET[name]
            a = sreader(f["ssrc0"], 32, lit)
            d, wr = sreader(f["sdst"], bits, None), swriter(f["sdst"], bits)

            def bitset(w: Wave) -> int:
                pos = a(w) & (bits - 1)
                v = d(w)
                wr(w, v | 1 << pos if bit else v & ~(1 << pos))
                return nxt

            return bitset
        if name in ("s_cmov_b32", "s_cmov_b64"):
            a, wr = sreader(f["ssrc0"], width, lit), swriter(f["sdst"], width)

            def cmov(w: Wave) -> int:
                if w.scc:
                    wr(w, a(w))
                return nxt

            return cmov
        if name == "s_getpc_b64":
            wr = swriter(f["sdst"], 64)

            def getpc(w: Wave) -> int:
                wr(w, nxt)
                return nxt

            return getpc
        if name.endswith(("_saveexec_b32", "_wrexec_b32")):
            op = name[2:].rsplit("_", 2)[0]
            fn_e = SAVEEXEC[op]
            a, wr = sreader(f["ssrc0"], 32, lit), swriter(f["sdst"], 32)
            save = name.endswith("_saveexec_b32")

            def saveexec(w: Wave) -> int:
                old = w.s[EXEC]
                new = fn_e(a(w), old, 0xFFFFFFFF)
                w.s[EXEC] = new
                w.scc = int(new != 0)
                wr(w, old if save else new)
                return nxt

            return saveexec
        raise unsupported(inst, ctx)
    if inst.encoding == "SOPC":
        w0, w1 = inst.widths
        fnc = SOPC.get(name)
        if fnc is None:
            raise unsupported(inst, ctx)
        a, b = sreader(f["ssrc0"], 64 if w0 == 2 else 32, lit), sreader(f["ssrc1"], 64 if w1 == 2 else 32, lit)

        def sopc(w: Wave) -> int:
            w.scc = fnc(a(w), b(w))
            return nxt

        return sopc
    if inst.encoding == "SOPK":
        k = f["simm16"]
        if name == "s_cmovk_i32":
            wr = swriter(f["sdst"], 32)
            kv = sext(k, 16) & 0xFFFFFFFF

            def cmovk(w: Wave) -> int:
                if w.scc:
                    wr(w, kv)
                return nxt

            return cmovk
        fnk = SOPK.get(name)
        if fnk is None:
            if name in ("s_waitcnt_vscnt", "s_waitcnt_vmcnt", "s_waitcnt_expcnt", "s_waitcnt_lgkmcnt"):
                return lambda w: nxt
            raise unsupported(inst, ctx)
        d, wr = sreader(f["sdst"], 32, None), swriter(f["sdst"], 32)

        def sopk(w: Wave) -> int:
            res, scc = fnk(d(w), k)
            if res is not None:
                wr(w, res)
            if scc is not None:
                w.scc = scc
            return nxt

        return sopk
    if inst.encoding == "SOPP":
        if name in SOPP_NOPS:
            return lambda w: nxt
        if name == "s_endpgm":
            return lambda w: ENDPGM
        if name == "s_barrier":
            return lambda w: -(nxt + 2)
        if name in BRANCHES:
            target = nxt + 4 * sext(f["simm16"], 16)
            cond = BRANCHES[name]

            def branch(w: Wave) -> int:
                return target if cond(w.scc, w.s[VCC], w.s[EXEC]) else nxt

            return branch
        raise unsupported(inst, ctx)
    if inst.encoding == "SMEM":
        return _compile_smem(inst, ctx)
    raise unsupported(inst, ctx)


def _compile_smem(inst: Instruction, ctx: Ctx) -> Step:
    f, nxt = inst.fields, inst.pc + inst.size
    if not inst.name.startswith("s_load_b"):
        raise unsupported(inst, ctx)
    (ndw,) = inst.widths
    base = sreader(f["sbase"], 64, None)
    soff = sreader(f["soffset"], 32, None) if f["soffset"] != 0x7C else (lambda w: 0)
    offset = f["offset"] - (1 << 21) if f["offset"] & 0x100000 else f["offset"]
    dst = f["sdata"]
    fmt = struct.Struct(f"<{ndw}I")

    def s_load(w: Wave) -> int:
        addr = (base(w) + offset + soff(w)) & ~3 & 0xFFFFFFFFFFFFFFFF
        try:
            data = w.mem.read(addr, 4 * ndw)
        except EmulatorError as e:
            raise EmulatorError(f"wave {w.wave_id} read {4 * ndw} bytes at 0x{addr:x}: {e}: pc=0x{w.pc:x} "
                                f"{inst.name} in {w.kernel}") from None  # fmt: skip
        w.s[dst : dst + ndw] = fmt.unpack(data)
        return nxt

    return s_load
