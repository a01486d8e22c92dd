"""The AMD encoders (tg.runtime.amd.pm4 / sdma) and the mock GPU's executors that parse their packets back
(tg.runtime.amd.sim.pm4_exec / sdma_exec), without a device: golden words per command (amd.md 3.9), then the packets
executed on a MockGPU over host memory, including a real gfx1100 kernel dispatched to the emulator, and the errors a
malformed packet raises."""

from __future__ import annotations

import ctypes
import struct
from pathlib import Path
from typing import Any

import pytest

from tg.ir import Ops, UOp, Variable, dtypes
from tg.runtime.amd import pm4, sdma
from tg.runtime.amd.program import CodeObject
from tg.runtime.amd.sim.decode import EmulatorError
from tg.runtime.amd.sim.gpu import MockError, MockGPU
from tg.runtime.amd.sim.kfd_mock import HostGPUMemory
from tg.runtime.amd.sim.pm4_exec import PM4Executor
from tg.runtime.amd.sim.sdma_exec import SDMAExecutor
from tg.runtime.hcq import ir
from tg.runtime.hcq.encode import EncodeCtx, encode_command, make_block
from tg.runtime.hcq.prepare import ProgramInfo

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "codeobj"
U64 = dtypes.uint64
FACTS = {"scratch": lambda private: (0x7F00_0012_3400, 0x1234), "queue_event": (0x7000_0000_0008, 9),
         "max_copy_size": sdma.MAX_COPY_SIZE}  # fmt: skip


class FakeAMD:
    device = "AMD"
    pm_encode = None


def encode(cmd: UOp, queue: str = "COMPUTE:0", facts: dict[str, Any] | None = None) -> tuple[list[UOp], EncodeCtx]:
    dev = FakeAMD()
    dev.pm_encode = pm4.pm_encode if queue.startswith("COMPUTE") else sdma.pm_encode  # type: ignore[assignment]
    ctx = EncodeCtx("AMD", queue, facts if facts is not None else FACTS)
    return encode_command(cmd, dev, ctx), ctx


def const_words(p: UOp) -> list[int | None]:
    """The packet's words, None for a patch word."""
    return [int(w.arg) if w.op is Ops.CONST else None for w in p.src]


# ---- golden words ----------------------------------------------------------------------------------------------------


def test_headers_and_field_constants() -> None:
    assert const_words(pm4.set_sh_reg("COMPUTE_PGM_LO", 1, 2))[:2] == [0xC0027600, 0x20C]
    assert pm4.header(0x15, 4) == 0xC0031500  # DISPATCH_DIRECT
    assert pm4.header(0x49, 7) == 0xC0064900  # RELEASE_MEM
    assert pm4.header(0x3C, 6) == 0xC0053C00  # WAIT_REG_MEM
    assert pm4.indirect_buffer(0x1000, 5)[0] == 0xC0023F00  # INDIRECT_BUFFER
    assert (pm4.GCR_ALL, pm4.GCR_SHADER) == (0xC3F1, 0x3F0)
    assert (pm4.WAIT_MEM_GE, pm4.CS_PARTIAL_FLUSH_EVENT, pm4.DISPATCH_INITIATOR) == (0x15, 0x407, 0x8005)
    assert pm4.unpack(pm4.RELEASE_SELECT_FIELDS, pm4.pack(pm4.RELEASE_SELECT_FIELDS, int_sel=2, data_sel=3)) == {
        "dst_sel": 0, "int_sel": 2, "data_sel": 3}  # fmt: skip
    with pytest.raises(ValueError, match="does not fit in 3 bits"):
        pm4.pack(pm4.WAIT_INFO_FIELDS, function=9)
    with pytest.raises(ValueError, match="unknown field 'bogus'"):
        pm4.pack(pm4.WAIT_INFO_FIELDS, bogus=1)
    with pytest.raises(ValueError, match="not a compute"):
        pm4.GC_REGS["X"] = 0x1000
        try:
            pm4.set_sh_reg("X", 1)
        finally:
            del pm4.GC_REGS["X"]
    assert (sdma.COPY_HEADER, sdma.FENCE_HEADER, sdma.TRAP_HEADER) == (0x1, 0x30005, 0x6)
    assert (sdma.POLL_HEADER, sdma.POLL_INTERVAL, sdma.TIMESTAMP_HEADER) == (0xD0000008, 0xFFF0004, 0x20D)


def test_wait_signal_timestamp_barrier_on_the_compute_queue() -> None:
    sig = ir.signal_buf("AMD", "signal", ("t", 0))
    (wait,), _ = encode(ir.wait(sig, 5))
    assert const_words(wait) == [0xC0053C00, 0x15, None, None, 5, 0xFFFFFFFF, 4]
    block = make_block(ir.hcqbuf("AMD", "cmdbuf", 0, dtypes.uint32, 7), [wait], dtypes.uint32)
    assert [off for off, _ in block.patches] == [8, 12]  # address low and high: link-time words
    (sigp,), _ = encode(ir.signal(sig, 7))
    ev = pm4.unpack(pm4.RELEASE_EVENT_FIELDS, sigp.src[1].arg)
    assert ev["event_type"] == 0x14 and ev["event_index"] == 5 and ev["GL2_WB"] and ev["SEQ"]
    assert const_words(sigp)[2:] == [pm4.pack(pm4.RELEASE_SELECT_FIELDS, data_sel=1), None, None, 7, 0, 0]
    # the timeline on KFD: a second RELEASE_MEM writes the queue event's mailbox and interrupts with its id
    tl, _ = encode(ir.signal(ir.timeline("AMD"), 3))
    assert len(tl) == 2 and const_words(tl[1])[2:] == [
        pm4.pack(pm4.RELEASE_SELECT_FIELDS, int_sel=2, data_sel=1), 8, 0x7000, 9, 0, 9]  # fmt: skip
    ts, _ = encode(ir.timestamp(sig))
    assert [p.arg.split()[0] for p in ts] == ["RELEASE_MEM", "RELEASE_MEM", "ACQUIRE_MEM"]
    assert pm4.unpack(pm4.RELEASE_SELECT_FIELDS, ts[1].src[2].arg)["data_sel"] == 3
    assert ir.render_word(ts[1].src[3]) == "(unsigned int)(&signal[t,0]@AMD+8)"
    bar, _ = encode(ir.barrier())
    assert const_words(bar[0]) == [0xC0053C00, 0x45, 0xE26, 0xE27, 0xFFFFFFFF, 0xFFFFFFFF, 4]
    assert const_words(bar[1]) == [0xC0065800, 0, 0xFFFFFFFF, 0xFFFFFFFF, 0, 0, 0, 0xC3F1]


class FakeProgram:
    """What the encoder asks of a loaded program: its code object."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.code_object = CodeObject((FIXTURES / f"clang15_{name}.o").read_bytes(), name)


def _add_call(global_size: tuple[Any, ...] = (4, 1, 1)) -> UOp:
    info = ProgramInfo("add", "AMD", (0, 1), (0,), (1,), (Variable("n", 0, 1000),), 1, global_size, (64, 1, 1),
                       FakeProgram("add"))  # fmt: skip
    params = [ir.slot_param(i, "AMD", dtypes.float32, 256) for i in range(2)]
    return UOp(Ops.CALL, dtypes.void, (UOp(Ops.PROGRAM, dtypes.void, (), info), *params))


def test_kernel_dispatch_registers_and_kernel_arguments() -> None:
    packets, ctx = encode(_add_call())
    names = [p.arg for p in packets]
    assert names == ["ACQUIRE_MEM", "SET_SH_REG COMPUTE_PGM_LO", "SET_SH_REG COMPUTE_PGM_RSRC1",
                     "SET_SH_REG COMPUTE_PGM_RSRC3", "SET_SH_REG COMPUTE_TMPRING_SIZE",
                     "SET_SH_REG COMPUTE_DISPATCH_SCRATCH_BASE_LO", "SET_SH_REG COMPUTE_RESTART_X",
                     "SET_SH_REG COMPUTE_USER_DATA_0", "SET_SH_REG COMPUTE_RESOURCE_LIMITS",
                     "SET_SH_REG COMPUTE_START_X", "DISPATCH_DIRECT add", "EVENT_WRITE CS_PARTIAL_FLUSH"]  # fmt: skip
    by = dict(zip(names, packets, strict=True))
    assert const_words(by["ACQUIRE_MEM"])[-1] == 0x3F0
    kd = FakeProgram("add").code_object.descriptor
    assert const_words(by["SET_SH_REG COMPUTE_PGM_RSRC1"]) == [0xC0027600, 0x212, kd.compute_pgm_rsrc1 | 1 << 20,
                                                               kd.compute_pgm_rsrc2]  # fmt: skip
    assert const_words(by["SET_SH_REG COMPUTE_TMPRING_SIZE"])[2:] == [0x1234]
    assert const_words(by["SET_SH_REG COMPUTE_DISPATCH_SCRATCH_BASE_LO"])[2:] == [0x7F00_0012_34 & 0xFFFFFFFF, 0x7F]
    assert const_words(by["SET_SH_REG COMPUTE_START_X"])[2:] == [0, 0, 0, 64, 1, 1, 0, 0]
    assert const_words(by["DISPATCH_DIRECT add"]) == [0xC0031500, 4, 1, 1, 0x8005]
    assert const_words(by["EVENT_WRITE CS_PARTIAL_FLUSH"]) == [0xC0004600, 0x407]
    # kernel arguments: two addresses (input patches, low/high words) and the int variable (a value patch)
    (args,) = ctx.blocks
    assert len(args.patches) == 5 and ir.render_word(args.patches[4][1]) == "n"
    low, high = (ir.render_word(w) for _, w in args.patches[:2])
    assert (low, high) == ("(unsigned int)&s0[AMD]", "(unsigned int)(&s0[AMD]>>32)")


def test_dispatch_with_a_symbolic_grid_and_refused_programs() -> None:
    n = Variable("g", 1, 100)
    packets, _ = encode(_add_call((n, 1, 1)))
    assert ir.render_word(packets[-2].src[1]) == "g"  # a value patch per execution
    bad = _add_call()
    info = bad.src[0].arg
    wrong = ProgramInfo(info.name, "AMD", (0,), (0,), (), (), 1, (1,), (1,), info.runner)  # 1 buffer, no variable
    with pytest.raises(Exception, match="kernarg_size 20 is not the layout of 1 buffers and 0 int32 variables"):
        encode(bad.replace(src=(UOp(Ops.PROGRAM, dtypes.void, (), wrong), *bad.src[1:2])))
    cpu = ProgramInfo("k", "AMD", (), (), (), (), 1, (1,), (1,), object())
    with pytest.raises(RuntimeError, match="was not compiled for an AMD device"):
        encode(UOp(Ops.CALL, dtypes.void, (UOp(Ops.PROGRAM, dtypes.void, (), cpu),)))


def test_sdma_copies_split_and_variable_counts() -> None:
    dst, src = (ir.slot_param(i, "AMD", dtypes.uint8, 5 << 29) for i in range(2))
    body = UOp(Ops.COPY, dtypes.uint8, (UOp(Ops.DEVICE, arg="AMD"),))
    packets, _ = encode(UOp(Ops.CALL, dtypes.void, (body, dst, src)), "COPY:0")
    assert [const_words(p)[:3] for p in packets] == [[1, 0x3FFFFFFF, 0], [1, 0x3FFFFFFF, 0], [1, (1 << 29) - 1, 0]]
    assert ir.render_word(packets[1].src[3]) == "(unsigned int)(&s1[AMD]+0x40000000)"
    nbytes = Variable("_nbytes", 0, 2**62, U64)
    packets, _ = encode(UOp(Ops.CALL, dtypes.void, (body, dst, src, nbytes)), "COPY:0")
    assert len(packets) == sdma.MAX_VARIABLE_COPY_PACKETS and all(len(p.src) == 7 for p in packets)
    assert "WHERE" in ir.render_word(packets[1].src[0])  # a COPY header, or a NOP of the same size when unused
    sig = ir.signal_buf("AMD", "signal", ("t", 0))
    (poll,), _ = encode(ir.wait(sig, 3), "COPY:0")
    assert const_words(poll) == [0xD0000008, None, None, 3, 0xFFFFFFFF, 0xFFF0004]
    fence, _ = encode(ir.signal(ir.timeline("AMD"), 2), "COPY:0")
    assert [p.arg for p in fence] == ["FENCE", "FENCE", "TRAP"] and const_words(fence[2]) == [6, 9]
    (ts,), _ = encode(ir.timestamp(sig), "COPY:0")
    assert const_words(ts)[0] == 0x20D
    assert encode(ir.barrier(), "COPY:0")[0] == []


# ---- the executors ---------------------------------------------------------------------------------------------------


class Memory:
    """Host memory blocks mapped into a MockGPU's identity memory."""

    def __init__(self) -> None:
        self.gpu_mem = HostGPUMemory("test GPU")
        self.blocks: list[Any] = []
        self.interrupts: list[int] = []
        self.gpu = MockGPU("test GPU", self.gpu_mem, on_interrupt=self.interrupts.append)

    def alloc(self, size: int) -> int:
        buf = (ctypes.c_char * size)()
        self.blocks.append(buf)
        va = ctypes.addressof(buf)
        self.gpu_mem.map(len(self.blocks), va, size)
        return va

    def words(self, va: int, words: list[int]) -> None:
        self.gpu_mem.write(va, struct.pack(f"<{len(words)}I", *words))

    def u32(self, va: int) -> int:
        return int(self.gpu.read_u32(va))


def packet_words(*packets: UOp) -> list[int]:
    out = []
    for p in packets:
        ws = const_words(p)
        assert None not in ws
        out += [w for w in ws if w is not None]
    return out


def pm4_queue(m: Memory, ring_dw: int = 256) -> tuple[PM4Executor, int, int]:
    ring, ptrs = m.alloc(4 * ring_dw), m.alloc(256)
    q = PM4Executor(m.gpu, ring, 4 * ring_dw, ptrs + 128, ptrs + 56)
    m.gpu.add_queue(q)
    return q, ring, ptrs


def submit(m: Memory, ring: int, ptrs: int, words: list[int], ring_dw: int = 256) -> None:
    put = m.gpu.read_u64(ptrs + 56)
    for i, w in enumerate(words):
        m.words(ring + 4 * ((put + i) % ring_dw), [w])
    m.gpu.write_u64(ptrs + 56, put + len(words))
    m.gpu.pump()
    m.gpu.check()


def test_pm4_executor_runs_signals_waits_timestamps_and_indirect_buffers() -> None:
    m = Memory()
    q, ring, ptrs = pm4_queue(m)
    sig, flag = m.alloc(16), m.alloc(16)
    submit(m, ring, ptrs, packet_words(pm4.release_mem(sig, 7, pm4.DATA_LOW32), pm4.wait_reg_mem(flag, 2),
                                       pm4.release_mem(sig, 8, pm4.DATA_LOW32)))  # fmt: skip
    assert m.u32(sig) == 7 and "WAIT_REG_MEM(mem at" in q.describe()  # stopped at the unsatisfied wait
    m.words(flag, [2])
    m.gpu.pump()
    assert m.u32(sig) == 8 and m.gpu.read_u64(ptrs + 128) == m.gpu.read_u64(ptrs + 56)
    # an indirect buffer with a timestamp and an interrupting release, then a packet after it in the ring
    ib = m.alloc(256)
    ib_words = packet_words(pm4.release_mem(), pm4.release_mem(sig + 8, 0, pm4.DATA_CLOCK), pm4.acquire_mem(),
                            pm4.release_mem(sig, 11, pm4.DATA_LOW32, pm4.INT_AFTER_WRITE, ctxid=42))  # fmt: skip
    m.words(ib, ib_words)
    before = m.gpu.clock()
    submit(m, ring, ptrs, pm4.indirect_buffer(ib, len(ib_words)) + packet_words(pm4.hdp_flush()))  # type: ignore[arg-type]
    assert m.u32(sig) == 11 and m.interrupts == [42] and before <= m.gpu.read_u64(sig + 8) <= m.gpu.clock()
    submit(m, ring, ptrs, packet_words(pm4.set_sh_reg("COMPUTE_TMPRING_SIZE", 0x5005)))
    assert m.gpu.regs[0x2E18] == 0x5005


@pytest.mark.parametrize("words, error", [
    ([0xC0007700, 0], "unknown PM4 opcode 0x77"),
    ([0xC0034900, 1, 2, 3, 4], "PM4 RELEASE_MEM with 4 body dwords; it has 7"),
    ([0xC0023F00, 0x1000, 0, 5], "INDIRECT_BUFFER without the valid bit"),
    ([0x40000000], "PM4 packet type 1"),
    ([0xC0031500, 1, 1, 1, 0x1], "wave32 compute dispatches only"),
    ([0xC0053C00, 0x17, 0, 0, 0, 0, 4], "WAIT_REG_MEM function 7 is not modelled"),
])  # fmt: skip
def test_pm4_malformed_packets_name_the_packet(words: list[int], error: str) -> None:
    m = Memory()
    _, ring, ptrs = pm4_queue(m)
    with pytest.raises(MockError, match=error) as e:
        submit(m, ring, ptrs, words)
    assert "test GPU COMPUTE ring dword 0" in str(e.value)
    assert m.gpu.queues[0].halted  # the queue stops; the GPU keeps the error
    with pytest.raises(MockError):
        m.gpu.check()


def test_pm4_dispatch_runs_a_gfx1100_kernel_on_the_emulator() -> None:
    m = Memory()
    _, ring, ptrs = pm4_queue(m)
    co = FakeProgram("add").code_object
    code = m.alloc(len(co.image) + 4096)
    code = (code + 255) & ~255
    m.gpu_mem.write(code, co.link(code).image)
    out, a, args = m.alloc(4 * 200), m.alloc(4 * 200), m.alloc(64)
    m.gpu_mem.write(a, struct.pack("<200f", *range(200)))
    m.gpu_mem.write(args, struct.pack("<QQi", out, a, 150))  # kernel arguments: out, a, n (amd.md 2.4)
    entry = code + co.entry_offset
    kd = co.descriptor
    words = packet_words(
        pm4.set_sh_reg("COMPUTE_PGM_LO", entry >> 8, entry >> 40),
        pm4.set_sh_reg("COMPUTE_PGM_RSRC1", kd.compute_pgm_rsrc1 | 1 << 20, kd.compute_pgm_rsrc2),
        pm4.set_sh_reg("COMPUTE_USER_DATA_0", args & 0xFFFFFFFF, args >> 32),
        pm4.set_sh_reg("COMPUTE_START_X", 0, 0, 0, 64, 1, 1, 0, 0),
        pm4.pkt3("DISPATCH_DIRECT", [4, 1, 1, pm4.DISPATCH_INITIATOR]),
    )
    submit(m, ring, ptrs, words)
    got = struct.unpack("<200f", m.gpu_mem.read(out, 800))
    assert list(got[:150]) == [float(i + 1) for i in range(150)] and set(got[150:]) == {0.0}
    assert m.gpu.dispatches == 1
    # the same kernel with an argument pointing at unmapped memory: an emulator fault, the queue halts
    m.gpu_mem.write(args, struct.pack("<QQi", 0x10, a, 150))
    with pytest.raises(EmulatorError, match="not mapped to this GPU"):
        submit(m, ring, ptrs, words)


def sdma_queue(m: Memory, ring_bytes: int = 1024) -> tuple[SDMAExecutor, int, int]:
    ring, ptrs = m.alloc(ring_bytes), m.alloc(256)
    q = SDMAExecutor(m.gpu, ring, ring_bytes, ptrs + 128, ptrs + 56)
    m.gpu.add_queue(q)
    return q, ring, ptrs


def sdma_submit(m: Memory, ring: int, ptrs: int, words: list[int], ring_bytes: int = 1024) -> None:
    put = m.gpu.read_u64(ptrs + 56)
    for i, w in enumerate(words):
        m.words(ring + (put + 4 * i) % ring_bytes, [w])
    m.gpu.write_u64(ptrs + 56, put + 4 * len(words))
    m.gpu.pump()
    m.gpu.check()


def test_sdma_executor_copies_fences_polls_and_timestamps() -> None:
    m = Memory()
    q, ring, ptrs = sdma_queue(m)
    src, dst, sig = m.alloc(4096), m.alloc(4096), m.alloc(16)
    m.gpu_mem.write(src, bytes(range(256)) * 16)
    sdma_submit(m, ring, ptrs, packet_words(sdma.copy_linear(dst + 3, src + 5, 1000), sdma.fence(sig, 5),
                                            sdma.poll_regmem(sig + 4, 1), sdma.fence(sig, 6)))  # fmt: skip
    assert m.gpu_mem.read(dst + 3, 1000) == (bytes(range(256)) * 16)[5:1005] and m.gpu_mem.read(dst, 3) == bytes(3)
    assert m.u32(sig) == 5 and "POLL_REGMEM" in q.describe()
    m.words(sig + 4, [1])
    m.gpu.pump()
    assert m.u32(sig) == 6
    trap = sdma.packet("TRAP", sdma.TRAP_HEADER, [17])
    ts = sdma.packet("TIMESTAMP", sdma.TIMESTAMP_HEADER, [(sig + 8) & 0xFFFFFFFF, (sig + 8) >> 32])
    nop = sdma.pack(sdma.NOP_HEADER_FIELDS, op=0, count=2)
    sdma_submit(m, ring, ptrs, [nop, 0xDEAD, 0xBEEF, *packet_words(trap, ts)])
    assert m.interrupts == [17] and m.gpu.read_u64(sig + 8) > 0
    # the tail skipped with zero dwords (one-dword NOPs), the next packet at the start of the ring
    put = m.gpu.read_u64(ptrs + 56)
    tail = (1024 - put % 1024) // 4
    sdma_submit(m, ring, ptrs, [0] * tail + packet_words(sdma.fence(sig, 99)))
    assert m.u32(sig) == 99


@pytest.mark.parametrize("words, error", [
    ([0x63], "unknown SDMA packet op 99"),
    ([0x5, 0], "SDMA FENCE needs 16 bytes, only 8 were submitted"),
    ([0x8, 0, 0, 0, 0, 0], "POLL_REGMEM on a register is not modelled"),
])  # fmt: skip
def test_sdma_malformed_packets_name_the_packet(words: list[int], error: str) -> None:
    m = Memory()
    _, ring, ptrs = sdma_queue(m)
    with pytest.raises(MockError, match=error) as e:
        sdma_submit(m, ring, ptrs, words)
    assert "ring byte 0" in str(e.value)
