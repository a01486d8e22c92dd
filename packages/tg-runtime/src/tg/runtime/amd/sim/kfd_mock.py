"""MOCKKFD: a mock of the amdgpu kernel driver's KFD interface with mock gfx1100 GPUs behind it (amd.md 3.8).

:class:`MockKFD` is a :class:`tg.runtime.amd.kfd.FileLayer`: the KFD interface opens, reads, ioctls and mmaps
through it exactly as through the real system, nothing is patched. It serves

- the sysfs topology of ``TG_MOCKGPU_COUNT`` GPUs (default 2; node 0 is the CPU, GPUs are nodes 1..) with the
  properties of an RX 7900 XTX (gfx1100, 96 CUs) and IP-discovery files (GC 11.0.0, SDMA 6.0.0, NBIF 4.3.0);
- ``/dev/kfd`` and the render nodes; the ioctls decode into the real interface's structures (unknown ones raise
  MockError naming the request);
- memory: allocations are host memory at the requested address (identity translation: a GPU address is the host
  address). VRAM and GTT are backed when allocated (their host reservation is replaced by anonymous memory), USERPTR
  memory is the caller's; each GPU sees only what was mapped to it, so a stray access faults instead of reading host
  memory;
- queues: ``CREATE_QUEUE`` attaches a PM4 or SDMA executor over the ring and pointer addresses to that GPU; doorbells
  are words of an 8 KiB host page per GPU, whose view runs the GPUs when the submitter stores to it;
- events: signal events set by RELEASE_MEM/TRAP interrupts, memory-fault events fed by the GPUs' faults, reported by
  WAIT_EVENTS.

Progress: the GPUs run when a doorbell is written (the PYTHON submitter writes through the doorbell view) and while
the host waits (``pump``, WAIT_EVENTS), so a compiled submitter that stores doorbells directly works too. Settings:
``TG_MOCKGPU_COUNT``, ``TG_MOCKGPU_EMU=0`` (retire dispatches without running them), ``TG_MOCKGPU_FAULT_VA`` (the next
dispatch faults at that address, reported through WAIT_EVENTS).
"""

from __future__ import annotations

import bisect
import ctypes
import errno
import functools
import mmap
import time
from dataclasses import dataclass, field
from typing import Any

from tg.runtime.amd import kfd
from tg.runtime.amd.sim.decode import EmulatorError
from tg.runtime.amd.sim.gpu import MockError, MockGPU
from tg.runtime.amd.sim.pm4_exec import PM4Executor
from tg.runtime.amd.sim.sdma_exec import SDMAExecutor
from tg.runtime.hcq.views import HostView

GFX1100_PROPERTIES = {
    "cpu_cores_count": 0, "simd_count": 192, "mem_banks_count": 1, "gfx_target_version": 110000,
    "array_count": 12, "simd_arrays_per_engine": 2, "cu_per_simd_array": 8, "simd_per_cu": 2,
    "max_waves_per_simd": 16, "lds_size_in_kb": 64, "max_slots_scratch_cu": 32, "wave_front_size": 32,
    "num_xcc": 1, "vendor_id": 4098, "device_id": 29772, "local_mem_size": 25753026560,
}  # fmt: skip
CPU_PROPERTIES = {"cpu_cores_count": 16, "simd_count": 0, "mem_banks_count": 1, "gfx_target_version": 0}
IP_VERSIONS = {kfd.IP_HW_IDS["GC"]: (11, 0, 0), kfd.IP_HW_IDS["SDMA0"]: (6, 0, 0), kfd.IP_HW_IDS["NBIF"]: (4, 3, 0)}
KFD_VERSION = (1, 16)
RENDER_MINOR = 128
FIRST_FD = 1000
DOORBELL_OFFSET_BASE = 0x10_0000_0000  # mmap offsets of the doorbell pages (one per GPU, 8 KiB apart)
MEM_OFFSET_BASE = 0x20_0000_0000  # render-node mmap offsets of VRAM/GTT allocations


class HostGPUMemory:
    """Identity GPU memory over host memory: the ranges mapped to one GPU (``read``/``write``/``extent`` of
    tg.runtime.amd.sim.gpu.GPUMemory); an access outside them raises EmulatorError and is remembered in
    ``last_fault``. Ranges may overlap (host memory registered twice) and adjacent ones join."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.ranges: dict[int, tuple[int, int]] = {}  # allocation handle -> (start, end)
        self.starts: list[int] = []  # the merged intervals
        self.ends: list[int] = []
        self.last_fault: int | None = None

    def map(self, handle: int, va: int, size: int) -> None:
        self.ranges[handle] = (va, va + size)
        self._merge()

    def unmap(self, handle: int) -> None:
        self.ranges.pop(handle, None)
        self._merge()

    def _merge(self) -> None:
        self.starts, self.ends = [], []
        for lo, hi in sorted(self.ranges.values()):
            if self.ends and lo <= self.ends[-1]:
                self.ends[-1] = max(self.ends[-1], hi)
            else:
                self.starts.append(lo)
                self.ends.append(hi)

    def mapped(self, va: int, n: int) -> bool:
        """Whether all of [va, va + n) is mapped."""
        i = bisect.bisect(self.starts, va) - 1
        return i >= 0 and va + n <= self.ends[i]

    def _check(self, va: int, n: int, verb: str) -> None:
        if va <= 0 or not self.mapped(va, max(n, 1)):
            self.last_fault = va
            raise EmulatorError(f"{self.name}: {verb} {n} bytes at {va:#x}, which is not mapped to this GPU")

    def read(self, va: int, n: int) -> bytes:
        self._check(va, n, "read")
        return ctypes.string_at(va, n)

    def write(self, va: int, data: bytes) -> None:
        self._check(va, len(data), "write")
        ctypes.memmove(va, data, len(data))

    def extent(self, va: int) -> int:
        self._check(va, 1, "execute")
        return self.ends[bisect.bisect(self.starts, va) - 1]


class _DoorbellView(HostView):
    """The doorbell words of a mock GPU: host memory whose stores also run the mock GPUs (what a doorbell write does
    to a real command processor)."""

    __slots__ = ("mock",)
    mock: MockKFD

    def __setitem__(self, i: Any, value: Any) -> None:
        super().__setitem__(i, value)
        self.mock.doorbell(self.addr)

    def view(self, offset: int = 0, size: int | None = None, fmt: str | None = None) -> HostView:
        v = _DoorbellView(self.addr + offset, self.nbytes - offset if size is None else size, fmt or self.fmt,
                          self.owner)  # fmt: skip
        v.mock = self.mock
        return v


@dataclass(eq=False)
class _Alloc:
    va: int
    size: int
    flags: int
    gpu_id: int
    mmap_offset: int
    mapped: set[int] = field(default_factory=set)


@dataclass(eq=False)
class _Event:
    event_id: int
    kind: int
    auto_reset: bool
    slot: int = 0
    signaled: bool = False


@dataclass(eq=False)
class MockNode:
    """A mock GPU of the topology: node number, ``gpu_id``, render minor, its memory view and the GPU model."""

    node: int
    gpu_id: int
    minor: int
    mem: HostGPUMemory
    gpu: MockGPU
    doorbells: int = 0  # host address of its 8 KiB doorbell page
    queues: dict[int, Any] = field(default_factory=dict)


class MockKFD:
    """The mock KFD file layer (see the module docstring); ``MockKFD.instance()`` is the process's one."""

    name = "MOCKKFD"
    _instance: MockKFD | None = None

    @classmethod
    def instance(cls) -> MockKFD:
        """The process's mock KFD (created on first use from TG_MOCKGPU_COUNT / _EMU / _FAULT_VA)."""
        if cls._instance is None:
            from tg.ir.helpers import TG_MOCKGPU_COUNT, TG_MOCKGPU_EMU, TG_MOCKGPU_FAULT_VA

            fault = str(TG_MOCKGPU_FAULT_VA.value or "0")
            cls._instance = cls(int(TG_MOCKGPU_COUNT.value), emulate=bool(int(TG_MOCKGPU_EMU.value)),
                                fault_va=int(fault, 0))  # fmt: skip
        return cls._instance

    def __init__(self, count: int = 2, *, emulate: bool = True, fault_va: int = 0) -> None:
        if not 1 <= count <= 64:
            raise ValueError(f"TG_MOCKGPU_COUNT must be 1..64, got {count}")
        self._os = kfd.OSFileLayer()
        self.nodes: list[MockNode] = []
        for i in range(count):
            mem = HostGPUMemory(f"MOCKKFD GPU {i}")
            gpu_id = 0x1000 + 0x111 * (i + 1)
            gpu = MockGPU(f"MOCKKFD GPU {i}", mem, emulate=emulate, fault_va=fault_va if i == 0 else 0,
                          on_interrupt=self._interrupt, on_fault=functools.partial(self._fault, gpu_id))  # fmt: skip
            node = MockNode(i + 1, gpu_id, RENDER_MINOR + i, mem, gpu)
            node.doorbells = self._os.mmap(0, kfd.DOORBELL_PAGE, mmap.PROT_READ | mmap.PROT_WRITE,
                                           mmap.MAP_SHARED | mmap.MAP_ANONYMOUS, -1, 0)  # fmt: skip
            self.nodes.append(node)
        self.files = self._sysfs()
        self.fds: dict[int, str] = {}
        self._next_fd = FIRST_FD
        self.allocs: dict[int, _Alloc] = {}
        self._next_handle = 1
        self.events: dict[int, _Event] = {}
        self._next_event = 1
        self.event_page: _Alloc | None = None
        self.faults: list[tuple[int, int, str]] = []  # (gpu_id, va, why) not yet reported
        self._next_queue = 1
        self.log: list[str] = []  # the ioctls in order (tests check the open sequence)
        self._pumping = False

    # ---- files -------------------------------------------------------------------------------------------------------

    def _sysfs(self) -> dict[str, str]:
        files: dict[str, str] = {"/dev/kfd": ""}
        files[f"{kfd.TOPOLOGY}/0/gpu_id"] = "0\n"
        files[f"{kfd.TOPOLOGY}/0/properties"] = "".join(f"{k} {v}\n" for k, v in CPU_PROPERTIES.items())
        for n in self.nodes:
            props = {**GFX1100_PROPERTIES, "drm_render_minor": n.minor}
            files[f"{kfd.TOPOLOGY}/{n.node}/gpu_id"] = f"{n.gpu_id}\n"
            files[f"{kfd.TOPOLOGY}/{n.node}/properties"] = "".join(f"{k} {v}\n" for k, v in props.items())
            files[f"/dev/dri/renderD{n.minor}"] = ""
            for hw, version in IP_VERSIONS.items():
                for part, v in zip(("major", "minor", "revision"), version, strict=True):
                    files[f"/sys/class/drm/renderD{n.minor}/device/ip_discovery/die/0/{hw}/0/{part}"] = f"{v}\n"
        return files

    def exists(self, path: str) -> bool:
        path = path.rstrip("/")
        return path in self.files or any(f.startswith(path + "/") for f in self.files)

    def read_text(self, path: str) -> str:
        if path not in self.files:
            raise FileNotFoundError(errno.ENOENT, "No such file or directory", path)
        return self.files[path]

    def listdir(self, path: str) -> list[str]:
        prefix = path.rstrip("/") + "/"
        names = sorted({f[len(prefix) :].split("/")[0] for f in self.files if f.startswith(prefix)})
        if not names:
            raise FileNotFoundError(errno.ENOENT, "No such file or directory", path)
        return names

    def open(self, path: str, flags: int) -> int:
        if path not in self.files or not (path == "/dev/kfd" or path.startswith("/dev/dri/")):
            raise FileNotFoundError(errno.ENOENT, "No such file or directory", path)
        fd, self._next_fd = self._next_fd, self._next_fd + 1
        self.fds[fd] = path
        return fd

    def close(self, fd: int) -> None:
        self.fds.pop(fd, None)

    def doorbell_view(self, addr: int, nbytes: int) -> HostView:
        v = _DoorbellView(addr, nbytes, "Q")
        v.mock = self
        return v

    # ---- mmap ------------------------------------------------------------------------------------------------------

    def mmap(self, addr: int, length: int, prot: int, flags: int, fd: int, offset: int) -> int:
        if fd == -1:
            return self._os.mmap(addr, length, prot, flags, fd, offset)
        path = self.fds.get(fd)
        if path == "/dev/kfd":
            for n in self.nodes:
                if offset == DOORBELL_OFFSET_BASE + n.node * kfd.DOORBELL_PAGE and length == kfd.DOORBELL_PAGE:
                    return n.doorbells
            raise OSError(errno.EINVAL, f"MOCKKFD: no doorbell page at /dev/kfd offset {offset:#x}")
        if path is not None and path.startswith("/dev/dri/"):
            for a in self.allocs.values():
                if a.mmap_offset == offset and a.mmap_offset:
                    if addr != a.va or length != a.size or not flags & kfd.MAP_FIXED:
                        raise OSError(errno.EINVAL, f"MOCKKFD: the render node maps allocation {a.va:#x} of {a.size}"
                                                    f" bytes at its address with MAP_FIXED")  # fmt: skip
                    return a.va  # backed since ALLOC_MEMORY_OF_GPU
            raise OSError(errno.EINVAL, f"MOCKKFD: no allocation at render-node offset {offset:#x}")
        raise OSError(errno.EBADF, f"MOCKKFD: mmap of fd {fd}, which is not open")

    def munmap(self, addr: int, length: int) -> None:
        if any(n.doorbells == addr for n in self.nodes):
            return
        self._os.munmap(addr, length)

    # ---- ioctls ----------------------------------------------------------------------------------------------------

    def ioctl(self, fd: int, request: int, arg: ctypes.Structure) -> None:
        if self.fds.get(fd) != "/dev/kfd":
            raise OSError(errno.ENOTTY, f"MOCKKFD: ioctl {request:#x} on fd {fd}, which is not /dev/kfd")
        name = kfd.IOCTL_NAMES.get(request)
        if name is None:
            raise MockError(f"unsupported KFD ioctl {request:#x}")
        if not isinstance(arg, kfd.IOCTLS[name][1]):
            raise MockError(f"KFD ioctl {name} takes {kfd.IOCTLS[name][1].__name__}, got {type(arg).__name__}")
        self.log.append(name)
        getattr(self, f"_{name.lower()}")(arg)

    def node(self, gpu_id: int) -> MockNode:
        for n in self.nodes:
            if n.gpu_id == gpu_id:
                return n
        raise OSError(errno.EINVAL, f"MOCKKFD: no GPU with gpu_id {gpu_id}")

    def _get_version(self, a: kfd.GetVersionArgs) -> None:
        a.major_version, a.minor_version = KFD_VERSION

    def _runtime_enable(self, a: kfd.RuntimeEnableArgs) -> None:
        pass

    def _acquire_vm(self, a: kfd.AcquireVMArgs) -> None:
        n = self.node(a.gpu_id)
        if self.fds.get(a.drm_fd) != f"/dev/dri/renderD{n.minor}":
            raise OSError(errno.EINVAL, f"MOCKKFD: ACQUIRE_VM of GPU {a.gpu_id} with fd {a.drm_fd}: not its render "
                                        f"node")  # fmt: skip

    def _alloc_memory_of_gpu(self, a: kfd.AllocMemoryArgs) -> None:
        self.node(a.gpu_id)
        kinds = a.flags & (kfd.MEM_VRAM | kfd.MEM_GTT | kfd.MEM_USERPTR)
        if kinds not in (kfd.MEM_VRAM, kfd.MEM_GTT, kfd.MEM_USERPTR):
            raise OSError(errno.EINVAL, f"MOCKKFD: allocation flags {a.flags:#x} name not exactly one memory kind")
        if a.va_addr % kfd.PAGE or a.size % kfd.PAGE or a.size == 0:
            raise OSError(errno.EINVAL, f"MOCKKFD: allocation at {a.va_addr:#x} of {a.size:#x} bytes is not in pages")
        if kinds != kfd.MEM_USERPTR and any(b.va < a.va_addr + a.size and a.va_addr < b.va + b.size and
                                            not b.flags & kfd.MEM_USERPTR for b in self.allocs.values()):  # fmt: skip
            raise OSError(errno.EINVAL, f"MOCKKFD: allocation at {a.va_addr:#x} overlaps another")
        handle, self._next_handle = self._next_handle, self._next_handle + 1
        offset = 0
        if kinds == kfd.MEM_USERPTR:
            if a.mmap_offset != a.va_addr:
                raise OSError(errno.EINVAL, "MOCKKFD: a USERPTR allocation's mmap_offset is its host address")
        else:  # back the reserved range with memory now: the GPU address is the host address
            self._os.mmap(a.va_addr, a.size, mmap.PROT_READ | mmap.PROT_WRITE,
                          mmap.MAP_SHARED | mmap.MAP_ANONYMOUS | kfd.MAP_FIXED, -1, 0)  # fmt: skip
            offset = MEM_OFFSET_BASE + handle * kfd.PAGE
        self.allocs[handle] = _Alloc(a.va_addr, a.size, a.flags, a.gpu_id, offset)
        a.handle, a.mmap_offset = handle, offset

    def _alloc(self, handle: int) -> _Alloc:
        if handle not in self.allocs:
            raise OSError(errno.EINVAL, f"MOCKKFD: no allocation with handle {handle}")
        return self.allocs[handle]

    def _gpu_ids(self, a: kfd.MapMemoryArgs) -> list[int]:
        return list((ctypes.c_uint32 * a.n_devices).from_address(a.device_ids_array_ptr)) if a.n_devices else []

    def _map_memory_to_gpu(self, a: kfd.MapMemoryArgs) -> None:
        alloc = self._alloc(a.handle)
        for gid in self._gpu_ids(a)[a.n_success :]:
            if gid not in alloc.mapped:
                self.node(gid).mem.map(a.handle, alloc.va, alloc.size)
                alloc.mapped.add(gid)
            a.n_success += 1

    def _unmap_memory_from_gpu(self, a: kfd.MapMemoryArgs) -> None:
        alloc = self._alloc(a.handle)
        for gid in self._gpu_ids(a)[a.n_success :]:
            if gid in alloc.mapped:
                self.node(gid).mem.unmap(a.handle)
                alloc.mapped.discard(gid)
            a.n_success += 1

    def _free_memory_of_gpu(self, a: kfd.FreeMemoryArgs) -> None:
        alloc = self._alloc(a.handle)
        if alloc.mapped:
            raise OSError(errno.EBUSY, f"MOCKKFD: allocation {alloc.va:#x} is still mapped to GPUs {alloc.mapped}")
        del self.allocs[a.handle]

    def _create_event(self, a: kfd.CreateEventArgs) -> None:
        if a.event_page_offset:
            if self.event_page is not None:
                raise OSError(errno.EINVAL, "MOCKKFD: the event page is set once per process")
            self.event_page = self._alloc(a.event_page_offset)
            if self.event_page.size < kfd.EVENT_PAGE_SIZE:
                raise OSError(errno.EINVAL, f"MOCKKFD: the event page needs {kfd.EVENT_PAGE_SIZE:#x} bytes")
            # like KFD, the call that sets the page also creates an event of the requested type
        if a.event_type not in (kfd.EVENT_SIGNAL, kfd.EVENT_MEMORY, kfd.EVENT_HW_EXCEPTION):
            raise MockError(f"MOCKKFD: event type {a.event_type} is not modelled")
        if a.event_type == kfd.EVENT_SIGNAL and self.event_page is None:
            raise OSError(errno.EINVAL, "MOCKKFD: signal events need the event page first")
        eid, self._next_event = self._next_event, self._next_event + 1
        slot = sum(e.kind == kfd.EVENT_SIGNAL for e in self.events.values())
        self.events[eid] = _Event(eid, a.event_type, bool(a.auto_reset), slot)
        a.event_id, a.event_slot_index, a.event_trigger_data = eid, slot, eid

    def _wait_events(self, a: kfd.WaitEventsArgs) -> None:
        self.pump()
        data = (kfd.EventData * a.num_events).from_address(a.events_ptr)
        ready = []
        for d in data:
            e = self.events.get(int(d.event_id))
            if e is None:
                raise OSError(errno.EINVAL, f"MOCKKFD: WAIT_EVENTS on unknown event {d.event_id}")
            if e.kind == kfd.EVENT_SIGNAL and e.signaled:
                ready.append(d)
                if e.auto_reset:
                    e.signaled = False
            elif e.kind == kfd.EVENT_MEMORY and self.faults:
                gid, va, _ = self.faults.pop(0)
                m = d.memory_exception_data
                m.va, m.gpu_id, m.failure.NotPresent = va, gid, 1
                ready.append(d)
        if ready:
            a.wait_result = kfd.WAIT_COMPLETE
            return
        time.sleep(min(a.timeout, 1) / 1000)  # nothing happens in a mock while nobody runs it: a short nap
        a.wait_result = kfd.WAIT_TIMEOUT

    def _create_queue(self, a: kfd.CreateQueueArgs) -> None:
        n = self.node(a.gpu_id)
        for what, va, size in (("ring", a.ring_base_address, a.ring_size), ("write pointer", a.write_pointer_address,
                               8), ("read pointer", a.read_pointer_address, 8)):  # fmt: skip
            if not n.mem.mapped(va, size):
                raise OSError(errno.EINVAL, f"MOCKKFD: the queue's {what} at {va:#x} is not mapped to GPU {a.gpu_id}")
        if a.ring_size & (a.ring_size - 1):
            raise OSError(errno.EINVAL, f"MOCKKFD: ring size {a.ring_size:#x} is not a power of two")
        if a.queue_percentage != kfd.QUEUE_PERCENTAGE or not 0 <= a.queue_priority <= 15:
            raise OSError(errno.EINVAL, "MOCKKFD: queue percentage must be 100 and priority 0..15")
        qid, self._next_queue = self._next_queue, self._next_queue + 1
        slot = len(n.queues)
        if a.queue_type == kfd.QUEUE_COMPUTE:
            if not (a.eop_buffer_address and a.eop_buffer_size and a.ctx_save_restore_address and
                    a.ctx_save_restore_size and a.ctl_stack_size):  # fmt: skip
                raise OSError(errno.EINVAL, "MOCKKFD: a gfx11 compute queue needs an EOP buffer and a CWSR area")
            q: Any = PM4Executor(n.gpu, a.ring_base_address, a.ring_size, a.read_pointer_address,
                                 a.write_pointer_address, f"COMPUTE queue {qid}")  # fmt: skip
        elif a.queue_type == kfd.QUEUE_SDMA:
            q = SDMAExecutor(n.gpu, a.ring_base_address, a.ring_size, a.read_pointer_address,
                             a.write_pointer_address, f"SDMA queue {qid}")  # fmt: skip
        else:
            raise MockError(f"MOCKKFD: queue type {a.queue_type} is not modelled (0 compute, 1 SDMA)")
        n.gpu.write_u64(a.read_pointer_address, 0)
        n.gpu.add_queue(q)
        n.queues[qid] = q
        a.queue_id = qid
        a.doorbell_offset = DOORBELL_OFFSET_BASE + n.node * kfd.DOORBELL_PAGE + 8 * slot

    def _destroy_queue(self, a: kfd.DestroyQueueArgs) -> None:
        for n in self.nodes:
            if (q := n.queues.pop(a.queue_id, None)) is not None:
                n.gpu.remove_queue(q)
                return
        raise OSError(errno.EINVAL, f"MOCKKFD: no queue {a.queue_id}")

    # ---- the GPUs ----------------------------------------------------------------------------------------------------

    def _interrupt(self, ctxid: int) -> None:
        e = self.events.get(ctxid)
        if e is not None and e.kind == kfd.EVENT_SIGNAL:
            e.signaled = True

    def _fault(self, gpu_id: int, va: int, why: str) -> None:
        self.faults.append((gpu_id, va, why))

    def doorbell(self, addr: int) -> None:
        """A doorbell store: run the GPUs (errors are recorded on the GPU, raised at the host's next wait)."""
        self.pump()

    def pump(self, gpu_id: int | None = None) -> None:
        """Run every GPU's queues until none moves (one GPU may wait for another's signal); then raise the recorded
        fault of GPU ``gpu_id``."""
        if not self._pumping:
            self._pumping = True
            try:
                while any([n.gpu.step() for n in self.nodes]):
                    pass
            finally:
                self._pumping = False
        if gpu_id is not None:
            self.node(gpu_id).gpu.check()

    def gpu(self, gpu_id: int) -> MockGPU:
        """The mock GPU with ``gpu_id``."""
        return self.node(gpu_id).gpu
