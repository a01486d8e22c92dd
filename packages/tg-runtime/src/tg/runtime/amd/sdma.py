"""SDMA 6.0 copy-queue commands as data, and the AMD copy encoder rules (specs/amd.md 3.4).

An SDMA packet starts with a header dword ``op[7:0] | sub_op[15:8] | op-specific bits``; :data:`PACKETS` gives each
packet's op, sub-op and the meaning of its dwords, the ``*_FIELDS`` tables the bit fields. The encoder rules build
packets from them; the mock GPU's SDMA executor (tg.runtime.amd.sim.sdma_exec) parses them with the same tables.

``pm_encode`` for ``COPY:0``:

- ``COPY`` (a CALL): COPY_LINEAR packets of at most ``max_copy_size`` bytes each (a byte count that is a variable
  becomes a fixed number of packets whose unused ones turn into NOPs of the same length);
- ``SIGNAL``: FENCE (32-bit write, uncached); for the timeline on KFD a second FENCE into the queue event's mailbox
  and a TRAP raising its interrupt;
- ``WAIT``: POLL_REGMEM on memory, ``>=``;
- ``TIMESTAMP``: TIMESTAMP (the global clock) into ``signal + 8``;
- ``BARRIER``: nothing (SDMA reads memory without caches).

``pm_submit`` copies the command buffer into the ring at ``put % ring_bytes``; when it does not fit before the end,
the tail is zero-filled (zero dwords are NOPs) and the copy starts at 0 (hcq.md 3.6).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tg.ir import Ops, PatternMatcher, QOp, UOp, UPat, dtypes
from tg.runtime.amd.pm4 import Field, Word, hi32, pack, ring_dwords, u32, unpack
from tg.runtime.hcq import ir

U32, U64, I32 = dtypes.uint32, dtypes.uint64, dtypes.int32
M32 = 0xFFFFFFFF

# ---- packet layouts ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Packet:
    """An SDMA packet: ``op``/``sub_op`` of its header and the meaning of each dword after the header (``body`` None:
    variable length, given by a count in the packet)."""

    name: str
    op: int
    sub_op: int
    body: tuple[str, ...] | None
    purpose: str


PACKETS: dict[str, Packet] = {p.name: p for p in (
    Packet("NOP", 0, 0, None, "filler; header count[29:16] more dwords are skipped (a zero dword is a 1-dword NOP)"),
    Packet("COPY_LINEAR", 1, 0, ("count", "parameter", "src_lo", "src_hi", "dst_lo", "dst_hi"),
           "copy count+1 bytes"),
    Packet("WRITE", 2, 0, None, "addr_lo, addr_hi, count-1, then count data dwords: write to memory"),
    Packet("FENCE", 5, 0, ("addr_lo", "addr_hi", "data"), "write a dword after earlier packets completed"),
    Packet("TRAP", 6, 0, ("int_context",), "raise an interrupt with a context id"),
    Packet("POLL_REGMEM", 8, 0, ("addr_lo", "addr_hi", "value", "mask", "interval"),
           "wait until (word & mask) <func> value"),
    Packet("TIMESTAMP", 13, 2, ("addr_lo", "addr_hi"), "write the 64-bit global clock"),
)}  # fmt: skip
BY_OP: dict[tuple[int, int], Packet] = {(p.op, p.sub_op): p for p in PACKETS.values()}

HEADER_FIELDS: dict[str, Field] = {"op": (0, 8), "sub_op": (8, 8)}
NOP_HEADER_FIELDS: dict[str, Field] = {"op": (0, 8), "sub_op": (8, 8), "count": (16, 14)}
FENCE_HEADER_FIELDS: dict[str, Field] = {"op": (0, 8), "sub_op": (8, 8), "mtype": (16, 3)}
POLL_HEADER_FIELDS: dict[str, Field] = {"op": (0, 8), "sub_op": (8, 8), "func": (28, 3), "mem_poll": (31, 1)}
POLL_INTERVAL_FIELDS: dict[str, Field] = {"interval": (0, 16), "retry_count": (16, 12)}
COPY_COUNT_FIELDS: dict[str, Field] = {"count": (0, 30)}
TRAP_FIELDS: dict[str, Field] = {"int_context": (0, 28)}

POLL_FUNCTIONS = {3: "==", 4: "!=", 5: ">="}
MTYPE_UC = 3  # FENCE writes uncached
MAX_COPY_SIZE = 0x40000000  # bytes per COPY_LINEAR on SDMA >= 5 (0x400000 before)
MAX_VARIABLE_COPY_PACKETS = 4  # a variable byte count: at most this many packets (AMDDevice.transfer splits above)

COPY_HEADER = pack(HEADER_FIELDS, op=1, sub_op=0)
COPY_AS_NOP = pack(NOP_HEADER_FIELDS, op=0, count=6)  # an unused copy packet of a variable-size copy
FENCE_HEADER = pack(FENCE_HEADER_FIELDS, op=5, mtype=MTYPE_UC)
TRAP_HEADER = pack(HEADER_FIELDS, op=6)
POLL_HEADER = pack(POLL_HEADER_FIELDS, op=8, func=5, mem_poll=1)
POLL_INTERVAL = pack(POLL_INTERVAL_FIELDS, interval=4, retry_count=0xFFF)
TIMESTAMP_HEADER = pack(HEADER_FIELDS, op=13, sub_op=2)


def header_of(word: int) -> Packet | None:
    """The packet a header dword starts (None: unknown op/sub-op)."""
    f = unpack(HEADER_FIELDS, word)
    if f["op"] == 0:
        return PACKETS["NOP"]
    return BY_OP.get((f["op"], f["sub_op"]))


def packet(name: str, head: Word, body: Sequence[Word], label: str = "") -> UOp:
    """The PACKET of SDMA packet ``name`` (its body length checked against the table)."""
    p = PACKETS[name]
    if p.body is not None and len(body) != len(p.body):
        raise ValueError(f"SDMA {name} has {len(p.body)} body dwords ({', '.join(p.body)}), got {len(body)}")
    return ir.packet(f"{name} {label}".strip(), [u32(head), *(u32(w) for w in body)])


def fence(addr: Word, value: Word) -> UOp:
    """FENCE: write the low 32 bits of ``value`` at ``addr``."""
    return packet("FENCE", FENCE_HEADER, [u32(addr), hi32(addr), u32(value)])


def poll_regmem(addr: Word, value: Word, mask: int = M32) -> UOp:
    """POLL_REGMEM on memory: wait until ``(mem & mask) >= value``."""
    return packet("POLL_REGMEM", POLL_HEADER, [u32(addr), hi32(addr), u32(value), mask, POLL_INTERVAL])


def copy_linear(dst: Word, src: Word, nbytes: int) -> UOp:
    """COPY_LINEAR of ``nbytes`` (1..2^30) bytes."""
    if not 0 < nbytes <= 1 << 30:
        raise ValueError(f"a COPY_LINEAR packet copies 1..2^30 bytes, got {nbytes}")
    return packet("COPY_LINEAR", COPY_HEADER, [nbytes - 1, 0, u32(src), hi32(src), u32(dst), hi32(dst)])


def _plus(addr: UOp, off: int) -> UOp:
    return addr + UOp.const(U64, off) if off else addr


def copy_packets(dst: UOp, src: UOp, nbytes: UOp | int, max_copy: int = MAX_COPY_SIZE) -> list[UOp]:
    """The COPY_LINEAR packets of a copy: ``nbytes`` split at ``max_copy``. A variable count gives
    ``ceil(max / max_copy)`` packets (at most MAX_VARIABLE_COPY_PACKETS), each a copy of its share or, when the share
    is empty, a NOP of the same 7 dwords."""
    if isinstance(nbytes, int) or nbytes.op is Ops.CONST:
        n = int(nbytes if isinstance(nbytes, int) else nbytes.arg)
        return [copy_linear(_plus(dst, off), _plus(src, off), min(max_copy, n - off)) for off in range(0, n, max_copy)]
    n64 = nbytes.cast(U64)
    count = min(-(-int(nbytes.vmax) // max_copy), MAX_VARIABLE_COPY_PACKETS) if int(nbytes.vmax) > 0 else 1
    out = []
    for k in range(count):
        off = UOp.const(U64, k * max_copy)
        used = n64 > off  # this packet copies something
        share = (n64 - off).minimum(UOp.const(U64, max_copy)) if k else n64.minimum(UOp.const(U64, max_copy))
        head = used.where(UOp.const(U32, COPY_HEADER), UOp.const(U32, COPY_AS_NOP))
        cnt = used.where((share - UOp.const(U64, 1)).cast(U32), UOp.const(U32, 0))
        s, d = _plus(src, k * max_copy), _plus(dst, k * max_copy)
        out.append(packet("COPY_LINEAR", head, [cnt, 0, u32(s), hi32(s), u32(d), hi32(d)], f"part {k}"))
    return out


# ---- the encoder rules ---------------------------------------------------------------------------------------------


def copy_nbytes(call: UOp) -> UOp | int:
    """A copy CALL's byte count: a DEFINE_VAR given as its third argument (transfer programs), else the
    destination's size."""
    if len(call.src) > 3 and call.src[3].op is Ops.DEFINE_VAR:
        return call.src[3]
    return ir.nbytes_of(call.src[1])


def _copy(ctx: Any, call: UOp) -> UOp:
    dst, src = ir.getaddr(call.src[1], ctx.device), ir.getaddr(call.src[2], ctx.device)
    packets = copy_packets(dst, src, copy_nbytes(call), ctx.facts.get("max_copy_size", MAX_COPY_SIZE))
    return UOp(Ops.LINEAR, dtypes.void, tuple(packets)) if packets else UOp(Ops.NOOP)


def _signal(ctx: Any, s: UOp, v: UOp) -> UOp:
    packets = [fence(ir.getaddr(s, ctx.device), v)]
    event = ctx.facts.get("queue_event")  # KFD: (mailbox address, event id): wake a host sleeping on the timeline
    if event is not None and s.op is Ops.HCQBUF and s.arg.role == "timeline":
        mailbox, event_id = event
        packets += [fence(mailbox, event_id), packet("TRAP", TRAP_HEADER, [pack(TRAP_FIELDS, int_context=event_id)])]
    return packets[0] if len(packets) == 1 else UOp(Ops.LINEAR, dtypes.void, tuple(packets))


# ctx: EncodeCtx; facts: "max_copy_size", "queue_event" ((mailbox address, event id) or None)
pm_encode = PatternMatcher([
    # SDMA reads and writes memory uncached: a barrier needs no packet
    (UPat(Ops.QCMD, arg=QOp.BARRIER), lambda ctx: UOp(Ops.NOOP)),
    (UPat(Ops.QCMD, arg=QOp.WAIT, src=(UPat.var("s"), UPat.var("v"))),
     lambda ctx, s, v: poll_regmem(ir.getaddr(s, ctx.device), v)),
    (UPat(Ops.QCMD, arg=QOp.SIGNAL, src=(UPat.var("s"), UPat.var("v"))), _signal),
    (UPat(Ops.QCMD, arg=QOp.TIMESTAMP, src=(UPat.var("s"),)),
     lambda ctx, s: packet("TIMESTAMP", TIMESTAMP_HEADER, [u32(a := ir.getaddr(s, ctx.device) + UOp.const(U64, 8)),
                                                           hi32(a)])),
    # copies: linear copies of at most max_copy_size bytes
    (UPat(Ops.CALL, src=(UPat(Ops.COPY),), allow_any_len=True, name="call"), _copy),
])  # fmt: skip


# ---- the submit rule -----------------------------------------------------------------------------------------------


def _i(x: int) -> UOp:
    return UOp.const(I32, x)


def submit_ring_copy(ctx: Any, q: UOp) -> UOp:
    """The submitter fragment of a copy queue (ctx: SubmitCtx): copy the command buffer into the ring at
    ``put % ring`` (bytes), zero-filling the tail and starting at 0 when it does not fit before the end; then, after a
    release fence, the write pointer, the doorbell and ``put`` (all in bytes)."""
    cmdbuf, after = q.src[0], q.src[1:]
    ring_dw, n = ring_dwords(ctx), ctx.nwords
    if 2 * n > ring_dw:
        raise RuntimeError(f"{ctx.device} {ctx.queue}: a submit of {n} dwords needs half the {ring_dw}-dword ring "
                           f"(it may first skip the ring's tail); lower HCQ_BATCH_SIZE")  # fmt: skip
    if ring_dw & (ring_dw - 1):
        raise RuntimeError(f"{ctx.device} {ctx.queue}: the ring size ({ring_dw} dwords) must be a power of two")
    ring = ir.hcqbuf(ctx.device, "ring", ctx.queue, U32, ring_dw)
    put, wptr, doorbell = (ir.hcqbuf(ctx.device, r, ctx.queue) for r in ("put", "wptr", "doorbell"))
    base = put.after(*after).index(_i(0)).load()
    pos = ((base >> UOp.const(U64, 2)) & UOp.const(U64, ring_dw - 1)).cast(I32)  # dword position in the ring
    fits = (pos + _i(n)) < _i(ring_dw + 1)
    start = fits.where(pos, _i(0))
    tail = fits.where(_i(0), _i(ring_dw) - pos)  # dwords zero-filled before wrapping
    r = UOp.range(_i(n), 3000)
    # the tail is shorter than the command buffer (it did not fit): the fill loop runs over n, gated by the tail
    fill = ring.after(*after).index(pos + r, valid=r < tail).store(UOp.const(U32, 0)).end(r)
    k = UOp.range(_i(n), 3001)
    copied = ring.after(fill).index(start + k).store(cmdbuf.after(*after).index(k).load()).end(k)
    new = base + (tail.cast(U64) + UOp.const(U64, n)) * UOp.const(U64, 4)
    fence_ = UOp(Ops.BARRIER, dtypes.void, (copied,))
    w = wptr.after(fence_).index(_i(0)).store(new)
    d = doorbell.after(UOp(Ops.BARRIER, dtypes.void, (w,))).index(_i(0)).store(new)
    return put.after(d).index(_i(0)).store(new)


pm_submit = PatternMatcher([(UPat(Ops.QUEUE, name="q"), submit_ring_copy)])
