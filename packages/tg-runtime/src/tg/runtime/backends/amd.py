"""The AMD device: RDNA3 GPUs on the HCQ layer, a PM4 compute queue and an SDMA copy queue (specs/amd.md 3).

Device strings (``DEV=[IFACE[:indices]+]AMD[:LLVM[:gfx1100]]``):

- ``AMD``, ``KFD+AMD``: the GPUs the amdgpu kernel driver exposes through KFD (``/dev/kfd``); the AM driver (PCI,
  USB) is never chosen implicitly;
- ``MOCKKFD+AMD``: the mock KFD with mock gfx1100 GPUs running the real machine code on the RDNA3 emulator
  (tg.runtime.amd.sim.kfd_mock); ``TG_MOCKGPU_COUNT`` GPUs;
- ``PCI+AMD``, ``USB+AMD``: the AM driver (tg.runtime.amd.am), which resets and boots the GPU from user space over
  tg.drivers' PCI access (VFIO/sysfs, ``REMOTE=``) or the ASM24 USB bridge; only when named explicitly;
- ``MOCKPCI+AMD``, ``MOCKUSB+AMD``: the AM driver on the process's mock AM GPUs (tg.runtime.amd.sim.am_gpu: register
  level, the same PM4/SDMA executors and emulator as MOCKKFD);
- ``KFD:1,0+AMD``: the GPUs in that order (``AMD`` = the first listed, ``AMD:1`` the second);
- ``:LLVM`` (the only renderer: LLVM IR compiled by llvmlite), ``:gfx1100`` (checked against the opened GPU).

Commands are encoded by the rule tables of tg.runtime.amd.pm4 (``COMPUTE:0``) and tg.runtime.amd.sdma (``COPY:0``;
absent with ``AMD_DISABLE_SDMA=1``: copies then run as kernels). Memory: buffers in VRAM (no CPU view: the host
copies through the staging ring), signals, command buffers and rings in uncached host-visible GTT, kernels in
host-visible VRAM, host memory registered as USERPTR. Queues are created on first use.

On AM, GPU addresses are not host addresses: every CPU access goes through the allocation's view (a BAR0 window onto
VRAM, or DMA-able system memory), signals and rings live in host-visible VRAM, and host memory is not mapped into the
GPU on the mocks and over USB (``can_map_host`` is the interface's); the AM GPUs of one PCI bus are peers (each maps
the other's VRAM through its BAR0). A fault the interrupt ring reports fails the device (DeviceHangError naming the
address; the error state sticks as on every HCQ device); ``recover()`` resets the MEC, restarts the compute ring and
clears the error state so the device can be used again. The session is finalised (``SCRATCH_REG6 = 0``) at exit.
"""

from __future__ import annotations

import atexit
import importlib.util
import time
from typing import TYPE_CHECKING, Any

from tg.ir import PatternMatcher, UOp, dtypes
from tg.ir.helpers import AMD_DISABLE_SDMA, round_up
from tg.ir.target import Target, TargetError
from tg.runtime.amd import pm4, sdma
from tg.runtime.amd.kfd import KFD, Allocation, DeviceFault, KFDIface, OSFileLayer, QueueDesc
from tg.runtime.device import BufferSpec, DeviceUnavailable, Dims, Program, check_device_index, instance_target
from tg.runtime.hcq.alloc import HCQAllocator, HCQBuffer
from tg.runtime.hcq.device import HCQDevice, Region, Signal
from tg.runtime.hcq.encode import QueueSpec
from tg.runtime.hcq.prepare import STAGING_SIZE
from tg.runtime.hcq.views import HostView

if TYPE_CHECKING:
    from tg.runtime.amd.sim.kfd_mock import MockKFD

U32 = dtypes.uint32
RING_BYTES = 16 << 20  # compute and SDMA rings (amd.md 3.1)
MAX_IB_DWORDS = (1 << 20) - 1
SPIN_S = 0.001  # a real device's host wait spins this long before sleeping in WAIT_EVENTS
ARCHS = ("gfx1100",)
AM_IFACES = ("PCI", "USB", "MOCKPCI", "MOCKUSB")  # the AM driver (tg.runtime.amd.am.iface)
_connections: dict[str, KFD] = {}  # one KFD connection per interface and process


def view_of(alloc: Any, size: int | None = None, fmt: str = "B", offset: int = 0) -> Any:
    """The CPU view of ``size`` bytes (default: all) at ``offset`` of an allocation: AM allocations carry theirs (BAR0
    or system memory: the GPU address is not a host address); KFD memory is mapped at its GPU address."""
    size = alloc.size - offset if size is None else size
    view = getattr(alloc, "view", None)
    if view is not None:
        return view.view(offset, size, fmt)
    if isinstance(alloc, Allocation):
        return HostView(alloc.va + offset, size, fmt)
    raise RuntimeError(f"memory at {alloc.va:#x} has no CPU view")


def _mock_class() -> type[MockKFD]:
    from tg.runtime.amd.sim.kfd_mock import MockKFD

    return MockKFD


def kfd_connection(iface: str) -> KFD:
    """The process's KFD connection of ``iface`` (KFD: the kernel's, MOCKKFD: the mock's), opened once."""
    if iface not in _connections:
        if iface == "MOCKKFD":
            from tg.runtime.amd.sim.kfd_mock import MockKFD

            _connections[iface] = KFD(MockKFD.instance())
        else:
            _connections[iface] = KFD(OSFileLayer())
    return _connections[iface]


class QueueRules(PatternMatcher):
    """Rule tables chosen by the queue a command is encoded or submitted for (``COMPUTE:n`` PM4, ``COPY:n`` SDMA)."""

    def __init__(self, compute: PatternMatcher, copy: PatternMatcher) -> None:
        super().__init__([])
        self.by_kind = {"COMPUTE": compute, "COPY": copy}

    def rewrite(self, uop: UOp, ctx: Any = None) -> UOp | None:
        kind = str(ctx.queue).split(":")[0]
        if kind not in self.by_kind:
            raise RuntimeError(f"{ctx.device} has no queue {ctx.queue}; AMD queues are COMPUTE:0 and COPY:0")
        return self.by_kind[kind].rewrite(uop, ctx)


class AMDProgram(Program):
    """A gfx11 kernel loaded on an AMD device: its code object (checked: tg.runtime.amd.program) is uploaded on first
    use into host-visible VRAM; called directly it runs as a one-call HCQ program on ``COMPUTE:0``."""

    def __init__(self, dev: AMDDevice, name: str, lib: bytes) -> None:
        from tg.runtime.amd.program import CodeObject

        super().__init__(name, lib)
        self.dev = dev
        self.code_object = CodeObject(lib, name)
        self.descriptor = self.code_object.descriptor
        self.image: Allocation | None = None
        self._linked: dict[tuple[Any, ...], Any] = {}

    def entry(self) -> int:
        """The kernel's entry address on the device (the image is uploaded on the first call)."""
        if self.image is None:
            co = self.code_object
            alloc = self.dev.iface.alloc(len(co.image), cpu_access=True, executable=True)
            image = co.link(alloc.va).image
            view_of(alloc).write(0, image)
            self.image = alloc
        entry = self.image.va + self.code_object.entry_offset
        if entry % 256:
            raise RuntimeError(f"kernel {self.name}: entry {entry:#x} is not 256-byte aligned (COMPUTE_PGM_LO)")
        return entry

    def launch(self, bufs: tuple, gs: Dims, ls: Dims, vals: tuple[int, ...], wait: bool, threads: int) -> float | None:
        from tg.runtime.hcq.exec import execute
        from tg.runtime.hcq.run import one_call_program, profiling, runtime_name

        gs, ls = tuple(gs or (1,)), tuple(ls or (1,))
        key = (len(bufs), len(vals), 1, profiling() or wait, runtime_name(), gs, ls)
        if (lb := self._linked.get(key)) is None:
            lb = self._linked[key] = one_call_program(self.dev, self, key[:4], gs, ls)
        return execute(lb, bufs, {f"_a{i}": v for i, v in enumerate(vals)} if vals else None, wait)


class AMDAllocator(HCQAllocator):
    """VRAM buffers; host memory (``Tensor.from_blob``) registered with the GPU as USERPTR."""

    def from_host_memory(self, mv: memoryview, addr: int) -> HCQBuffer:
        """An HCQBuffer over host memory at ``addr``: its pages are registered with the GPU."""
        dev: AMDDevice = self.dev
        if not dev.can_map_host:
            raise ValueError(f"{dev.device} ({dev.iface_name}+AMD) cannot use host memory at a raw pointer: the GPU "
                             f"reaches no host memory there; copy it into a device buffer instead")  # fmt: skip
        lo = addr - addr % 4096
        hi = round_up(addr + max(mv.nbytes, 1), 4096)
        alloc = dev.iface.register_host(lo, hi - lo)
        va = alloc.va + (addr - lo)  # KFD: the host address itself; AM: the GPU address the pages were mapped at
        buf = HCQBuffer(va, mv.nbytes, HostView(addr, mv.nbytes, "B", owner=mv), dev, keep=(alloc, mv))
        buf.external = True
        return buf


def _allocation(keep: Any) -> Any:
    """The KFD Allocation or AM allocation that ``keep`` holds, or None."""
    from tg.runtime.amd.am.iface import AMAllocation

    k = keep[0] if isinstance(keep, tuple) else keep
    return k if isinstance(k, (Allocation, AMAllocation)) else None


class AMDDevice(HCQDevice):
    """An RDNA3 GPU driven through HCQ (see the module docstring)."""

    interfaces = {name: "tg.runtime.backends.amd:AMDDevice" for name in ("KFD", "MOCKKFD", *AM_IFACES)}
    renderers = ("LLVM",)
    pm_encode = QueueRules(pm4.pm_encode, sdma.pm_encode)
    pm_submit = QueueRules(pm4.pm_submit, sdma.pm_submit)
    # the largest submits: an indirect buffer (compute), half the ring (copy: a submit may first skip the ring's tail)
    queues = {"COMPUTE:0": QueueSpec("compute", U32, MAX_IB_DWORDS), "COPY:0": QueueSpec("copy", U32, RING_BYTES // 8)}
    can_map_host = True
    timestamp_divider = 100.0  # GPU clock ticks per microsecond

    @classmethod
    def check_arch(cls, target: Target) -> None:
        """gfx1100 (the mock models nothing else); the opened GPU's arch is checked when it opens."""
        if target.arch is not None and target.arch not in ARCHS:
            raise TargetError(f"device string {str(target)!r}: unknown AMD arch {target.arch!r}; available: "
                              f"{', '.join(ARCHS)}")  # fmt: skip
        if target.iface in ("MOCKKFD", "MOCKPCI", "MOCKUSB") and target.arch not in (None, "gfx1100"):
            raise TargetError(f"device string {str(target)!r}: {target.iface}+AMD models gfx1100 only")

    def __init__(self, device: str = "AMD", target: Target | None = None) -> None:
        index = check_device_index(device)
        target = target if target is not None else instance_target(device)
        type(self).check_arch(target)
        self.iface_name = target.iface or "KFD"
        self.am = self.iface_name in AM_IFACES
        conn = None if self.am else kfd_connection(self.iface_name)
        if importlib.util.find_spec("llvmlite") is None:
            raise DeviceUnavailable("AMD: the LLVM renderer needs llvmlite: pip install 'tg-runtime[llvm]'")
        if target.indices is not None:
            if index >= len(target.indices):
                raise DeviceUnavailable(f"{device}: {target} lists {len(target.indices)} GPU(s)")
            gpu = target.indices[index]
        else:
            gpu = index
        self.iface: Any = self._open_am(gpu) if conn is None else KFDIface(conn, gpu)  # AMIface or KFDIface
        self.arch = self.iface.node.arch if not self.am else f"gfx{self.iface.props['gfx_target_version'] // 100}"
        if self.arch not in ARCHS:
            raise DeviceUnavailable(f"{device}: the GPU is {self.arch}; tg supports {', '.join(ARCHS)}")
        if target.arch is not None and target.arch != self.arch:
            raise TargetError(f"device string {str(target)!r}: arch {target.arch} differs from the opened GPU's "
                              f"({self.arch})")  # fmt: skip
        self.mock: MockKFD | None = conn.files if conn is not None and isinstance(conn.files, _mock_class()) else None
        self.am_mock: Any = getattr(self.iface, "mock_gpu", None)  # the MockAMGPU behind MOCKPCI/MOCKUSB
        self.can_map_host = bool(getattr(self.iface, "can_map_host", True))  # KFD: always (USERPTR)
        self.can_recover = self.am
        p = self.iface.props
        self.cu_cnt, self.se_cnt = p["simd_count"] // p["simd_per_cu"], p["array_count"] // p["simd_arrays_per_engine"]
        self.has_copy_queue = not AMD_DISABLE_SDMA.value
        ring_dw = RING_BYTES // 4
        sdma_major = self.iface.ip_versions.get("SDMA0", (6, 0, 0))[0]
        self.encode_facts = {
            "arch": self.arch, "scratch": self.scratch_for,
            "hdp_flush": (pm4.NBIO_HDP_FLUSH_REQ, pm4.NBIO_HDP_FLUSH_DONE),
            # KFD: the timeline's RELEASE_MEM also wakes WAIT_EVENTS; AM's sleep drains the interrupt ring instead
            "queue_event": None if self.am else (self.iface.mailbox, int(self.iface.queue_event.event_id)),
            "max_copy_size": sdma.MAX_COPY_SIZE if sdma_major >= 5 else 0x400000,
            "ring_dwords": {"COMPUTE:0": ring_dw, "COPY:0": ring_dw},
        }  # fmt: skip
        self.hw_queues: dict[str, tuple[QueueDesc, Region]] = {}
        self._scratch: list[tuple[int, Allocation, int]] = []  # (bytes per lane, memory, TMPRING_SIZE), grow-only
        self._staging: Region | None = None
        self._state: list[Region] = []  # pages of u64 words (queue put counters)
        self._state_used = 0
        self._fault: Exception | None = None
        from tg.codegen.render.llvmir import AMDLLVMRenderer
        from tg.runtime.llvm import AMDGPU_TRIPLE, LLVMCompiler

        arch = self.arch
        super().__init__(device, AMDAllocator(self), LLVMCompiler(AMDGPU_TRIPLE, arch),
                         lambda name, lib: AMDProgram(self, name, lib), lambda: AMDLLVMRenderer(arch),
                         target)  # fmt: skip

    def _open_am(self, index: int) -> Any:
        """The AM driver on GPU ``index`` of the interface (boots it); finalised at exit."""
        from tg.runtime.amd.am.iface import AMIface

        iface = AMIface(self.iface_name, index)
        atexit.register(iface.close)
        return iface

    @property
    def emulated(self) -> bool:
        """Whether kernels run on the RDNA3 emulator (MOCKKFD, MOCKPCI, MOCKUSB): tests keep their grids small."""
        return self.mock is not None or self.am_mock is not None

    @property
    def peer_group(self) -> str:
        """The GPUs of one KFD connection map each other's memory, as do the AM GPUs of one PCI bus (peer to peer
        through BAR0); over USB each GPU is on its own."""
        return f"{self.iface_name}+{self.device}" if self.iface_name.endswith("USB") else f"{self.iface_name}+AMD"

    # ---- memory ----------------------------------------------------------------------------------------------------

    def alloc_region(self, size: int) -> Region:
        """Uncached host-visible memory (GTT): signals, link blocks, staging."""
        a = self.iface.alloc(size, uncached=True, cpu_access=True)
        return Region(a.va, size, view_of(a, size), self, a)

    def free_region(self, region: Region) -> None:
        if (a := _allocation(region.keep)) is not None and region.va == a.va:
            self.iface.free(a)

    def alloc_buffer(self, size: int, options: BufferSpec) -> HCQBuffer:
        """VRAM without a CPU view (the host copies through the staging ring); host memory for
        ``BufferSpec(host=True)``; host-visible VRAM when there is no copy queue (the host then copies directly)."""
        cpu = not self.has_copy_queue
        host = options.host and self.can_map_host  # AM mocks and USB: host buffers live in host-visible VRAM
        a = self.iface.alloc(size, host=host, cpu_access=cpu or options.host)
        view = view_of(a, size) if options.host or cpu else None
        return HCQBuffer(a.va, size, view, self, keep=a)

    def free_buffer(self, buf: HCQBuffer) -> None:
        if (a := _allocation(buf.keep)) is not None:
            self.iface.free(a)

    def _map_to(self, keep: Any, device: Any) -> None:
        if device is self or (a := _allocation(keep)) is None:
            return
        if not isinstance(device, AMDDevice) or device.peer_group != self.peer_group:
            raise RuntimeError(f"{self.device} memory cannot be mapped into {getattr(device, 'device', device)}")
        self.iface.map(a, device.iface if self.am else device.iface.gpu_id)

    def map_buffer(self, buf: HCQBuffer, device: Any) -> int:
        """Map a buffer into a peer GPU (KFD MAP_MEMORY_TO_GPU); the address is the same."""
        self._map_to(buf.base.keep, device)
        return int(buf.va)

    def map_region(self, region: Region, device: Any) -> int:
        self._map_to(region.keep, device)
        return region.va

    def staging_region(self) -> Region:
        if self._staging is None:
            self._staging = self.alloc_region(STAGING_SIZE)
        return self._staging

    def scratch_for(self, private_bytes: int) -> tuple[int, int]:
        """(scratch address, COMPUTE_TMPRING_SIZE) for kernels using ``private_bytes`` per lane. Scratch only grows;
        programs linked against a smaller one keep it (it is never freed while the device is open)."""
        if not self._scratch or self._scratch[-1][0] < private_bytes:
            per_lane = max(private_bytes, 128, self._scratch[-1][0] if self._scratch else 0)
            nbytes, tmpring = pm4.tmpring_size(per_lane, self.cu_cnt, self.se_cnt,
                                               self.iface.props["max_slots_scratch_cu"])  # fmt: skip
            self._scratch.append((per_lane, self.iface.alloc(nbytes), tmpring))
        _, a, tmpring = self._scratch[-1]
        return a.va, tmpring

    def scratch_region(self) -> Region:
        va, _ = self.scratch_for(0)
        a = self._scratch[-1][1]
        return Region(va, a.size, None, self, a)

    def program_address(self, info: Any) -> int:
        return int(pm4.program_of(info).entry())

    # ---- queues ------------------------------------------------------------------------------------------------------

    def hw_queue(self, queue: str) -> tuple[QueueDesc, Region]:
        """The KFD queue behind ``queue`` and its put counter (created on first use)."""
        if (q := self.hw_queues.get(queue)) is None:
            if queue not in self.queues:
                raise RuntimeError(f"{self.device} has no queue {queue}; its queues: {', '.join(self.queues)}")
            if queue.startswith("COPY") and not self.has_copy_queue:
                raise RuntimeError(f"{self.device} has no copy queue (AMD_DISABLE_SDMA=1)")
            desc = self.iface.create_queue("compute" if queue.startswith("COMPUTE") else "copy", RING_BYTES)
            q = self.hw_queues[queue] = (desc, self._word())
        return q

    def _word(self) -> Region:
        """A zeroed u64 of host memory (a queue's put counter)."""
        if self._state_used % 4096 == 0:
            self._state.append(self.alloc_region(4096))
        word = self._state[-1].sub(self._state_used % 4096, 8)
        self._state_used += 8
        word.u64()[0] = 0  # AM VRAM is not cleared between sessions: a previous session's count may lie there
        return word

    def queue_region(self, queue: str, role: str) -> Region:
        desc, put = self.hw_queue(queue)
        if role == "ring":
            return Region(desc.ring.va, desc.ring.size, view_of(desc.ring, fmt="I"), self, desc.ring)
        if role in ("wptr", "rptr"):
            va = desc.wptr_va if role == "wptr" else desc.rptr_va
            return Region(va, 8, view_of(desc.gart, 8, "Q", va - desc.gart.va), self, desc.gart)
        if role == "doorbell":
            return Region(getattr(desc.doorbell, "addr", 0), 8, desc.doorbell, self)  # AM mocks: no host address
        if role == "put":
            return put
        raise RuntimeError(f"AMD queues have no {role}")

    def ring_pointers(self, queue: str) -> tuple[int, int]:
        """(put, read pointer) of ``queue`` in dwords."""
        desc, put = self.hw_queue(queue)
        unit = 1 if queue.startswith("COMPUTE") else 4
        return int(put.u64()[0]) // unit, int(view_of(desc.gart, 8, "Q", desc.rptr_va - desc.gart.va)[0]) // unit

    def transfer(self, dest: Any, src: Any, nbytes: int, touch: tuple[Any, ...] = ()) -> Any:
        """A device copy, in pieces the transfer program's SDMA packets cover."""
        piece = sdma.MAX_VARIABLE_COPY_PACKETS * int(self.encode_facts["max_copy_size"])
        st = None
        for off in range(0, max(nbytes, 1), piece):
            n = min(piece, nbytes - off)
            st = super().transfer(dest.offset(off, n) if nbytes > piece else dest,
                                  src.offset(off, n) if nbytes > piece else src, n, touch)  # fmt: skip
        if nbytes > piece:
            dest.base.stamp = st
        return st

    # ---- waiting, faults ---------------------------------------------------------------------------------------------

    def pump(self) -> None:
        """Raise a fault KFD reported while sleeping; on the mock, run its GPUs (and raise their recorded fault)."""
        if self._fault is not None:
            raise self._fault
        if self.mock is not None:
            self.mock.pump(self.iface.gpu_id)
        elif self.am_mock is not None:
            from tg.runtime.amd.am.iface import pump_mocks

            pump_mocks()
            self.iface.check_fault()  # a page fault the mock posted to the interrupt ring
            if self.am_mock.core is not None:
                self.am_mock.core.check()  # any other error of its executors or emulator

    def iface_sleep(self, ms: float, sig: Signal, value: int) -> None:
        """Spin a little, then sleep in KFD's WAIT_EVENTS (woken by the timeline's interrupt), at most 10 ms so
        waits on other signals keep polling. A fault KFD reports is raised by the next ``pump``."""
        if self.mock is None and self.am_mock is None:
            end = time.perf_counter() + SPIN_S
            while time.perf_counter() < end:
                if (sig.value & 0xFFFFFFFF) >= value:
                    return
        try:
            self.iface.sleep(int(min(ms, 10)))
        except DeviceFault as e:
            self._fault = e

    def recover(self) -> bool:
        """AM only: reset the compute and copy engines, start their rings again from the beginning, declare the pending
        epochs finished (``T_d = V_d - 1``: their results are lost) and clear the error state (hcq.md 4.4).
        Whether the device recovered."""
        if not self.am or not self.iface.recover():
            return False
        for q in self.hw_queues.values():
            q[1].u64()[0] = 0  # the new rings start empty: put = wptr = rptr = 0
        self.timeline.value = int(self.timeline_value.value) - 1
        self.error_state = self._fault = None
        return True

    def hang_detail(self) -> str:
        parts = []
        if fault := self.iface.on_hang():
            parts.append(f"{'AM' if self.am else 'KFD'} reports: {fault}.")
        if self.am:
            parts.append("recover() on the device resets its engines and makes it usable again.")
        if self.mock is not None:
            parts.append(f"Mock GPU queues: {self.mock.gpu(self.iface.gpu_id).hang_detail()}.")
        elif self.am_mock is not None and self.am_mock.core is not None:
            parts.append(f"Mock GPU queues: {self.am_mock.core.hang_detail()}.")
        return " ".join(parts)

    def measure_clock_offset(self) -> float:
        """The mock's GPU clock is the host's perf_counter (100 ticks per us): no offset."""
        return 0.0 if self.emulated else super().measure_clock_offset()

    def __repr__(self) -> str:
        return f"<AMDDevice {self.device} {self.arch} via {self.iface_name} (gpu_id {self.iface.gpu_id})>"
