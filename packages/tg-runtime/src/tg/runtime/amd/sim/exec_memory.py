"""Compile vector memory instructions (DS, FLAT, GLOBAL, SCRATCH) into closures over a `Wave`.

Accesses complete at once (s_waitcnt is a no-op). Every lane's access is bounds-checked against LDS, its private
scratch or GPUMemory; an access outside raises EmulatorError naming lane, wave, group, address, pc and instruction.
FLAT addresses in the shared aperture go to LDS and those in the private aperture to scratch (amd.md 4.4).
"""

from __future__ import annotations

import re
from collections.abc import Callable

from tg.runtime.amd.sim.decode import EmulatorError, Instruction
from tg.runtime.amd.sim.wave import EXEC, Ctx, Wave, fault, lanes_of

Step = Callable[[Wave], None]
SHARED_BASE, PRIVATE_BASE, APERTURE = 0x1000_0000_0000_0000, 0x2000_0000_0000_0000, 1 << 32
M64 = 0xFFFFFFFFFFFFFFFF

# load/store kinds from the mnemonic's tail: bytes moved, sign extension, d16 half
_LOAD = re.compile(r"load_(d16_)?(hi_)?([uib])(8|16|32|64|96|128)$")
_STORE = re.compile(r"store_(d16_hi_)?b(8|16|32|64|96|128)$")


def _load_kind(name: str) -> tuple[int, bool, int] | None:
    """(bytes, signed, d16: 0 none / 1 low half / 2 high half) of a load mnemonic."""
    m = _LOAD.search(name)
    if not m:
        return None
    d16 = 2 if m.group(2) else (1 if m.group(1) else 0)
    return int(m.group(4)) // 8, m.group(3) == "i", d16


def _store_kind(name: str) -> tuple[int, bool] | None:
    m = _STORE.search(name)
    return (int(m.group(2)) // 8, bool(m.group(1))) if m else None


def _to_lane_value(data: bytes, nbytes: int, signed: bool) -> int:
    v = int.from_bytes(data, "little")
    if signed and v >> (8 * nbytes - 1):
        v -= 1 << (8 * nbytes)
    return v & 0xFFFFFFFF if nbytes <= 4 else v


def _make_load_writer(vdst: int, nbytes: int, signed: bool, d16: int) -> Callable[[Wave, int, bytes], None]:
    """Writes one lane's loaded bytes into the destination VGPR(s)."""
    if d16:
        shift, keep = (16, 0x0000FFFF) if d16 == 2 else (0, 0xFFFF0000)

        def wr16(w: Wave, lane: int, data: bytes) -> None:
            v = _to_lane_value(data, nbytes, signed) & 0xFFFF
            w.v[vdst][lane] = (w.v[vdst][lane] & keep) | v << shift

        return wr16
    ndw = max(1, nbytes // 4)
    if ndw == 1:

        def wr32(w: Wave, lane: int, data: bytes) -> None:
            w.v[vdst][lane] = _to_lane_value(data, nbytes, signed)

        return wr32

    def wrn(w: Wave, lane: int, data: bytes) -> None:
        for k in range(ndw):
            w.v[vdst + k][lane] = int.from_bytes(data[4 * k : 4 * k + 4], "little")

    return wrn


def _store_bytes(w: Wave, data: int, lane: int, nbytes: int, hi: bool) -> bytes:
    if nbytes <= 4:
        v = w.v[data][lane]
        if hi:
            v >>= 16
        return (v & ((1 << (8 * nbytes)) - 1)).to_bytes(nbytes, "little")
    return b"".join(w.v[data + k][lane].to_bytes(4, "little") for k in range(nbytes // 4))


def _copy_regs(w: Wave, first: int, n: int) -> None:
    """Give registers first..first+n-1 private lists before per-lane writes (lists may be shared)."""
    for k in range(n):
        w.v[first + k] = w.v[first + k][:]


# ---------------------------------------------------------------- LDS


def _lds_read(w: Wave, lane: int, addr: int, n: int) -> bytes:
    if addr < 0 or addr + n > len(w.lds):
        raise fault(w, lane, f"read {n} bytes at LDS 0x{addr:x} outside {len(w.lds)} bytes")
    return bytes(w.lds[addr : addr + n])


def _lds_write(w: Wave, lane: int, addr: int, data: bytes) -> None:
    if addr < 0 or addr + len(data) > len(w.lds):
        raise fault(w, lane, f"wrote {len(data)} bytes at LDS 0x{addr:x} outside {len(w.lds)} bytes")
    w.lds[addr : addr + len(data)] = data


def compile_ds(inst: Instruction, ctx: Ctx) -> Step:
    f, name = inst.fields, inst.name
    addr_r, vdst, d0, d1 = f["addr"], f["vdst"], f["data0"], f["data1"]
    if f["gds"]:
        raise EmulatorError(f"GDS is not supported: {inst.name} at pc=0x{inst.pc:x}")
    if "2addr" in name:
        m = re.search(r"b(32|64)$", name)
        if not m:
            raise _unsupported(inst, ctx)
        size = int(m.group(1)) // 8
        stride = size * (64 if "stride64" in name else 1)
        o0, o1 = f["offset0"] * stride, f["offset1"] * stride
        ndw = size // 4
        if "load" in name:

            def load2(w: Wave) -> None:
                _copy_regs(w, vdst, 2 * ndw)
                for lane in lanes_of(w.s[EXEC]):
                    base = w.v[addr_r][lane]
                    for j, off in enumerate((o0, o1)):
                        data = _lds_read(w, lane, base + off, size)
                        for k in range(ndw):
                            w.v[vdst + j * ndw + k][lane] = int.from_bytes(data[4 * k : 4 * k + 4], "little")

            return load2
        if name.startswith("ds_store"):

            def store2(w: Wave) -> None:
                for lane in lanes_of(w.s[EXEC]):
                    base = w.v[addr_r][lane]
                    for off, src in ((o0, d0), (o1, d1)):
                        _lds_write(w, lane, base + off, _store_bytes(w, src, lane, size, False))

            return store2
        raise _unsupported(inst, ctx)
    offset = f["offset1"] << 8 | f["offset0"]
    lk = _load_kind(name)
    if name.startswith("ds_load") and lk:
        nbytes, signed, d16 = lk
        wr = _make_load_writer(vdst, nbytes, signed, d16)
        ndw = max(1, nbytes // 4)

        def ds_load(w: Wave) -> None:
            _copy_regs(w, vdst, ndw)
            for lane in lanes_of(w.s[EXEC]):
                wr(w, lane, _lds_read(w, lane, w.v[addr_r][lane] + offset, nbytes))

        return ds_load
    sk = _store_kind(name.replace("_d16_hi", "")) if name.startswith("ds_store") else None
    if sk:
        nbytes, _ = sk
        hi = name.endswith("_d16_hi")

        def ds_store(w: Wave) -> None:
            for lane in lanes_of(w.s[EXEC]):
                _lds_write(w, lane, w.v[addr_r][lane] + offset, _store_bytes(w, d0, lane, nbytes, hi))

        return ds_store
    if name in ("ds_load_u16_d16", "ds_load_u16_d16_hi", "ds_load_u8_d16", "ds_load_u8_d16_hi", "ds_load_i8_d16",
                "ds_load_i8_d16_hi"):  # fmt: skip
        nbytes = 2 if "16_d16" in name else 1
        wr = _make_load_writer(vdst, nbytes, "_i8" in name, 2 if name.endswith("hi") else 1)

        def ds_load_d16(w: Wave) -> None:
            _copy_regs(w, vdst, 1)
            for lane in lanes_of(w.s[EXEC]):
                wr(w, lane, _lds_read(w, lane, w.v[addr_r][lane] + offset, nbytes))

        return ds_load_d16
    raise _unsupported(inst, ctx)


def _unsupported(inst: Instruction, ctx: Ctx) -> EmulatorError:
    where = f" in {ctx.kernel}" if ctx.kernel else ""
    return EmulatorError(
        f"unsupported rdna3 instruction {inst.name} word=0x{inst.words[0]:08x} at pc=0x{inst.pc:x}{where}"
    )


# ---------------------------------------------------------------- global / scratch / flat


def _scratch_access(w: Wave, lane: int, addr: int, n: int, data: bytes | None) -> bytes:
    mem = w.scratch[lane] if w.scratch else b""
    if addr < 0 or addr + n > len(mem):
        verb = "read" if data is None else "wrote"
        raise fault(w, lane, f"{verb} {n} bytes at scratch 0x{addr:x} outside {len(mem)} bytes")
    if data is None:
        return bytes(mem[addr : addr + n])
    mem[addr : addr + n] = data  # type: ignore[index]
    return b""


def _global_access(w: Wave, lane: int, addr: int, n: int, data: bytes | None) -> bytes:
    addr &= M64
    if SHARED_BASE <= addr < SHARED_BASE + APERTURE:
        off = addr - SHARED_BASE
        if data is None:
            return _lds_read(w, lane, off, n)
        _lds_write(w, lane, off, data)
        return b""
    if PRIVATE_BASE <= addr < PRIVATE_BASE + APERTURE:
        return _scratch_access(w, lane, addr - PRIVATE_BASE, n, data)
    try:
        if data is None:
            return w.mem.read(addr, n)
        w.mem.write(addr, data)
        return b""
    except EmulatorError as e:
        verb = "read" if data is None else "wrote"
        raise fault(w, lane, f"{verb} {n} bytes at unmapped 0x{addr:x} ({e})") from None


def compile_flat(inst: Instruction, ctx: Ctx) -> Step:
    f, name = inst.fields, inst.name
    seg, offset, vdst, vdata, vaddr, saddr = f["seg"], f["offset"], f["vdst"], f["data"], f["addr"], f["saddr"]
    use_saddr = seg != 0 and saddr not in (0x7C, 0x7D)
    if seg == 1:  # scratch: per-lane private offset = saddr (SGPR) + vaddr (if sve) + offset
        access = _scratch_access
        has_v = bool(f["sve"])

        def address(w: Wave, lane: int) -> int:
            a = offset
            if use_saddr:
                a += w.s[saddr]
            if has_v:
                a += w.v[vaddr][lane]
            return a & 0xFFFFFFFF

    else:
        access = _global_access
        if use_saddr:

            def address(w: Wave, lane: int) -> int:
                return (w.s[saddr] | w.s[saddr + 1] << 32) + w.v[vaddr][lane] + offset

        else:

            def address(w: Wave, lane: int) -> int:
                return (w.v[vaddr][lane] | w.v[vaddr + 1][lane] << 32) + offset

    if "atomic" in name:
        raise _unsupported(inst, ctx)
    lk = _load_kind(name)
    if "_load_" in name and lk:
        nbytes, signed, d16 = lk
        wr = _make_load_writer(vdst, nbytes, signed, d16)
        ndw = max(1, nbytes // 4)

        def load(w: Wave) -> None:
            _copy_regs(w, vdst, ndw)
            for lane in lanes_of(w.s[EXEC]):
                wr(w, lane, access(w, lane, address(w, lane), nbytes, None))

        return load
    sk = _store_kind(name)
    if "_store_" in name and sk:
        nbytes, hi = sk

        def store(w: Wave) -> None:
            for lane in lanes_of(w.s[EXEC]):
                access(w, lane, address(w, lane), nbytes, _store_bytes(w, vdata, lane, nbytes, hi))

        return store
    raise _unsupported(inst, ctx)
