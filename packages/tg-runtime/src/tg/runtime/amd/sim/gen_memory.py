"""Vector memory instructions (DS, FLAT, GLOBAL, SCRATCH): their translation and the access helpers they call.

Translated code computes the 32 lane addresses and calls one helper per instruction (`global_load`, `lds_store`...),
which reads or writes the active lanes: the span of a wave's addresses is read from `GPUMemory` at once when it is
small (one read and one struct unpack for the common contiguous case), and every access is bounds-checked against
LDS, the lane's scratch or GPUMemory; an access outside raises EmulatorError naming lane, wave, group, address, pc and
kernel. FLAT addresses in the shared aperture go to LDS and those in the private aperture to scratch (amd.md 4.4).
Accesses complete at once (s_waitcnt is a no-op).
"""

from __future__ import annotations

import re
import struct
from collections.abc import Sequence

from tg.runtime.amd.sim.decode import EmulatorError, Instruction
from tg.runtime.amd.sim.translate import BlockGen, unsupported
from tg.runtime.amd.sim.wave import FULL, ZEROS, Wave, fault, lanes_of

SHARED_BASE, PRIVATE_BASE, APERTURE = 0x1000_0000_0000_0000, 0x2000_0000_0000_0000, 1 << 32
M32, M64 = 0xFFFFFFFF, 0xFFFFFFFFFFFFFFFF
SPAN_LIMIT = 1 << 16  # a wave's accesses within this many bytes are served by one GPUMemory read

_FMT = {(1, False): "B", (1, True): "b", (2, False): "H", (2, True): "h", (4, False): "I", (4, True): "i",
        (8, False): "Q", (8, True): "q"}  # fmt: skip
_ONE = {k: struct.Struct("<" + c) for k, c in _FMT.items()}
_ALL = {k: struct.Struct(f"<32{c}") for k, c in _FMT.items()}


def _value(data: bytes | bytearray, off: int, n: int, signed: bool) -> int:
    """One lane's loaded value: n bytes at off, sign-extended to 32 bits (as bits) for signed loads."""
    if n > 8:
        return int.from_bytes(data[off : off + n], "little")
    v = _ONE[n, signed].unpack_from(data, off)[0]
    return v & M32 if signed else v


def _extract(data: bytes | bytearray, base: int, addrs: Sequence[int], ex: int, n: int, signed: bool) -> list[int]:
    """The 32 lane values of a load whose active lanes all read `data` (which starts at address `base`)."""
    if ex == FULL and n <= 8 and addrs[0] == base and addrs == list(range(base, base + 32 * n, n)):
        vals = _ALL[n, signed].unpack_from(data, 0)
        return [x & M32 for x in vals] if signed else list(vals)
    out = [0] * 32
    for i in lanes_of(ex) if ex != FULL else range(32):
        out[i] = _value(data, addrs[i] - base, n, signed)
    return out


def _active(addrs: Sequence[int], ex: int) -> Sequence[int]:
    return addrs if ex == FULL else [addrs[i] for i in lanes_of(ex)]


# ---------------------------------------------------------------- global / flat


def _lane_access(w: Wave, lane: int, addr: int, n: int, data: bytes | None) -> bytes:
    """One lane's access to a flat address: LDS and scratch apertures, else GPUMemory."""
    addr &= M64
    if SHARED_BASE <= addr < SHARED_BASE + APERTURE:
        return _lds_lane(w, lane, addr - SHARED_BASE, n, data)
    if PRIVATE_BASE <= addr < PRIVATE_BASE + APERTURE:
        return _scratch_lane(w, lane, addr - PRIVATE_BASE, n, data)
    try:
        if data is None:
            return w.mem.read(addr, n)
        w.mem.write(addr, data)
        return b""
    except EmulatorError as e:
        verb = "read" if data is None else "wrote"
        raise fault(w, lane, f"{verb} {n} bytes at unmapped 0x{addr:x} ({e})") from None


def global_load(w: Wave, addrs: list[int], ex: int, n: int, signed: bool) -> list[int] | tuple[int, ...]:
    """Load n bytes per active lane from flat/global addresses (0 in inactive lanes)."""
    if not ex:
        return ZEROS
    act = _active(addrs, ex)
    lo, hi = min(act), max(act) + n
    if 0 <= lo and hi <= SHARED_BASE and hi - lo <= SPAN_LIMIT:
        try:
            data = w.mem.read(lo, hi - lo)
        except EmulatorError:
            pass  # some lane is out of bounds: the lane-by-lane path names it
        else:
            return _extract(data, lo, addrs, ex, n, signed)
    out = [0] * 32
    for i in lanes_of(ex):
        out[i] = _value(_lane_access(w, i, addrs[i], n, None), 0, n, signed)
    return out


def _pack_all(vals: Sequence[int], n: int) -> bytes:
    if n <= 8:
        return _ALL[n, False].pack(*vals)
    return b"".join(x.to_bytes(n, "little") for x in vals)


def global_store(w: Wave, addrs: list[int], ex: int, n: int, vals: Sequence[int]) -> None:
    """Store n bytes per active lane to flat/global addresses (lanes in order: the last of equal addresses wins)."""
    if not ex:
        return
    lo = addrs[0]
    if ex == FULL and lo >= 0 and lo + 32 * n <= SHARED_BASE and addrs == list(range(lo, lo + 32 * n, n)):
        try:
            w.mem.write(lo, _pack_all(vals, n))
            return
        except EmulatorError:
            pass  # some lane is out of bounds: the lane-by-lane path names it
    for i in lanes_of(ex):
        _lane_access(w, i, addrs[i], n, vals[i].to_bytes(n, "little"))


# ---------------------------------------------------------------- LDS


def _lds_lane(w: Wave, lane: int, addr: int, n: int, data: bytes | None) -> bytes:
    lds = w.lds
    if addr < 0 or addr + n > len(lds):
        verb = "read" if data is None else "wrote"
        raise fault(w, lane, f"{verb} {n} bytes at LDS 0x{addr:x} outside {len(lds)} bytes")
    if data is None:
        return bytes(lds[addr : addr + n])
    lds[addr : addr + n] = data
    return b""


def lds_load(w: Wave, addrs: list[int], ex: int, n: int, signed: bool) -> list[int] | tuple[int, ...]:
    """Load n bytes per active lane from LDS byte addresses."""
    if not ex:
        return ZEROS
    act = _active(addrs, ex)
    if min(act) >= 0 and max(act) + n <= len(w.lds):
        return _extract(w.lds, 0, addrs, ex, n, signed)
    out = [0] * 32
    for i in lanes_of(ex):
        out[i] = _value(_lds_lane(w, i, addrs[i], n, None), 0, n, signed)
    return out


def lds_store(w: Wave, addrs: list[int], ex: int, n: int, vals: Sequence[int]) -> None:
    """Store n bytes per active lane to LDS byte addresses."""
    lds = w.lds
    for i in lanes_of(ex):
        a = addrs[i]
        if a < 0 or a + n > len(lds):
            raise fault(w, i, f"wrote {n} bytes at LDS 0x{a:x} outside {len(lds)} bytes")
        lds[a : a + n] = vals[i].to_bytes(n, "little")


# ---------------------------------------------------------------- scratch (per-lane private memory)


def _scratch_lane(w: Wave, lane: int, addr: int, n: int, data: bytes | None) -> bytes:
    mem = w.scratch[lane] if w.scratch else bytearray()
    if addr < 0 or addr + n > len(mem):
        verb = "read" if data is None else "wrote"
        raise fault(w, lane, f"{verb} {n} bytes at scratch 0x{addr:x} outside {len(mem)} bytes")
    if data is None:
        return bytes(mem[addr : addr + n])
    mem[addr : addr + n] = data
    return b""


def scratch_load(w: Wave, addrs: list[int], ex: int, n: int, signed: bool) -> list[int]:
    """Load n bytes per active lane from the lane's scratch at its offset."""
    out = [0] * 32
    for i in lanes_of(ex):
        out[i] = _value(_scratch_lane(w, i, addrs[i], n, None), 0, n, signed)
    return out


def scratch_store(w: Wave, addrs: list[int], ex: int, n: int, vals: Sequence[int]) -> None:
    """Store n bytes per active lane to the lane's scratch at its offset."""
    for i in lanes_of(ex):
        _scratch_lane(w, i, addrs[i], n, vals[i].to_bytes(n, "little"))


HELPERS = {"global_load": global_load, "global_store": global_store, "lds_load": lds_load, "lds_store": lds_store,
           "scratch_load": scratch_load, "scratch_store": scratch_store}  # fmt: skip

# ---------------------------------------------------------------- translation

# load/store kinds from the mnemonic's tail: bytes moved, sign extension, d16 half
_LOAD = re.compile(r"load_(?:(d16_hi_)|(d16_))?([uib])(8|16|32|64|96|128)(_d16(_hi)?)?$")
_STORE = re.compile(r"store_(d16_hi_)?b(8|16|32|64|96|128)(_d16_hi)?$")


def load_kind(name: str) -> tuple[int, bool, int] | None:
    """(bytes, signed, d16: 0 whole dwords / 1 low half / 2 high half) of a load mnemonic."""
    m = _LOAD.search(name)
    if not m:
        return None
    d16 = 2 if (m.group(1) or m.group(6)) else 1 if (m.group(2) or m.group(5)) else 0
    return int(m.group(4)) // 8, m.group(3) == "i", d16


def store_kind(name: str) -> tuple[int, bool] | None:
    """(bytes, from the high half) of a store mnemonic."""
    m = _STORE.search(name)
    return (int(m.group(2)) // 8, bool(m.group(1) or m.group(3))) if m else None


def _emit_load_result(g: BlockGen, vals: str, vdst: int, n: int, d16: int) -> None:
    """Write a load's lane values (local `vals`) into its destination VGPR(s), active lanes only."""
    if d16:
        t = g.tmp()
        if d16 == 2:
            g.emit(f"{t} = [(o & 0xFFFF) | (x & 0xFFFF) << 16 for o, x in zip(v[{vdst}], {vals})]")
        else:
            g.emit(f"{t} = [(o & 0xFFFF0000) | (x & 0xFFFF) for o, x in zip(v[{vdst}], {vals})]")
        g.write(vdst, t)
        return
    ndw = max(1, n // 4)
    if ndw == 1:
        g.write(vdst, vals)
        return
    for k in range(ndw):
        t = g.tmp()
        g.emit(f"{t} = [x >> {32 * k} & 0xFFFFFFFF for x in {vals}]")
        g.write(vdst + k, t)


def _store_values(data: int, n: int, hi: bool) -> str:
    """Expression of the 32 lane values a store writes from VGPR(s) `data`."""
    if n > 4:
        regs = [f"v[{data + k}]" for k in range(n // 4)]
        names = [f"x{k}" for k in range(n // 4)]
        combined = " | ".join(f"{x} << {32 * k}" if k else x for k, x in enumerate(names))
        return f"[{combined} for {', '.join(names)} in zip({', '.join(regs)})]"
    if hi:
        return f"[x >> 16 & {(1 << (8 * n)) - 1:#x} for x in v[{data}]]"
    if n == 4:
        return f"v[{data}]"
    return f"[x & {(1 << (8 * n)) - 1:#x} for x in v[{data}]]"


def gen_memory(inst: Instruction, g: BlockGen) -> None:
    """Emit a DS/FLAT/GLOBAL/SCRATCH instruction (MUBUF cache invalidates are no-ops)."""
    g.ns.update(HELPERS)
    if inst.encoding == "MUBUF":
        if inst.name.startswith(("buffer_gl0_inv", "buffer_gl1_inv")):
            return
        g.raise_error(unsupported(inst, g.ctx))
    elif inst.encoding == "DS":
        _ds(inst, g)
    else:
        _flat(inst, g)


def _ds(inst: Instruction, g: BlockGen) -> None:
    f, name = inst.fields, inst.name
    addr, vdst, d0, d1 = f["addr"], f["vdst"], f["data0"], f["data1"]
    if f["gds"]:
        g.raise_error(unsupported(inst, g.ctx, "GDS"))
        return
    if "2addr" in name:
        m = re.search(r"_b(32|64)$", name)
        if not m or not name.startswith(("ds_load_2addr", "ds_store_2addr")):
            g.raise_error(unsupported(inst, g.ctx))
            return
        n = int(m.group(1)) // 8
        stride = n * (64 if "stride64" in name else 1)
        offsets = (f["offset0"] * stride, f["offset1"] * stride)
        if name.startswith("ds_load"):
            vals = []
            for off in offsets:  # both halves are read before the destination registers change
                t = g.tmp("m")
                g.emit(f"{t} = lds_load(w, [x + {off} for x in v[{addr}]], ex, {n}, False)")
                vals.append(t)
            for j, t in enumerate(vals):
                _emit_load_result(g, t, vdst + j * (n // 4), n, 0)
        else:
            for off, src in zip(offsets, (d0, d1)):
                g.emit(f"lds_store(w, [x + {off} for x in v[{addr}]], ex, {n}, {_store_values(src, n, False)})")
        return
    offset = f["offset1"] << 8 | f["offset0"]
    address = f"[x + {offset} for x in v[{addr}]]" if offset else f"v[{addr}]"
    if name.startswith("ds_load") and (lk := load_kind(name)):
        n, signed, d16 = lk
        t = g.tmp("m")
        g.emit(f"{t} = lds_load(w, {address}, ex, {n}, {signed})")
        _emit_load_result(g, t, vdst, n, d16)
        return
    if name.startswith("ds_store") and (sk := store_kind(name)):
        n, hi = sk
        g.emit(f"lds_store(w, {address}, ex, {n}, {_store_values(d0, n, hi)})")
        return
    g.raise_error(unsupported(inst, g.ctx))


def _flat(inst: Instruction, g: BlockGen) -> None:
    f, name = inst.fields, inst.name
    seg, offset, vdst, vdata, vaddr, saddr = f["seg"], f["offset"], f["vdst"], f["data"], f["addr"], f["saddr"]
    use_saddr = seg != 0 and saddr not in (0x7C, 0x7D)
    if "atomic" in name:
        g.raise_error(unsupported(inst, g.ctx, "atomics are not implemented"))
        return
    if seg == 1:  # scratch: lane offset = saddr (SGPR) + vaddr (when sve) + offset, 32 bits
        base = f"s[{saddr}] + {offset}" if use_saddr else str(offset)
        address = f"[(x + {base}) & 0xFFFFFFFF for x in v[{vaddr}]]" if f["sve"] else f"[({base}) & 0xFFFFFFFF] * 32"
        load, store = "scratch_load", "scratch_store"
    else:
        if use_saddr:
            address = f"[x + {offset} + (s[{saddr}] | s[{saddr + 1}] << 32) for x in v[{vaddr}]]"
        else:
            address = f"[(lo | hi << 32) + {offset} for lo, hi in zip(v[{vaddr}], v[{vaddr + 1}])]"
        load, store = "global_load", "global_store"
    if "_load_" in name and (lk := load_kind(name)):
        n, signed, d16 = lk
        t = g.tmp("m")
        g.emit(f"{t} = {load}(w, {address}, ex, {n}, {signed})")
        _emit_load_result(g, t, vdst, n, d16)
        return
    if "_store_" in name and (sk := store_kind(name)):
        n, hi = sk
        g.emit(f"{store}(w, {address}, ex, {n}, {_store_values(vdata, n, hi)})")
        return
    g.raise_error(unsupported(inst, g.ctx))
