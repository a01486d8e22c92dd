"""What each remote PCI command does on the server: one handler per `RemoteCmd`, in the table `HANDLERS`.

A handler gets the session and one complete request, validates every field against the session's devices, BARs,
allocations and limits *before* it touches a device, and returns its `Reply` (None for posted commands), or raises
`RequestError` (validation; the device was not touched). Any other exception is a device failure; the session turns
both into error replies (`tg.drivers.remote.session`).
"""

from __future__ import annotations

import contextlib
import hmac
import logging
import os
import struct
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

from tg.drivers.regprog import OP_EXPECT32, OP_READ, OP_READ32, decode_ops, run_ops
from tg.drivers.remote.devices import restrict_filter
from tg.drivers.remote.protocol import (
    CFG_SPACE_SIZE,
    CONTIGUOUS_MAX,
    NUM_BARS,
    PAGE_SIZE,
    SERVER_FEATURES,
    RemoteCmd,
    Request,
    decode_probe_payload,
    encode_addr_table,
    encode_paddrs,
    pack_response,
)

if TYPE_CHECKING:
    from tg.drivers.mmio import MMIOView
    from tg.drivers.pci.base import PCIDevice
    from tg.drivers.remote.session import Session

__all__ = ["HANDLERS", "Allocation", "Reply", "RequestError"]

log = logging.getLogger("tg.drivers.remote.server")

READ_OPS = frozenset({OP_READ32, OP_EXPECT32, OP_READ})


class Reply(NamedTuple):
    """Bytes to send; `fd` (if not None) travels as SCM_RIGHTS ancillary data with them and is owned by the reply."""

    data: bytes
    fd: int | None = None


class RequestError(Exception):
    """A request rejected by validation (the device was not touched); `close` ends the session after the reply."""

    def __init__(self, message: str, *, close: bool = False) -> None:
        super().__init__(message)
        self.close = close


@dataclass
class Allocation:
    """One sysmem allocation of a session: its device, view, requested size and the bytes it counts against caps."""

    dev_id: int
    view: MMIOView
    size: int
    accounted: int


# ---- session-less commands ------------------------------------------------------------------------------------------


def auth(session: Session, req: Request) -> Reply:
    token = session.server.token
    if token is None or session.authenticated:
        return Reply(pack_response())
    if not hmac.compare_digest(req.payload, token):
        session.close_delay = 0.1
        raise RequestError("authentication failed", close=True)
    session.mark_authenticated()
    log.info("%s: authenticated", session.peer)
    return Reply(pack_response())


def ping(session: Session, req: Request) -> Reply:
    return Reply(pack_response(SERVER_FEATURES))  # resp0: the optional commands this server has


def probe(session: Session, req: Request) -> Reply:
    if req.arg1 % 8:
        raise RequestError(f"PROBE payload length must be a multiple of 8, got {req.arg1}")
    if req.arg2 > 0xFFFF:
        raise RequestError(f"PROBE vendor must be 16-bit, got {req.arg2:#x}")
    if req.arg0 > 0xFF:
        raise RequestError(f"PROBE base class must be 8-bit, got {req.arg0:#x}")
    vendor, base_class = req.arg2, (req.arg0 or None)
    wanted = decode_probe_payload(req.payload)
    for mask, ids in wanted:
        if mask > 0xFFFF or any(i > 0xFFFF for i in ids):
            raise RequestError(f"PROBE device masks and ids must be 16-bit, got mask {mask:#x} ids {ids}")
    devices = restrict_filter(vendor, wanted, session.server.allow)
    found = [] if devices is None else list(session.server.provider(vendor, devices, base_class))
    lines = [f"{name}:{session.discover(factory, name)}" for factory, name in found]
    text = "\n".join(lines).encode()
    return Reply(pack_response(len(text), len(lines), text))


# ---- config space, BARs, reset --------------------------------------------------------------------------------------


def map_bar(session: Session, req: Request) -> Reply:
    # a query that touches nothing: an absent BAR answers size 0 (the PCIDevice contract) instead of an error
    if req.bar >= NUM_BARS:
        raise RequestError(f"BAR index must be 0..{NUM_BARS - 1}, got {req.bar}")
    addr, size = session.device(req.dev_id).bar_info(req.bar)
    return Reply(pack_response(addr, size))


def _cfg_device(session: Session, req: Request) -> PCIDevice:
    if req.arg1 not in (1, 2, 4):
        raise RequestError(f"config access size must be 1, 2 or 4, got {req.arg1}")
    dev = session.device(req.dev_id)
    cfg_size = int(getattr(dev, "cfg_size", CFG_SPACE_SIZE))
    if req.arg0 + req.arg1 > cfg_size:
        raise RequestError(f"config access [{req.arg0:#x}, {req.arg0 + req.arg1:#x}) is beyond {cfg_size:#x}")
    return dev


def cfg_read(session: Session, req: Request) -> Reply:
    dev = _cfg_device(session, req)
    return Reply(pack_response(dev.read_config(req.arg0, req.arg1)))


def cfg_write(session: Session, req: Request) -> Reply:
    if req.arg1 in (1, 2, 4) and req.arg2 >= 1 << (8 * req.arg1):
        raise RequestError(f"config value {req.arg2:#x} does not fit in {req.arg1} bytes")
    dev = _cfg_device(session, req)
    dev.write_config(req.arg0, req.arg2, req.arg1)
    return Reply(pack_response())


def reset(session: Session, req: Request) -> Reply:
    if session.server.deny_reset:
        raise RequestError("RESET is disabled on this server (--deny-reset)")
    session.device(req.dev_id).reset()
    return Reply(pack_response())


def resize_bar(session: Session, req: Request) -> Reply:
    dev, _ = session.check_bar(req)
    session.forget_bar(req.dev_id, req.bar)
    dev.resize_bar(req.bar)
    return Reply(pack_response())


def mmio_read(session: Session, req: Request) -> Reply:
    view = session.bar_view(req)
    return Reply(pack_response(req.arg1, 0, _read(view, req.arg0, req.arg1)))


def mmio_write(session: Session, req: Request) -> None:
    view = session.bar_view(req)
    _write(view, req.arg0, req.payload)


def mmio_batch(session: Session, req: Request, posted: bool = False) -> Reply | None:
    """A register program (`tg.drivers.regprog`): validated whole (ops, slots, bounds) before any op runs."""
    try:
        ops = decode_ops(req.payload)
    except ValueError as e:
        raise RequestError(str(e)) from None
    if posted and any(op in READ_OPS for op, *_ in ops):
        raise RequestError("MMIO_BATCH_POSTED may only write")
    _, size = session.check_bar(req)
    total = 0
    for i, (op, _, block, offset, _) in enumerate(ops):
        width = block if op == OP_READ else 4
        total += width if op in READ_OPS else 0
        if offset + width > size:
            raise RequestError(
                f"MMIO_BATCH op {i}: BAR {req.bar} access [{offset:#x}, {offset + width:#x}) is out of bounds "
                f"(size {size:#x})"
            )
    if total > session.limits.max_xfer:
        raise RequestError(f"MMIO_BATCH reads {total} bytes, over the limit of {session.limits.max_xfer} bytes")
    view = session.bar_view(Request(req.cmd, req.dev_id, req.bar, 0, 0))
    executed, data = run_ops(view, ops)
    return None if posted else Reply(pack_response(len(data), executed, data))


def mmio_batch_posted(session: Session, req: Request) -> None:
    """A register program of writes only, without a reply (a read in it drops the session, nothing applied)."""
    mmio_batch(session, req, posted=True)


# ---- system memory --------------------------------------------------------------------------------------------------


def _alloc_check(session: Session, req: Request) -> tuple[PCIDevice, int, bool]:
    size, contiguous = req.arg0, req.arg1
    limits = session.limits
    if size <= 0 or size > limits.max_alloc:
        raise RequestError(f"sysmem size must be in [1, {limits.max_alloc}], got {size}")
    if contiguous not in (0, 1):
        raise RequestError(f"contiguous flag must be 0 or 1, got {contiguous}")
    if contiguous and size > CONTIGUOUS_MAX:
        raise RequestError(f"contiguous sysmem is limited to {CONTIGUOUS_MAX} bytes, got {size}")
    accounted = -(-size // PAGE_SIZE) * PAGE_SIZE
    if session.total_alloc + accounted > limits.max_total:
        raise RequestError(
            f"session sysmem total would exceed {limits.max_total} bytes "
            f"({session.total_alloc} in use, {accounted} requested)"
        )
    return session.device(req.dev_id), accounted, bool(contiguous)


def map_sysmem(session: Session, req: Request) -> Reply:
    dev, accounted, contiguous = _alloc_check(session, req)
    view, paddrs = dev.alloc_sysmem(req.arg0, contiguous=contiguous)
    handle = session.store(Allocation(req.dev_id, view, req.arg0, accounted))
    return Reply(pack_response(8 * len(paddrs), handle, encode_paddrs(list(paddrs))))


def map_sysmem_fd(session: Session, req: Request) -> Reply:
    if session.transport != "unix":
        raise RequestError("MAP_SYSMEM_FD requires a unix socket")
    dev, accounted, contiguous = _alloc_check(session, req)
    shared = getattr(dev, "alloc_sysmem_shared", None)
    if shared is None:
        raise RequestError(f"MAP_SYSMEM_FD is not supported by device {req.dev_id} ({type(dev).__name__})")
    try:
        fd, view, paddrs = shared(accounted, contiguous=contiguous)
    except NotImplementedError as e:  # the client falls back to MAP_SYSMEM on "not supported"
        raise RequestError(f"MAP_SYSMEM_FD is not supported by device {req.dev_id}: {e}") from e
    try:
        table = encode_addr_table(_coalesce(paddrs))
        if len(table) > accounted:
            raise RequestError("address table does not fit in the shared buffer")
        view.write(0, table)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(Exception):
            dev.free_sysmem(view)
        raise
    handle = session.store(Allocation(req.dev_id, view, accounted, accounted))
    return Reply(pack_response(accounted, handle), fd)


def sysmem_read(session: Session, req: Request) -> Reply:
    alloc = session.allocation(req)
    return Reply(pack_response(req.arg1, 0, _read(alloc.view, req.arg0, req.arg1)))


def sysmem_write(session: Session, req: Request) -> None:
    alloc = session.allocation(req)
    _write(alloc.view, req.arg0, req.payload)


# ---- helpers --------------------------------------------------------------------------------------------------------


def _read(view: MMIOView, offset: int, size: int) -> bytes:
    if size == 4 and offset % 4 == 0:  # one 32-bit access for register reads
        return struct.pack("<I", view.read32(offset))
    return bytes(view.read(offset, size))


def _write(view: MMIOView, offset: int, data: bytes) -> None:
    if len(data) == 4 and offset % 4 == 0:
        view.write32(offset, struct.unpack("<I", data)[0])
    elif data:
        view.write(offset, data)


def _coalesce(paddrs: Iterable[int]) -> list[tuple[int, int]]:
    """Merge consecutive 4 KiB page addresses into (paddr, size) ranges."""
    ranges: list[tuple[int, int]] = []
    for paddr in paddrs:
        if ranges and ranges[-1][0] + ranges[-1][1] == paddr:
            ranges[-1] = (ranges[-1][0], ranges[-1][1] + PAGE_SIZE)
        else:
            ranges.append((paddr, PAGE_SIZE))
    return ranges


#: the handler of every command
HANDLERS: dict[int, Callable[[Session, Request], Reply | None]] = {
    RemoteCmd.PROBE: probe,
    RemoteCmd.MAP_BAR: map_bar,
    RemoteCmd.MAP_SYSMEM_FD: map_sysmem_fd,
    RemoteCmd.CFG_READ: cfg_read,
    RemoteCmd.CFG_WRITE: cfg_write,
    RemoteCmd.RESET: reset,
    RemoteCmd.MMIO_READ: mmio_read,
    RemoteCmd.MMIO_WRITE: mmio_write,
    RemoteCmd.MAP_SYSMEM: map_sysmem,
    RemoteCmd.SYSMEM_READ: sysmem_read,
    RemoteCmd.SYSMEM_WRITE: sysmem_write,
    RemoteCmd.RESIZE_BAR: resize_bar,
    RemoteCmd.PING: ping,
    RemoteCmd.MMIO_BATCH: mmio_batch,
    RemoteCmd.MMIO_BATCH_POSTED: mmio_batch_posted,
    RemoteCmd.AUTH: auth,
}
