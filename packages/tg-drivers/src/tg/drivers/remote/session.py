"""One remote PCI client's session: a transport-independent state machine, bytes in (`feed`), replies out.

`Session.feed(bytes)` frames requests (`RequestParser`), dispatches each to its command handler
(`tg.drivers.remote.commands`) and never does I/O itself, so the whole request path can be fuzzed in-process. The
session owns everything a client acquires (the devices it probed and opened with their locks, BAR mappings, sysmem
allocations) and the checks that need that state; `close()` releases all of it.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

from tg.drivers.remote.commands import HANDLERS, Allocation, Reply, RequestError
from tg.drivers.remote.devices import SERVER_DEVPREF, DeviceFactory
from tg.drivers.remote.protocol import (
    MAX_BATCH_PAYLOAD,
    MAX_PROBE_PAYLOAD,
    MAX_TOKEN_LEN,
    NUM_BARS,
    POSTED_CMDS,
    ProtocolError,
    RemoteCmd,
    Request,
    RequestParser,
    command_name,
    pack_error,
)

if TYPE_CHECKING:
    from tg.drivers.mmio import MMIOView
    from tg.drivers.pci.base import PCIDevice
    from tg.drivers.remote.server import RemoteServer

__all__ = ["FeedResult", "Limits", "Session"]

log = logging.getLogger("tg.drivers.remote.server")


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


class FeedResult(NamedTuple):
    """What `Session.feed` produced: replies to send in order, and whether to close the connection afterwards."""

    replies: list[Reply]
    close: bool


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
        #: bytes of sysmem this session holds (rounded up to pages), bounded by `Limits.max_total`
        self.total_alloc = 0
        self._discovered: list[tuple[DeviceFactory, str]] = []
        self._opened: dict[int, PCIDevice] = {}
        self._bars: dict[tuple[int, int], tuple[MMIOView, int]] = {}
        self._allocs: list[Allocation | None] = []
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

    def mark_authenticated(self) -> None:
        """AUTH succeeded: from the next request on, every command and its full payload cap are accepted."""
        self.authenticated = True
        self._parser.max_payload = self._payload_caps()

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
        handler = HANDLERS.get(req.cmd)
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

    # ---- per-session state, and the checks that need it ----------------------------------------------------------

    def discover(self, factory: DeviceFactory, name: str) -> int:
        """The session's index (`dev_id`) of a device PROBE found, adding it on first sight."""
        index = next((i for i, (_, n) in enumerate(self._discovered) if n == name), None)
        if index is None:
            index = len(self._discovered)
            self._discovered.append((factory, name))
        return index

    def device(self, dev_id: int) -> PCIDevice:
        """The probed device `dev_id`, opened (and locked) on first use in this session."""
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

    def check_bar(self, req: Request) -> tuple[PCIDevice, int]:
        """The device of a BAR request and the BAR's size; the BAR index must be valid and the BAR present."""
        if req.bar >= NUM_BARS:
            raise RequestError(f"BAR index must be 0..{NUM_BARS - 1}, got {req.bar}")
        dev = self.device(req.dev_id)
        _, size = dev.bar_info(req.bar)
        if size <= 0:
            raise RequestError(f"BAR {req.bar} of device {req.dev_id} is absent")
        return dev, size

    def check_range(self, what: str, offset: int, size: int, limit: int) -> None:
        """A transfer of `size` bytes at `offset` must fit the transfer cap and `limit`."""
        if size > self.limits.max_xfer:
            raise RequestError(f"transfer of {size} bytes exceeds the limit of {self.limits.max_xfer} bytes")
        if offset + size > limit:
            raise RequestError(f"{what} access [{offset:#x}, {offset + size:#x}) is out of bounds (size {limit:#x})")

    def bar_view(self, req: Request) -> MMIOView:
        """Validate an MMIO request's BAR, offset and size; map the BAR on first use in this session."""
        dev, size = self.check_bar(req)
        self.check_range(f"BAR {req.bar}", req.arg0, req.arg1, size)
        key = (req.dev_id, req.bar)
        cached = self._bars.get(key)
        if cached is None or cached[1] != size:
            cached = (dev.map_bar(req.bar), size)
            self._bars[key] = cached
        return cached[0]

    def forget_bar(self, dev_id: int, bar: int) -> None:
        """Drop the mapping of a BAR (its size is about to change)."""
        self._bars.pop((dev_id, bar), None)

    def allocation(self, req: Request) -> Allocation:
        """The sysmem allocation a request names (`bar` is the handle); it must be this session's, on this device."""
        handle = req.bar
        alloc = self._allocs[handle] if handle < len(self._allocs) else None
        if alloc is None or alloc.dev_id != req.dev_id:
            raise RequestError(f"invalid sysmem handle {handle} for device {req.dev_id}")
        self.check_range(f"sysmem handle {handle}", req.arg0, req.arg1, alloc.size)
        return alloc

    def store(self, alloc: Allocation) -> int:
        """Keep a new allocation; return its handle."""
        self._allocs.append(alloc)
        self.total_alloc += alloc.accounted
        return len(self._allocs) - 1

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
