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
from itertools import chain

from tg.runtime.amd.sim.blockgen import BlockGen, unsupported
from tg.runtime.amd.sim.decode import EmulatorError, Instruction
from tg.runtime.amd.sim.wave import FULL, ZEROS, Wave, fault, lane_bits, lanes_of

SHARED_BASE, PRIVATE_BASE, APERTURE = 0x1000_0000_0000_0000, 0x2000_0000_0000_0000, 1 << 32
M32, M64 = 0xFFFFFFFF, 0xFFFFFFFFFFFFFFFF
SPAN_LIMIT = 1 << 16  # a wave's accesses within this many bytes are served by one GPUMemory read

_FMT = {(1, False): "B", (1, True): "b", (2, False): "H", (2, True): "h", (4, False): "I", (4, True): "i"}
_ONE = {k: struct.Struct("<" + c) for k, c in _FMT.items()}
_ALL = {k: struct.Struct(f"<32{c}") for k, c in _FMT.items()}
_DWORDS = {n: struct.Struct(f"<{n}I") for n in (2, 3, 4)}
_ALL_DWORDS = {n: struct.Struct(f"<{32 * n}I") for n in (2, 3, 4)}
ZERO_ROWS = {n: (ZEROS,) * n for n in (1, 2, 3, 4)}
Rows = tuple[Sequence[int], ...]


def _rows(data: bytes | bytearray, base: int, addrs: Sequence[int], ex: int, n: int, signed: bool) -> Rows:
    """A load's result when its active lanes all read `data` (which starts at address `base`): one sequence of 32
    lane values per destination dword (n <= 4: one, sign-extended to 32 bits for signed loads)."""
    full = ex == FULL
    vals: Sequence[int]
    if n <= 4:
        if full and addrs[0] == base and addrs == list(range(base, base + 32 * n, n)):
            vals = _ALL[n, signed].unpack_from(data, 0)
        else:
            unpack = _ONE[n, signed].unpack_from
            if full:
                vals = [unpack(data, a - base)[0] for a in addrs]
            else:
                vals = [unpack(data, a - base)[0] if m else 0 for a, m in zip(addrs, lane_bits(ex), strict=False)]
        return ([x & M32 for x in vals] if signed else vals,)
    k = n // 4
    if full and addrs[0] == base and addrs == list(range(base, base + 32 * n, n)):
        words = _ALL_DWORDS[k].unpack_from(data, 0)
        return tuple(words[j::k] for j in range(k))
    unpack = _DWORDS[k].unpack_from
    zero = (0,) * k
    if full:
        per_lane = [unpack(data, a - base) for a in addrs]
    else:
        per_lane = [unpack(data, a - base) if m else zero for a, m in zip(addrs, lane_bits(ex), strict=False)]
    return tuple(zip(*per_lane, strict=False))


def _lane_rows(values: list[bytes], n: int, signed: bool) -> Rows:
    """Rows of a load from each lane's bytes (b"" for inactive lanes)."""
    data = b"".join(v or bytes(n) for v in values)
    return _rows(data, 0, list(range(0, 32 * n, n)), FULL, n, signed)


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


def global_load(w: Wave, addrs: list[int], ex: int, n: int, signed: bool) -> Rows:
    """Load n bytes per active lane from flat/global addresses: one row of 32 lane values per dword (0 in inactive
    lanes)."""
    if not ex:
        return ZERO_ROWS[max(1, n // 4)]
    act = _active(addrs, ex)
    lo, hi = min(act), max(act) + n
    if 0 <= lo and hi <= SHARED_BASE and hi - lo <= SPAN_LIMIT:
        try:
            data = w.mem.read(lo, hi - lo)
        except EmulatorError:
            pass  # some lane is out of bounds: the lane-by-lane path names it
        else:
            return _rows(data, lo, addrs, ex, n, signed)
    values = [b""] * 32
    for i in lanes_of(ex):
        values[i] = _lane_access(w, i, addrs[i], n, None)
    return _lane_rows(values, n, signed)


def _pack_all(rows: Rows, n: int) -> bytes:
    """The bytes of all 32 lanes' store data, lane after lane."""
    if n <= 4:
        return _ALL[n, False].pack(*rows[0])
    return _ALL_DWORDS[n // 4].pack(*chain.from_iterable(zip(*rows, strict=False)))


def _lane_bytes(rows: Rows, lane: int, n: int) -> bytes:
    if n <= 4:
        return _ONE[n, False].pack(rows[0][lane])
    return _DWORDS[n // 4].pack(*(r[lane] for r in rows))


def global_store(w: Wave, addrs: list[int], ex: int, n: int, rows: Rows) -> None:
    """Store n bytes per active lane (data: one row per dword) to flat/global addresses (lanes in order: the last of
    equal addresses wins)."""
    if not ex:
        return
    lo = addrs[0]
    if ex == FULL and lo >= 0 and lo + 32 * n <= SHARED_BASE and addrs == list(range(lo, lo + 32 * n, n)):
        try:
            w.mem.write(lo, _pack_all(rows, n))
            return
        except EmulatorError:
            pass  # some lane is out of bounds: the lane-by-lane path names it
    for i in lanes_of(ex):
        _lane_access(w, i, addrs[i], n, _lane_bytes(rows, i, n))


# ---------------------------------------------------------------- LDS


def _local_lane(w: Wave, lane: int, mem: bytearray, what: str, addr: int, n: int, data: bytes | None) -> bytes:
    """One lane's access of n bytes at `addr` of an on-chip memory (`what`: LDS or scratch): the bytes read, or b""
    after writing `data`; out of bounds raises the lane's fault."""
    if addr < 0 or addr + n > len(mem):
        verb = "read" if data is None else "wrote"
        raise fault(w, lane, f"{verb} {n} bytes at {what} 0x{addr:x} outside {len(mem)} bytes")
    if data is None:
        return bytes(mem[addr : addr + n])
    mem[addr : addr + n] = data
    return b""


def _lds_lane(w: Wave, lane: int, addr: int, n: int, data: bytes | None) -> bytes:
    return _local_lane(w, lane, w.lds, "LDS", addr, n, data)


def lds_load(w: Wave, addrs: list[int], ex: int, n: int, signed: bool) -> Rows:
    """Load n bytes per active lane from LDS byte addresses (rows as global_load)."""
    if not ex:
        return ZERO_ROWS[max(1, n // 4)]
    act = _active(addrs, ex)
    if min(act) >= 0 and max(act) + n <= len(w.lds):
        return _rows(w.lds, 0, addrs, ex, n, signed)
    for i in lanes_of(ex):
        _lds_lane(w, i, addrs[i], n, None)  # raises for the first lane out of bounds
    raise AssertionError("unreachable")


def lds_store(w: Wave, addrs: list[int], ex: int, n: int, rows: Rows) -> None:
    """Store n bytes per active lane to LDS byte addresses."""
    lds = w.lds
    if n <= 4:
        pack_into, vals = _ONE[n, False].pack_into, rows[0]
        for i in lanes_of(ex):
            a = addrs[i]
            if a < 0 or a + n > len(lds):
                raise fault(w, i, f"wrote {n} bytes at LDS 0x{a:x} outside {len(lds)} bytes")
            pack_into(lds, a, vals[i])
        return
    for i in lanes_of(ex):
        _lds_lane(w, i, addrs[i], n, _lane_bytes(rows, i, n))


# ---------------------------------------------------------------- scratch (per-lane private memory)


def _scratch_lane(w: Wave, lane: int, addr: int, n: int, data: bytes | None) -> bytes:
    return _local_lane(w, lane, w.scratch[lane] if w.scratch else bytearray(), "scratch", addr, n, data)


def scratch_load(w: Wave, addrs: list[int], ex: int, n: int, signed: bool) -> Rows:
    """Load n bytes per active lane from the lane's scratch at its offset (rows as global_load)."""
    values = [b""] * 32
    for i in lanes_of(ex):
        values[i] = _scratch_lane(w, i, addrs[i], n, None)
    return _lane_rows(values, n, signed)


def scratch_store(w: Wave, addrs: list[int], ex: int, n: int, rows: Rows) -> None:
    """Store n bytes per active lane to the lane's scratch at its offset."""
    for i in lanes_of(ex):
        _scratch_lane(w, i, addrs[i], n, _lane_bytes(rows, i, n))


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


def _emit_load_result(g: BlockGen, rows: str, vdst: int, n: int, d16: int) -> None:
    """Write a load's rows (local `rows`, one per dword) into its destination VGPR(s), active lanes only."""
    if d16:
        t = g.tmp()
        if d16 == 2:
            g.emit(f"{t} = [(o & 0xFFFF) | (x & 0xFFFF) << 16 for o, x in zip(v[{vdst}], {rows}[0])]")
        else:
            g.emit(f"{t} = [(o & 0xFFFF0000) | (x & 0xFFFF) for o, x in zip(v[{vdst}], {rows}[0])]")
        g.write(vdst, t)
        return
    for k in range(max(1, n // 4)):
        g.write(vdst + k, f"{rows}[{k}]")


def _store_values(data: int, n: int, hi: bool) -> str:
    """Expression of the rows (one per dword, 32 lanes each) a store writes from VGPR(s) `data`."""
    if n > 4:
        return f"({', '.join(f'v[{data + k}]' for k in range(n // 4))})"
    if hi:
        return f"([x >> 16 & {(1 << (8 * n)) - 1:#x} for x in v[{data}]],)"
    if n == 4:
        return f"(v[{data}],)"
    return f"([x & {(1 << (8 * n)) - 1:#x} for x in v[{data}]],)"


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
            for off, src in zip(offsets, (d0, d1), strict=False):
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
