"""The submitter's two runtimes (hcq.md 3.6): compiled C (HCQ_RUNTIME_DEV=CPU) and the PYTHON interpreter over
MMIO-style views. The same submitter writes the same bytes either way; interpreted, a register model sees every
store in program order; forcing CPU on memory that is a register model is refused at link."""

from __future__ import annotations

import ctypes
import struct
from typing import Any

import pytest

from tg.ir import KernelInfo, Ops, PatternMatcher, QOp, UOp, UPat, Variable, dtypes
from tg.runtime.hcq import ProgramInfo, QueueSpec, compile_linear, compile_queues, ir, slot_linear
from tg.runtime.hcq.alloc import BlockPool
from tg.runtime.hcq.cpu import CMD_WORDS, RING_SLOTS, HCQCPUDevice
from tg.runtime.hcq.device import HCQDevice, Region
from tg.runtime.hcq.link import link_batch
from tg.runtime.hcq.submit import BoundSubmitter, build_submitter
from tg.runtime.hcq.views import HostView

U32, U64 = dtypes.uint32, dtypes.uint64


def host_region(nbytes: int, fill: bytes = b"") -> Region:
    """Zeroed (or ``fill``-prefixed) host memory as a Region."""
    mem = (ctypes.c_char * nbytes)()
    if fill:
        ctypes.memmove(mem, fill, len(fill))
    addr = ctypes.addressof(mem)
    return Region(addr, nbytes, HostView(addr, nbytes, "B", owner=mem), None, mem)


# ---- the same submitter on both runtimes ---------------------------------------------------------------------------


class CPUShape:
    """What the compiler stages ask of an HCQ+CPU device, without opening one (no workers, no memory)."""

    def __init__(self, device: str) -> None:
        self.device, self.peer_group, self.has_copy_queue, self.can_map_host = device, "HCQ+CPU", True, True
        self.queues, self.encode_facts = HCQCPUDevice.queues, {}
        self.pm_encode, self.pm_submit = HCQCPUDevice.pm_encode, HCQCPUDevice.pm_submit


class ShapeEnv:
    def __init__(self, *names: str) -> None:
        self.devices = {n: CPUShape(n) for n in names}

    def hcq_device(self, name: str) -> Any:
        return self.devices.get(name)

    def lower_kernel(self, device: str, ast: UOp) -> ProgramInfo:
        topo = ast.toposort()
        outs = sorted({u.src[0].src[0].arg for u in topo if u.op is Ops.STORE})
        ins = sorted({u.src[0].src[0].arg for u in topo if u.op is Ops.LOAD})
        params = sorted({u.arg for u in topo if u.op is Ops.PARAM})
        variables = tuple(sorted({u for u in topo if u.op is Ops.DEFINE_VAR}, key=lambda v: v.arg[0]))
        return ProgramInfo(ast.arg.name, device, tuple(params), tuple(outs), tuple(ins), variables, threads=2)


def _kernel(name: str, end: Any) -> UOp:
    p = [UOp.param(i, dtypes.float32, 64) for i in range(2)]
    r = UOp.range(end, 0)
    return p[0].index(r).store(p[1].index(r).load()).end(r).sink(arg=KernelInfo(name=name))


def _program(n_kernels: int) -> Any:
    """A profiled two-device program: a chain of kernels (a variable in each), copies both ways (one batch)."""
    env = ShapeEnv("CPU", "CPU:1")
    n = Variable("n", 1, 64)
    bufs = [UOp.new_buffer("CPU", 64, dtypes.float32) for _ in range(n_kernels + 1)]
    far = UOp.new_buffer("CPU:1", 64, dtypes.float32)
    calls = [UOp(Ops.CALL, dtypes.void, (_kernel(f"k{i}", n), bufs[i + 1], bufs[i])) for i in range(n_kernels)]
    copy = UOp(Ops.COPY, dtypes.float32, (UOp(Ops.DEVICE, arg="CPU:1"),))
    calls.append(UOp(Ops.CALL, dtypes.void, (copy, far, bufs[-1])))
    slotted, slots = slot_linear(UOp(Ops.LINEAR, dtypes.void, tuple(calls)))
    prog = compile_linear(slotted, len(slots), env, profile=True)
    (batch,) = prog.batches
    return batch, build_submitter(batch, env)


def _regions(batch: Any, sub: Any, seed: int) -> list[Region]:
    """Host memory for every submitter parameter: blocks holding their blobs, counters near the ring's end (so
    the ring wraps), the input table with recognisable addresses, other memory a pattern."""
    blobs = {b.buf: b.blob for b in batch.blocks}
    for g in batch.patches.gathers:  # (word, table index, byte offset, part) quadruples, as link writes them
        blobs[g.table] = struct.pack(f"<{4 * len(g.entries)}Q", *[x for e in g.entries for x in e])
    regions = []
    for p in sub.params:
        role, size = p.arg.role, max(p.dtype.size, 1) * p.dtype.base.itemsize
        if p in blobs:
            regions.append(host_region(size, blobs[p]))
        elif role == "timeline_value":
            regions.append(host_region(8, (seed + 41).to_bytes(8, "little")))
        elif role == "put":
            regions.append(host_region(8, (RING_SLOTS - 3).to_bytes(8, "little")))
        elif role == "input_table":
            words = [0x7F0000001000 + 0x1000 * k for k in range(size // 8)]
            regions.append(host_region(size, b"".join(w.to_bytes(8, "little") for w in words)))
        else:
            regions.append(host_region(size, bytes((i * 37 + seed) % 251 for i in range(min(size, 4096)))))
    return regions


@pytest.mark.parametrize("n_kernels", [2, 12])
def test_cpu_and_python_submitters_write_identical_bytes(n_kernels: int) -> None:
    # 12 kernels: more than 16 input words in one command buffer, so the gather loop runs too
    batch, sub = _program(n_kernels)
    assert bool(batch.patches.gathers) == (n_kernels == 12)
    compiled, interpreted = _regions(batch, sub, 0), _regions(batch, sub, 0)
    BoundSubmitter(sub, "CPU", compiled).run([37])
    BoundSubmitter(sub, "PYTHON", interpreted).run([37])
    for p, a, b in zip(sub.params, compiled, interpreted, strict=True):
        assert a.view.read(0, a.size) == b.view.read(0, b.size), f"{p.arg} differs"
    # and it did the work: V_d advanced, put bumped by the entries of each submit, the ring holds the commands
    for p, r in zip(sub.params, compiled, strict=True):
        if p.arg.role == "timeline_value":
            assert r.u64()[0] == 42
    entries = {(d, q): n // CMD_WORDS for d, q, n in sub.submits}  # one submit per queue here
    for p, r in zip(sub.params, compiled, strict=True):
        if p.arg.role in ("put", "ring"):
            n = entries[(p.src[0].arg, p.arg.key)]
            if p.arg.role == "put":
                assert r.u64()[0] == RING_SLOTS - 3 + n
            else:  # the entries wrapped around the ring's end: kinds WAIT/SIGNAL/KERNEL/MEMCPY/TIMESTAMP
                kinds = [r.u64()[((RING_SLOTS - 3 + e) % RING_SLOTS) * CMD_WORDS] for e in range(n)]
                assert all(k in (1, 2, 3, 4, 5) for k in kinds), kinds


# ---- a register model sees the stores in program order -------------------------------------------------------------


class RecordingModel:
    """A register file that records every access (offset, bytes) in order."""

    def __init__(self, size: int) -> None:
        self.size, self.mem, self.log = size, bytearray(size), []

    def read(self, offset: int, size: int) -> bytes:
        return bytes(self.mem[offset : offset + size])

    def write(self, offset: int, data: bytes) -> None:
        self.mem[offset : offset + len(data)] = data
        self.log.append((offset, bytes(data)))


def _model_submit(ctx: Any, q: UOp) -> UOp:
    cmdbuf, after = q.src[0], q.src[1:]
    ring = ir.hcqbuf(ctx.device, "ring", ctx.queue, U32, 64)
    door = ir.hcqbuf(ctx.device, "doorbell", ctx.queue, U32, 1)
    r = UOp.range(UOp.const(dtypes.int32, ctx.nwords), 3000)
    copied = ring.index(r).store(cmdbuf.after(*after).index(r).load()).end(r)
    fence = UOp(Ops.BARRIER, dtypes.void, (copied,))
    return door.after(fence).index(UOp.const(dtypes.int32, 0)).store(UOp.const(U32, ctx.nwords))


def _lo(x: UOp) -> UOp:
    return (x & UOp.const(U64, 0xFFFFFFFF)).cast(U32)


def _hi(x: UOp) -> UOp:
    return (x >> UOp.const(U64, 32)).cast(U32)


class ModelDevice(HCQDevice):
    """An HCQ device whose ring and doorbell are a register model (tg.drivers' ModelMMIO), the rest host memory:
    its packets are [kind, address low, address high, value] dwords."""

    queues = {"COMPUTE:0": QueueSpec("compute", U32, 64)}
    pm_encode = PatternMatcher([
        (UPat(Ops.QCMD, arg=QOp.BARRIER), lambda ctx: UOp(Ops.NOOP)),
        (UPat(Ops.QCMD, arg=QOp.WAIT, src=(UPat.var("s"), UPat.var("v"))),
         lambda ctx, s, v: ir.packet("WAIT", [4, _lo(ir.getaddr(s, ctx.device)), _hi(ir.getaddr(s, ctx.device)),
                                              v.cast(U32)])),
        (UPat(Ops.QCMD, arg=QOp.SIGNAL, src=(UPat.var("s"), UPat.var("v"))),
         lambda ctx, s, v: ir.packet("SIGNAL", [3, _lo(ir.getaddr(s, ctx.device)), _hi(ir.getaddr(s, ctx.device)),
                                                v.cast(U32)])),
    ])  # fmt: skip
    pm_submit = PatternMatcher([(UPat(Ops.QUEUE, name="q"), _model_submit)])

    def __init__(self, device: str) -> None:
        from tg.drivers.mmio import ModelMMIO

        self.block_pool = BlockPool(self)
        self.model = RecordingModel(4096)
        self._ring = Region(0x10000, 256, ModelMMIO(self.model, 0, 256), self)
        self._door = Region(0x20000, 4, ModelMMIO(self.model, 1024, 4), self)
        super().__init__(device, None, None, None)  # type: ignore[arg-type]
        self.keep: list[Region] = []

    def alloc_region(self, size: int) -> Region:
        r = host_region(size)
        r.owner = self
        self.__dict__.setdefault("keep", []).append(r)
        return r

    def queue_region(self, queue: str, role: str) -> Region:
        return {"ring": self._ring, "doorbell": self._door}[role]


class ModelEnv:
    def __init__(self, dev: ModelDevice) -> None:
        self.dev = dev

    def hcq_device(self, name: str) -> Any:
        return self.dev if name == self.dev.device else None

    def lower_kernel(self, device: str, ast: UOp) -> ProgramInfo:
        raise NotImplementedError


def test_a_register_model_sees_the_stores_in_program_order() -> None:
    pytest.importorskip("tg.drivers.mmio", reason="register models come from tg-drivers (the hw extra)")
    dev = ModelDevice("FAKEMODEL")
    env = ModelEnv(dev)
    sig = ir.signal_buf(dev.device, "signal", ("test", 0))
    v = Variable("v", 0, 1000, dtypes.int32)
    batch = compile_queues([ir.queue(dev.device, "COMPUTE:0", [ir.signal(sig, v.cast(U64))])], env, finalize=False)
    lb = link_batch(batch, build_submitter(batch, env), env, "PYTHON", 1)
    lb.copies[0].submitter.run([77])
    nwords = batch.encoded[0].cmdbuf.nwords
    ring_writes = [(off, data) for off, data in dev.model.log if off < 1024]
    assert [off for off, _ in ring_writes] == [4 * i for i in range(nwords)]  # each ring word once, in order
    assert dev.model.log[-1] == (1024, nwords.to_bytes(4, "little"))  # the doorbell last
    words = [int.from_bytes(d, "little") for _, d in ring_writes]
    signal_va = lb.copies[0].regions[sig].va
    assert words[:4] == [3, signal_va & 0xFFFFFFFF, signal_va >> 32, 77]  # the value patch went in


def test_forcing_cpu_on_a_model_backed_doorbell_is_refused() -> None:
    pytest.importorskip("tg.drivers.mmio", reason="register models come from tg-drivers (the hw extra)")
    dev = ModelDevice("FAKEMODEL")
    env = ModelEnv(dev)
    sig = ir.signal_buf(dev.device, "signal", ("test", 0))
    batch = compile_queues([ir.queue(dev.device, "COMPUTE:0", [ir.signal(sig, 1)])], env, finalize=False)
    with pytest.raises(RuntimeError, match=r"HCQ_RUNTIME_DEV=CPU cannot drive FAKEMODEL: its (ring|doorbell) is not "
                                           r"host memory \(ModelMMIO\); use HCQ_RUNTIME_DEV=PYTHON"):  # fmt: skip
        link_batch(batch, build_submitter(batch, env), env, "CPU", 1)
    # auto picks the interpreter for it
    lb = link_batch(batch, build_submitter(batch, env), env, "auto", 1)
    assert lb.runtime == "PYTHON"
