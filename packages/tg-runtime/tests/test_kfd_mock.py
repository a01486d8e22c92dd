"""The KFD interface (tg.runtime.amd.kfd) over the mock KFD file layer (tg.runtime.amd.sim.kfd_mock): discovery,
the open sequence of ioctls, allocation flags and per-GPU mappings, queues and doorbells, events and faults, two GPUs
waiting on each other's memory, and the errors a machine without a GPU or without permission gives."""

from __future__ import annotations

import ctypes
import errno
import os
import struct

import pytest

from tg.runtime.amd import kfd, pm4, sdma
from tg.runtime.amd.kfd import KFD, DeviceFault, KFDIface
from tg.runtime.amd.sim.decode import EmulatorError
from tg.runtime.amd.sim.gpu import MockError
from tg.runtime.amd.sim.kfd_mock import MockKFD
from tg.runtime.device import DeviceUnavailable
from tg.runtime.hcq.views import HostView


@pytest.fixture
def mock() -> MockKFD:
    return MockKFD(2)


def _words(*packets: object) -> list[int]:
    return [int(w.arg) for p in packets for w in p.src]  # type: ignore[attr-defined]


def test_discovery_reads_the_topology(mock: MockKFD) -> None:
    gpus = kfd.discover(mock)
    assert [g.node for g in gpus] == [1, 2] and len({g.gpu_id for g in gpus}) == 2
    g = gpus[0]
    assert g.arch == "gfx1100" and g.props["simd_count"] == 192 and g.props["max_slots_scratch_cu"] == 32
    assert g.ip_versions == {"GC": (11, 0, 0), "SDMA0": (6, 0, 0), "NBIF": (4, 3, 0)}
    assert g.render_node == "/dev/dri/renderD128" and mock.exists(g.render_node)
    assert mock.listdir(kfd.TOPOLOGY) == ["0", "1", "2"] and mock.read_text(f"{kfd.TOPOLOGY}/0/gpu_id") == "0\n"
    with pytest.raises(FileNotFoundError):
        mock.read_text("/sys/nothing")


def test_open_sequence_and_events(mock: MockKFD) -> None:
    conn = KFD(mock)
    iface = KFDIface(conn, 0)
    assert mock.log == ["GET_VERSION", "RUNTIME_ENABLE", "ACQUIRE_VM", "ALLOC_MEMORY_OF_GPU", "MAP_MEMORY_TO_GPU",
                        "CREATE_EVENT", "CREATE_EVENT", "CREATE_EVENT", "CREATE_EVENT"]  # fmt: skip
    assert conn.version >= (1, 14) and conn.event_page is not None
    assert iface.mailbox == conn.event_page.va + 8 * iface.queue_event.event_slot_index
    second = KFDIface(conn, 1)  # the event page is mapped to the second GPU, not allocated again
    assert mock.log[9:12] == ["ACQUIRE_VM", "MAP_MEMORY_TO_GPU", "CREATE_EVENT"]
    assert second.gpu_id in conn.event_page.mapped and iface.gpu_id in conn.event_page.mapped
    with pytest.raises(DeviceUnavailable, match="no GPU 2: KFD lists 2 GPU"):
        KFDIface(conn, 2)


def test_allocation_flags_and_per_gpu_mappings(mock: MockKFD) -> None:
    conn = KFD(mock)
    a, b = KFDIface(conn, 0), KFDIface(conn, 1)
    vram = a.alloc(10000)
    assert vram.size == 12288 and vram.flags == kfd.MEM_VRAM | kfd.MEM_WRITABLE | kfd.MEM_EXECUTABLE | \
        kfd.MEM_NO_SUBSTITUTE and not vram.cpu  # fmt: skip
    gtt = a.alloc(4096, uncached=True, cpu_access=True)
    assert gtt.flags & (kfd.MEM_GTT | kfd.MEM_UNCACHED | kfd.MEM_COHERENT | kfd.MEM_PUBLIC) == kfd.MEM_GTT | \
        kfd.MEM_UNCACHED | kfd.MEM_COHERENT | kfd.MEM_PUBLIC  # fmt: skip
    host = a.alloc(4096, host=True)
    assert host.flags & kfd.MEM_USERPTR and host.flags & kfd.MEM_PUBLIC
    HostView(gtt.va, 4096).write(0, b"hello")  # the CPU mapping of GTT is the GPU address
    ga, gb = mock.gpu(a.gpu_id), mock.gpu(b.gpu_id)
    assert ga.mem.read(gtt.va, 5) == b"hello"
    with pytest.raises(EmulatorError, match="not mapped to this GPU"):  # not mapped to the other GPU yet
        gb.mem.read(gtt.va, 5)
    a.map(gtt, b.gpu_id)
    assert gb.mem.read(gtt.va, 5) == b"hello"
    ga.mem.write(vram.va + 100, b"vram")  # VRAM without a CPU view is still memory the GPU reaches
    assert ga.mem.read(vram.va + 100, 4) == b"vram"
    a.free(gtt)
    with pytest.raises(EmulatorError):
        gb.mem.read(gtt.va, 5)
    with pytest.raises(EmulatorError):
        ga.mem.read(gtt.va, 5)
    buf = (ctypes.c_char * 8192)()
    addr = (ctypes.addressof(buf) + 4095) & ~4095
    pinned = a.register_host(addr, 4096)
    ctypes.memmove(addr, b"pinned", 6)
    assert pinned.flags & kfd.MEM_USERPTR and ga.mem.read(addr, 6) == b"pinned"
    with pytest.raises(ValueError, match="page-aligned"):
        a.register_host(addr + 1, 4096)


def test_queues_run_when_the_doorbell_is_written(mock: MockKFD) -> None:
    iface = KFDIface(KFD(mock), 0)
    q = iface.create_queue("compute", 1 << 16)
    assert q.kind == "compute" and len(q.extras) == 2  # EOP buffer and context-save area
    save, ctl, debug = iface.context_save_sizes()
    assert q.extras[1].size >= save + debug and ctl % 4096 == 0
    sig = iface.alloc(4096, uncached=True, cpu_access=True)
    words = _words(pm4.release_mem(sig.va, 41, pm4.DATA_LOW32))
    HostView(q.ring.va, q.ring.size, "I").view(0, 4 * len(words)).write(0, struct.pack(f"<{len(words)}I", *words))
    HostView(q.wptr_va, 8, "Q")[0] = len(words)
    assert HostView(sig.va, 8, "I")[0] == 0  # nothing runs before the doorbell
    q.doorbell[0] = len(words)
    assert HostView(sig.va, 8, "I")[0] == 41 and HostView(q.rptr_va, 8, "Q")[0] == len(words)
    c = iface.create_queue("copy", 1 << 16)
    assert c.doorbell.addr - q.doorbell.addr == 8  # doorbells: words of the GPU's doorbell page
    iface.destroy_queue(c)
    with pytest.raises(OSError, match="no queue"):
        iface.kfd.ioctl("DESTROY_QUEUE", queue_id=c.queue_id)


def test_two_gpus_push_copy_after_a_cross_device_wait(mock: MockKFD) -> None:
    conn = KFD(mock)
    a, b = KFDIface(conn, 0), KFDIface(conn, 1)
    src, dst = a.alloc(1 << 16), b.alloc(1 << 16)
    flag, done = a.alloc(4096, uncached=True, cpu_access=True), b.alloc(4096, uncached=True, cpu_access=True)
    for mem in (dst, done):
        b.map(mem, a.gpu_id)  # GPU 0 pushes into GPU 1's memory and signals its page
    mock.gpu(a.gpu_id).mem.write(src.va, bytes(range(256)) * 256)
    q = a.create_queue("copy", 1 << 16)
    words = _words(sdma.poll_regmem(flag.va, 1), sdma.copy_linear(dst.va, src.va, 1 << 16), sdma.fence(done.va, 7))
    HostView(q.ring.va, q.ring.size, "I").write(0, struct.pack(f"<{len(words)}I", *words))
    HostView(q.wptr_va, 8, "Q")[0] = 4 * len(words)
    q.doorbell[0] = 4 * len(words)
    assert HostView(done.va, 4, "I")[0] == 0  # waiting for the flag, nothing copied
    assert mock.gpu(b.gpu_id).mem.read(dst.va, 4) == bytes(4)
    # GPU 1's compute queue sets the flag in GPU 0's memory: the copy then runs
    a.map(flag, b.gpu_id)
    cq = b.create_queue("compute", 1 << 16)
    w = _words(pm4.release_mem(flag.va, 1, pm4.DATA_LOW32))
    HostView(cq.ring.va, cq.ring.size, "I").write(0, struct.pack(f"<{len(w)}I", *w))
    HostView(cq.wptr_va, 8, "Q")[0] = len(w)
    cq.doorbell[0] = len(w)
    assert HostView(done.va, 4, "I")[0] == 7
    assert mock.gpu(b.gpu_id).mem.read(dst.va, 1 << 16) == bytes(range(256)) * 256


def test_interrupts_wake_sleep_and_faults_are_reported(mock: MockKFD) -> None:
    iface = KFDIface(KFD(mock), 0)
    q = iface.create_queue("compute", 1 << 16)
    words = _words(pm4.release_mem(iface.mailbox, int(iface.queue_event.event_id), pm4.DATA_LOW32,
                                   pm4.INT_AFTER_WRITE, ctxid=int(iface.queue_event.event_id)))  # fmt: skip
    HostView(q.ring.va, q.ring.size, "I").write(0, struct.pack(f"<{len(words)}I", *words))
    HostView(q.wptr_va, 8, "Q")[0] = len(words)
    iface.sleep(1000)  # the mock runs the queue while the host waits: the interrupt sets the queue event
    assert iface.events[0].event_id == iface.queue_event.event_id
    assert mock.events[int(iface.queue_event.event_id)].signaled is False  # auto-reset by the wait
    mock.gpu(iface.gpu_id).fault_va = 0xDEAD000  # the next dispatch faults there
    mock.gpu(iface.gpu_id).regs.update({0x2E0C: 1, 0x2E07: 1, 0x2E08: 1, 0x2E09: 1})
    w = _words(pm4.pkt3("DISPATCH_DIRECT", [1, 1, 1, pm4.DISPATCH_INITIATOR]))
    HostView(q.ring.va, q.ring.size, "I").write(4 * len(words), struct.pack(f"<{len(w)}I", *w))
    HostView(q.wptr_va, 8, "Q")[0] = len(words) + len(w)
    with pytest.raises(DeviceFault, match="MMU fault at 0xdead000: not present"):
        iface.sleep(10)
    assert iface.on_hang() == "MMU fault at 0xdead000: not present"


def test_bad_requests_are_refused(mock: MockKFD) -> None:
    conn = KFD(mock)
    with pytest.raises(MockError, match="unsupported KFD ioctl 0xc0084b77"):
        mock.ioctl(conn.fd, 0xC0084B77, kfd.DestroyQueueArgs())
    with pytest.raises(OSError) as e:
        conn.ioctl("ALLOC_MEMORY_OF_GPU", va_addr=0x1000, size=4096, gpu_id=12345, flags=kfd.MEM_VRAM)
    assert e.value.errno == errno.EINVAL
    with pytest.raises(OSError, match="exactly one memory kind"):
        conn.ioctl("ALLOC_MEMORY_OF_GPU", va_addr=0x1000, size=4096, gpu_id=conn.gpus[0].gpu_id,
                   flags=kfd.MEM_VRAM | kfd.MEM_GTT)  # fmt: skip
    with pytest.raises(OSError, match="not /dev/kfd"):
        mock.ioctl(12345, kfd.IOCTLS["GET_VERSION"][0], kfd.GetVersionArgs())


class NoPermission(MockKFD):
    """A machine where /dev/kfd exists but the user is not in the render group."""

    def open(self, path: str, flags: int) -> int:
        raise PermissionError(errno.EACCES, "Permission denied", path)


class NoKFD(MockKFD):
    """A machine with the topology but no /dev/kfd node."""

    def open(self, path: str, flags: int) -> int:
        raise FileNotFoundError(errno.ENOENT, "No such file or directory", path)


def test_clear_errors_without_a_gpu_or_permission() -> None:
    with pytest.raises(DeviceUnavailable, match="add your user to the 'render' group"):
        KFD(NoPermission(1))
    with pytest.raises(DeviceUnavailable, match="/dev/kfd does not exist"):
        KFD(NoKFD(1))
    if os.path.exists("/dev/kfd"):
        pytest.skip("this machine has KFD: the no-GPU error is not reachable")
    with pytest.raises(DeviceUnavailable, match=r"no AMD GPU here: .* DEV=MOCKKFD\+AMD runs the mock"):
        KFD(kfd.OSFileLayer())
