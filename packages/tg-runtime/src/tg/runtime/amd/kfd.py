"""The KFD interface of the amdgpu kernel driver (``/dev/kfd``): GPU discovery, memory, queues, events (amd.md 3.7).

Everything the interface touches outside the process (sysfs files, ``/dev/kfd`` and the render node, their ioctls
and mmaps) goes through a :class:`FileLayer`: :class:`OSFileLayer` on a real system, the mock KFD
(tg.runtime.amd.sim.kfd_mock) in tests. Nothing else is patched.

- Discovery: ``/sys/devices/virtual/kfd/kfd/topology/nodes/N`` with a non-zero ``gpu_id`` are GPUs (node 0 is the
  CPU); ``properties`` holds ``name value`` lines; IP versions come from the render node's ``ip_discovery`` tree.
- Memory: a VA range is reserved (``PROT_NONE``), KFD allocates VRAM or GTT there and the render node is mapped over
  it when the CPU needs access, so the GPU address is the host address; host memory is registered as ``USERPTR``.
  Every allocation is mapped to the GPUs that use it (``MAP_MEMORY_TO_GPU``).
- Queues: a ring, a 256-byte page holding the write pointer (+56) and read pointer (+128), an EOP buffer and a
  context-save area (compute); KFD returns a doorbell offset into an 8 KiB doorbell page of ``/dev/kfd``.
- Events: one event page per process; per device a queue event (the timeline's RELEASE_MEM interrupt wakes
  ``sleep``), a memory-fault event and a hardware-exception event, whose data name the fault.
"""

from __future__ import annotations

import ctypes
import errno
import mmap
import os
from dataclasses import dataclass, field
from typing import Any, Protocol

from tg.runtime.device import DeviceUnavailable

# ---- ioctl structures (linux/kfd_ioctl.h, interface 1.17) ---------------------------------------------------------


class _Struct(ctypes.Structure):
    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{n}={getattr(self, n)}' for n, *_ in self._fields_)})"


class GetVersionArgs(_Struct):
    _fields_ = [("major_version", ctypes.c_uint32), ("minor_version", ctypes.c_uint32)]


class CreateQueueArgs(_Struct):
    _fields_ = [("ring_base_address", ctypes.c_uint64), ("write_pointer_address", ctypes.c_uint64),
                ("read_pointer_address", ctypes.c_uint64), ("doorbell_offset", ctypes.c_uint64),
                ("ring_size", ctypes.c_uint32), ("gpu_id", ctypes.c_uint32), ("queue_type", ctypes.c_uint32),
                ("queue_percentage", ctypes.c_uint32), ("queue_priority", ctypes.c_uint32),
                ("queue_id", ctypes.c_uint32), ("eop_buffer_address", ctypes.c_uint64),
                ("eop_buffer_size", ctypes.c_uint64), ("ctx_save_restore_address", ctypes.c_uint64),
                ("ctx_save_restore_size", ctypes.c_uint32), ("ctl_stack_size", ctypes.c_uint32),
                ("sdma_engine_id", ctypes.c_uint32), ("pad", ctypes.c_uint32)]  # fmt: skip


class DestroyQueueArgs(_Struct):
    _fields_ = [("queue_id", ctypes.c_uint32), ("pad", ctypes.c_uint32)]


class CreateEventArgs(_Struct):
    _fields_ = [("event_page_offset", ctypes.c_uint64), ("event_trigger_data", ctypes.c_uint32),
                ("event_type", ctypes.c_uint32), ("auto_reset", ctypes.c_uint32), ("node_id", ctypes.c_uint32),
                ("event_id", ctypes.c_uint32), ("event_slot_index", ctypes.c_uint32)]  # fmt: skip


class MemoryExceptionFailure(_Struct):
    _fields_ = [("NotPresent", ctypes.c_uint32), ("ReadOnly", ctypes.c_uint32), ("NoExecute", ctypes.c_uint32),
                ("imprecise", ctypes.c_uint32)]  # fmt: skip


class MemoryExceptionData(_Struct):
    _fields_ = [("failure", MemoryExceptionFailure), ("va", ctypes.c_uint64), ("gpu_id", ctypes.c_uint32),
                ("ErrorType", ctypes.c_uint32)]  # fmt: skip


class HwExceptionData(_Struct):
    _fields_ = [("reset_type", ctypes.c_uint32), ("reset_cause", ctypes.c_uint32), ("memory_lost", ctypes.c_uint32),
                ("gpu_id", ctypes.c_uint32)]  # fmt: skip


class _EventDataUnion(ctypes.Union):
    _fields_ = [("memory_exception_data", MemoryExceptionData), ("hw_exception_data", HwExceptionData),
                ("last_event_age", ctypes.c_uint64)]  # fmt: skip


class EventData(_Struct):
    _anonymous_ = ("u",)
    _fields_ = [("u", _EventDataUnion), ("kfd_event_data_ext", ctypes.c_uint64), ("event_id", ctypes.c_uint32),
                ("pad", ctypes.c_uint32)]  # fmt: skip


class WaitEventsArgs(_Struct):
    _fields_ = [("events_ptr", ctypes.c_uint64), ("num_events", ctypes.c_uint32), ("wait_for_all", ctypes.c_uint32),
                ("timeout", ctypes.c_uint32), ("wait_result", ctypes.c_uint32)]  # fmt: skip


class AcquireVMArgs(_Struct):
    _fields_ = [("drm_fd", ctypes.c_uint32), ("gpu_id", ctypes.c_uint32)]


class AllocMemoryArgs(_Struct):
    _fields_ = [("va_addr", ctypes.c_uint64), ("size", ctypes.c_uint64), ("handle", ctypes.c_uint64),
                ("mmap_offset", ctypes.c_uint64), ("gpu_id", ctypes.c_uint32), ("flags", ctypes.c_uint32)]  # fmt: skip


class FreeMemoryArgs(_Struct):
    _fields_ = [("handle", ctypes.c_uint64)]


class MapMemoryArgs(_Struct):
    _fields_ = [("handle", ctypes.c_uint64), ("device_ids_array_ptr", ctypes.c_uint64), ("n_devices", ctypes.c_uint32),
                ("n_success", ctypes.c_uint32)]  # fmt: skip


class RuntimeEnableArgs(_Struct):
    _fields_ = [("r_debug", ctypes.c_uint64), ("mode_mask", ctypes.c_uint32), ("capabilities_mask", ctypes.c_uint32)]


_IOC_WRITE, _IOC_READ = 1, 2


def _ioc(direction: int, nr: int, struct: type[ctypes.Structure]) -> int:
    return direction << 30 | ctypes.sizeof(struct) << 16 | ord("K") << 8 | nr


# name -> (request number, argument structure); the mock decodes requests with the same table
IOCTLS: dict[str, tuple[int, type[ctypes.Structure]]] = {
    "GET_VERSION": (_ioc(_IOC_READ, 0x01, GetVersionArgs), GetVersionArgs),
    "CREATE_QUEUE": (_ioc(_IOC_READ | _IOC_WRITE, 0x02, CreateQueueArgs), CreateQueueArgs),
    "DESTROY_QUEUE": (_ioc(_IOC_READ | _IOC_WRITE, 0x03, DestroyQueueArgs), DestroyQueueArgs),
    "CREATE_EVENT": (_ioc(_IOC_READ | _IOC_WRITE, 0x08, CreateEventArgs), CreateEventArgs),
    "WAIT_EVENTS": (_ioc(_IOC_READ | _IOC_WRITE, 0x0C, WaitEventsArgs), WaitEventsArgs),
    "ACQUIRE_VM": (_ioc(_IOC_WRITE, 0x15, AcquireVMArgs), AcquireVMArgs),
    "ALLOC_MEMORY_OF_GPU": (_ioc(_IOC_READ | _IOC_WRITE, 0x16, AllocMemoryArgs), AllocMemoryArgs),
    "FREE_MEMORY_OF_GPU": (_ioc(_IOC_WRITE, 0x17, FreeMemoryArgs), FreeMemoryArgs),
    "MAP_MEMORY_TO_GPU": (_ioc(_IOC_READ | _IOC_WRITE, 0x18, MapMemoryArgs), MapMemoryArgs),
    "UNMAP_MEMORY_FROM_GPU": (_ioc(_IOC_READ | _IOC_WRITE, 0x19, MapMemoryArgs), MapMemoryArgs),
    "RUNTIME_ENABLE": (_ioc(_IOC_READ | _IOC_WRITE, 0x25, RuntimeEnableArgs), RuntimeEnableArgs),
}
IOCTL_NAMES = {req: name for name, (req, _) in IOCTLS.items()}

# allocation flags
MEM_VRAM, MEM_GTT, MEM_USERPTR = 1 << 0, 1 << 1, 1 << 2
MEM_UNCACHED, MEM_COHERENT, MEM_NO_SUBSTITUTE = 1 << 25, 1 << 26, 1 << 28
MEM_PUBLIC, MEM_EXECUTABLE, MEM_WRITABLE = 1 << 29, 1 << 30, 1 << 31
QUEUE_COMPUTE, QUEUE_SDMA = 0, 1
EVENT_SIGNAL, EVENT_HW_EXCEPTION, EVENT_MEMORY = 0, 3, 8
WAIT_COMPLETE, WAIT_TIMEOUT = 0, 1
QUEUE_PERCENTAGE, QUEUE_PRIORITY = 100, 7

# mmap flags the stdlib may lack
MAP_FIXED, MAP_NORESERVE, PROT_NONE = 0x10, 0x4000, 0
PAGE = mmap.PAGESIZE

TOPOLOGY = "/sys/devices/virtual/kfd/kfd/topology/nodes"
KFD_PATH = "/dev/kfd"
IP_HW_IDS = {"GC": 11, "SDMA0": 42, "NBIF": 108}  # hardware ids in ip_discovery
DOORBELL_PAGE = 0x2000
EVENT_PAGE_SIZE = 0x8000
WPTR_OFFSET, RPTR_OFFSET = 56, 128  # amd_queue_t write_dispatch_id / read_dispatch_id


def round_up(x: int, a: int) -> int:
    return -(-x // a) * a


# ---- the file layer ------------------------------------------------------------------------------------------------


class FileLayer(Protocol):
    """The operating-system calls the KFD interface makes (files, ioctls, mmaps), replaceable by a mock."""

    name: str

    def exists(self, path: str) -> bool: ...

    def read_text(self, path: str) -> str: ...

    def listdir(self, path: str) -> list[str]: ...

    def open(self, path: str, flags: int) -> int: ...

    def close(self, fd: int) -> None: ...

    def ioctl(self, fd: int, request: int, arg: ctypes.Structure) -> None:
        """Run an ioctl on ``arg`` in place (OSError with the errno on failure)."""
        ...

    def mmap(self, addr: int, length: int, prot: int, flags: int, fd: int, offset: int) -> int: ...

    def munmap(self, addr: int, length: int) -> None: ...

    def doorbell_view(self, addr: int, nbytes: int) -> Any:
        """An MMIO-style view (u64 elements) of mapped doorbells."""
        ...


class OSFileLayer:
    """The real system: os, fcntl and libc's mmap."""

    name = "KFD"

    def __init__(self) -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        self._mmap, self._munmap = libc.mmap, libc.munmap
        self._mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                               ctypes.c_long]  # fmt: skip
        self._mmap.restype = ctypes.c_void_p
        self._munmap.argtypes, self._munmap.restype = [ctypes.c_void_p, ctypes.c_size_t], ctypes.c_int

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def read_text(self, path: str) -> str:
        with open(path) as f:
            return f.read()

    def listdir(self, path: str) -> list[str]:
        return os.listdir(path)

    def open(self, path: str, flags: int) -> int:
        return os.open(path, flags | os.O_CLOEXEC)

    def close(self, fd: int) -> None:
        os.close(fd)

    def ioctl(self, fd: int, request: int, arg: ctypes.Structure) -> None:
        import fcntl

        fcntl.ioctl(fd, request, arg, True)

    def mmap(self, addr: int, length: int, prot: int, flags: int, fd: int, offset: int) -> int:
        res = self._mmap(addr or None, length, prot, flags, fd, offset)
        if res in (None, ctypes.c_void_p(-1).value):
            e = ctypes.get_errno()
            raise OSError(e, f"mmap of {length} bytes failed: {os.strerror(e)}")
        return int(res)

    def munmap(self, addr: int, length: int) -> None:
        if self._munmap(addr, length) != 0:
            e = ctypes.get_errno()
            raise OSError(e, f"munmap at {addr:#x} failed: {os.strerror(e)}")

    def doorbell_view(self, addr: int, nbytes: int) -> Any:
        from tg.runtime.hcq.views import HostView

        return HostView(addr, nbytes, "Q")


# ---- discovery ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GPUNode:
    """A GPU of the KFD topology: its node, ``gpu_id``, ``properties`` and IP versions (major, minor, revision)."""

    node: int
    gpu_id: int
    props: dict[str, int]
    ip_versions: dict[str, tuple[int, int, int]]

    @property
    def arch(self) -> str:
        """``gfx1100`` from ``gfx_target_version`` 110000."""
        v = self.props["gfx_target_version"]
        return f"gfx{v // 10000}{(v // 100) % 100:x}{v % 100:x}"

    @property
    def render_node(self) -> str:
        return f"/dev/dri/renderD{self.props['drm_render_minor']}"


def discover(files: FileLayer) -> list[GPUNode]:
    """The GPUs of the KFD topology, by node number (DeviceUnavailable when KFD or its topology is missing)."""
    if not files.exists(TOPOLOGY):
        raise DeviceUnavailable(f"AMD: no AMD GPU here: {TOPOLOGY} does not exist (the amdgpu kernel driver's KFD "
                                f"is not loaded); DEV=MOCKKFD+AMD runs the mock GPU")  # fmt: skip
    gpus = []
    for name in sorted((n for n in files.listdir(TOPOLOGY) if n.isdigit()), key=int):
        base = f"{TOPOLOGY}/{name}"
        try:
            gpu_id = int(files.read_text(f"{base}/gpu_id").strip() or 0)
        except OSError:
            continue
        if gpu_id == 0:
            continue
        props = {}
        for line in files.read_text(f"{base}/properties").splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[1].lstrip("-").isdigit():
                props[parts[0]] = int(parts[1])
        ips: dict[str, tuple[int, int, int]] = {}
        ip_base = f"/sys/class/drm/renderD{props.get('drm_render_minor', 0)}/device/ip_discovery/die/0"
        for ip, hw in IP_HW_IDS.items():
            d = f"{ip_base}/{hw}/0"
            if files.exists(d):
                ips[ip] = tuple(int(files.read_text(f"{d}/{p}").strip()) for p in ("major", "minor", "revision"))  # type: ignore[assignment]
        gpus.append(GPUNode(int(name), gpu_id, props, ips))
    return gpus


# ---- memory, queues, events ---------------------------------------------------------------------------------------


@dataclass(eq=False)
class Allocation:
    """Memory KFD manages: ``va`` (GPU address = host address), ``size``, the KFD ``handle``, its ``flags``, whether
    the CPU can reach it (``cpu``), the GPUs it is mapped to, and the host mapping to drop at free (``reserved``)."""

    va: int
    size: int
    handle: int
    flags: int
    cpu: bool
    owner_gpu: int
    mapped: set[int] = field(default_factory=set)
    reserved: bool = True


@dataclass
class QueueDesc:
    """A created queue: ring, write/read pointer addresses, the doorbell view (u64), the KFD queue id."""

    kind: str
    ring: Allocation
    gart: Allocation
    wptr_va: int
    rptr_va: int
    doorbell: Any
    queue_id: int
    extras: list[Allocation]


class DeviceFault(RuntimeError):
    """A fault KFD reported for a GPU (memory fault with its address, hardware exception)."""


class KFD:
    """The process's connection to KFD over a file layer: ``/dev/kfd``, its version, the GPUs, the event page."""

    def __init__(self, files: FileLayer) -> None:
        self.files = files
        self.gpus = discover(files)
        if not self.gpus:
            raise DeviceUnavailable(f"AMD: KFD lists no GPU in {TOPOLOGY}")
        self.fd = _open(files, KFD_PATH)
        v = self.ioctl("GET_VERSION")
        self.version = (int(v.major_version), int(v.minor_version))
        if self.version[0] != 1:
            raise DeviceUnavailable(f"AMD: KFD interface version {self.version} is not supported (1.x)")
        if self.version >= (1, 14):
            self.ioctl("RUNTIME_ENABLE", mode_mask=0)
        self.event_page: Allocation | None = None

    def ioctl(self, name: str, **fields: int) -> Any:
        """Run KFD ioctl ``name`` with ``fields``; returns the structure KFD filled."""
        req, struct = IOCTLS[name]
        arg = struct(**fields)
        self.files.ioctl(self.fd, req, arg)
        return arg


def _open(files: FileLayer, path: str) -> int:
    try:
        return files.open(path, os.O_RDWR)
    except FileNotFoundError:
        raise DeviceUnavailable(f"AMD: {path} does not exist: no AMD GPU driven by the amdgpu kernel driver here "
                                f"(DEV=MOCKKFD+AMD runs the mock GPU)") from None  # fmt: skip
    except PermissionError:
        user = os.environ.get("USER", "$USER")
        raise DeviceUnavailable(f"AMD: no permission to open {path}: add your user to the 'render' group (sudo "
                                f"usermod -aG render {user}) and log in again") from None  # fmt: skip


class KFDIface:
    """One GPU through KFD (see the module docstring): ``props``, ``ip_versions``, ``alloc``/``free``/``map``,
    ``create_queue``, ``sleep`` and the fault report ``on_hang``."""

    def __init__(self, kfd: KFD, index: int) -> None:
        if not 0 <= index < len(kfd.gpus):
            raise DeviceUnavailable(f"AMD: no GPU {index}: KFD lists {len(kfd.gpus)} GPU(s)")
        self.kfd, self.files, self.node = kfd, kfd.files, kfd.gpus[index]
        self.gpu_id, self.props, self.ip_versions = self.node.gpu_id, self.node.props, self.node.ip_versions
        self.drm_fd = _open(self.files, self.node.render_node)
        self.kfd.ioctl("ACQUIRE_VM", drm_fd=self.drm_fd, gpu_id=self.gpu_id)
        self.doorbell_base: int | None = None
        self.doorbell_page = 0
        if kfd.event_page is None:
            kfd.event_page = self.alloc(EVENT_PAGE_SIZE, uncached=True, cpu_access=True)
            self.kfd.ioctl("CREATE_EVENT", event_page_offset=kfd.event_page.handle)
        else:
            self.map(kfd.event_page)
        self.queue_event = self.kfd.ioctl("CREATE_EVENT", event_type=EVENT_SIGNAL, auto_reset=1)
        self.mailbox = kfd.event_page.va + 8 * int(self.queue_event.event_slot_index)
        self.mem_event = self.kfd.ioctl("CREATE_EVENT", event_type=EVENT_MEMORY)
        self.hw_event = self.kfd.ioctl("CREATE_EVENT", event_type=EVENT_HW_EXCEPTION)
        self.events = (EventData * 3)()
        self.fault: str | None = None

    # ---- memory ------------------------------------------------------------------------------------------------------

    def alloc(self, size: int, *, host: bool = False, uncached: bool = False, cpu_access: bool = False,
              executable: bool = False) -> Allocation:  # fmt: skip
        """``size`` bytes (rounded up to pages) of VRAM (default), uncached GTT (``uncached``) or host memory
        (``host``), mapped to this GPU; ``cpu_access`` also maps it for the host (public VRAM needs resizable BAR)."""
        size = round_up(max(size, 1), PAGE)
        flags = MEM_WRITABLE | MEM_EXECUTABLE | MEM_NO_SUBSTITUTE
        if uncached:
            flags |= MEM_GTT | MEM_COHERENT | MEM_UNCACHED
        elif host:
            flags |= MEM_USERPTR
        else:
            flags |= MEM_VRAM
        cpu = cpu_access or host or uncached
        if cpu:
            flags |= MEM_PUBLIC
        files = self.files
        if host:
            va = files.mmap(0, size, mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_SHARED | mmap.MAP_ANONYMOUS, -1, 0)
        else:
            va = files.mmap(0, size, PROT_NONE, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | MAP_NORESERVE, -1, 0)
        try:
            mem = self.kfd.ioctl("ALLOC_MEMORY_OF_GPU", va_addr=va, size=size, gpu_id=self.gpu_id, flags=flags,
                                 mmap_offset=va if host else 0)  # fmt: skip
        except OSError as e:
            files.munmap(va, size)
            if e.errno == errno.EINVAL and flags & MEM_VRAM and cpu_access:
                raise MemoryError("cannot allocate host-visible VRAM: enable resizable BAR") from e
            if e.errno == errno.ENOMEM:
                raise MemoryError(f"AMD: cannot allocate {size} bytes: the GPU is out of memory") from e
            raise
        alloc = Allocation(va, size, int(mem.handle), flags, cpu, self.gpu_id)
        if cpu and not host:
            files.mmap(va, size, mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_SHARED | MAP_FIXED, self.drm_fd,
                       int(mem.mmap_offset))  # fmt: skip
        self.map(alloc)
        return alloc

    def register_host(self, addr: int, size: int) -> Allocation:
        """Host memory at ``addr`` (``size`` bytes, page-aligned) registered as USERPTR and mapped to this GPU."""
        if addr % PAGE or size % PAGE:
            raise ValueError(f"host memory for the GPU must be page-aligned, got {addr:#x} + {size:#x}")
        flags = MEM_WRITABLE | MEM_EXECUTABLE | MEM_NO_SUBSTITUTE | MEM_USERPTR | MEM_PUBLIC
        mem = self.kfd.ioctl("ALLOC_MEMORY_OF_GPU", va_addr=addr, size=size, gpu_id=self.gpu_id, flags=flags,
                             mmap_offset=addr)  # fmt: skip
        alloc = Allocation(addr, size, int(mem.handle), flags, True, self.gpu_id, reserved=False)
        self.map(alloc)
        return alloc

    def map(self, alloc: Allocation, gpu_id: int | None = None) -> None:
        """Map an allocation (of this or a peer GPU of the process) to GPU ``gpu_id`` (default: this one)."""
        gid = self.gpu_id if gpu_id is None else gpu_id
        if gid in alloc.mapped:
            return
        ids = (ctypes.c_uint32 * 1)(gid)
        res = self.kfd.ioctl("MAP_MEMORY_TO_GPU", handle=alloc.handle, device_ids_array_ptr=ctypes.addressof(ids),
                             n_devices=1)  # fmt: skip
        if res.n_success != 1:
            raise RuntimeError(f"AMD: KFD mapped {alloc.size} bytes at {alloc.va:#x} to {res.n_success} of 1 GPU")
        alloc.mapped.add(gid)

    def free(self, alloc: Allocation) -> None:
        """Unmap an allocation from every GPU, free it and drop its host mapping."""
        if alloc.mapped:
            ids = (ctypes.c_uint32 * len(alloc.mapped))(*sorted(alloc.mapped))
            self.kfd.ioctl("UNMAP_MEMORY_FROM_GPU", handle=alloc.handle, device_ids_array_ptr=ctypes.addressof(ids),
                           n_devices=len(alloc.mapped))  # fmt: skip
            alloc.mapped.clear()
        self.kfd.ioctl("FREE_MEMORY_OF_GPU", handle=alloc.handle)
        if alloc.reserved:
            self.files.munmap(alloc.va, alloc.size)

    # ---- queues ------------------------------------------------------------------------------------------------------

    def context_save_sizes(self) -> tuple[int, int, int]:
        """(ctx_save_restore_size, ctl_stack_size, debug area) of a gfx11 compute queue's CWSR area."""
        p = self.props
        cu_cnt = p["simd_count"] // p["simd_per_cu"]
        wave_cnt = cu_cnt * p["max_waves_per_simd"] * p["simd_per_cu"]
        wg_data = round_up((0x60000 + 0x4000 + 0x10000 + 0x1000) * cu_cnt, PAGE)
        ctl_stack = round_up(12 * wave_cnt + 48, PAGE)
        return wg_data + ctl_stack, ctl_stack, round_up(wave_cnt * 32, 64)

    def create_queue(self, kind: str, ring_bytes: int) -> QueueDesc:
        """A ``compute`` (PM4) or ``copy`` (SDMA) queue with a ring of ``ring_bytes``."""
        ring = self.alloc(ring_bytes, uncached=True, cpu_access=True)
        gart = self.alloc(0x1000, uncached=True, cpu_access=True)
        extras: list[Allocation] = []
        args: dict[str, int] = {}
        if kind == "compute":
            save, ctl_stack, debug = self.context_save_sizes()
            eop = self.alloc(0x1000)
            cwsr = self.alloc(round_up(save + debug, PAGE))
            extras += [eop, cwsr]
            args = {"eop_buffer_address": eop.va, "eop_buffer_size": eop.size, "ctx_save_restore_address": cwsr.va,
                    "ctx_save_restore_size": save, "ctl_stack_size": ctl_stack}  # fmt: skip
        try:
            q = self.kfd.ioctl("CREATE_QUEUE", ring_base_address=ring.va, ring_size=ring.size, gpu_id=self.gpu_id,
                               queue_type=QUEUE_COMPUTE if kind == "compute" else QUEUE_SDMA,
                               queue_percentage=QUEUE_PERCENTAGE, queue_priority=QUEUE_PRIORITY,
                               write_pointer_address=gart.va + WPTR_OFFSET, read_pointer_address=gart.va + RPTR_OFFSET,
                               **args)  # fmt: skip
        except OSError:
            for a in (ring, gart, *extras):
                self.free(a)
            raise
        if self.doorbell_base is None:
            self.doorbell_base = int(q.doorbell_offset) & ~(DOORBELL_PAGE - 1)
            self.doorbell_page = self.files.mmap(0, DOORBELL_PAGE, mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_SHARED,
                                                 self.kfd.fd, self.doorbell_base)  # fmt: skip
        addr = self.doorbell_page + int(q.doorbell_offset) - self.doorbell_base
        doorbell = self.files.doorbell_view(addr, 8)
        return QueueDesc(kind, ring, gart, gart.va + WPTR_OFFSET, gart.va + RPTR_OFFSET, doorbell, int(q.queue_id),
                         extras)  # fmt: skip

    def destroy_queue(self, q: QueueDesc) -> None:
        """Destroy a queue and free its memory."""
        self.kfd.ioctl("DESTROY_QUEUE", queue_id=q.queue_id)
        for a in (q.ring, q.gart, *q.extras):
            self.free(a)

    # ---- events ------------------------------------------------------------------------------------------------------

    def sleep(self, ms: int) -> None:
        """Block up to ``ms`` for the queue event (the timeline's interrupt); DeviceFault when KFD reports a memory
        fault or hardware exception of this GPU."""
        ev = self.events
        for slot, e in zip(ev, (self.queue_event, self.mem_event, self.hw_event), strict=True):
            slot.event_id = int(e.event_id)
        self.kfd.ioctl("WAIT_EVENTS", events_ptr=ctypes.addressof(ev), num_events=3, wait_for_all=0,
                       timeout=max(int(ms), 0))  # fmt: skip
        self.check_fault()

    def check_fault(self) -> None:
        """Raise DeviceFault when the last wait reported a fault of this GPU."""
        mem, hw = self.events[1].memory_exception_data, self.events[2].hw_exception_data
        if mem.gpu_id == self.gpu_id:
            f = mem.failure
            why = [n for n, v in (("not present", f.NotPresent), ("read-only", f.ReadOnly),
                                  ("no execute", f.NoExecute), ("imprecise", f.imprecise)) if v]  # fmt: skip
            self.fault = f"MMU fault at {int(mem.va):#x}: {', '.join(why) or 'unknown reason'}"
        elif hw.gpu_id == self.gpu_id:
            self.fault = (f"hardware exception: reset type {hw.reset_type}, cause {hw.reset_cause}, memory lost "
                          f"{hw.memory_lost}")  # fmt: skip
        if self.fault is not None:
            raise DeviceFault(f"AMD GPU {self.gpu_id}: {self.fault}")

    def on_hang(self) -> str:
        """What KFD reported about a hang (faults since the last wait), or ''."""
        if self.fault is None:
            try:
                self.sleep(0)
            except DeviceFault:
                pass
        return self.fault or ""
