"""Admission of remote PCI connections: everything that happens before a client holds the session slot.

One thread (the server's accept loop) runs a selector over the listener and every connection that has not been
admitted yet. Nothing here blocks, sleeps or holds the session slot, so unauthenticated clients cannot delay the owner:

* a connection must send its AUTH frame (or, on a server without a token, a request header) within
  `Limits.first_request_timeout`; at most `AUTH frame` bytes (33 + 256) are ever buffered for it;
* a wrong token is answered at once and the connection closed `failure_delay` later, parked here (no thread);
* each source (peer IP, plus the peer's uid for loopback and unix-socket peers, so two local users are two sources)
  has a failure budget: past it, the source is refused for an exponentially growing back-off; other sources are not
  affected;
* unauthenticated connections are bounded per source and overall; at the bound the idlest unauthenticated connection
  (of the same source, or of the source holding the most) is evicted, so idle connections cannot starve a client that
  authenticates at once;
* rejections are logged individually only a few times per interval, then aggregated into one summary line.

Authenticated connections wait here (at most `busy_grace`) for the session slot, then get "server busy". Who a
source is, its budget and the rejection log live in `tg.drivers.remote.sources`.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import hmac
import logging
import selectors
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from tg.drivers.remote.protocol import (
    MAX_TOKEN_LEN,
    REQUEST_SIZE,
    RemoteCmd,
    pack_error,
    pack_response,
    unpack_request_header,
)
from tg.drivers.remote.sources import RejectionLog, SourceTable, peer_source

__all__ = ["AdmissionPolicy", "Gatekeeper"]

log = logging.getLogger("tg.drivers.remote.server")

#: the largest frame an unauthenticated client can make the server buffer: an AUTH header and its token
MAX_UNAUTHENTICATED_FRAME = REQUEST_SIZE + MAX_TOKEN_LEN


@dataclass(frozen=True)
class AdmissionPolicy:
    """Bounds on connections that have not been admitted yet (times in seconds)."""

    #: unauthenticated connections held at once, over all sources
    max_pending: int = 256
    #: unauthenticated connections held at once from one source
    max_pending_per_source: int = 64
    #: failed authentications a source may make before it is refused for a while
    failure_budget: int = 5
    #: seconds after which one failure is forgiven (the budget refills at this rate)
    failure_decay: float = 2.0
    #: first back-off once the budget is spent; it doubles with every further failure, up to `backoff_max`
    backoff_base: float = 0.5
    backoff_max: float = 30.0
    #: a connection whose AUTH failed is closed this long after the reply (parked, holding nothing)
    failure_delay: float = 0.1
    #: how long an authenticated client waits for the session slot before it is told "server busy"
    busy_grace: float = 0.5
    #: authenticated connections waiting for the slot at once (more are told "server busy" at once)
    max_waiting: int = 8
    #: rejections logged one by one per interval; the rest go into one summary line per interval
    log_burst: int = 3
    log_interval: float = 10.0

    def __post_init__(self) -> None:
        for name in ("max_pending", "max_pending_per_source", "failure_budget", "max_waiting"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        for name in ("failure_decay", "backoff_base", "backoff_max", "log_interval"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        for name in ("failure_delay", "busy_grace", "log_burst"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")


# ---- the accept loop ------------------------------------------------------------------------------------------------

_READING, _CLOSING, _WAITING = "reading", "closing", "waiting"
_LISTEN, _WAKE = "listen", "wake"


@dataclass(eq=False)
class _Pending:
    sock: socket.socket
    peer: str
    source: str
    accepted: float
    last_rx: float
    state: str = _READING
    first_rx: float | None = None
    buf: bytearray = field(default_factory=bytearray)
    need: int = REQUEST_SIZE
    deadline: float = 0.0
    #: bytes the session sends before anything else (the OK of the AUTH that admitted the connection)
    first_reply: bytes = b""


class Gatekeeper:
    """The accept loop: admits connections to `start_session(sock, peer, source, initial_bytes, first_reply)`.

    `slot_free()` says whether a session may start now; the server calls `wake()` when its session ends. `run()`
    returns once `stop` is set (call `wake()` after setting it).
    """

    MAX_ACCEPTS_PER_TURN = 8  # reads of connections already accepted are served between batches of accepts

    def __init__(
        self,
        listener: socket.socket,
        transport: str,
        *,
        token: bytes | None,
        policy: AdmissionPolicy,
        first_request_timeout: float,
        io_timeout: float,
        slot_free: Callable[[], bool],
        start_session: Callable[[socket.socket, str, str, bytes, bytes], None],
        stopping: Callable[[], bool],
    ) -> None:
        self.listener, self.transport, self.token, self.policy = listener, transport, token, policy
        self.first_request_timeout, self.io_timeout = first_request_timeout, io_timeout
        self._slot_free, self._start_session, self._stopping = slot_free, start_session, stopping
        self.sources = SourceTable(policy)
        self.rejections = RejectionLog(log, policy.log_interval, policy.log_burst)
        self._pending: dict[socket.socket, _Pending] = {}
        self._waiting: list[_Pending] = []
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_w.setblocking(False)
        self._selector = selectors.DefaultSelector()
        self._last_prune = time.monotonic()

    # ---- public --------------------------------------------------------------------------------------------------

    def wake(self) -> None:
        """Make `run` look at the slot and the stop flag now (safe from any thread and from signal handlers)."""
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")

    @property
    def pending_count(self) -> int:
        """Unauthenticated connections held (reading or closing)."""
        return len(self._pending)

    def run(self) -> None:
        """Serve until `stopping()`; closes every connection it still holds on the way out."""
        self.listener.setblocking(False)
        self._selector.register(self.listener, selectors.EVENT_READ, _LISTEN)
        self._selector.register(self._wake_r, selectors.EVENT_READ, _WAKE)
        try:
            while not self._stopping():
                now = time.monotonic()
                timeout = min(0.5, max(0.0, self._next_deadline(now) - now))
                accept = False
                for key, _ in self._selector.select(timeout):
                    if key.data is _LISTEN:
                        accept = True
                    elif key.data is _WAKE:
                        with contextlib.suppress(OSError):
                            self._wake_r.recv(4096)
                    else:
                        self._guarded(functools.partial(self._readable, key.data, time.monotonic()), key.data)
                if accept and not self._stopping():
                    self._guarded(self._accept_some)
                now = time.monotonic()
                self._guarded(functools.partial(self._expire, now))
                self._guarded(functools.partial(self._dispatch, now))
                self.rejections.flush(now)
                if now - self._last_prune > 60:
                    self.sources.prune(now)
                    self._last_prune = now
        finally:
            self.rejections.flush(force=True)
            for p in [*self._pending.values(), *self._waiting]:
                self._close(p)
            self._waiting.clear()
            self._selector.close()
            for s in (self._wake_r, self._wake_w):
                with contextlib.suppress(OSError):
                    s.close()

    def _guarded(self, step: Callable[[], None], p: _Pending | None = None) -> None:
        """Run one step of the loop; an unexpected error costs at most the connection it concerns, never the loop."""
        try:
            step()
        except Exception as e:
            log.error("admission failed%s: %s: %s", f" for {p.peer}" if p else "", type(e).__name__, e)
            if p is not None:
                self._forget(p, time.monotonic())
                self._close(p)

    # ---- accepting -----------------------------------------------------------------------------------------------

    def _accept_some(self) -> None:
        for _ in range(self.MAX_ACCEPTS_PER_TURN):
            try:
                sock, addr = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as e:
                if e.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    log.error("accept failed: %s; dropping the idlest unauthenticated connection", e)
                    self._evict_for(None, time.monotonic())
                else:
                    log.warning("accept failed: %s", e)
                return
            try:
                sock.setblocking(False)
                self._admit_new(sock, _peer_name(addr, self.transport), peer_source(sock, self.transport))
            except Exception as e:  # this connection is lost, the loop goes on
                log.error("admission of %s failed: %s: %s", _peer_name(addr, self.transport), type(e).__name__, e)
                pending = self._pending.get(sock)
                if pending is not None:
                    self._forget(pending, time.monotonic())
                _close_quietly(sock)

    def _admit_new(self, sock: socket.socket, peer: str, source: str) -> None:
        now = time.monotonic()
        blocked = self.sources.blocked_for(source, now)
        if blocked > 0:
            self._refuse(
                sock,
                source,
                "backing off",
                f"too many failed authentications from {source}; retry in {blocked:.0f}s"
                if blocked >= 1
                else f"too many failed authentications from {source}; retry in a moment",
            )
            return
        if self.sources.pending(source) >= self.policy.max_pending_per_source and not self._evict_for(source, now):
            self._refuse(sock, source, "too many connections", f"too many unauthenticated connections from {source}")
            return
        if len(self._pending) >= self.policy.max_pending and not self._evict_for(None, now):
            self._refuse(sock, source, "too many connections", "too many unauthenticated connections")
            return
        deadline = now + self.first_request_timeout
        p = _Pending(sock, peer, source, accepted=now, last_rx=now, deadline=deadline)
        self._pending[sock] = p
        self.sources.add_pending(source, +1, now)
        self._selector.register(sock, selectors.EVENT_READ, p)
        log.debug("%s: connected (source %s)", peer, source)
        self._readable(p, now)  # the request is often already there

    def _evict_for(self, source: str | None, now: float) -> bool:
        """Close the idlest unauthenticated connection of `source` (or of the source holding the most); False if none
        can go (connections already answered and closing are never evicted: that would cut their penalty short)."""
        candidates = [p for p in self._pending.values() if p.state == _READING]
        if source is not None:
            candidates = [p for p in candidates if p.source == source]
        elif candidates:
            counts: dict[str, int] = {}
            for p in candidates:
                counts[p.source] = counts.get(p.source, 0) + 1
            biggest = max(counts, key=lambda s: counts[s])
            candidates = [p for p in candidates if p.source == biggest]
        if not candidates:
            return False
        # idle first: connections that sent nothing, then the ones whose last byte is oldest
        victim = min(candidates, key=lambda p: (p.first_rx is not None, p.last_rx, p.accepted))
        self._reject(victim, "evicted", "idle before authenticating; evicted for a newer connection", now, fail=False)
        return True

    def _refuse(self, sock: socket.socket, source: str, reason: str, message: str) -> None:
        self.rejections.event(reason, source)
        with contextlib.suppress(OSError):
            sock.send(pack_error(message))
        _close_quietly(sock)

    # ---- reading the first frame ---------------------------------------------------------------------------------

    def _readable(self, p: _Pending, now: float) -> None:
        if p.state != _READING:
            return
        try:
            data = p.sock.recv(p.need - len(p.buf))
        except (BlockingIOError, InterruptedError):
            return
        except OSError as e:
            self._drop(p, f"receive failed: {e}")
            return
        if not data:
            self._drop(p, "client closed before authenticating")
            return
        p.buf += data
        p.last_rx = now
        if p.first_rx is None:
            p.first_rx = now
            p.deadline = min(p.deadline, now + self.io_timeout)
        if len(p.buf) < p.need:
            return
        if p.need == REQUEST_SIZE:
            header = unpack_request_header(bytes(p.buf))
            if self.token is None:  # nothing to check: the session reads the rest of the request itself
                self._admit(p, bytes(p.buf), b"", now)
                return
            if header.cmd != RemoteCmd.AUTH:  # not a guess: it costs the source's budget nothing
                self._reject(p, "authentication required", "authentication required", now, fail=False)
                return
            if not 0 < header.arg1 <= MAX_TOKEN_LEN:
                self._reject(p, "authentication failed", "authentication failed", now, fail=True, delay=True)
                return
            p.need = REQUEST_SIZE + header.arg1
            return
        if hmac.compare_digest(bytes(p.buf[REQUEST_SIZE:]), self.token or b""):
            log.info("%s: authenticated", p.peer)
            self._admit(p, b"", pack_response(), now)
        else:
            self._reject(p, "authentication failed", "authentication failed", now, fail=True, delay=True)

    def _admit(self, p: _Pending, initial: bytes, first_reply: bytes, now: float) -> None:
        self._forget(p, now)
        if len(self._waiting) >= self.policy.max_waiting:
            self._busy(p)
            return
        p.state, p.deadline, p.first_reply = _WAITING, now + self.policy.busy_grace, first_reply
        p.buf = bytearray(initial)
        self._waiting.append(p)
        self._dispatch(now)

    def _dispatch(self, now: float) -> None:
        while self._waiting and self._slot_free() and not self._stopping():
            p = self._waiting.pop(0)
            self._start_session(p.sock, p.peer, p.source, bytes(p.buf), p.first_reply)

    def _busy(self, p: _Pending) -> None:
        log.info("%s: rejected: server busy", p.peer)
        with contextlib.suppress(OSError):
            p.sock.send(pack_error("server busy"))
        self._close(p)

    # ---- failures and timeouts -----------------------------------------------------------------------------------

    def _reject(self, p: _Pending, reason: str, message: str, now: float, *, fail: bool, delay: bool = False) -> None:
        """Answer `message` and close (after `failure_delay` with `delay`); `fail` (a wrong token: a guess) charges
        the source's failure budget."""
        self.rejections.event(reason, p.source, p.peer, now)
        if fail:
            backoff = self.sources.failure(p.source, now)
            if backoff:
                log.debug("%s: failure budget spent; refusing it for %.1fs", p.source, backoff)
        with contextlib.suppress(OSError):
            p.sock.send(pack_error(message))
        if delay and self.policy.failure_delay > 0:
            p.state, p.deadline = _CLOSING, now + self.policy.failure_delay
            with contextlib.suppress(KeyError, ValueError):
                self._selector.unregister(p.sock)
            return
        self._forget(p, now)
        self._close(p)

    def _drop(self, p: _Pending, why: str) -> None:
        log.debug("%s: dropped: %s", p.peer, why)
        self._forget(p, time.monotonic())
        self._close(p)

    def _expire(self, now: float) -> None:
        for p in [p for p in self._pending.values() if p.deadline <= now]:
            if p.state == _CLOSING:
                self._forget(p, now)
                self._close(p)
            else:
                message = f"no complete first request within {now - p.accepted:.1f}s of connecting"
                self._reject(p, "timed out", message, now, fail=False)
        while self._waiting and self._waiting[0].deadline <= now:
            self._busy(self._waiting.pop(0))

    def _next_deadline(self, now: float) -> float:
        deadlines = [p.deadline for p in self._pending.values()]
        if self._waiting:
            deadlines.append(self._waiting[0].deadline)
        return min(deadlines, default=now + 0.5)

    def _forget(self, p: _Pending, now: float) -> None:
        if self._pending.pop(p.sock, None) is not None:
            self.sources.add_pending(p.source, -1, now)
            with contextlib.suppress(KeyError, ValueError):
                self._selector.unregister(p.sock)

    @staticmethod
    def _close(p: _Pending) -> None:
        _close_quietly(p.sock)


def _close_quietly(sock: socket.socket) -> None:
    """Close after reading what the client already sent: closing with unread input makes the kernel send a reset,
    which can destroy the error reply before the client reads it."""
    with contextlib.suppress(OSError):
        sock.setblocking(False)
        for _ in range(4):
            if not sock.recv(MAX_UNAUTHENTICATED_FRAME):
                break
    with contextlib.suppress(OSError):
        sock.close()


def _peer_name(addr: object, transport: str) -> str:
    if transport == "unix":
        return "unix-client"
    if isinstance(addr, tuple) and len(addr) >= 2:
        return f"{addr[0]}:{addr[1]}"
    return str(addr)
