"""PM4 compute-queue commands of RDNA3 (gfx1100) as data, and the AMD compute encoder rules (specs/amd.md 3.2-3.3).

The packets are tables: :data:`PACKETS` gives each type-3 packet its opcode and the meaning of every body dword, and
the ``*_FIELDS`` tables give the bit fields packed into those dwords (cache-control masks, event selectors, wait
functions). The encoder rules below build packets from them, the mock GPU (tg.runtime.amd.sim.pm4_exec) parses them
back with the same tables, and the golden tests check the words. Register addresses are absolute dword indices on
gfx1100 (GC segment 0 base 0x1260 + the register's offset; NBIO segment 2 base 0xD20 + offset).

``pm_encode`` turns one HCQ queue command into PM4 packets (hcq.md 3.4 encoder contract):

- ``EXEC`` (a kernel CALL): invalidate the shader caches (ACQUIRE_MEM), load the kernel's registers (entry, resource
  descriptors, scratch, kernel-argument address, work-group size) with SET_SH_REG, DISPATCH_DIRECT, then a
  CS_PARTIAL_FLUSH so the next command starts after the kernel's writes are done;
- ``SIGNAL``: an end-of-pipe RELEASE_MEM with cache write-back writing the low 32 bits; for the timeline on KFD a
  second one writes the queue event's mailbox and raises its interrupt, so a host sleeping in WAIT_EVENTS wakes;
- ``WAIT``: WAIT_REG_MEM on memory, ``>=``;
- ``TIMESTAMP``: RELEASE_MEM (all earlier work done), RELEASE_MEM of the GPU clock into ``signal + 8``, ACQUIRE_MEM;
- ``BARRIER``: the HDP flush (WAIT_REG_MEM writing the flush request register and waiting for its done register),
  then ACQUIRE_MEM invalidating every cache, so host writes and other queues' writes are seen.

``pm_submit`` hands a command buffer to the compute ring as an INDIRECT_BUFFER packet (hcq.md 3.6).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tg.ir import Ops, PatternMatcher, QOp, UOp, UPat, dtypes
from tg.runtime.hcq import ir

U32, U64, I32 = dtypes.uint32, dtypes.uint64, dtypes.int32
M32 = 0xFFFFFFFF
Field = tuple[int, int]  # (lowest bit, width)

# ---- packet layouts ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Packet:
    """A PM4 type-3 packet: ``opcode`` and the meaning of each body dword (``body`` None: variable length)."""

    name: str
    opcode: int
    body: tuple[str, ...] | None
    purpose: str


PACKETS: dict[str, Packet] = {p.name: p for p in (
    Packet("NOP", 0x10, None, "ring filler: the body dwords are skipped"),
    Packet("DISPATCH_DIRECT", 0x15, ("groups_x", "groups_y", "groups_z", "dispatch_initiator"),
           "launch a grid of work-groups with the COMPUTE_* registers loaded so far"),
    Packet("WAIT_REG_MEM", 0x3C, ("info", "addr_lo_or_reg", "addr_hi_or_reg_done", "reference", "mask",
                                  "poll_interval"), "wait until (word & mask) <function> reference"),
    Packet("INDIRECT_BUFFER", 0x3F, ("addr_lo", "addr_hi", "control"), "execute a command buffer (IB) in memory"),
    Packet("EVENT_WRITE", 0x46, ("event",), "a pipeline event (CS_PARTIAL_FLUSH: wait for earlier dispatches)"),
    Packet("RELEASE_MEM", 0x49, ("event", "select", "addr_lo", "addr_hi", "data_lo", "data_hi", "int_ctxid"),
           "at end of pipe: flush caches, write a value or the GPU clock, optionally interrupt"),
    Packet("ACQUIRE_MEM", 0x58, ("coher_cntl", "size_lo", "size_hi", "base_lo", "base_hi", "poll_interval",
                                 "gcr_cntl"), "invalidate / write back caches before later commands read memory"),
    Packet("SET_SH_REG", 0x76, None, "reg - 0x2C00, then values for consecutive compute registers"),
    Packet("SET_UCONFIG_REG", 0x79, None, "reg - 0xC000, then values for consecutive uconfig registers"),
)}  # fmt: skip
BY_OPCODE: dict[int, Packet] = {p.opcode: p for p in PACKETS.values()}
SH_REG_BASE, UCONFIG_REG_BASE = 0x2C00, 0xC000  # register packets take a dword offset from these
SH_REG_END = 0x3000

# header dword: type[31:30] = 3, count[29:16] = body dwords - 1, opcode[15:8]
HEADER_FIELDS: dict[str, Field] = {"opcode": (8, 8), "count": (16, 14), "type": (30, 2)}
# ACQUIRE_MEM gcr_cntl: which caches to invalidate (INV) or write back (WB)
GCR_CNTL_FIELDS: dict[str, Field] = {"GLI_INV": (0, 2), "GLM_WB": (4, 1), "GLM_INV": (5, 1), "GLK_WB": (6, 1),
                                     "GLK_INV": (7, 1), "GLV_INV": (8, 1), "GL1_INV": (9, 1), "GL2_INV": (14, 1),
                                     "GL2_WB": (15, 1)}  # fmt: skip
# RELEASE_MEM event dword: the event, where in the pipe, and the caches to flush before writing
RELEASE_EVENT_FIELDS: dict[str, Field] = {"event_type": (0, 6), "event_index": (8, 4), "GLM_WB": (12, 1),
                                          "GLM_INV": (13, 1), "GLV_INV": (14, 1), "GL1_INV": (15, 1),
                                          "GL2_INV": (20, 1), "GL2_WB": (21, 1), "SEQ": (22, 1)}  # fmt: skip
# RELEASE_MEM select dword: destination (0 memory), interrupt (0 none, 2 after the write), data (0 none, 1 low 32
# bits, 2 64 bits, 3 the GPU clock counter)
RELEASE_SELECT_FIELDS: dict[str, Field] = {"dst_sel": (16, 2), "int_sel": (24, 3), "data_sel": (29, 3)}
# WAIT_REG_MEM info dword: function (3 ==, 4 !=, 5 >=), memory (1) or register (0), operation (1: write the first
# register, then wait on the second), engine (0 micro-engine)
WAIT_INFO_FIELDS: dict[str, Field] = {"function": (0, 3), "mem_space": (4, 1), "operation": (6, 2), "engine": (8, 1)}
EVENT_FIELDS: dict[str, Field] = {"event_type": (0, 6), "event_index": (8, 4)}
DISPATCH_INITIATOR_FIELDS: dict[str, Field] = {"compute_shader_en": (0, 1), "force_start_at_000": (2, 1),
                                               "cs_w32_en": (15, 1)}  # fmt: skip
IB_CONTROL_FIELDS: dict[str, Field] = {"size_dw": (0, 20), "valid": (23, 1)}
# COMPUTE_TMPRING_SIZE: scratch waves in flight and the scratch bytes of one wave in 256-byte units
TMPRING_FIELDS: dict[str, Field] = {"waves": (0, 12), "wavesize": (12, 15)}

WAIT_FUNCTIONS = {3: "==", 4: "!=", 5: ">="}
CACHE_FLUSH_AND_INV_TS_EVENT, END_OF_PIPE = 0x14, 5
CS_PARTIAL_FLUSH, PARTIAL_FLUSH_INDEX = 7, 4
DATA_NONE, DATA_LOW32, DATA_64, DATA_CLOCK = 0, 1, 2, 3
INT_NONE, INT_AFTER_WRITE = 0, 2


def pack(fields: Mapping[str, Field], **values: int) -> int:
    """A dword from named bit fields (ValueError for an unknown field or a value that does not fit)."""
    word = 0
    for name, value in values.items():
        if name not in fields:
            raise ValueError(f"unknown field {name!r}; fields: {', '.join(fields)}")
        lo, width = fields[name]
        if not 0 <= value < 1 << width:
            raise ValueError(f"field {name}={value:#x} does not fit in {width} bits")
        word |= value << lo
    return word


def unpack(fields: Mapping[str, Field], word: int) -> dict[str, int]:
    """The named bit fields of a dword."""
    return {name: (word >> lo) & ((1 << width) - 1) for name, (lo, width) in fields.items()}


def header(opcode: int, body_dwords: int) -> int:
    """The type-3 header of a packet with ``body_dwords`` dwords after it."""
    if not 1 <= body_dwords <= 1 << 14:
        raise ValueError(f"a PM4 packet body has 1..16384 dwords, got {body_dwords}")
    return pack(HEADER_FIELDS, type=3, count=body_dwords - 1, opcode=opcode)


GCR_ALL = pack(GCR_CNTL_FIELDS, GLI_INV=1, GLM_WB=1, GLM_INV=1, GLK_WB=1, GLK_INV=1, GLV_INV=1, GL1_INV=1, GL2_INV=1,
               GL2_WB=1)  # fmt: skip
GCR_SHADER = pack(GCR_CNTL_FIELDS, GLM_WB=1, GLM_INV=1, GLK_WB=1, GLK_INV=1, GLV_INV=1, GL1_INV=1)  # before dispatches
RELEASE_FLUSH = pack(RELEASE_EVENT_FIELDS, event_type=CACHE_FLUSH_AND_INV_TS_EVENT, event_index=END_OF_PIPE, GLM_WB=1,
                     GLM_INV=1, GLV_INV=1, GL1_INV=1, GL2_INV=1, GL2_WB=1, SEQ=1)  # fmt: skip
WAIT_MEM_GE = pack(WAIT_INFO_FIELDS, function=5, mem_space=1)  # 0x15
WAIT_REG_WRITE_THEN_WAIT = pack(WAIT_INFO_FIELDS, function=5, mem_space=0, operation=1)
CS_PARTIAL_FLUSH_EVENT = pack(EVENT_FIELDS, event_type=CS_PARTIAL_FLUSH, event_index=PARTIAL_FLUSH_INDEX)  # 0x407
DISPATCH_INITIATOR = pack(DISPATCH_INITIATOR_FIELDS, compute_shader_en=1, force_start_at_000=1, cs_w32_en=1)  # 0x8005
IB_VALID = 1 << 23
POLL_INTERVAL = 4

# ---- registers (gfx1100, absolute dword indices) -------------------------------------------------------------------

GC_REGS: dict[str, int] = {
    "COMPUTE_START_X": 0x2E04, "COMPUTE_START_Y": 0x2E05, "COMPUTE_START_Z": 0x2E06,
    "COMPUTE_NUM_THREAD_X": 0x2E07, "COMPUTE_NUM_THREAD_Y": 0x2E08, "COMPUTE_NUM_THREAD_Z": 0x2E09,
    "COMPUTE_PGM_LO": 0x2E0C, "COMPUTE_PGM_HI": 0x2E0D,
    "COMPUTE_DISPATCH_SCRATCH_BASE_LO": 0x2E10, "COMPUTE_DISPATCH_SCRATCH_BASE_HI": 0x2E11,
    "COMPUTE_PGM_RSRC1": 0x2E12, "COMPUTE_PGM_RSRC2": 0x2E13, "COMPUTE_RESOURCE_LIMITS": 0x2E15,
    "COMPUTE_TMPRING_SIZE": 0x2E18, "COMPUTE_RESTART_X": 0x2E1B, "COMPUTE_PGM_RSRC3": 0x2E28,
    "COMPUTE_USER_DATA_0": 0x2E40,
}  # fmt: skip
NBIO_HDP_FLUSH_REQ, NBIO_HDP_FLUSH_DONE = 0xE26, 0xE27  # BIF_BX_PF0_GPU_HDP_FLUSH_REQ / _DONE on NBIO 4.3
RSRC1_PRIV = 1 << 20
LDS_BLOCK = 512  # COMPUTE_PGM_RSRC2.lds_size unit in bytes
RSRC2_LDS_SHIFT = 15

# ---- words ---------------------------------------------------------------------------------------------------------

Word = UOp | int


def u32(x: Word) -> UOp:
    """A value as a uint32 packet word (the low 32 bits; constants stay constants)."""
    if isinstance(x, int):
        return UOp.const(U32, x & M32)
    if x.op is Ops.CONST:
        return UOp.const(U32, int(x.arg) & M32)
    return x if x.dtype is U32 else x.cast(U32)


def hi32(x: Word) -> UOp:
    """The high 32 bits of a 64-bit value as a packet word."""
    if isinstance(x, int):
        return UOp.const(U32, (x >> 32) & M32)
    if x.op is Ops.CONST:
        return UOp.const(U32, (int(x.arg) >> 32) & M32)
    return (x.cast(U64) >> UOp.const(U64, 32)).cast(U32)


def pkt3(name: str, body: Sequence[Word], label: str = "") -> UOp:
    """The PACKET of PM4 packet ``name`` with ``body`` (its length checked against the table)."""
    p = PACKETS[name]
    if p.body is not None and len(body) != len(p.body):
        raise ValueError(f"PM4 {name} has {len(p.body)} body dwords ({', '.join(p.body)}), got {len(body)}")
    return ir.packet(f"{name} {label}".strip(), [header(p.opcode, len(body)), *(u32(w) for w in body)])


def set_sh_reg(reg: str, *values: Word) -> UOp:
    """SET_SH_REG of consecutive compute registers starting at ``reg``."""
    addr = GC_REGS[reg]
    if not SH_REG_BASE <= addr < SH_REG_END:
        raise ValueError(f"{reg} ({addr:#x}) is not a compute (SH) register")
    return pkt3("SET_SH_REG", [addr - SH_REG_BASE, *values], reg)


def acquire_mem(gcr_cntl: int = GCR_ALL) -> UOp:
    """ACQUIRE_MEM over all memory (size 2^64-1) with the cache actions ``gcr_cntl``."""
    return pkt3("ACQUIRE_MEM", [0, M32, M32, 0, 0, 0, gcr_cntl])


def release_mem(addr: Word = 0, value: Word = 0, data_sel: int = DATA_NONE, int_sel: int = INT_NONE,
                ctxid: Word = 0, flush: bool = True) -> UOp:  # fmt: skip
    """RELEASE_MEM at end of pipe: optionally flush caches, write ``value`` (or the clock), optionally interrupt."""
    event = RELEASE_FLUSH if flush else pack(RELEASE_EVENT_FIELDS, event_type=CACHE_FLUSH_AND_INV_TS_EVENT,
                                             event_index=END_OF_PIPE)  # fmt: skip
    select = pack(RELEASE_SELECT_FIELDS, dst_sel=0, int_sel=int_sel, data_sel=data_sel)
    data_hi = hi32(value) if data_sel == DATA_64 else 0
    return pkt3("RELEASE_MEM", [event, select, u32(addr), hi32(addr), u32(value), data_hi, ctxid])


def wait_reg_mem(addr: Word, value: Word, mask: int = M32, function: int = 5) -> UOp:
    """WAIT_REG_MEM on the dword at ``addr``: wait until ``(mem & mask) <function> value``."""
    info = pack(WAIT_INFO_FIELDS, function=function, mem_space=1)
    return pkt3("WAIT_REG_MEM", [info, u32(addr), hi32(addr), u32(value), mask, POLL_INTERVAL])


def hdp_flush(req: int = NBIO_HDP_FLUSH_REQ, done: int = NBIO_HDP_FLUSH_DONE) -> UOp:
    """The HDP flush: write the request register, wait until the done register shows the requested bits."""
    return pkt3("WAIT_REG_MEM", [WAIT_REG_WRITE_THEN_WAIT, req, done, M32, M32, POLL_INTERVAL], "HDP_FLUSH")


def indirect_buffer(addr: Word, size_dw: int) -> list[Word]:
    """The 4 dwords of an INDIRECT_BUFFER packet executing ``size_dw`` dwords at ``addr``."""
    if not 0 < size_dw < 1 << 20:
        raise ValueError(f"an indirect buffer holds 1..2^20-1 dwords, got {size_dw}")
    p = PACKETS["INDIRECT_BUFFER"]
    return [header(p.opcode, 3), u32(addr), hi32(addr), size_dw | IB_VALID]


# ---- the encoder rules ---------------------------------------------------------------------------------------------


def tmpring_size(private_bytes: int, cu_cnt: int, se_cnt: int, max_slots_scratch_cu: int) -> tuple[int, int]:
    """(scratch bytes, COMPUTE_TMPRING_SIZE) for kernels using up to ``private_bytes`` per lane (amd.md 3.5)."""
    per_lane = -(-max(private_bytes, 128) // 4) * 4
    nbytes = per_lane * 64 * max_slots_scratch_cu * cu_cnt
    wavesize = -(-64 * per_lane // 256)
    waves = min(nbytes // (wavesize * 256) // se_cnt, cu_cnt * max_slots_scratch_cu)
    return nbytes, pack(TMPRING_FIELDS, waves=min(waves, (1 << 12) - 1), wavesize=wavesize)


def _launch_dims(dims: Sequence[Any] | None) -> list[Word]:
    out: list[Word] = [d if isinstance(d, UOp) else int(d) for d in (dims or ())]
    if len(out) > 3:
        raise RuntimeError(f"AMD launches have at most 3 dimensions, got {dims}")
    return out + [1] * (3 - len(out))


def program_of(info: Any) -> Any:
    """The loaded AMD program behind a ProgramInfo (its runner, or the CompiledRunner's program)."""
    prg = getattr(info.runner, "_prg", info.runner)
    if prg is None or not hasattr(prg, "code_object"):
        raise RuntimeError(f"kernel {info.name} was not compiled for an AMD device ({type(prg).__name__})")
    return prg


def _exec(ctx: Any, call: UOp, prg: UOp) -> UOp:
    info = prg.arg
    program = program_of(info)
    co = program.code_object
    kd = co.descriptor
    co.check_kernargs(len(info.globals), len(info.vars))
    args: list[Word] = []
    for g in info.globals:
        addr = ir.getaddr(call.src[1 + g], ctx.device)
        args += [u32(addr), hi32(addr)]
    args += [u32(v) for v in info.vars]
    kernargs = ir.getaddr(ctx.data_block("kernargs", args or [0]), ctx.device)
    entry = ir.getaddr(ir.hcqbuf(ctx.device, "program", info), ctx.device) >> UOp.const(U64, 8)
    scratch_va, tmpring = ctx.facts["scratch"](kd.private_segment_fixed_size)
    lds_blocks = -(-kd.group_segment_fixed_size // LDS_BLOCK)
    gx, gy, gz = _launch_dims(info.global_size)
    lx, ly, lz = _launch_dims(info.local_size)
    if not all(isinstance(v, int) for v in (lx, ly, lz)):
        raise RuntimeError(f"kernel {info.name}: the work-group size must be static, got {info.local_size}")
    return UOp(Ops.LINEAR, dtypes.void, (
        acquire_mem(GCR_SHADER),
        set_sh_reg("COMPUTE_PGM_LO", u32(entry), hi32(entry)),
        set_sh_reg("COMPUTE_PGM_RSRC1", kd.compute_pgm_rsrc1 | RSRC1_PRIV,
                   kd.compute_pgm_rsrc2 | lds_blocks << RSRC2_LDS_SHIFT),
        set_sh_reg("COMPUTE_PGM_RSRC3", kd.compute_pgm_rsrc3),
        set_sh_reg("COMPUTE_TMPRING_SIZE", tmpring),
        set_sh_reg("COMPUTE_DISPATCH_SCRATCH_BASE_LO", (scratch_va >> 8) & M32, scratch_va >> 40),
        set_sh_reg("COMPUTE_RESTART_X", 0, 0, 0),
        set_sh_reg("COMPUTE_USER_DATA_0", u32(kernargs), hi32(kernargs)),
        set_sh_reg("COMPUTE_RESOURCE_LIMITS", 0),
        set_sh_reg("COMPUTE_START_X", 0, 0, 0, lx, ly, lz, 0, 0),
        pkt3("DISPATCH_DIRECT", [gx, gy, gz, DISPATCH_INITIATOR], info.name),
        pkt3("EVENT_WRITE", [CS_PARTIAL_FLUSH_EVENT], "CS_PARTIAL_FLUSH"),
    ))  # fmt: skip


def _signal(ctx: Any, s: UOp, v: UOp) -> UOp:
    addr = ir.getaddr(s, ctx.device)
    packets = [release_mem(addr, v, DATA_LOW32, flush=True)]
    event = ctx.facts.get("queue_event")  # KFD: (mailbox address, event id): wake a host sleeping on the timeline
    if event is not None and s.op is Ops.HCQBUF and s.arg.role == "timeline":
        mailbox, event_id = event
        packets.append(release_mem(mailbox, event_id, DATA_LOW32, INT_AFTER_WRITE, ctxid=event_id, flush=False))
    return packets[0] if len(packets) == 1 else UOp(Ops.LINEAR, dtypes.void, tuple(packets))


def _timestamp(ctx: Any, s: UOp) -> UOp:
    addr = ir.getaddr(s, ctx.device) + UOp.const(U64, 8)
    return UOp(Ops.LINEAR, dtypes.void, (release_mem(flush=True), release_mem(addr, 0, DATA_CLOCK, flush=False),
                                         acquire_mem(GCR_ALL)))  # fmt: skip


def _barrier(ctx: Any) -> UOp:
    req, done = ctx.facts.get("hdp_flush", (NBIO_HDP_FLUSH_REQ, NBIO_HDP_FLUSH_DONE))
    return UOp(Ops.LINEAR, dtypes.void, (hdp_flush(req, done), acquire_mem(GCR_ALL)))


# ctx: EncodeCtx; facts: "scratch" (private bytes per lane -> (scratch address, COMPUTE_TMPRING_SIZE)),
# "queue_event" ((mailbox address, event id) or None), "hdp_flush" ((request, done) register addresses)
pm_encode = PatternMatcher([
    # memory made visible: HDP flush, then every cache invalidated
    (UPat(Ops.QCMD, arg=QOp.BARRIER), _barrier),
    # waits compare the low 32 bits, >=
    (UPat(Ops.QCMD, arg=QOp.WAIT, src=(UPat.var("s"), UPat.var("v"))),
     lambda ctx, s, v: wait_reg_mem(ir.getaddr(s, ctx.device), v)),
    # signals: end-of-pipe writes after every earlier command, caches written back
    (UPat(Ops.QCMD, arg=QOp.SIGNAL, src=(UPat.var("s"), UPat.var("v"))), _signal),
    (UPat(Ops.QCMD, arg=QOp.TIMESTAMP, src=(UPat.var("s"),)), _timestamp),
    # kernels: registers, dispatch, partial flush
    (UPat(Ops.CALL, src=(UPat(Ops.PROGRAM, name="prg"),), allow_any_len=True, name="call"), _exec),
])  # fmt: skip


# ---- the submit rule -----------------------------------------------------------------------------------------------


def _i(x: int) -> UOp:
    return UOp.const(I32, x)


def ring_dwords(ctx: Any) -> int:
    """The ring size of the submit's queue in dwords: ``facts["ring_dwords"][queue]`` (the QueueSpec's
    ``ring_words`` is the largest submit, which for an indirect buffer is not the ring)."""
    return int(ctx.facts.get("ring_dwords", {}).get(ctx.queue, ctx.spec.ring_words))


def submit_indirect(ctx: Any, q: UOp) -> UOp:
    """The submitter fragment of a compute queue (ctx: SubmitCtx): an INDIRECT_BUFFER packet for the command buffer
    at ``put % ring`` (4 dwords; ring sizes are multiples of 4, so it never wraps), then, after a release fence, the
    write pointer, the doorbell and ``put`` (all in dwords)."""
    cmdbuf, after = q.src[0], q.src[1:]
    ring_words = ring_dwords(ctx)
    if ring_words & (ring_words - 1):
        raise RuntimeError(f"{ctx.device} {ctx.queue}: the ring size ({ring_words} dwords) must be a power of two")
    ring = ir.hcqbuf(ctx.device, "ring", ctx.queue, U32, ring_words)
    put, wptr, doorbell = (ir.hcqbuf(ctx.device, r, ctx.queue) for r in ("put", "wptr", "doorbell"))
    base = put.after(*after).index(_i(0)).load()
    slot = (base & UOp.const(U64, ring_words - 1)).cast(I32)
    words = indirect_buffer(ir.getaddr(cmdbuf, ctx.device), ctx.nwords)
    stores = [ring.after(*after).index(slot + _i(k)).store(u32(w)) for k, w in enumerate(words)]
    new = base + UOp.const(U64, len(words))
    fence = UOp(Ops.BARRIER, dtypes.void, tuple(stores))
    w = wptr.after(fence).index(_i(0)).store(new)
    d = doorbell.after(UOp(Ops.BARRIER, dtypes.void, (w,))).index(_i(0)).store(new)
    return put.after(d).index(_i(0)).store(new)


pm_submit = PatternMatcher([(UPat(Ops.QUEUE, name="q"), submit_indirect)])
