"""HCQ device semantics on the device under test: HCQ+CPU always (DEV naming an HCQ device runs them there), the
device-level ports of tinygrad's test/device/test_hcq*.py (hcq.md section 12): signals and waits from hand-made
queues, kernels and copies through compiled programs, the timeline wrap, hangs, the staging ring, link copies,
profile records."""

from __future__ import annotations

import gc
import itertools
import os
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from tg.ir import KernelInfo, Ops, UOp, Variable, dtypes
from tg.ir.helpers import Context
from tg.ir.target import Target
from tg.runtime.device import Buffer, Device, DeviceUnavailable
from tg.runtime.engine import method_cache
from tg.runtime.hcq import compile_queues, ir
from tg.runtime.hcq.device import DeviceHangError, HCQDevice
from tg.runtime.hcq.exec import execute
from tg.runtime.hcq.link import LinkedBatch, link_batch
from tg.runtime.hcq.run import ENV, submitter_of


def _dev_setting() -> str:
    """DEV when it names an HCQ device (e.g. DEV=MOCKKFD+AMD), else HCQ+CPU."""
    targets = Target.parse(os.environ.get("DEV", ""))
    if targets and targets[0].iface is not None:
        return os.environ["DEV"]
    return "HCQ+CPU"


@pytest.fixture
def dev() -> Iterator[HCQDevice]:
    """The HCQ device under test (its instance 0), with DEV set for the whole test."""
    with Context(DEV=_dev_setting()):
        d = Device[Target.parse(_dev_setting())[0].name]
        assert isinstance(d, HCQDevice)
        yield d
        d.synchronize()


def name(d: HCQDevice, i: int) -> str:
    """Instance ``i`` of the device under test (the test skips where there is no such device: one real GPU)."""
    return instance(d.device.split(":")[0], i)


def instance(base: str, i: int) -> str:
    """``base:i``, skipping the test when that device does not open here."""
    dev = base + (f":{i}" if i else "")
    try:
        Device[dev]
    except DeviceUnavailable as e:
        pytest.skip(f"needs {dev}: {e}")
    return dev


def run_queues(queues: list[UOp], var_vals: dict[str, int] | None = None, copies: int = 1) -> LinkedBatch:
    """Compile, link and run hand-made queues once."""
    batch = compile_queues(queues, ENV)
    lb = link_batch(batch, submitter_of(batch), ENV, "auto", copies)
    execute(lb, [], var_vals)
    return lb


def test_signal(dev: HCQDevice) -> None:
    sig = ir.signal_buf(dev.device, "signal", ("test", 0))
    lb = run_queues([ir.queue(dev.device, "COMPUTE:0", [ir.signal(sig, 5)])])
    dev.synchronize()
    assert lb.signal(sig).value == 5


def test_signal_update_with_a_variable(dev: HCQDevice) -> None:
    sig, v = ir.signal_buf(dev.device, "signal", ("test", 0)), Variable("v", 0, 1000, dtypes.int32)
    batch = compile_queues([ir.queue(dev.device, "COMPUTE:0", [ir.signal(sig, v.cast(dtypes.uint64))])], ENV)
    lb = link_batch(batch, submitter_of(batch), ENV, "auto", 1)
    for value in (3, 7, 1000, 0):
        execute(lb, [], {"v": value})
        dev.synchronize()
        assert lb.signal(sig).value == value


def test_wait_then_signal(dev: HCQDevice) -> None:
    a, b = (ir.signal_buf(dev.device, "signal", ("test", i)) for i in range(2))
    batch = compile_queues([ir.queue(dev.device, "COMPUTE:0", [ir.wait(a, 1), ir.signal(b, 1)])], ENV)
    lb = link_batch(batch, submitter_of(batch), ENV, "auto", 1)
    lb.signal(a).value = 1  # already satisfied
    execute(lb, [])
    dev.synchronize()
    assert lb.signal(b).value == 1


@pytest.mark.parametrize("with_variable", [False, True])
def test_wait_set_late(dev: HCQDevice, with_variable: bool) -> None:
    a, b = (ir.signal_buf(dev.device, "signal", ("test", i)) for i in range(2))
    v = Variable("want", 1, 100, dtypes.int32)
    want = v.cast(dtypes.uint64) if with_variable else 2
    batch = compile_queues([ir.queue(dev.device, "COMPUTE:0", [ir.wait(a, want), ir.signal(b, 9)])], ENV)
    lb = link_batch(batch, submitter_of(batch), ENV, "auto", 1)
    execute(lb, [], {"want": 2} if with_variable else None)
    time.sleep(0.02)
    assert lb.signal(b).value == 0  # still waiting
    lb.signal(a).value = 1
    time.sleep(0.02)
    assert lb.signal(b).value == 0  # 1 < 2
    lb.signal(a).value = 2
    dev.synchronize()
    assert lb.signal(b).value == 9


def test_multi_device_signal_wait(dev: HCQDevice) -> None:
    d0, d1 = name(dev, 0), name(dev, 1)
    a, b = ir.signal_buf(d0, "signal", ("test", 0)), ir.signal_buf(d1, "signal", ("test", 1))
    # device 1 waits for a signal of device 0, which device 0 sets
    lb = run_queues([ir.queue(d1, "COMPUTE:0", [ir.wait(a, 3), ir.signal(b, 4)]),
                     ir.queue(d0, "COMPUTE:0", [ir.signal(a, 3)])])  # fmt: skip
    Device[d0].synchronize()
    Device[d1].synchronize()
    assert (lb.signal(a).value, lb.signal(b).value) == (3, 4)


def _add_one_info(dev: HCQDevice, n: int) -> Any:
    p = [UOp.param(i, dtypes.uint32, n) for i in range(2)]
    r = UOp.range(n, 0)
    ast = p[0].index(r).store(p[1].index(r).load() + UOp.const(dtypes.uint32, 1)).end(r)
    return ENV.lower_kernel(dev.device, ast.sink(arg=KernelInfo(name=f"add_one_{n}")))


def test_one_kernel_from_a_queue(dev: HCQDevice) -> None:
    info = _add_one_info(dev, 16)
    src = Buffer(dev.device, 16, dtypes.uint32).ensure_allocated().copyin(np.arange(16, dtype=np.uint32).data)
    dst = Buffer(dev.device, 16, dtypes.uint32).ensure_allocated()
    params = [ir.slot_param(i, dev.device, dtypes.uint32, 16) for i in range(2)]
    call = UOp(Ops.CALL, dtypes.void, (UOp(Ops.PROGRAM, dtypes.void, (), info), *params))
    batch = compile_queues([ir.queue(dev.device, "COMPUTE:0", [call])], ENV)
    lb = link_batch(batch, submitter_of(batch), ENV, "auto", 2)
    execute(lb, [dst._buf, src._buf])
    out = np.frombuffer(dst.as_memoryview(), dtype=np.uint32)
    np.testing.assert_array_equal(out, np.arange(16) + 1)


def test_two_kernels_a_hundred_times(dev: HCQDevice) -> None:
    from tg.tensor import Tensor

    x = Tensor(np.zeros(32, dtype=np.float32), device=dev.device).realize()
    for _ in range(100):
        x = (x + 1).contiguous().realize()
        x = (x * 2).contiguous().realize()
    expect = np.zeros(32, dtype=np.float32)
    for _ in range(100):
        expect = (expect + 1) * 2
    np.testing.assert_array_equal(x.numpy(), expect)


def test_kernel_with_a_variable_changing_per_exec(dev: HCQDevice) -> None:
    from tg.tensor import Tensor

    data = np.arange(16, dtype=np.float32)
    x = Tensor(data, device=dev.device).realize()
    v = Variable("n", 1, 16)
    compiled = None
    for n in range(1, 17):
        out = (x[: v.bind(n)] * 2 + 1).numpy()
        np.testing.assert_array_equal(out, data[:n] * 2 + 1)
        if n == 1:
            compiled = len(method_cache)
    assert len(method_cache) == compiled  # one kernel for every value


def test_bind_once_run_many(dev: HCQDevice) -> None:
    info = _add_one_info(dev, 8)
    params = [ir.slot_param(i, dev.device, dtypes.uint32, 8) for i in range(2)]
    call = UOp(Ops.CALL, dtypes.void, (UOp(Ops.PROGRAM, dtypes.void, (), info), *params))
    batch = compile_queues([ir.queue(dev.device, "COMPUTE:0", [call])], ENV)
    lb = link_batch(batch, submitter_of(batch), ENV, "auto", 2)
    pairs = []
    for k in range(40):
        src = Buffer(dev.device, 8, dtypes.uint32).ensure_allocated()
        src.copyin(np.full(8, k, dtype=np.uint32).data)
        dst = Buffer(dev.device, 8, dtypes.uint32).ensure_allocated()
        execute(lb, [dst._buf, src._buf])
        pairs.append((k, dst, src))
    for k, dst, _ in pairs:
        np.testing.assert_array_equal(np.frombuffer(dst.as_memoryview(), dtype=np.uint32), np.full(8, k + 1))


@pytest.mark.parametrize("nbytes", [4, 1 << 20, (16 << 20) + 12])
def test_copy_between_devices(dev: HCQDevice, nbytes: int) -> None:
    from tg.tensor import Tensor

    data = np.random.default_rng(0).integers(0, 256, nbytes, dtype=np.uint8)
    x = Tensor(data, device=dev.device).realize()
    y = x.to(name(dev, 1)).realize()
    back = y.to(dev.device).realize()
    k = min(nbytes, 1 << 12) if getattr(dev, "emulated", False) else nbytes  # an emulated GPU: a small kernel
    z = (back[:k] + 1).realize()
    np.testing.assert_array_equal(y.numpy(), data)
    np.testing.assert_array_equal(back.numpy(), data)
    np.testing.assert_array_equal(z.numpy(), data[:k] + 1)


def test_copy_with_a_variable_size(dev: HCQDevice) -> None:
    # the transfer program: one linked copy, its byte count a value patch per execution
    src = Buffer(dev.device, 4096, dtypes.uint8).ensure_allocated()
    src.copyin(bytes(range(256)) * 16)
    for n in (1, 7, 100, 4096):
        dst = Buffer(dev.device, 4096, dtypes.uint8).ensure_allocated()
        dst.copyin(bytes(4096))
        dev.transfer(dst._buf, src._buf, n)
        got = bytes(dst.as_memoryview())
        assert got[:n] == (bytes(range(256)) * 16)[:n] and got[n:] == bytes(4096 - n)


def test_transfer_program_follows_the_device_a_name_opens_under_dev() -> None:
    from tg.runtime.hcq.run import transfer_program

    # the same name is another device under another DEV: the cached transfer program must link the current one
    if _dev_setting() != "HCQ+CPU":
        pytest.skip("needs two HCQ+CPU targets for one name")
    with Context(DEV="HCQ+CPU"):
        src, first = Device["CPU"], Device["CPU:1"]
        to_first = transfer_program(src, "CPU:1")
    with Context(DEV="HCQ+CPU:CLANG:x86-64-v2"):
        second = Device["CPU:1"]
        to_second = transfer_program(src, "CPU:1")
        assert transfer_program(src, "CPU:1") is to_second  # still cached per device
    assert first is not second and to_first is not to_second
    assert first in to_first.devices and second not in to_first.devices
    assert second in to_second.devices and first not in to_second.devices
    with Context(DEV="HCQ+CPU"):
        a = Buffer("CPU", 64, dtypes.uint8).ensure_allocated()  # on src
        a.copyin(bytes(range(64)))
    for setting, dst in (("HCQ+CPU", first), ("HCQ+CPU:CLANG:x86-64-v2", second)):
        with Context(DEV=setting):  # a buffer of the device CPU:1 opens under this DEV
            b = Buffer("CPU:1", 64, dtypes.uint8).ensure_allocated()
            assert b._buf.owner is dst
            src.transfer(b._buf, a._buf, 64)
            src.synchronize()
            assert bytes(b.as_memoryview()) == bytes(range(64))


def test_memory_barrier_before_a_copy(dev: HCQDevice) -> None:
    from tg.tensor import Tensor

    # the kernel writes on COMPUTE:0, the copy reads it on COPY:0: the copy waits for the kernel's signal
    for _ in range(20):
        x = Tensor(np.arange(4096, dtype=np.float32), device=dev.device)
        y = (x * 3).to(name(dev, 1)).realize()
        np.testing.assert_array_equal(y.numpy(), np.arange(4096, dtype=np.float32) * 3)


@pytest.mark.parametrize("n", [1, 3, 7, 64, 1000])
def test_small_copies_from_host_buffers(dev: HCQDevice, n: int) -> None:
    data = bytes((i * 7 + 3) % 256 for i in range(n))
    b = Buffer(dev.device, n, dtypes.uint8).copyin(data)
    assert bytes(b.as_memoryview()) == data
    out = bytearray(n)
    b.copyout(memoryview(out))
    assert bytes(out) == data


def test_map_a_host_buffer_to_the_device(dev: HCQDevice) -> None:
    from tg.tensor import Tensor

    if not dev.can_map_host:
        pytest.skip(f"{dev.device} reaches no host memory (e.g. the AM driver's mocks, USB)")

    host = np.arange(64, dtype=np.float32)
    t = Tensor.from_blob(host.ctypes.data, (64,), dtype=dtypes.float32, device=dev.device)
    np.testing.assert_array_equal((t * 2).numpy(), host * 2)
    t.assign(t + 1).realize()  # the device writes the host memory in place
    dev.synchronize()
    np.testing.assert_array_equal(host, np.arange(64, dtype=np.float32) + 1)


def test_timeline_wrap(dev: HCQDevice) -> None:
    from tg.tensor import Tensor

    d1 = Device[name(dev, 1)]
    assert isinstance(d1, HCQDevice)
    sig = ir.signal_buf(dev.device, "signal", ("test", 0))
    v = Variable("v", 0, 10**6, dtypes.int32)
    batch = compile_queues([ir.queue(dev.device, "COMPUTE:0", [ir.signal(sig, v.cast(dtypes.uint64))]),
                            ir.queue(d1.device, "COMPUTE:0", [ir.wait(sig, v.cast(dtypes.uint64))])], ENV)  # fmt: skip
    lb = link_batch(batch, submitter_of(batch), ENV, "auto", 2)
    gen0 = (dev.generation, d1.generation)
    with Context(HCQ_TIMELINE_WRAP=16):
        x = Tensor(np.zeros(4, dtype=np.float32), device=dev.device).realize()
        y = Tensor(np.zeros(4, dtype=np.float32), device=d1.device).realize()
        for i in range(500):
            execute(lb, [], {"v": i})
            if i % 5 == 0:
                x = (x + 1).realize()
                y = (y + 2).realize()
            if i % 50 == 0:
                dev.synchronize()
        dev.synchronize()
        d1.synchronize()
        for d in (dev, d1):  # values stayed small (32-bit compares) and the timeline was rebased
            assert int(d.timeline_value.value) <= 16 + 1 and int(d.timeline.value) <= 16
        np.testing.assert_array_equal(x.numpy(), np.full(4, 100.0))
        np.testing.assert_array_equal(y.numpy(), np.full(4, 200.0))
    assert lb.signal(sig, 499 % 2).value == 499
    assert dev.generation > gen0[0] and d1.generation > gen0[1]


def test_hang_raises_and_the_error_state_sticks() -> None:
    with Context(DEV=_dev_setting(), HCQDEV_WAIT_TIMEOUT_MS=200):
        base = Target.parse(_dev_setting())[0].name.split(":")[0]
        dev = Device[instance(base, 7)]  # an instance of its own: it stays broken
        assert isinstance(dev, HCQDevice)
        never = ir.signal_buf(dev.device, "signal", ("never", 0))
        run_queues([ir.queue(dev.device, "COMPUTE:0", [ir.wait(never, 1)])])
        start = time.perf_counter()
        with pytest.raises(DeviceHangError) as e:
            dev.synchronize()
        assert time.perf_counter() - start < 2.0
        msg = str(e.value)
        assert f"{dev.device} did not finish: COMPUTE:0 timeline at 0x" in msg
        assert "waited for >= 1" in msg and "is 0" in msg and "HCQDEV_WAIT_TIMEOUT_MS" in msg
        assert "last submitted: queues" in msg and "error state" in msg
        if type(dev).__name__ == "HCQCPUDevice":
            assert "COMPUTE:0 is stuck in WAIT(signal at 0x" in msg and ">= 1, now 0)" in msg
        with pytest.raises(DeviceHangError, match="is in an error state after an earlier hang"):
            dev.synchronize()
        with pytest.raises(DeviceHangError, match="is in an error state after an earlier hang"):
            Buffer(dev.device, 4, dtypes.uint8).copyin(b"abcd")


def test_staged_copies_reuse_slots(dev: HCQDevice, monkeypatch: pytest.MonkeyPatch) -> None:
    if not dev.has_copy_queue:
        pytest.skip("no copy queue: copies go through the CPU view")
    alloc: Any = dev.allocator
    monkeypatch.setattr(alloc, "staging_slot_size", 1 << 20)
    monkeypatch.setattr(alloc, "staging_slots", 4)
    monkeypatch.setattr(alloc, "_staging", None)
    data = np.random.default_rng(5).integers(0, 256, (5 << 20) + 123, dtype=np.uint8).tobytes()
    b = Buffer(dev.device, len(data), dtypes.uint8).copyin(data)
    out = bytearray(len(data))
    b.copyout(memoryview(out))
    assert bytes(out) == data
    assert len(alloc._staging) == 4
    dev.synchronize()
    monkeypatch.setattr(alloc, "_staging", None)  # the next test gets the default ring again


def test_copies_without_a_copy_queue() -> None:
    from tg.tensor import Tensor

    with Context(DEV=_dev_setting()):
        base = Target.parse(_dev_setting())[0].name.split(":")[0]
        a, b = Device[instance(base, 5)], Device[instance(base, 6)]
        assert isinstance(a, HCQDevice) and isinstance(b, HCQDevice)
        a.has_copy_queue = b.has_copy_queue = False
        data = np.arange(1000, dtype=np.int32)
        x = Tensor(data, device=a.device).realize()
        y = (x.to(b.device) + 1).realize()
        np.testing.assert_array_equal(y.numpy(), data + 1)
        odd = Tensor(np.arange(7, dtype=np.uint8), device=a.device)[1:6].to(b.device).realize()  # byte copy kernel
        np.testing.assert_array_equal(odd.numpy(), np.arange(1, 6, dtype=np.uint8))
        for d in (a, b):  # no copy queue was started (HCQ+CPU: workers, AMD: hardware queues)
            assert "COPY:0" not in getattr(d, "workers", getattr(d, "hw_queues", None))


def test_overlapping_device_tuples(dev: HCQDevice) -> None:
    from tg.tensor import Tensor

    four = tuple(name(dev, i) for i in range(4))
    data = np.arange(64, dtype=np.float32).reshape(8, 8)
    x = Tensor(data, device=dev.device).shard(four, axis=0)
    y = (x * 2 + 1).realize()
    z = y.to(four[:2])  # the same buffers, now a 2-device op
    w = (z * 3).sum(axis=1)
    np.testing.assert_allclose(w.numpy(), ((data * 2 + 1) * 3).sum(axis=1))


def test_link_copies_keep_executions_in_flight_apart(dev: HCQDevice) -> None:
    # one linked program writes its variable into a buffer; 3 executions in flight with 2 link copies
    fill = Variable("k", 0, 1000, dtypes.int32)
    p = UOp.param(0, dtypes.int32, 64)
    r = UOp.range(64, 0)
    ast = p.index(r).store(fill + r).end(r).sink(arg=KernelInfo(name="fill_k"))
    info = ENV.lower_kernel(dev.device, ast)
    param = ir.slot_param(0, dev.device, dtypes.int32, 64)
    call = UOp(Ops.CALL, dtypes.void, (UOp(Ops.PROGRAM, dtypes.void, (), info), param))
    gate = ir.signal_buf(dev.device, "signal", ("gate", 0))
    # the first execution waits on a host-set gate, so all three are queued before any runs
    batch = compile_queues([ir.queue(dev.device, "COMPUTE:0", [ir.wait(gate, 1), call])], ENV)
    lb = link_batch(batch, submitter_of(batch), ENV, "auto", 2)
    lb.signal(gate, 0).value, lb.signal(gate, 1).value = 0, 1
    outs = [Buffer(dev.device, 64, dtypes.int32).ensure_allocated() for _ in range(3)]
    execute(lb, [outs[0]._buf], {"k": 100})
    execute(lb, [outs[1]._buf], {"k": 200})
    assert lb.count == 2
    lb.signal(gate, 0).value = 1  # the third execution reuses copy 0: it waits for the first to finish
    execute(lb, [outs[2]._buf], {"k": 300})
    for k, o in zip((100, 200, 300), outs, strict=True):
        np.testing.assert_array_equal(np.frombuffer(o.as_memoryview(), dtype=np.int32), k + np.arange(64))


def test_profile_records_are_monotone_and_inside_the_host_interval(dev: HCQDevice) -> None:
    from tg.runtime.hcq import profile
    from tg.tensor import Tensor

    profile.records.clear()
    with Context(PROFILE=1):
        t0 = time.perf_counter() * 1e6
        x = Tensor(np.arange(256, dtype=np.float32), device=dev.device)
        for _ in range(5):
            x = (x * 2 + 1).contiguous()
        y = x.to(name(dev, 1)).realize()
        dev.synchronize()
        Device[name(dev, 1)].synchronize()
        t1 = time.perf_counter() * 1e6
    recs = [r for r in profile.records if r.device in (dev.device, name(dev, 1))]
    assert recs and any(r.queue == "COPY:0" for r in recs) and any(r.queue == "COMPUTE:0" for r in recs)
    for r in recs:
        assert t0 <= r.start_us <= r.end_us <= t1, r
    by_queue: dict[tuple[str, str], list[Any]] = {}
    for r in recs:
        by_queue.setdefault((r.device, r.queue), []).append(r)
    for rs in by_queue.values():  # a queue runs in order: each command starts after the one before ended
        for a, b in itertools.pairwise(rs):
            assert a.end_us <= b.start_us
    assert y.shape == (256,)
    profile.records.clear()
    gc.collect()
