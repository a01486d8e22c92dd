"""USBPCIDevice: the GPU behind an ASM24 USB-to-PCIe bridge, as a PCIDevice.

The bridge exposes a chain of PCI-PCI bridges on buses 0..3 and the GPU on bus 4. :func:`setup_usb_bars` programs
the bus numbers and memory windows of the bridges, resizes the GPU's BAR0 to the largest Resizable BAR size, sizes
and assigns every memory BAR and enables the GPU. BAR accesses then go through the bridge's streaming engine
(4-byte aligned only), and ``alloc_sysmem`` hands out the bridge's 512 KiB SRAM (bus address ``0x200000``), which is
never freed.
"""

from __future__ import annotations

from typing import Any

from tg.drivers.alloc import BumpAllocator
from tg.drivers.mmio import MMIOView
from tg.drivers.pci.base import PAGE_SIZE_4K, PCIDevice
from tg.drivers.usb.asm24 import SRAM_BUS_ADDR, SRAM_SIZE, SRAM_XDATA_WINDOW, USBMMIO, ASM24Controller

__all__ = ["GPU_BUS", "USBPCIDevice", "setup_usb_bars"]

GPU_BUS = 4
MEM_BASE = 0x1000_0000
PREF_MEM_BASE = 0x8_0000_0000
BAR_POOL_ALIGN = 2 << 20
REBAR_CAP_ID = 0x15


def _round_up(x: int, align: int) -> int:
    return (x + align - 1) // align * align


def _find_ext_cap(ctrl: ASM24Controller, bus: int, cap_id: int) -> int | None:
    offset, seen = 0x100, set()
    while offset and offset not in seen:
        seen.add(offset)
        header = ctrl.pcie_cfg_req(offset, bus=bus)
        assert header is not None
        if header in (0, 0xFFFFFFFF):
            return None
        if header & 0xFFFF == cap_id:
            return offset
        offset = (header >> 20) & 0xFFC
    return None


def setup_usb_bars(
    ctrl: ASM24Controller, gpu_bus: int = GPU_BUS, mem_base: int = MEM_BASE, pref_mem_base: int = PREF_MEM_BASE
) -> dict[int, tuple[int, int]]:
    """Program the bridge chain, resize BAR0, size and assign the GPU's BARs; return ``{bar: (address, size)}``."""
    if not 1 <= gpu_bus <= 255:
        raise ValueError(f"gpu_bus must be in 1..255, got {gpu_bus}")
    for bus in range(gpu_bus):
        ctrl.pcie_cfg_req(0x18, bus=bus, value=(bus + 1) << 8 | gpu_bus << 16, size=4)  # primary/secondary/subordinate
        ctrl.pcie_cfg_req(0x20, bus=bus, value=(mem_base >> 16) & 0xFFFF, size=2)
        ctrl.pcie_cfg_req(0x22, bus=bus, value=0xFFFF, size=2)
        ctrl.pcie_cfg_req(0x24, bus=bus, value=(pref_mem_base >> 16) & 0xFFFF, size=2)
        ctrl.pcie_cfg_req(0x26, bus=bus, value=0xFFFF, size=2)
        ctrl.pcie_cfg_req(0x28, bus=bus, value=pref_mem_base >> 32, size=4)
        ctrl.pcie_cfg_req(0x2C, bus=bus, value=0xFFFFFFFF, size=4)
        ctrl.pcie_cfg_req(0x04, bus=bus, value=0x7, size=1)  # IO | MEMORY | MASTER

    rebar = _find_ext_cap(ctrl, gpu_bus, REBAR_CAP_ID)
    if rebar is not None:
        cap = ctrl.pcie_cfg_req(rebar + 4, bus=gpu_bus)
        ctrl_reg = ctrl.pcie_cfg_req(rebar + 8, bus=gpu_bus)
        assert cap is not None and ctrl_reg is not None
        if cap >> 4:
            largest = (cap >> 4).bit_length() - 1
            ctrl.pcie_cfg_req(rebar + 8, bus=gpu_bus, value=(ctrl_reg & ~0x1F00) | (largest << 8), size=4)

    bars: dict[int, tuple[int, int]] = {}
    pools = {False: mem_base, True: pref_mem_base}
    k = 0
    while k < 24:
        reg = 0x10 + k
        cfg = ctrl.pcie_cfg_req(reg, bus=gpu_bus)
        assert cfg is not None
        is64 = bool(cfg & 0x4)
        if cfg & 0x1:  # I/O BAR: not assigned
            k += 4
            continue
        prefetch = bool(cfg & 0x8)
        ctrl.pcie_cfg_req(reg, bus=gpu_bus, value=0xFFFFFFFF, size=4)
        lo = (ctrl.pcie_cfg_req(reg, bus=gpu_bus) or 0) & 0xFFFFFFF0
        hi = 0
        if is64:
            ctrl.pcie_cfg_req(reg + 4, bus=gpu_bus, value=0xFFFFFFFF, size=4)
            hi = ctrl.pcie_cfg_req(reg + 4, bus=gpu_bus) or 0
        width_mask = (1 << 64) - 1 if is64 else 0xFFFFFFFF
        size = (~(((hi << 32) | lo) & ~0xF) + 1) & width_mask
        if lo or hi:
            addr = pools[prefetch]
            ctrl.pcie_cfg_req(reg, bus=gpu_bus, value=addr & 0xFFFFFFFF, size=4)
            if is64:
                ctrl.pcie_cfg_req(reg + 4, bus=gpu_bus, value=addr >> 32, size=4)
            bars[k // 4] = (addr, size)
            pools[prefetch] = addr + _round_up(size, BAR_POOL_ALIGN)
        else:  # unimplemented BAR: restore it
            ctrl.pcie_cfg_req(reg, bus=gpu_bus, value=0, size=4)
        k += 8 if is64 else 4
    ctrl.pcie_cfg_req(0x04, bus=gpu_bus, value=0x7, size=1)
    return bars


class USBPCIDevice(PCIDevice):
    """A PCIDevice for the GPU behind an ASM24 bridge.

    ``usb_dev`` is a device from ``USB3.list_devices`` (opened here with :class:`~tg.drivers.usb.transport.USB3`) or an
    already-open transport such as :class:`~tg.drivers.mock.usb.MockASM24Bridge`. ``pcibus`` is its ``"usb:B-A"``
    name. The lock is taken before the bridge is touched. ``reset`` is not available over the bridge;
    ``free_sysmem`` is a no-op (the SRAM allocator never frees).
    """

    def __init__(self, devpref: str, usb_dev: Any, pcibus: str) -> None:
        super().__init__(devpref, pcibus, peer_group=f"USBPCIDevice_{pcibus}")
        self.usb: Any = None
        self._take_lock()
        try:
            if hasattr(usb_dev, "control_write") and hasattr(usb_dev, "bulk_read"):
                self.usb = usb_dev
            else:
                from tg.drivers.usb.transport import USB3

                self.usb = USB3(usb_dev)
            self.ctrl = ASM24Controller(self.usb)
            self._bars = setup_usb_bars(self.ctrl, gpu_bus=GPU_BUS, mem_base=MEM_BASE, pref_mem_base=PREF_MEM_BASE)
        except BaseException:
            self.close()
            raise
        self.sram = BumpAllocator(size=SRAM_SIZE, wrap=False)

    def read_config(self, offset: int, size: int) -> int:
        """Config read of the GPU (bus 4) through a type-1 TLP; the access must not cross a dword."""
        self._check_config(offset, size)
        self._check_dword(offset, size)
        value = self.ctrl.pcie_cfg_req(offset, bus=GPU_BUS, dev=0, fn=0, size=size)
        assert value is not None
        return value

    def write_config(self, offset: int, value: int, size: int) -> None:
        """Config write of the GPU (bus 4); the access must not cross a dword."""
        self._check_config(offset, size, value)
        self._check_dword(offset, size)
        self.ctrl.pcie_cfg_req(offset, bus=GPU_BUS, dev=0, fn=0, value=value, size=size)

    @staticmethod
    def _check_dword(offset: int, size: int) -> None:
        if (offset & 3) + size > 4:
            raise ValueError(f"config access of {size} bytes at {offset:#x} crosses a dword (not possible over USB)")

    def bar_info(self, bar: int) -> tuple[int, int]:
        """``(bus address, size)`` as assigned by :func:`setup_usb_bars`; ``(0, 0)`` for an absent BAR."""
        self._check_bar_index(bar)
        return self._bars.get(bar, (0, 0))

    def map_bar(self, bar: int, off: int = 0, addr: int = 0, size: int | None = None, fmt: str = "B") -> MMIOView:
        """A 4-byte-aligned-only view of ``[off, off+size)`` of the BAR through the bridge; ``addr`` is ignored."""
        self._check_open()
        off, size = self._bar_window(bar, off, size, fmt)
        return USBMMIO(self.ctrl, self._bars[bar][0] + off, size, fmt, pcimem=True)

    def resize_bar(self, bar: int) -> None:
        """No-op: BAR0 was resized to its largest size during setup."""
        self._check_bar_index(bar)

    def reset(self) -> None:
        """Not available over the USB bridge."""
        raise NotImplementedError(
            "function-level reset is not available through the USB bridge; power-cycle the device (or use native PCI)"
        )

    def dma_view(self, ctrl_addr: int, size: int) -> USBMMIO:
        """A byte view of controller memory (XDATA, or the SRAM window at ``0xF000``)."""
        return USBMMIO(self.ctrl, ctrl_addr, size, "B", pcimem=False)

    def alloc_sysmem(self, size: int, vaddr: int = 0, contiguous: bool = False) -> tuple[MMIOView, list[int]]:
        """Bridge SRAM the GPU reaches at ``0x200000+off``; one bus address per 4 KiB page. Never freed."""
        self._check_open()
        self._check_sysmem(size, contiguous)
        off = self.sram.alloc(size, alignment=PAGE_SIZE_4K)
        paddrs = [SRAM_BUS_ADDR + off + PAGE_SIZE_4K * i for i in range(-(-size // PAGE_SIZE_4K))]
        return self.dma_view(SRAM_XDATA_WINDOW + off, size), paddrs

    def free_sysmem(self, view: MMIOView) -> None:
        """No-op: the SRAM bump allocator cannot free."""

    def _close(self) -> None:
        if self.usb is not None and hasattr(self.usb, "close"):
            self.usb.close()
