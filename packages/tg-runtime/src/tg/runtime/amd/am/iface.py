"""AMIface: the AM driver as an interface of the AMD device (amd.md 3.6, 5.11): ``PCI+AMD``, ``USB+AMD`` and their
mocks ``MOCKPCI+AMD`` / ``MOCKUSB+AMD``.

Opening: ``PCI`` lists AMD GPUs through tg.drivers' discovery (sysfs, or the remote servers of ``REMOTE=``) and opens
one with the ``"AM"`` lock (a bound kernel driver is refused, never unbound implicitly), enlarges BAR0 when it can,
and boots it (:class:`~tg.runtime.amd.am.device.AMDev`); ``USB`` opens the ASM24 bridge (ids 0xADD1:0x0001,
0x3801:0x0001); the mocks open the process's mock AM GPUs (``TG_MOCKGPU_COUNT``, fake firmware, no settle times).

Memory (``alloc``): VRAM mapped in the GPU's page tables; ``cpu_access``/``uncached`` VRAM gets a BAR0 view; ``host``
memory is DMA-able system memory (``alloc_sysmem``) mapped ``SYSTEM|SNOOPED`` uncached. Over USB there is no
host-mapped memory: everything the host touches lives in VRAM and is reached by TLPs (``can_map_host = False``).
Queues: the ring and a 256-byte pointer page (write pointer +56, read pointer +128) in host-visible memory, an EOP
buffer for compute; the HQD/SDMA ring registers are programmed and the queue's doorbell is a u64 of BAR2.
``sleep`` polls the interrupt ring (VFIO's eventfd when present) and raises :class:`DeviceFault` when it holds a
fault; ``recover`` resets the MEC and the SDMA engine and starts both rings again from their saved parameters.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from tg.runtime.amd.am.device import AMDev
from tg.runtime.amd.am.memory import PAGE, Mapping, MemoryManager
from tg.runtime.device import DeviceUnavailable

__all__ = ["AMAllocation", "AMIface", "AMQueue", "DeviceFault", "mock_gpus", "pump_mocks"]

AMD_GPU_IDS = (0x74A1, 0x744C, 0x7480, 0x7550, 0x7551, 0x7590, 0x75A0, 0x75A8)
USB_IDS = ((0xADD1, 0x0001), (0x3801, 0x0001))
WPTR_OFFSET, RPTR_OFFSET = 56, 128
EOP_BYTES = 0x1000
IFACES = ("PCI", "USB", "MOCKPCI", "MOCKUSB")
_mock_gpus: dict[str, list[Any]] = {}  # interface (MOCKPCI, MOCKUSB) -> its mock GPUs (separate boards)


class DeviceFault(RuntimeError):
    """The GPU reported a fault (page fault with its address, SQ error) through the interrupt ring."""


def mock_gpus(kind: str = "MOCKPCI") -> list[Any]:
    """The process's mock AM GPUs of interface ``kind`` (``TG_MOCKGPU_COUNT`` of them, ``TG_MOCKAM_VRAM_MB`` each;
    ``TG_MOCKGPU_FAULT_VA`` makes GPU 0's first dispatch fault there), created on first use; the boards behind the
    mock bus and behind the mock USB bridge are different ones. They outlive the devices opened on them, like boards
    outlive a driver session."""
    if kind not in _mock_gpus:
        from tg.ir.helpers import TG_MOCKAM_VRAM_MB, TG_MOCKGPU_COUNT, TG_MOCKGPU_EMU, TG_MOCKGPU_FAULT_VA
        from tg.runtime.amd.sim.am_gpu import MockAMGPU

        fault = int(str(TG_MOCKGPU_FAULT_VA.value or "0"), 0)
        _mock_gpus[kind] = [MockAMGPU(int(TG_MOCKAM_VRAM_MB.value), emulate=bool(int(TG_MOCKGPU_EMU.value)),
                                      name=f"{kind} AM GPU {i}", fault_va=fault if i == 0 else 0)
                            for i in range(int(TG_MOCKGPU_COUNT.value))]  # fmt: skip
    return _mock_gpus[kind]


def pump_mocks() -> None:
    """Run every mock AM GPU's queues until none moves (one GPU may wait for a signal another sets)."""
    cores = [g.core for gpus in _mock_gpus.values() for g in gpus if g.core is not None]
    while any([c.step() for c in cores]):
        pass


@dataclass(eq=False)
class AMAllocation:
    """GPU memory of an AM device: ``va`` (GPU address), ``size``, ``view`` (a CPU view, or None), the page-table
    ``mapping``, and the system memory view it was carved from (host allocations)."""

    va: int
    size: int
    view: Any
    mapping: Mapping
    sysmem: Any = None
    mapped: set[int] = field(default_factory=set)
    peers: list[Any] = field(default_factory=list)  # the AMIfaces of peer GPUs this VRAM is mapped into


@dataclass
class AMQueue:
    """A created queue: ring, pointer page (``wptr_va``/``rptr_va``), the doorbell view (u64), the ring's setup."""

    kind: str
    ring: AMAllocation
    gart: AMAllocation
    wptr_va: int
    rptr_va: int
    doorbell: Any
    extras: list[AMAllocation]


def _round_up(x: int, a: int) -> int:
    return -(-x // a) * a


class AMIface:
    """One GPU driven by the AM driver through interface ``kind`` (PCI, USB, MOCKPCI, MOCKUSB); see the module
    docstring."""

    def __init__(self, kind: str, index: int) -> None:
        if kind not in IFACES:
            raise DeviceUnavailable(f"AM: unknown interface {kind!r}; available: {', '.join(IFACES)}")
        self.kind, self.index = kind, index
        self.mock = kind.startswith("MOCK")
        self.mock_gpu: Any = mock_gpus(kind)[index] if self.mock and index < len(mock_gpus(kind)) else None
        self.pci = self._open(kind, index)
        try:
            if self.mock:
                from tg.runtime.amd.sim import fw_fake

                self.dev = AMDev(self.pci, firmware=fw_fake.firmware_files(), hw_delays=False)
            else:
                self.dev = AMDev(self.pci)
        except BaseException:
            self.pci.close()
            raise
        self.usb = kind.endswith("USB")
        self.can_map_host = not self.usb and not self.mock
        self.props = self.dev.disc.props()
        v = self.dev.ip_versions
        self.ip_versions = {"GC": v["GC"], "SDMA0": v["SDMA0"], "NBIF": v["NBIO"]}
        self.gpu_id = index
        self.queues: dict[str, AMQueue] = {}
        self.closed = False

    @staticmethod
    def _open(kind: str, index: int) -> Any:
        def pick(found: list[Any], what: str) -> Any:
            if index >= len(found):
                raise DeviceUnavailable(f"{kind}+AMD:{index} does not exist ({len(found)} {what} found)")
            return found[index]

        if kind == "MOCKPCI":
            gpu = pick(mock_gpus(kind), "mock AM GPU(s)")
            return gpu.pci_device("AM", f"mock:am:{os.getpid()}.{index}")  # mocks are per process: so are locks
        if kind == "MOCKUSB":
            from tg.drivers.usb.usbpci import USBPCIDevice

            gpu = pick(mock_gpus(kind), "mock AM GPU(s)")
            return USBPCIDevice("AM", gpu.usb_bridge(), f"usb:mock-am-{os.getpid()}.{index}")
        if kind == "USB":
            from tg.drivers.usb.transport import USB3
            from tg.drivers.usb.usbpci import USBPCIDevice

            found = [d for vid, pid in USB_IDS for d in USB3.list_devices(vid, pid)]
            usb_dev, name = pick(found, "ASM24 USB bridge(s) with the custom firmware")
            return USBPCIDevice("AM", usb_dev, name)
        try:
            from tg.drivers.pci.discovery import list_devices
        except ImportError as e:
            raise DeviceUnavailable("PCI+AMD needs tg-drivers: pip install 'tg-runtime[hw]'") from e
        try:
            found = list_devices(0x1002, ((0xFFFF, AMD_GPU_IDS),))
        except RuntimeError as e:  # discovery failed (sysfs unreadable, a REMOTE= server unreachable)
            raise DeviceUnavailable(f"PCI+AMD: {e}") from e
        factory, name = pick(found, "AMD GPU(s) on the PCI bus")
        pci = factory("AM", name)
        try:
            pci.resize_bar(0)
        except (RuntimeError, OSError, NotImplementedError):
            pass  # a small BAR works too: the driver's structures stay in its visible part
        return pci

    # ---- memory ----------------------------------------------------------------------------------------------------

    def alloc(self, size: int, *, host: bool = False, uncached: bool = False, cpu_access: bool = False,
              executable: bool = False) -> AMAllocation:  # fmt: skip
        """GPU memory (see the module docstring); ``executable`` changes nothing (every page is executable)."""
        mm = self.dev.mm
        size = _round_up(max(size, 1), PAGE)
        if host and self.can_map_host:
            view, paddrs = self.pci.alloc_sysmem(size)
            va = MemoryManager.alloc_va(size)
            m = mm.map_range(va, size, [(p, PAGE) for p in paddrs], system=True, snooped=True, uncached=True)
            return AMAllocation(va, size, view, m, sysmem=view)
        m = mm.valloc(size, uncached=uncached or host)
        view = None
        if cpu_access or uncached or host:
            paddr = m.pages[0][0]
            if paddr + m.size > self.dev.vram.nbytes:
                mm.vfree(m)
                raise MemoryError(f"{self.kind}+AMD: host-visible VRAM at {paddr:#x} lies beyond the "
                                  f"{self.dev.vram.nbytes >> 20} MiB BAR0; enable resizable BAR")  # fmt: skip
            view = self.dev.vram.view(paddr, m.size)
        return AMAllocation(m.va, size, view, m)

    def register_host(self, addr: int, size: int) -> AMAllocation:
        """Map existing host memory ``[addr, addr + size)`` (page aligned) into the GPU: its pages are locked and their
        bus addresses read from ``/proc/self/pagemap`` (CAP_SYS_ADMIN). Only a local PCI device (``PCI+AMD``) can
        reach host memory this way; the mocks, USB and remote devices raise ValueError."""
        if type(self.pci).__name__ != "LinuxPCIDevice":
            raise ValueError(f"{self.kind}+AMD cannot use host memory at a raw pointer (the GPU reaches no host "
                             f"memory there); copy it into a device buffer instead")  # fmt: skip
        import ctypes

        from tg.drivers.pci.sysmem import system_paddrs

        if ctypes.CDLL(None, use_errno=True).mlock(ctypes.c_void_p(addr), ctypes.c_size_t(size)) != 0:
            raise OSError(ctypes.get_errno(), f"{self.kind}+AMD: cannot lock {size} bytes of host memory at {addr:#x} "
                          "for the GPU (raise RLIMIT_MEMLOCK or grant cap_ipc_lock)")  # fmt: skip
        paddrs = system_paddrs(addr, size)
        va = MemoryManager.alloc_va(size)
        m = self.dev.mm.map_range(va, size, [(p, PAGE) for p in paddrs], system=True, snooped=True, uncached=True)
        return AMAllocation(va, size, None, m)

    def free(self, a: AMAllocation) -> None:
        """Unmap (here and in peer GPUs) and free an allocation."""
        for peer in a.peers:
            if not peer.closed:
                peer.dev.mm.unmap_range(a.va, a.size)
        a.peers.clear()
        if a.mapping.system:
            self._free_host(a)
        else:
            self.dev.mm.vfree(a.mapping)

    def _free_host(self, a: AMAllocation) -> None:
        self.dev.mm.unmap_range(a.va, a.size)
        MemoryManager.free_va(a.va)
        if a.sysmem is not None:  # else registered host memory: the caller owns it
            self.pci.free_sysmem(a.sysmem)

    def map(self, a: AMAllocation, peer: AMIface | None = None) -> None:
        """Make an allocation of this GPU reachable by GPU ``peer`` (an AMIface of the same interface) at the same GPU
        address: its VRAM pages are mapped into the peer's page tables as system pages at their bus addresses in this
        GPU's BAR0 (peer to peer; the VRAM must lie in the BAR: large BAR). Host memory is mapped by bus address too."""
        if peer is None or peer is self or peer in a.peers:
            return
        if self.usb or peer.usb or peer.kind != self.kind:
            raise RuntimeError(f"{self.kind}+AMD:{self.index}: memory cannot be mapped into {peer.kind}+AMD:"
                               f"{peer.index} (peer to peer needs two GPUs on one PCI bus)")  # fmt: skip
        if a.mapping.system:
            pages = list(a.mapping.pages)
        else:
            bus, bar_size = self.pci.bar_info(0)
            if any(p + n > bar_size for p, n in a.mapping.pages):
                raise MemoryError(f"{self.kind}+AMD:{self.index}: VRAM at {a.mapping.pages[0][0]:#x} lies beyond the "
                                  f"{bar_size >> 20} MiB BAR0 a peer reaches; enable resizable BAR")  # fmt: skip
            pages = [(bus + p, n) for p, n in a.mapping.pages]
        peer.dev.mm.map_range(a.va, a.size, pages, system=True, snooped=a.mapping.system, uncached=True)
        a.peers.append(peer)

    # ---- queues ----------------------------------------------------------------------------------------------------

    def create_queue(self, kind: str, ring_bytes: int) -> AMQueue:
        """A ``compute`` (PM4, COMPUTE:0) or ``copy`` (SDMA, COPY:0) queue with a ring of ``ring_bytes``."""
        if kind not in ("compute", "copy"):
            raise ValueError(f"queue kind must be 'compute' or 'copy', got {kind!r}")
        if kind in self.queues:
            raise RuntimeError(f"{self.kind}+AMD: the {kind} queue exists already (one of each kind)")
        ring = self.alloc(ring_bytes, uncached=True, cpu_access=True)
        gart = self.alloc(PAGE, uncached=True, cpu_access=True)
        gart.view.write(0, bytes(PAGE))
        extras = []
        wptr, rptr = gart.va + WPTR_OFFSET, gart.va + RPTR_OFFSET
        if kind == "compute":
            eop = self.alloc(EOP_BYTES)
            extras.append(eop)
            index = self.dev.gfx.setup_ring(ring.va, ring_bytes, rptr, wptr, eop.va, EOP_BYTES)
        else:
            index = self.dev.sdma.setup_ring(ring.va, ring_bytes, rptr, wptr)
        q = AMQueue(kind, ring, gart, wptr, rptr, self.dev.doorbells.view(index * 8, 8, "Q"), extras)
        self.queues[kind] = q
        return q

    # ---- interrupts, faults, recovery ------------------------------------------------------------------------------

    def sleep(self, ms: int) -> None:
        """Wait up to ``ms`` for an interrupt (VFIO eventfd; otherwise return at once), then process the interrupt
        ring; DeviceFault when it reported a fault."""
        poller = getattr(self.pci, "irq_poller", None)
        if poller is not None and ms > 0:
            events = poller.poll(ms)
            if events:
                try:
                    import os

                    os.read(self.pci.irq_fd, 8 * len(events))
                except (OSError, TypeError):
                    pass
        self.check_fault()

    def check_fault(self) -> None:
        """Process the interrupt ring; raise DeviceFault naming what the GPU reported."""
        self.dev.ih.handle()
        if self.dev.is_err_state:
            raise DeviceFault(f"{self.kind}+AMD:{self.index}: {'; '.join(self.dev.errors) or 'error state'}")

    def on_hang(self) -> str:
        """What the interrupt ring reported (faults), or ''."""
        self.dev.ih.handle()
        return "; ".join(self.dev.errors)

    def recover(self) -> bool:
        """After a fault or hang: reset the MEC and the SDMA engine, start the compute and copy rings again with their
        pointers at 0 (what they held is dropped). Whether it recovered."""
        if not self.dev.recover(force=True):
            return False
        q = self.queues.get("compute")
        if q is not None and self.dev.gfx.ring is not None:
            q.gart.view.write(0, bytes(PAGE))
            self.dev.gfx.setup_ring(*self.dev.gfx.ring)
        q, sdma = self.queues.get("copy"), self.dev.sdma
        if q is not None and sdma.ring is not None:  # a copy queue may wait for a signal that will never come
            ring = sdma.ring
            sdma.fini_hw()
            sdma.init_hw()
            q.gart.view.write(0, bytes(PAGE))
            sdma.setup_ring(*ring)
        return True

    def close(self) -> None:
        """Stop the engines, record a clean (or faulted) end, release the device."""
        if self.closed:
            return
        self.closed = True
        try:
            self.dev.fini()
        finally:
            self.pci.close()

    def __repr__(self) -> str:
        return f"<AMIface {self.kind}:{self.index} {self.dev.name}>"
