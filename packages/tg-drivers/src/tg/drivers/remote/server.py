"""Remote PCI server: a transport-independent session state machine plus thin TCP / unix-socket adapters.

`Session.feed(bytes)` turns request bytes into response bytes and never does I/O itself, so the whole request
validation path can be fuzzed in-process. Every offset and size is checked against the BAR, config-space and
allocation sizes *before* the device is touched; the device sees only in-bounds accesses. `RemoteServer` owns the
configuration (device provider, limits, token, allowlist) and runs the accept loop: one active session at a time,
state per session, released at disconnect, bounded time per request.
"""

from __future__ import annotations

import contextlib
import hmac
import logging
import os
import socket
import stat
import struct
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple, Protocol

from tg.drivers.regprog import OP_EXPECT32, OP_READ, OP_READ32, decode_ops, run_ops
from tg.drivers.remote.admission import AdmissionPolicy, Gatekeeper
from tg.drivers.remote.protocol import (
    CFG_SPACE_SIZE,
    CONTIGUOUS_MAX,
    DEFAULT_PORT,
    MAX_BATCH_PAYLOAD,
    MAX_PROBE_PAYLOAD,
    MAX_TOKEN_LEN,
    NUM_BARS,
    PAGE_SIZE,
    POSTED_CMDS,
    SERVER_FEATURES,
    ProtocolError,
    RemoteCmd,
    Request,
    RequestParser,
    command_name,
    decode_probe_payload,
    encode_addr_table,
    encode_paddrs,
    pack_error,
    pack_response,
)

READ_OPS = frozenset({OP_READ32, OP_EXPECT32, OP_READ})

if TYPE_CHECKING:
    from tg.drivers.mmio import MMIOView
    from tg.drivers.pci.base import PCIDevice

log = logging.getLogger("tg.drivers.remote.server")

DeviceFilter = tuple[tuple[int, tuple[int, ...]], ...]
DeviceFactory = Callable[[str, str], "PCIDevice"]


class DeviceProvider(Protocol):
    """A discovery backend `(vendor, devices, base_class) -> [(factory, name), ...]`; `factory(devpref, name)` opens."""

    def __call__(
        self, vendor: int, devices: DeviceFilter, base_class: int | None
    ) -> Sequence[tuple[DeviceFactory, str]]: ...


SERVER_DEVPREF = "SV"  # lock prefix of devices opened by the server (tinygrad's serve.py uses the same)


@dataclass(frozen=True)
class Limits:
    """Resource caps and timeouts of a server (sizes in bytes, times in seconds; `idle_timeout=0` means none)."""

    max_xfer: int = 64 << 20
    max_alloc: int = 256 << 20
    max_total: int = 1 << 30
    io_timeout: float = 30.0
    idle_timeout: float = 600.0
    #: a connection must complete its first request (its AUTH when a token is set) this soon after connecting
    first_request_timeout: float = 5.0

    def __post_init__(self) -> None:
        for name in ("max_xfer", "max_alloc", "max_total"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        for name in ("io_timeout", "first_request_timeout"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if self.idle_timeout < 0:
            raise ValueError(f"idle_timeout must be >= 0, got {self.idle_timeout}")


class Reply(NamedTuple):
    """Bytes to send; `fd` (if not None) travels as SCM_RIGHTS ancillary data with them and is owned by the reply."""

    data: bytes
    fd: int | None = None


class FeedResult(NamedTuple):
    """What `Session.feed` produced: replies to send in order, and whether to close the connection afterwards."""

    replies: list[Reply]
    close: bool


class RequestError(Exception):
    """A request rejected by validation (the device was not touched); `close` ends the session after the reply."""

    def __init__(self, message: str, *, close: bool = False) -> None:
        super().__init__(message)
        self.close = close


@dataclass
class _Allocation:
    dev_id: int
    view: MMIOView
    size: int
    accounted: int


def parse_allow(spec: str) -> tuple[int, int | None]:
    """Parse an allowlist entry `VENDOR[:DEVICE]` (hex, `0x` optional) into `(vendor, device or None)`."""
    parts = spec.strip().split(":")
    try:
        if len(parts) == 1:
            vendor, device = int(parts[0], 16), None
        elif len(parts) == 2:
            vendor, device = int(parts[0], 16), int(parts[1], 16)
        else:
            raise ValueError
    except ValueError:
        raise ValueError(f"allowlist entry must be VENDOR[:DEVICE] in hex (e.g. 1002:744c), got {spec!r}") from None
    if not 0 <= vendor <= 0xFFFF or (device is not None and not 0 <= device <= 0xFFFF):
        raise ValueError(f"allowlist ids must be 16-bit, got {spec!r}")
    return vendor, device


def _restrict_filter(
    vendor: int, devices: DeviceFilter, allow: Sequence[tuple[int, int | None]]
) -> DeviceFilter | None:
    """Intersect a PROBE filter with the allowlist; `None` when nothing of `vendor` is allowed."""
    if not allow:
        return devices
    entries = [dev for ven, dev in allow if ven == vendor]
    if not entries:
        return None
    if None in entries:
        return devices
    exact = tuple(dev for dev in entries if dev is not None and any((dev & m) in ids for m, ids in devices))
    return ((0xFFFF, exact),) if exact else None


class Session:
    """One client connection's state machine: bytes in (`feed`), replies out; all device state is per session.

    Create sessions through `RemoteServer.new_session`. `close()` releases everything the session acquired (sysmem
    allocations, BAR mappings, opened devices and their locks) and is idempotent.
    """

    #: error lines one session may log; the rest are counted and reported when it closes
    MAX_ERROR_LOGS = 20

    def __init__(
        self, server: RemoteServer, *, transport: str = "tcp", peer: str = "", authenticated: bool = False
    ) -> None:
        if transport not in ("tcp", "unix"):
            raise ValueError(f"transport must be 'tcp' or 'unix', got {transport!r}")
        self.server, self.transport, self.peer = server, transport, peer
        self.limits = server.limits
        #: True once AUTH succeeded here, when the connection was admitted with its AUTH, or without a token
        self.authenticated = authenticated or server.token is None
        self.closed = False
        #: set when `feed` stopped at its reply limit with requests still buffered (call `feed(b"")` to go on)
        self.stalled = False
        self.errors_logged = 0
        self.errors_suppressed = 0
        #: set once a feed result asked to close the connection
        self.finished = False
        #: set when the connection should linger before closing (failed authentication)
        self.close_delay = 0.0
        #: exceptions raised by the device itself (not by validation; the first 100), for diagnostics and fuzz oracles
        self.device_errors: list[BaseException] = []
        self.requests = 0
        self._discovered: list[tuple[DeviceFactory, str]] = []
        self._opened: dict[int, PCIDevice] = {}
        self._bars: dict[tuple[int, int], tuple[MMIOView, int]] = {}
        self._allocs: list[_Allocation | None] = []
        self._total_alloc = 0
        self._parser = RequestParser(self._payload_caps())

    # ---- framing -------------------------------------------------------------------------------------------------

    def _payload_caps(self) -> dict[int, int]:
        if not self.authenticated:
            return {RemoteCmd.AUTH: MAX_TOKEN_LEN}
        return {
            RemoteCmd.AUTH: MAX_TOKEN_LEN,
            RemoteCmd.PROBE: MAX_PROBE_PAYLOAD,
            RemoteCmd.MMIO_WRITE: self.limits.max_xfer,
            RemoteCmd.SYSMEM_WRITE: self.limits.max_xfer,
            RemoteCmd.MMIO_BATCH: MAX_BATCH_PAYLOAD,
            RemoteCmd.MMIO_BATCH_POSTED: MAX_BATCH_PAYLOAD,
        }

    @property
    def mid_request(self) -> bool:
        """True while a request has started to arrive but is not complete (the I/O timeout applies)."""
        return self._parser.mid_request

    def feed(self, data: bytes, reply_limit: int | None = None) -> FeedResult:
        """Consume received bytes; return the replies to send and whether to close the connection afterwards.

        With `reply_limit`, requests are handled only until the replies reach that many bytes: the rest stay buffered
        (`stalled` is set) until the next call, so a client that sends requests without reading the replies makes the
        caller stop reading, instead of making this session build every reply in memory. Once a result has said
        "close", the session is finished: further input is ignored.
        """
        if self.finished or self.closed:
            return FeedResult([], True)
        replies: list[Reply] = []
        size = 0
        self.stalled = False
        self._parser.push(data)
        while True:
            if reply_limit is not None and size >= reply_limit:
                self.stalled = True
                return FeedResult(replies, False)
            try:  # one request at a time: handling one (e.g. AUTH) may change the caps for the next
                req = self._parser.pop()
            except ProtocolError as e:
                self.finished = self._framing_failed(e, replies)
                return FeedResult(replies, True)
            if req is None:
                return FeedResult(replies, False)
            self.requests += 1
            before = len(replies)
            if self._handle(req, replies):
                self.finished = True
                return FeedResult(replies, True)
            size += sum(len(r.data) for r in replies[before:])

    def _framing_failed(self, err: ProtocolError, replies: list[Reply]) -> bool:
        header = err.header
        if header is not None and not self.authenticated and header.cmd != RemoteCmd.AUTH:
            self._error(replies, "authentication required")
        elif header is not None and header.cmd in POSTED_CMDS:
            self._log_error("%s: closing: %s", self.peer, err)  # posted: no reply is expected, drop the session
        else:
            self._error(replies, str(err))
        return True

    def _error(self, replies: list[Reply], message: str) -> None:
        self._log_error("%s: error: %s", self.peer, message)
        replies.append(Reply(pack_error(message)))

    def _log_error(self, fmt: str, *args: object) -> None:
        """Log a warning, at most `MAX_ERROR_LOGS` per session (a client can repeat a bad request forever)."""
        if self.errors_logged < self.MAX_ERROR_LOGS:
            self.errors_logged += 1
            log.warning(fmt, *args)
        else:
            self.errors_suppressed += 1
            log.debug(fmt, *args)

    # ---- dispatch ------------------------------------------------------------------------------------------------

    def _handle(self, req: Request, replies: list[Reply]) -> bool:
        """Execute one complete request, appending its reply; return True when the session must close."""
        log.debug("%s: %s", self.peer, req.describe())
        if not self.authenticated and req.cmd != RemoteCmd.AUTH:
            self._error(replies, "authentication required")
            return True
        handler = _HANDLERS.get(req.cmd)
        if handler is None:  # unreachable: the parser rejects unknown commands
            self._error(replies, f"unknown command {req.cmd}")
            return True
        posted = req.cmd in POSTED_CMDS
        try:
            reply = handler(self, req)
        except RequestError as e:
            if posted:  # the payload was consumed by the parser; never apply any of it, drop the session
                self._log_error("%s: closing after invalid %s: %s", self.peer, command_name(req.cmd), e)
                return True
            self._error(replies, str(e))
            return e.close
        except Exception as e:
            if len(self.device_errors) < 100:  # bounded: a client may repeat a failing request forever
                self.device_errors.append(e)
            if posted:
                self._log_error("%s: closing after failed %s: %r", self.peer, command_name(req.cmd), e)
                return True
            self._error(replies, f"{command_name(req.cmd)} failed: {type(e).__name__}: {e}")
            return False
        if reply is not None:
            replies.append(reply)
        return False

    def _device(self, dev_id: int) -> PCIDevice:
        if dev_id in self._opened:
            return self._opened[dev_id]
        if dev_id >= len(self._discovered):
            raise RequestError(f"device {dev_id} not probed")
        factory, name = self._discovered[dev_id]
        try:
            dev = factory(SERVER_DEVPREF, name)
        except Exception as e:
            raise RequestError(f"cannot open device {name}: {type(e).__name__}: {e}") from e
        log.info("%s: opened %s as device %d", self.peer, name, dev_id)
        self._opened[dev_id] = dev
        return dev

    def _check_bar(self, req: Request) -> tuple[PCIDevice, int]:
        if req.bar >= NUM_BARS:
            raise RequestError(f"BAR index must be 0..{NUM_BARS - 1}, got {req.bar}")
        dev = self._device(req.dev_id)
        _, size = dev.bar_info(req.bar)
        if size <= 0:
            raise RequestError(f"BAR {req.bar} of device {req.dev_id} is absent")
        return dev, size

    def _check_range(self, what: str, offset: int, size: int, limit: int) -> None:
        if size > self.limits.max_xfer:
            raise RequestError(f"transfer of {size} bytes exceeds the limit of {self.limits.max_xfer} bytes")
        if offset + size > limit:
            raise RequestError(f"{what} access [{offset:#x}, {offset + size:#x}) is out of bounds (size {limit:#x})")

    def _bar_view(self, req: Request) -> MMIOView:
        """Validate an MMIO request's BAR, offset and size; map the BAR on first use in this session."""
        dev, size = self._check_bar(req)
        self._check_range(f"BAR {req.bar}", req.arg0, req.arg1, size)
        key = (req.dev_id, req.bar)
        cached = self._bars.get(key)
        if cached is None or cached[1] != size:
            cached = (dev.map_bar(req.bar), size)
            self._bars[key] = cached
        return cached[0]

    def _allocation(self, req: Request) -> _Allocation:
        handle = req.bar
        alloc = self._allocs[handle] if handle < len(self._allocs) else None
        if alloc is None or alloc.dev_id != req.dev_id:
            raise RequestError(f"invalid sysmem handle {handle} for device {req.dev_id}")
        self._check_range(f"sysmem handle {handle}", req.arg0, req.arg1, alloc.size)
        return alloc

    # ---- commands ------------------------------------------------------------------------------------------------

    def _auth(self, req: Request) -> Reply:
        token = self.server.token
        if token is None or self.authenticated:
            return Reply(pack_response())
        if not hmac.compare_digest(req.payload, token):
            self.close_delay = 0.1
            raise RequestError("authentication failed", close=True)
        self.authenticated = True
        self._parser.max_payload = self._payload_caps()
        log.info("%s: authenticated", self.peer)
        return Reply(pack_response())

    def _ping(self, req: Request) -> Reply:
        return Reply(pack_response(SERVER_FEATURES))  # resp0: the optional commands this server has

    def _probe(self, req: Request) -> Reply:
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
        devices = _restrict_filter(vendor, wanted, self.server.allow)
        found = [] if devices is None else list(self.server.provider(vendor, devices, base_class))
        lines = []
        for factory, name in found:
            index = next((i for i, (_, n) in enumerate(self._discovered) if n == name), None)
            if index is None:
                index = len(self._discovered)
                self._discovered.append((factory, name))
            lines.append(f"{name}:{index}")
        text = "\n".join(lines).encode()
        return Reply(pack_response(len(text), len(lines), text))

    def _map_bar(self, req: Request) -> Reply:
        # a query that touches nothing: an absent BAR answers size 0 (the PCIDevice contract) instead of an error
        if req.bar >= NUM_BARS:
            raise RequestError(f"BAR index must be 0..{NUM_BARS - 1}, got {req.bar}")
        addr, size = self._device(req.dev_id).bar_info(req.bar)
        return Reply(pack_response(addr, size))

    def _cfg_check(self, req: Request) -> PCIDevice:
        if req.arg1 not in (1, 2, 4):
            raise RequestError(f"config access size must be 1, 2 or 4, got {req.arg1}")
        dev = self._device(req.dev_id)
        cfg_size = int(getattr(dev, "cfg_size", CFG_SPACE_SIZE))
        if req.arg0 + req.arg1 > cfg_size:
            raise RequestError(f"config access [{req.arg0:#x}, {req.arg0 + req.arg1:#x}) is beyond {cfg_size:#x}")
        return dev

    def _cfg_read(self, req: Request) -> Reply:
        dev = self._cfg_check(req)
        return Reply(pack_response(dev.read_config(req.arg0, req.arg1)))

    def _cfg_write(self, req: Request) -> Reply:
        if req.arg1 in (1, 2, 4) and req.arg2 >= 1 << (8 * req.arg1):
            raise RequestError(f"config value {req.arg2:#x} does not fit in {req.arg1} bytes")
        dev = self._cfg_check(req)
        dev.write_config(req.arg0, req.arg2, req.arg1)
        return Reply(pack_response())

    def _reset(self, req: Request) -> Reply:
        if self.server.deny_reset:
            raise RequestError("RESET is disabled on this server (--deny-reset)")
        self._device(req.dev_id).reset()
        return Reply(pack_response())

    def _resize_bar(self, req: Request) -> Reply:
        dev, _ = self._check_bar(req)
        self._bars.pop((req.dev_id, req.bar), None)
        dev.resize_bar(req.bar)
        return Reply(pack_response())

    def _mmio_read(self, req: Request) -> Reply:
        view = self._bar_view(req)
        return Reply(pack_response(req.arg1, 0, _read(view, req.arg0, req.arg1)))

    def _mmio_batch_posted(self, req: Request) -> None:
        """A register program of writes only, without a reply (a read in it drops the session, nothing applied)."""
        self._mmio_batch(req, posted=True)

    def _mmio_batch(self, req: Request, posted: bool = False) -> Reply | None:
        """A register program (`tg.drivers.regprog`): validated whole (ops, slots, bounds) before any op runs."""
        try:
            ops = decode_ops(req.payload)
        except ValueError as e:
            raise RequestError(str(e)) from None
        if posted and any(op in READ_OPS for op, *_ in ops):
            raise RequestError("MMIO_BATCH_POSTED may only write")
        _, size = self._check_bar(req)
        total = 0
        for i, (op, _, block, offset, _) in enumerate(ops):
            width = block if op == OP_READ else 4
            total += width if op in READ_OPS else 0
            if offset + width > size:
                raise RequestError(
                    f"MMIO_BATCH op {i}: BAR {req.bar} access [{offset:#x}, {offset + width:#x}) is out of bounds "
                    f"(size {size:#x})"
                )
        if total > self.limits.max_xfer:
            raise RequestError(f"MMIO_BATCH reads {total} bytes, over the limit of {self.limits.max_xfer} bytes")
        view = self._bar_view(Request(req.cmd, req.dev_id, req.bar, 0, 0))
        executed, data = run_ops(view, ops)
        return None if posted else Reply(pack_response(len(data), executed, data))

    def _mmio_write(self, req: Request) -> None:
        view = self._bar_view(req)
        _write(view, req.arg0, req.payload)

    def _alloc_check(self, req: Request) -> tuple[PCIDevice, int, bool]:
        size, contiguous = req.arg0, req.arg1
        if size <= 0 or size > self.limits.max_alloc:
            raise RequestError(f"sysmem size must be in [1, {self.limits.max_alloc}], got {size}")
        if contiguous not in (0, 1):
            raise RequestError(f"contiguous flag must be 0 or 1, got {contiguous}")
        if contiguous and size > CONTIGUOUS_MAX:
            raise RequestError(f"contiguous sysmem is limited to {CONTIGUOUS_MAX} bytes, got {size}")
        accounted = -(-size // PAGE_SIZE) * PAGE_SIZE
        if self._total_alloc + accounted > self.limits.max_total:
            raise RequestError(
                f"session sysmem total would exceed {self.limits.max_total} bytes "
                f"({self._total_alloc} in use, {accounted} requested)"
            )
        return self._device(req.dev_id), accounted, bool(contiguous)

    def _map_sysmem(self, req: Request) -> Reply:
        dev, accounted, contiguous = self._alloc_check(req)
        view, paddrs = dev.alloc_sysmem(req.arg0, contiguous=contiguous)
        handle = self._store(_Allocation(req.dev_id, view, req.arg0, accounted))
        return Reply(pack_response(8 * len(paddrs), handle, encode_paddrs(list(paddrs))))

    def _map_sysmem_fd(self, req: Request) -> Reply:
        if self.transport != "unix":
            raise RequestError("MAP_SYSMEM_FD requires a unix socket")
        dev, accounted, contiguous = self._alloc_check(req)
        shared = getattr(dev, "alloc_sysmem_shared", None)
        if shared is None:
            raise RequestError(f"MAP_SYSMEM_FD is not supported by device {req.dev_id} ({type(dev).__name__})")
        try:
            fd, view, paddrs = shared(accounted, contiguous=contiguous)
        except NotImplementedError as e:  # the client falls back to MAP_SYSMEM on "not supported"
            raise RequestError(f"MAP_SYSMEM_FD is not supported by device {req.dev_id}: {e}") from e
        try:
            ranges = _coalesce(paddrs)
            table = encode_addr_table(ranges)
            if len(table) > accounted:
                raise RequestError("address table does not fit in the shared buffer")
            view.write(0, table)
        except BaseException:
            os.close(fd)
            with contextlib.suppress(Exception):
                dev.free_sysmem(view)
            raise
        handle = self._store(_Allocation(req.dev_id, view, accounted, accounted))
        return Reply(pack_response(accounted, handle), fd)

    def _store(self, alloc: _Allocation) -> int:
        self._allocs.append(alloc)
        self._total_alloc += alloc.accounted
        return len(self._allocs) - 1

    def _sysmem_read(self, req: Request) -> Reply:
        alloc = self._allocation(req)
        return Reply(pack_response(req.arg1, 0, _read(alloc.view, req.arg0, req.arg1)))

    def _sysmem_write(self, req: Request) -> None:
        alloc = self._allocation(req)
        _write(alloc.view, req.arg0, req.payload)

    # ---- teardown ------------------------------------------------------------------------------------------------

    def close(self) -> None:
        """Release this session's allocations, mappings and devices (idempotent)."""
        if self.closed:
            return
        self.closed = True
        for alloc in self._allocs:
            if alloc is not None:
                with contextlib.suppress(Exception):
                    self._opened[alloc.dev_id].free_sysmem(alloc.view)
        self._allocs.clear()
        self._bars.clear()
        for dev in self._opened.values():
            if not self.server.is_shared(dev):
                try:
                    dev.close()
                except Exception as e:
                    log.warning("%s: closing %s failed: %s", self.peer, getattr(dev, "pcibus", dev), e)
        self._opened.clear()
        self._discovered.clear()


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


_HANDLERS: dict[int, Callable[[Session, Request], Reply | None]] = {
    RemoteCmd.PROBE: Session._probe,
    RemoteCmd.MAP_BAR: Session._map_bar,
    RemoteCmd.MAP_SYSMEM_FD: Session._map_sysmem_fd,
    RemoteCmd.CFG_READ: Session._cfg_read,
    RemoteCmd.CFG_WRITE: Session._cfg_write,
    RemoteCmd.RESET: Session._reset,
    RemoteCmd.MMIO_READ: Session._mmio_read,
    RemoteCmd.MMIO_WRITE: Session._mmio_write,
    RemoteCmd.MAP_SYSMEM: Session._map_sysmem,
    RemoteCmd.SYSMEM_READ: Session._sysmem_read,
    RemoteCmd.SYSMEM_WRITE: Session._sysmem_write,
    RemoteCmd.RESIZE_BAR: Session._resize_bar,
    RemoteCmd.PING: Session._ping,
    RemoteCmd.MMIO_BATCH: Session._mmio_batch,
    RemoteCmd.MMIO_BATCH_POSTED: Session._mmio_batch_posted,
    RemoteCmd.AUTH: Session._auth,
}


class _SharedFactory:
    """`factory(devpref, name)` that hands out one already-open device."""

    def __init__(self, dev: PCIDevice) -> None:
        self.dev = dev

    def __call__(self, devpref: str, name: str) -> PCIDevice:
        return self.dev


class StaticProvider:
    """A device provider over already-open devices that outlive sessions (e.g. a simulated board).

    PROBE filtering reads vendor, device and class from each device's config space. Sessions never close these
    devices; their state (BAR contents, a simulated flash) persists across client connections.
    """

    def __init__(self, devices: Sequence[PCIDevice]) -> None:
        self.devices = list(devices)

    def __call__(self, vendor: int, devices: DeviceFilter, base_class: int | None) -> list[tuple[DeviceFactory, str]]:
        """Devices matching `vendor`, one of the `(mask, ids)` groups and (if given) the base class."""
        out: list[tuple[DeviceFactory, str]] = []
        for dev in self.devices:
            if dev.read_config(0, 2) != vendor:
                continue
            device_id = dev.read_config(2, 2)
            if not any((device_id & mask) in ids for mask, ids in devices):
                continue
            if base_class is not None and dev.read_config(0x0B, 1) != base_class:
                continue
            out.append((_SharedFactory(dev), dev.pcibus))
        return out

    def is_shared(self, dev: object) -> bool:
        """True for the devices this provider serves (sessions must not close them)."""
        return any(dev is d for d in self.devices)


class RemoteServer:
    """The remote PCI server: configuration, session factory and socket accept loop.

    `provider` lists and opens devices (a discovery backend, or a `StaticProvider`). Bind with `bind_tcp` (loopback
    by default; a TCP listener needs a `token` unless `insecure=True`) or `bind_unix` (mode 0600; a token is
    optional there), then run `serve_forever()` (typically in a thread) until `shutdown()`. Connections are admitted
    by a `Gatekeeper` (`admission` bounds it); one admitted client at a time holds the session, in its own thread.
    """

    #: replies a session accumulates before sending them (one larger reply is sent on its own): while they are being
    #: sent nothing more is read from that client, so a client that never reads stalls only itself
    REPLY_BUFFER = 1 << 20

    def __init__(
        self,
        provider: DeviceProvider,
        *,
        limits: Limits | None = None,
        token: bytes | str | None = None,
        allow: Iterable[tuple[int, int | None]] = (),
        deny_reset: bool = False,
        admission: AdmissionPolicy | None = None,
        insecure: bool = False,
    ) -> None:
        self.provider = provider
        self.limits = limits or Limits()
        if isinstance(token, str):
            token = token.encode()
        if token is not None and not 0 < len(token) <= MAX_TOKEN_LEN:
            raise ValueError(f"token must be 1..{MAX_TOKEN_LEN} bytes, got {len(token)}")
        self.token: bytes | None = token
        self.allow = tuple(allow)
        self.deny_reset = deny_reset
        self.admission = admission or AdmissionPolicy()
        self.insecure = insecure
        self.sessions_served = 0
        self._listener: socket.socket | None = None
        self._transport = "tcp"
        self._unix_path: str | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._active: threading.Thread | None = None
        self._active_conn: socket.socket | None = None
        self._gate: Gatekeeper | None = None
        self.address: tuple[str, int] | str | None = None

    def is_shared(self, dev: object) -> bool:
        """Whether `dev` outlives sessions (owned by the provider rather than the session)."""
        check = getattr(self.provider, "is_shared", None)
        return bool(check(dev)) if check is not None else False

    def new_session(self, transport: str = "tcp", peer: str = "", *, authenticated: bool = False) -> Session:
        """A fresh session (used by the socket adapters, and directly by in-process tests and fuzzers)."""
        return Session(self, transport=transport, peer=peer, authenticated=authenticated)

    # ---- binding -------------------------------------------------------------------------------------------------

    def bind_tcp(self, host: str = "127.0.0.1", port: int = DEFAULT_PORT) -> tuple[str, int]:
        """Listen on TCP `host:port` (port 0 picks a free one); return the bound address.

        Refused without a token unless the server was made with `insecure=True`: on TCP, loopback included, every
        local user (and with another `host`, the network) could otherwise reach the devices.
        """
        if self.token is None and not self.insecure:
            raise ValueError(
                "a TCP listener needs a token: every user who can reach the port would get raw device access "
                "(pass insecure=True only on a machine and network you trust, or use bind_unix)"
            )
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host, port))
            sock.listen(128)
        except BaseException:
            sock.close()
            raise
        self._listener, self._transport = sock, "tcp"
        bound = sock.getsockname()
        self.address = (bound[0], bound[1])
        return self.address

    def bind_unix(self, path: str) -> str:
        """Listen on a unix socket at `path` (mode 0600; a stale socket file there is removed first)."""
        with contextlib.suppress(FileNotFoundError):
            st = os.lstat(path)
            if not stat.S_ISSOCK(st.st_mode):
                raise FileExistsError(f"{path} exists and is not a socket; refusing to replace it")
            os.unlink(path)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old_umask = os.umask(0o177)  # the socket file is born 0600: no window where others may connect
        try:
            sock.bind(path)
        except BaseException:
            sock.close()
            raise
        finally:
            os.umask(old_umask)
        os.chmod(path, 0o600)
        sock.listen(128)
        self._listener, self._transport, self._unix_path = sock, "unix", path
        self.address = path
        return path

    # ---- serving -------------------------------------------------------------------------------------------------

    def serve_forever(self) -> None:
        """Accept connections until `shutdown()`; one session at a time, extra clients get "server busy"."""
        listener = self._listener
        if listener is None:
            raise RuntimeError("bind_tcp() or bind_unix() must be called before serve_forever()")
        limits = self.limits
        first_request = min(limits.first_request_timeout, limits.idle_timeout or limits.first_request_timeout)
        gate = Gatekeeper(
            listener,
            self._transport,
            token=self.token,
            policy=self.admission,
            first_request_timeout=first_request,
            io_timeout=limits.io_timeout,
            slot_free=self._slot_free,
            start_session=self._start_session,
            stopping=self._stop.is_set,
        )
        self._gate = gate
        try:
            if self._stop.is_set():
                return
            gate.run()
        finally:
            self._gate = None
            self._close_listener()

    def _slot_free(self) -> bool:
        with self._lock:
            return self._active is None

    def _start_session(self, conn: socket.socket, peer: str, source: str, initial: bytes, first_reply: bytes) -> None:
        """Run an admitted connection's session in its own thread (called by the gatekeeper when the slot is free)."""
        thread = threading.Thread(
            target=self._run_session, args=(conn, peer, initial, first_reply), name=f"pci-session {peer}", daemon=True
        )
        with self._lock:
            self._active, self._active_conn = thread, conn
        thread.start()

    def _run_session(self, conn: socket.socket, peer: str, initial: bytes, first_reply: bytes) -> None:
        session: Session | None = None
        reason = "client closed"
        try:
            conn.setblocking(True)
            if self._transport == "tcp":
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            for opt in (socket.SO_SNDBUF, socket.SO_RCVBUF):  # large buffers for bulk BAR/sysmem transfers
                with contextlib.suppress(OSError):
                    conn.setsockopt(socket.SOL_SOCKET, opt, 64 << 20)
            session = self.new_session(self._transport, peer, authenticated=bool(first_reply))
            log.info("%s: session open", peer)
            if first_reply:
                conn.settimeout(self.limits.io_timeout)
                conn.sendall(first_reply)
            reason = self._session_loop(conn, session, initial)
        except Exception as e:
            reason = f"{type(e).__name__}: {e}"
        finally:
            if session is not None:
                session.close()
            with contextlib.suppress(OSError):
                conn.close()
            with self._lock:
                self._active, self._active_conn = None, None
            self.sessions_served += 1
            requests = session.requests if session else 0
            suppressed = session.errors_suppressed if session else 0
            more = f", {suppressed} more errors not logged" if suppressed else ""
            log.info("%s: session closed (%s, %d requests%s)", peer, reason, requests, more)
            gate = self._gate
            if gate is not None:
                gate.wake()  # hand the slot to a waiting client at once

    def _session_loop(self, conn: socket.socket, session: Session, first: bytes = b"") -> str:
        """Read requests, answer them, and never read more while replies are unsent (back-pressure)."""
        limits = self.limits
        last_rx = time.monotonic()
        request_start: float | None = None
        pending_data = first
        while not self._stop.is_set():
            if pending_data or session.stalled:
                data, pending_data = pending_data, b""
            else:
                now = time.monotonic()
                if session.mid_request:
                    request_start = request_start if request_start is not None else now
                    remaining = request_start + limits.io_timeout - now
                    if remaining <= 0:
                        return "I/O timeout mid-request"
                else:
                    request_start = None
                    remaining = limits.idle_timeout - (now - last_rx) if limits.idle_timeout else 1.0
                    if remaining <= 0:
                        return "idle timeout"
                conn.settimeout(min(remaining, 0.25))
                try:
                    data = conn.recv(1 << 20)
                except TimeoutError:
                    continue
                except OSError as e:
                    return f"receive failed: {e}"
                if not data:
                    return "client closed"
                last_rx = time.monotonic()
            before = session.requests
            replies, close = session.feed(data, self.REPLY_BUFFER)
            conn.settimeout(limits.io_timeout)
            try:
                for reply in replies:
                    if reply.fd is None:
                        conn.sendall(reply.data)
                    else:
                        socket.send_fds(conn, [reply.data], [reply.fd])
            except TimeoutError:
                return "send timed out (the client does not read its replies)"
            finally:  # fds belong to the replies: close them whether or not they were sent
                for reply in replies:
                    if reply.fd is not None:
                        os.close(reply.fd)
            if close:
                return "closed by server"
            if not session.mid_request:
                request_start = None
            elif session.requests != before:  # a new request started in this chunk: its own clock
                request_start = last_rx
        return "server shutdown"

    def request_stop(self) -> None:
        """Ask `serve_forever` and the active session to stop soon; returns at once (safe in signal handlers)."""
        self._stop.set()
        gate = self._gate
        if gate is not None:
            gate.wake()

    def shutdown(self, timeout: float = 5.0) -> None:
        """Stop accepting, end the active session and wait for it (idempotent)."""
        self.request_stop()
        with self._lock:
            active, conn = self._active, self._active_conn
        if conn is not None:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)  # wakes the session's recv at once
        if active is not None and active is not threading.current_thread():
            active.join(timeout)

    def _close_listener(self) -> None:
        if self._listener is not None:
            with contextlib.suppress(OSError):
                self._listener.close()
            self._listener = None
        if self._unix_path is not None:
            with contextlib.suppress(OSError):
                os.unlink(self._unix_path)
            self._unix_path = None


__all__ = [
    "AdmissionPolicy",
    "DeviceProvider",
    "FeedResult",
    "Limits",
    "RemoteServer",
    "Reply",
    "RequestError",
    "Session",
    "StaticProvider",
    "parse_allow",
]
