"""Finding and opening the Navi31 board over USB (ASM24 bridge), native PCI or a remote PCI server, and `Bar5`."""

from __future__ import annotations

import functools
import importlib
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from amdflash import regs
from amdflash.image import BoardIdentity
from tg.drivers.regprog import ProgramResult, RegisterProgram, post_writes, run_program

log = logging.getLogger("amdflash")

TRANSPORTS = ("auto", "usb", "pci", "remote")

_Raw = tuple[str, str, int, int, Callable[[], Any]]

SIM_HINT = "; to try amdflash without hardware, add --sim"
REMOTE_UNSET = (
    "--transport remote needs the REMOTE environment variable, which is not set: "
    "REMOTE=host:port[,host:port...] names the tg-pci-server(s) to use"
)


def _drivers(module: str) -> Any:
    # imported on first use, so that listing one transport never needs another transport's dependencies
    return importlib.import_module(f"tg.drivers.{module}")


@dataclass
class Candidate:
    """One board that could be opened: its index in the listing, transport, identifier and ids."""

    index: int
    transport: str
    ident: str
    vid: int
    pid: int
    opener: Callable[[], Any] = field(repr=False, compare=False)

    def open(self) -> Any:
        """Open the device (lock prefix "AM") and return the `PCIDevice`."""
        return self.opener()

    def describe(self) -> str:
        """The `list` line: `<index> <transport> <id> (<vid>:<pid>)`."""
        return f"{self.index} {self.transport} {self.ident} ({self.vid:#06x}:{self.pid:#06x})"


def _usb_candidates() -> list[_Raw]:
    try:
        usb = _drivers("usb")
    except ImportError as exc:  # the libusb1 binding is missing: report it like a missing libusb
        raise OSError(f"USB support unavailable: {exc}{SIM_HINT}") from exc
    found: list[_Raw] = []
    usb.USB3.cache_clear()  # a fresh enumeration per command: boards get re-plugged during recovery
    try:
        for vid, pid in regs.USB_BRIDGE_IDS:
            for dev, name in usb.USB3.list_devices(vid, pid):
                found.append(("usb", name, vid, pid, functools.partial(usb.USBPCIDevice, regs.LOCK_PREFIX, dev, name)))
    except OSError as exc:
        if "libusb" not in str(exc):
            raise
        raise OSError(f"{exc}{SIM_HINT}") from exc
    return found


def _pci_candidates() -> list[_Raw]:
    pci = _drivers("pci")
    if os.environ.get("REMOTE", "").strip() and not os.environ.get("TG_DRIVERS_BACKEND", "").strip():
        # tg-drivers' list_devices would return the REMOTE servers' devices here; remote is never part of pci/auto
        entries = [(pci.LinuxPCIDevice, bus) for bus in pci.scan_bus(regs.AMD_VENDOR_ID, regs.NAVI31_DEVICES)]
    else:
        entries = pci.list_devices(regs.AMD_VENDOR_ID, regs.NAVI31_DEVICES, refresh=True)
    return [
        ("pci", name, regs.AMD_VENDOR_ID, regs.NAVI31_DEVICE_ID, functools.partial(factory, regs.LOCK_PREFIX, name))
        for factory, name in entries
    ]


def _remote_candidates() -> list[_Raw]:
    if not os.environ.get("REMOTE", "").strip():
        raise RuntimeError(REMOTE_UNSET)
    remote = _drivers("remote")
    found: list[_Raw] = []
    for sock, name in remote.remote_list(regs.AMD_VENDOR_ID, regs.NAVI31_DEVICES, None):
        found.append(
            (
                "remote",
                name,
                regs.AMD_VENDOR_ID,
                regs.NAVI31_DEVICE_ID,
                functools.partial(remote.RemotePCIDevice, regs.LOCK_PREFIX, name, sock),
            )
        )
    return found


def list_candidates(transport: str, *, warn: Callable[[str], None] | None = None) -> list[Candidate]:
    """Candidates of `transport` in order (USB first for `auto`, then native PCI), without opening any device."""
    if transport not in TRANSPORTS:
        raise ValueError(f"unknown transport {transport!r}; expected one of {', '.join(TRANSPORTS)}")
    raw: list[_Raw] = []
    if transport in ("auto", "usb"):
        try:
            raw += _usb_candidates()
        except OSError as exc:
            if transport == "usb":
                raise
            if warn is not None:
                warn(f"warning: USB transport unavailable: {exc}")
    if transport in ("auto", "pci"):
        try:
            raw += _pci_candidates()
        except _drivers("errors").NoPCIBusError as exc:
            if transport == "pci":
                raise
            if warn is not None:
                warn(f"warning: PCI transport unavailable: {exc}")
    if transport == "remote":
        raw += _remote_candidates()
    found = [Candidate(i, t, ident, vid, pid, fn) for i, (t, ident, vid, pid, fn) in enumerate(raw)]
    log.debug("%s candidates: %s", transport, [c.ident for c in found])
    return found


def open_gpu(index: int, transport: str, *, warn: Callable[[str], None] | None = None) -> Any:
    """Open candidate `index` of `transport`; RuntimeError when there is none or the index is out of range."""
    candidates = list_candidates(transport, warn=warn)
    if not candidates:
        raise RuntimeError(f"no supported {transport} AMD GPU found")
    if not 0 <= index < len(candidates):
        raise RuntimeError(f"device index {index} out of range (found {len(candidates)})")
    return candidates[index].open()


class Bar5:
    """The board's BAR5 as a register accessor: single 32-bit `read32`/`write32`, block `read`/`write`."""

    def __init__(self, pci_dev: Any):
        self.view = pci_dev.map_bar(regs.BAR5_INDEX)

    def read32(self, off: int) -> int:
        """One aligned 32-bit read."""
        return int(self.view.read32(off))

    def write32(self, off: int, value: int) -> None:
        """One aligned 32-bit write; `value` is masked to 32 bits."""
        self.view.write32(off, value & 0xFFFFFFFF)

    def read(self, off: int, n: int) -> bytes:
        """Block read (one streaming read over USB)."""
        return bytes(self.view.read(off, n))

    def write(self, off: int, data: bytes) -> None:
        """Block write."""
        self.view.write(off, bytes(data))

    def run_program(self, program: RegisterProgram) -> ProgramResult:
        """Run a register program on BAR5: one round trip over the remote transport, op by op elsewhere."""
        return run_program(self.view, program)

    def post_writes(self, writes: list[tuple[int, int]]) -> bool:
        """Send dword writes as one posted request where the transport can (remote); False: write them one by one."""
        return post_writes(self.view, writes)


def board_identity(dev: Any) -> BoardIdentity | None:
    """The board's PCI ids and subsystem ids from its config space (None when the device has no config space)."""
    read = getattr(dev, "read_config", None)
    if read is None:
        return None
    return BoardIdentity(read(0, 2), read(2, 2), read(0x2C, 2), read(0x2E, 2))
