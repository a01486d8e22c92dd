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
fault; ``recover`` resets the MEC and starts the compute ring again from its saved parameters.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tg.runtime.amd.am.device import AMDev
from tg.runtime.amd.am.memory import PAGE, Mapping, MemoryManager
from tg.runtime.device import DeviceUnavailable

__all__ = ["AMAllocation", "AMIface", "AMQueue", "DeviceFault", "mock_gpus"]

AMD_GPU_IDS = (0x74A1, 0x744C, 0x7480, 0x7550, 0x7551, 0x7590, 0x75A0, 0x75A8)
USB_IDS = ((0xADD1, 0x0001), (0x3801, 0x0001))
WPTR_OFFSET, RPTR_OFFSET = 56, 128
EOP_BYTES = 0x1000
IFACES = ("PCI", "USB", "MOCKPCI", "MOCKUSB")
_mock_gpus: list[Any] = []


class DeviceFault(RuntimeError):
    """The GPU reported a fault (page fault with its address, SQ error) through the interrupt ring."""


def mock_gpus() -> list[Any]:
    """The process's mock AM GPUs (``TG_MOCKGPU_COUNT`` of them, ``TG_MOCKAM_VRAM_MB`` each), created on first use;
    they outlive the devices opened on them, like boards outlive a driver session."""
    if not _mock_gpus:
        from tg.ir.helpers import TG_MOCKAM_VRAM_MB, TG_MOCKGPU_COUNT, TG_MOCKGPU_EMU
        from tg.runtime.amd.sim.am_gpu import MockAMGPU

        for i in range(int(TG_MOCKGPU_COUNT.value)):
            _mock_gpus.append(MockAMGPU(int(TG_MOCKAM_VRAM_MB.value), emulate=bool(int(TG_MOCKGPU_EMU.value)),
                                        name=f"MOCKAM GPU {i}"))  # fmt: skip
    return _mock_gpus


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
            gpu = pick(mock_gpus(), "mock AM GPU(s)")
            return gpu.pci_device("AM", f"mock:am:{index}")
        if kind == "MOCKUSB":
            from tg.drivers.usb.usbpci import USBPCIDevice

            gpu = pick(mock_gpus(), "mock AM GPU(s)")
            return USBPCIDevice("AM", gpu.usb_bridge(), f"usb:mock-am-{index}")
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
            factory, name = pick(list_devices(0x1002, ((0xFFFF, AMD_GPU_IDS),)), "AMD GPU(s) on the PCI bus")
        except RuntimeError as e:
            raise DeviceUnavailable(f"PCI+AMD: {e}") from e
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

    def free(self, a: AMAllocation) -> None:
        """Unmap and free an allocation."""
        if a.mapping.system:
            self._free_host(a)
        else:
            self.dev.mm.vfree(a.mapping)

    def _free_host(self, a: AMAllocation) -> None:
        self.dev.mm.unmap_range(a.va, a.size)
        MemoryManager.free_va(a.va)
        self.pci.free_sysmem(a.sysmem)

    def map(self, a: AMAllocation, gpu_id: int | None = None) -> None:
        """Make an allocation reachable by GPU ``gpu_id``: only this GPU (AM devices do not share memory in v1)."""
        if gpu_id not in (None, self.gpu_id):
            raise RuntimeError(f"{self.kind}+AMD: mapping memory into another AM GPU ({gpu_id}) is not supported")

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
        """After a fault: reset the MEC, start the compute ring again with its pointers at 0. Whether it recovered."""
        if not self.dev.recover(force=True):
            return False
        q = self.queues.get("compute")
        if q is not None and self.dev.gfx.ring is not None:
            q.gart.view.write(0, bytes(PAGE))
            self.dev.gfx.setup_ring(*self.dev.gfx.ring)
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
