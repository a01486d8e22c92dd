"""The HCQ compiler stages S0-S4 on hand-made schedules, with no device: two fake HCQ devices whose encoders emit
readable packets (uint64 words: WAIT/SIGNAL/TIMESTAMP/EXEC/COPY). Golden listings of the queues (hcq.md 3.2 and
12), patch classes, the spec checks, and the errors of encoding."""

from __future__ import annotations

import textwrap

import pytest

from tg.ir import KernelInfo, Ops, PatternMatcher, QOp, SpecError, UOp, UPat, Variable, dtypes, hcq_spec, verify
from tg.runtime.hcq import (
    DepsTracker,
    PatchClass,
    ProgramInfo,
    QueueSpec,
    compile_linear,
    decode_block,
    ir,
    slot_linear,
)

U64 = dtypes.uint64


def _exec(ctx, call: UOp, prg: UOp) -> UOp:
    info = prg.arg
    args = [ir.getaddr(call.src[1 + g], ctx.device) for g in info.globals] + [v.cast(U64) for v in info.vars]
    return ir.packet("EXEC", [ir.getaddr(ir.hcqbuf(ctx.device, "program", info.name), ctx.device), *args], U64)


fake_encode = PatternMatcher([
    (UPat(Ops.QCMD, arg=QOp.BARRIER), lambda ctx: ir.packet("BARRIER", [0], U64)),
    (UPat(Ops.QCMD, arg=QOp.WAIT, src=(UPat.var("s"), UPat.var("v"))),
     lambda ctx, s, v: ir.packet("WAIT", [ir.getaddr(s, ctx.device), v], U64)),
    (UPat(Ops.QCMD, arg=QOp.SIGNAL, src=(UPat.var("s"), UPat.var("v"))),
     lambda ctx, s, v: ir.packet("SIGNAL", [ir.getaddr(s, ctx.device), v], U64)),
    (UPat(Ops.QCMD, arg=QOp.TIMESTAMP, src=(UPat.var("s"),)),
     lambda ctx, s: ir.packet("TIMESTAMP", [ir.getaddr(s, ctx.device) + UOp.const(U64, 8)], U64)),
    (UPat(Ops.CALL, src=(UPat(Ops.PROGRAM, name="prg"),), allow_any_len=True, name="call"), _exec),
    (UPat(Ops.CALL, src=(UPat(Ops.COPY),), allow_any_len=True, name="call"),
     lambda ctx, call: ir.packet("COPY", [ir.getaddr(call.src[1], ctx.device), ir.getaddr(call.src[2], ctx.device),
                                          ir.nbytes_of(call.src[1])], U64)),
])  # fmt: skip


class FakeHCQ:
    """An HCQ device as stages S0-S4 see it; its packets are readable text."""

    def __init__(self, device: str, peer_group: str = "fake", has_copy_queue: bool = True, ring_words: int = 1 << 16):
        self.device, self.peer_group, self.has_copy_queue, self.can_map_host = device, peer_group, has_copy_queue, True
        self.queues = {"COMPUTE:0": QueueSpec("compute", U64, ring_words), "COPY:0": QueueSpec("copy", U64, ring_words)}
        self.pm_encode, self.encode_facts = fake_encode, {}


class FakeEnv:
    """Fake HCQ devices by name (any other device is a host device); kernels "compile" to a ProgramInfo read off
    the AST (the PARAMs it stores to and loads from)."""

    def __init__(self, *devices: FakeHCQ) -> None:
        self.devices = {d.device: d for d in devices}

    def hcq_device(self, name: str) -> FakeHCQ | None:
        return self.devices.get(name)

    def lower_kernel(self, device: str, ast: UOp) -> ProgramInfo:
        topo = ast.toposort()
        outs = sorted({u.src[0].src[0].arg for u in topo if u.op is Ops.STORE})
        ins = sorted({u.src[0].src[0].arg for u in topo if u.op is Ops.LOAD})
        params = sorted({u.arg for u in topo if u.op is Ops.PARAM})
        variables = tuple(sorted({u for u in topo if u.op is Ops.DEFINE_VAR}, key=lambda v: v.arg[0]))
        return ProgramInfo(ast.arg.name, device, tuple(params), tuple(outs), tuple(ins), variables)


ENV = FakeEnv(FakeHCQ("A"), FakeHCQ("A:1"))


def kernel(name: str, nbufs: int = 2, n: int = 4, end: UOp | int | None = None) -> UOp:
    """out[i] = in0[i] (+ in1[i] ...) for i < end (default n)."""
    ps = [UOp.param(i, dtypes.float32, n) for i in range(nbufs)]
    r = UOp.range(end if end is not None else n, 0)
    val = ps[1].index(r).load()
    for p in ps[2:]:
        val = val + p.index(r).load()
    return ps[0].index(r).store(val).end(r).sink(arg=KernelInfo(name=name))


def call(body: UOp, *bufs: UOp) -> UOp:
    return UOp(Ops.CALL, dtypes.void, (body, *bufs))


def copy(dst: UOp, src: UOp) -> UOp:
    return call(UOp(Ops.COPY, dst.dtype, (UOp(Ops.DEVICE, arg=ir.device_of(dst)),)), dst, src)


def buf(dev: str, n: int = 4) -> UOp:
    return UOp.new_buffer(dev, n, dtypes.float32)


def view(base: UOp, n: int, offset: int) -> UOp:
    return UOp(Ops.BUFFER_VIEW, base.dtype, (base,), (n, offset))


def compiled(calls: list[UOp], env: FakeEnv = ENV, **kw):
    slotted, slots = slot_linear(UOp(Ops.LINEAR, dtypes.void, tuple(calls)))
    return compile_linear(slotted, len(slots), env, **kw)


def listing(calls: list[UOp], env: FakeEnv = ENV, **kw) -> str:
    out = []
    for s in compiled(calls, env, **kw).steps:
        out.append(ir.format_queues(s.queues) if hasattr(s, "queues") else f"HOST {ir.render_command(s)}")
    return "\n".join(line.rstrip() for text in out for line in text.splitlines())


def golden(text: str) -> str:
    return textwrap.dedent(text).strip()


A, A1 = "A", "A:1"


def test_slotting_numbers_buffers_by_first_use_and_keeps_view_offsets() -> None:
    a, b = buf(A), buf(A, 16)
    slotted, slots = slot_linear(UOp(Ops.LINEAR, dtypes.void, (call(kernel("K"), view(b, 4, 8), a),
                                                                 call(kernel("K2"), a, b))))  # fmt: skip
    assert slots == [b, a]
    first = slotted.src[0].src[1]
    assert first.op is Ops.BUFFER_VIEW and first.arg == (4, 8) and first.src[0].arg == (0, 16)
    assert slotted.src[1].src[1].arg == (1, 4)
    # the same structure over other buffers is the same slotted schedule (one compile cache key)
    c, d = buf(A), buf(A, 16)
    again, _ = slot_linear(UOp(Ops.LINEAR, dtypes.void, (call(kernel("K"), view(d, 4, 8), c),
                                                         call(kernel("K2"), c, d))))  # fmt: skip
    assert again is slotted


def test_single_queue() -> None:
    a, b, c = buf(A), buf(A), buf(A)
    assert listing([call(kernel("K1"), b, a), call(kernel("K2"), c, b)]) == golden("""
        A COMPUTE:0    BARRIER; WAIT(T[A], e(A)-1); K1(s0, s1); K2(s2, s0); SIGNAL(T[A], e(A))
    """)


def test_copy_kernel_kernel_copy_is_the_spec_example() -> None:
    # hcq.md 3.2: [COPY host->a, K1 b<-a, K2 c<-b, COPY c->host], here with the "host" buffer on the peer A:1
    a, b, c, h = buf(A), buf(A), buf(A), buf(A1)
    assert listing([copy(a, h), call(kernel("K1"), b, a), call(kernel("K2"), c, b), copy(h, c)]) == golden("""
        A:1 COPY:0     BARRIER; WAIT(T[A:1], e(A:1)-1); WAIT(T[A], e(A)-1); COPY s0<-s1; SIGNAL(Q[A:1 COPY:0], 1)
        A COMPUTE:0    BARRIER; WAIT(T[A], e(A)-1); WAIT(Q[A:1 COPY:0], 1); K1(s2, s0); K2(s3, s2);
                       SIGNAL(Q[A COMPUTE:0], 3); WAIT(Q[A COPY:0], 4); SIGNAL(T[A], e(A))
        A COPY:0       BARRIER; WAIT(T[A], e(A)-1); WAIT(T[A:1], e(A:1)-1); WAIT(Q[A COMPUTE:0], 3);
                       WAIT(Q[A:1 COPY:0], 1); COPY s1<-s3; SIGNAL(Q[A COPY:0], 4)
        A:1 COMPUTE:0  BARRIER; WAIT(T[A:1], e(A:1)-1); WAIT(Q[A COPY:0], 4); WAIT(Q[A:1 COPY:0], 1);
                       SIGNAL(T[A:1], e(A:1))
    """)


def test_write_after_read_across_queues() -> None:
    # the copy reads a on COPY:0, then a kernel overwrites a on COMPUTE:0: the kernel waits for the copy
    a, b, h = buf(A), buf(A), buf(A1)
    assert listing([copy(h, a), call(kernel("K1"), a, b)]) == golden("""
        A COPY:0       BARRIER; WAIT(T[A], e(A)-1); WAIT(T[A:1], e(A:1)-1); COPY s0<-s1; SIGNAL(Q[A COPY:0], 1)
        A COMPUTE:0    BARRIER; WAIT(T[A], e(A)-1); WAIT(Q[A COPY:0], 1); K1(s1, s2); SIGNAL(T[A], e(A))
        A:1 COMPUTE:0  BARRIER; WAIT(T[A:1], e(A:1)-1); WAIT(Q[A COPY:0], 1); SIGNAL(T[A:1], e(A:1))
    """)


def test_suballocated_arena_views_depend_on_byte_ranges() -> None:
    # floats [0,4) written by K1; the copy reads [4,8) (no dependency on K1); K2 overwrites [4,8) (waits for the
    # copy); K3 writes [2,6), which only overlaps work of its own queue
    a, b, c, h = buf(A), buf(A), buf(A), buf(A1)
    arena = buf(A, 64)
    v0, v1, v2 = view(arena, 4, 0), view(arena, 4, 4), view(arena, 4, 2)
    calls = [call(kernel("K1"), v0, a), copy(h, v1), call(kernel("K2"), v1, b), call(kernel("K3"), v2, c)]
    assert listing(calls) == golden("""
        A COMPUTE:0    BARRIER; WAIT(T[A], e(A)-1); K1(s0+0, s1); WAIT(Q[A COPY:0], 2); K2(s0+16, s3); K3(s0+8, s4);
                       SIGNAL(T[A], e(A))
        A COPY:0       BARRIER; WAIT(T[A], e(A)-1); WAIT(T[A:1], e(A:1)-1); COPY s2<-s0+16; SIGNAL(Q[A COPY:0], 2)
        A:1 COMPUTE:0  BARRIER; WAIT(T[A:1], e(A:1)-1); WAIT(Q[A COPY:0], 2); SIGNAL(T[A:1], e(A:1))
    """)


def test_deps_tracker_on_byte_ranges() -> None:
    t, base = DepsTracker(), buf(A, 64)
    w1, r1, w2 = ("A", "Q", 0), ("A", "R", 1), ("A", "Q", 2)
    assert t.access([], [(base, 0, 16)], w1) == set()
    assert t.access([(base, 16, 32)], [], r1) == set()  # disjoint from the write
    assert t.access([(base, 8, 24)], [], ("B", "R", 3)) == {w1}  # read after write
    assert t.access([], [(base, 12, 20)], w2) == {w1, r1, ("B", "R", 3)}  # write after write and after reads
    assert t.access([(base, 0, 64)], [], ("C", "R", 4)) == {w1, w2}


def test_two_devices_with_a_push_copy() -> None:
    a, b, h, k = buf(A), buf(A), buf(A1), buf(A1)
    assert listing([call(kernel("K1"), b, a), copy(h, b), call(kernel("K2"), k, h)]) == golden("""
        A COMPUTE:0    BARRIER; WAIT(T[A], e(A)-1); K1(s0, s1); SIGNAL(Q[A COMPUTE:0], 1); WAIT(Q[A COPY:0], 2);
                       SIGNAL(T[A], e(A))
        A COPY:0       BARRIER; WAIT(T[A], e(A)-1); WAIT(T[A:1], e(A:1)-1); WAIT(Q[A COMPUTE:0], 1); COPY s2<-s0;
                       SIGNAL(Q[A COPY:0], 2)
        A:1 COMPUTE:0  BARRIER; WAIT(T[A:1], e(A:1)-1); WAIT(Q[A COPY:0], 2); K2(s3, s2); SIGNAL(T[A:1], e(A:1))
    """)


def test_merge_caps_the_first_submit_and_doubles() -> None:
    x = [buf(A) for _ in range(8)]
    calls = [call(kernel(f"K{i}"), x[i + 1], x[i]) for i in range(7)]
    assert listing(calls, batch_size=2) == golden("""
        A COMPUTE:0    BARRIER; WAIT(T[A], e(A)-1); K0(s0, s1); K1(s2, s0)
        A COMPUTE:0    K2(s3, s2); K3(s4, s3); K4(s5, s4); K5(s6, s5)
        A COMPUTE:0    K6(s7, s6); SIGNAL(T[A], e(A))
    """)
    assert listing(calls, batch_size=0).count("COMPUTE:0") == 1  # 0: no cap


def test_merge_keeps_submit_order_per_queue() -> None:
    # COMPUTE:0 of A gets K1, then the copy needs K1, then K2 waits for the copy: one submit per queue still keeps
    # each queue's own order, and the queue signals order the queues
    a, b, c, h = buf(A), buf(A), buf(A), buf(A1)
    prog = compiled([call(kernel("K1"), b, a), copy(h, b), call(kernel("K2"), c, h)])
    keys = [str(q.arg) for q in prog.batches[0].queues]
    assert keys == ["A COMPUTE:0", "A COPY:0", "A:1 COMPUTE:0"]


def test_profile_timestamps_around_each_call() -> None:
    a, b, h = buf(A), buf(A), buf(A1)
    prog = compiled([call(kernel("K1"), b, a), copy(h, b)], profile=True)
    assert ir.format_queues(prog.batches[0].queues) == golden("""
        A COMPUTE:0    BARRIER; WAIT(T[A], e(A)-1); TIMESTAMP(P0s[A]); K1(s0, s1); TIMESTAMP(P0e[A]);
                       SIGNAL(Q[A COMPUTE:0], 1); WAIT(Q[A COPY:0], 2); SIGNAL(T[A], e(A))
        A COPY:0       BARRIER; WAIT(T[A], e(A)-1); WAIT(T[A:1], e(A:1)-1); WAIT(Q[A COMPUTE:0], 1);
                       TIMESTAMP(P1s[A]); COPY s2<-s0; TIMESTAMP(P1e[A]); SIGNAL(Q[A COPY:0], 2)
        A:1 COMPUTE:0  BARRIER; WAIT(T[A:1], e(A:1)-1); WAIT(Q[A COPY:0], 2); SIGNAL(T[A:1], e(A:1))
    """)
    assert [(d, q, name) for d, q, name, _, _ in prog.batches[0].profile] == [
        (A, "COMPUTE:0", "K1"),
        (A, "COPY:0", "copy 16"),
    ]


def test_host_calls_split_batches() -> None:
    a, b, c, disk = buf(A), buf(A), buf(A), buf("DISK")
    assert listing([call(kernel("K1"), b, a), copy(disk, b), call(kernel("K2"), c, b)]) == golden("""
        A COMPUTE:0    BARRIER; WAIT(T[A], e(A)-1); K1(s0, s1); SIGNAL(T[A], e(A))
        HOST COPY s2<-s0
        A COMPUTE:0    BARRIER; WAIT(T[A], e(A)-1); K2(s3, s0); SIGNAL(T[A], e(A))
    """)


def test_copy_without_copy_queue_is_a_copy_kernel() -> None:
    env = FakeEnv(FakeHCQ(A, has_copy_queue=False), FakeHCQ(A1, has_copy_queue=False))
    a, h = buf(A), buf(A1)
    assert listing([copy(h, a)], env) == golden("""
        A COMPUTE:0    BARRIER; WAIT(T[A], e(A)-1); WAIT(T[A:1], e(A:1)-1); copy_16(s0, s1);
                       SIGNAL(Q[A COMPUTE:0], 1); SIGNAL(T[A], e(A))
        A:1 COMPUTE:0  BARRIER; WAIT(T[A:1], e(A:1)-1); WAIT(Q[A COMPUTE:0], 1); SIGNAL(T[A:1], e(A:1))
    """)
    # over uint32 words when sizes and offsets allow, else bytes
    odd = UOp(Ops.BUFFER_VIEW, dtypes.uint8, (buf(A, 8),), (5, 3))
    prog = compiled([copy(UOp.new_buffer(A1, 5, dtypes.uint8), odd)], env)
    info = next(c.src[0].arg for q in prog.batches[0].queues for c in q.src if c.op is Ops.CALL)
    assert info.name == "copy_5"


def test_copy_between_peer_groups_goes_through_the_staging_buffer() -> None:
    env = FakeEnv(FakeHCQ(A, peer_group="g0"), FakeHCQ(A1, peer_group="g1"))
    a, h = buf(A), buf(A1)
    assert listing([copy(h, a)], env) == golden("""
        A COPY:0       BARRIER; WAIT(T[A], e(A)-1); COPY staging[0]@A+0<-s1+0; SIGNAL(Q[A COPY:0], 1)
        A:1 COPY:0     BARRIER; WAIT(T[A:1], e(A:1)-1); WAIT(T[A], e(A)-1); WAIT(Q[A COPY:0], 1);
                       COPY s0+0<-staging[0]@A+0; SIGNAL(Q[A:1 COPY:0], 2)
        A COMPUTE:0    BARRIER; WAIT(T[A], e(A)-1); WAIT(Q[A COPY:0], 1); WAIT(Q[A:1 COPY:0], 2); SIGNAL(T[A], e(A))
        A:1 COMPUTE:0  BARRIER; WAIT(T[A:1], e(A:1)-1); WAIT(Q[A:1 COPY:0], 2); SIGNAL(T[A:1], e(A:1))
    """)


def test_patch_classes_each_present() -> None:
    a, b = buf(A), buf(A)
    n = Variable("n", 1, 4)
    batch = compiled([call(kernel("KV", end=n), b, a)]).batches[0]
    counts = batch.patches.counts()
    # link: &timeline (twice: wait and signal), &program; input: &s0, &s1; value: n; epoch: epoch-1, epoch
    assert counts == {PatchClass.LINK: 3, PatchClass.INPUT: 2, PatchClass.VALUE: 1, PatchClass.EPOCH: 2}
    assert batch.variables == [n]
    assert batch.patches.inputs == [(0, A), (1, A)]
    assert decode_block(batch.blocks[0]).splitlines() == [
        "  BARRIER      0x0",
        "  WAIT         [&T[A]] [e(A)-1]",
        "  EXEC         [&program[KV]@A] [&s0[A]] [&s1[A]] [n]",
        "  SIGNAL       [&T[A]] [e(A)]",
    ]


def test_many_input_words_become_a_gather_table() -> None:
    bufs = [buf(A) for _ in range(10)]
    calls = [call(kernel(f"K{i}"), bufs[i + 1], bufs[i]) for i in range(9)]  # 18 input words in one cmdbuf
    batch = compiled(calls).batches[0]
    (gather,) = batch.patches.gathers
    assert len(gather.entries) == 18 and gather.table.arg.role == "patch_pairs"
    assert batch.patches.counts()[PatchClass.INPUT] == 18
    assert not [w for _, _, w, c in batch.patches.runtime if c is PatchClass.INPUT]
    # (word index, table index, byte offset, part): the first EXEC's output is word 4 (after BARRIER and WAIT)
    assert gather.entries[0] == (4, batch.patches.inputs.index((0, A)), 0, 0)  # K0 writes slot 0


def test_data_blocks_of_two_submits_to_one_queue_are_different_memory() -> None:
    # an encoder keeping kernel arguments in data blocks (AMD): the second submit's blocks must not be the first's
    def exec_with_args(ctx, call: UOp, prg: UOp) -> UOp:
        args = ctx.data_block("kernargs", [ir.getaddr(call.src[1 + g], ctx.device) for g in prg.arg.globals], U64)
        return ir.packet("EXEC", [ir.getaddr(args, ctx.device)], U64)

    dev = FakeHCQ("A")
    dev.pm_encode = PatternMatcher([(UPat(Ops.CALL, src=(UPat(Ops.PROGRAM, name="prg"),), allow_any_len=True,
                                          name="call"), exec_with_args)]) + fake_encode  # fmt: skip
    x = [buf(A) for _ in range(5)]
    calls = [call(kernel(f"K{i}"), x[i + 1], x[i]) for i in range(4)]
    batch = compiled(calls, FakeEnv(dev), batch_size=2).batches[0]
    assert [e.key for e in batch.encoded] == [(A, "COMPUTE:0")] * 2
    blocks = [b.buf for e in batch.encoded for b in e.data]
    assert len(blocks) == 4 and len(set(blocks)) == 4  # before the fix: submit 1 reused submit 0's two blocks


def test_queues_pass_the_spec_and_a_wait_outside_a_queue_is_refused() -> None:
    a, b, h = buf(A), buf(A), buf(A1)
    batch = compiled([copy(a, h), call(kernel("K1"), b, a)], profile=True).batches[0]
    verify(UOp(Ops.LINEAR, dtypes.void, tuple(batch.queues)), hcq_spec)
    verify(UOp(Ops.LINEAR, dtypes.void, tuple(e.queue for e in batch.encoded)), hcq_spec)
    with pytest.raises(SpecError, match="WAIT outside a QUEUE"):
        verify(UOp(Ops.LINEAR, dtypes.void, (ir.wait(ir.timeline(A), 1),)), hcq_spec)
    with pytest.raises(SpecError, match="signal HCQBUF"):
        verify(ir.queue(A, "COMPUTE:0", [ir.wait(ir.hcqbuf(A, "cmdbuf"), 1)]), hcq_spec)
    with pytest.raises(SpecError, match="holds a"):
        verify(ir.queue(A, "COMPUTE:0", [ir.timeline(A)]), hcq_spec)


def test_encoding_errors_name_the_problem() -> None:
    a, b = buf(A), buf(A)
    small = FakeEnv(FakeHCQ(A, ring_words=4), FakeHCQ(A1))
    with pytest.raises(RuntimeError, match=r"COMPUTE:0 submit of \d+ words exceeds the 4-word ring of A; lower "
                                           "HCQ_BATCH_SIZE"):  # fmt: skip
        compiled([call(kernel("K1"), b, a)], small)
    bare = FakeHCQ(A)
    bare.pm_encode = PatternMatcher([])
    with pytest.raises(RuntimeError, match=r"A has no encoder rule for BARRIER on COMPUTE:0"):
        compiled([call(kernel("K1"), b, a)], FakeEnv(bare))
    with pytest.raises(ValueError, match="unknown HCQBUF role"):
        ir.hcqbuf(A, "doorbel")
