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

Authenticated connections wait here (at most `busy_grace`) for the session slot, then get "server busy".
"""

from __future__ import annotations

import contextlib
import errno
import functools
import hmac
import logging
import selectors
import socket
import struct
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

__all__ = ["AdmissionPolicy", "Gatekeeper", "RejectionLog", "SourceTable", "peer_source"]

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


# ---- who is on the other end ----------------------------------------------------------------------------------------

_NETLINK_SOCK_DIAG, _SOCK_DIAG_BY_FAMILY, _NLM_F_REQUEST, _NLMSG_ERROR = 4, 20, 1, 2
_NO_COOKIE = 0xFFFFFFFF


def _loopback_peer_uid(sock: socket.socket) -> int | None:
    """The uid owning the client end of a loopback TCP connection (Linux sock_diag), or None if unknown.

    The kernel knows both ends of a loopback connection; asking it for the peer's socket by its exact 4-tuple is one
    netlink round trip and needs no privilege.
    """
    try:
        local, peer = sock.getsockname(), sock.getpeername()
        family = sock.family
        src = socket.inet_pton(family, peer[0]).ljust(16, b"\0")
        dst = socket.inet_pton(family, local[0]).ljust(16, b"\0")
        sockid = struct.pack("!HH16s16s", peer[1], local[1], src, dst) + struct.pack("=III", 0, _NO_COOKIE, _NO_COOKIE)
        request = struct.pack("=BBBxI", family, socket.IPPROTO_TCP, 0, 0xFFFFFFFF) + sockid
        header = struct.pack("=IHHII", 16 + len(request), _SOCK_DIAG_BY_FAMILY, _NLM_F_REQUEST, 1, 0)
        with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, _NETLINK_SOCK_DIAG) as nl:
            nl.settimeout(0.2)
            nl.send(header + request)
            reply = nl.recv(4096)
    except (OSError, ValueError, AttributeError, IndexError):
        return None
    if len(reply) < 16 + 4 + 48 + 16 + 4:
        return None
    _, kind = struct.unpack_from("=IH", reply)
    if kind == _NLMSG_ERROR:
        return None
    (uid,) = struct.unpack_from("=I", reply, 16 + 4 + 48 + 12)  # inet_diag_msg: family..retrans, id, 3 u32, uid
    return int(uid)


def peer_source(sock: socket.socket, transport: str) -> str:
    """The source a connection is accounted to: `"<ip>"`, `"<ip> uid <n>"` for loopback peers, `"unix uid <n>"`."""
    if transport == "unix":
        with contextlib.suppress(OSError, AttributeError):
            creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
            return f"unix uid {struct.unpack('3i', creds)[1]}"
        return "unix"
    try:
        ip = str(sock.getpeername()[0])
    except OSError:
        return "unknown"
    if ip.startswith("::ffff:"):
        ip = ip[7:]
    if ip.startswith("127.") or ip == "::1":
        uid = _loopback_peer_uid(sock)
        if uid is not None:
            return f"{ip} uid {uid}"
    return ip


# ---- per-source failure budget --------------------------------------------------------------------------------------


@dataclass
class _Source:
    score: float = 0.0
    updated: float = 0.0
    blocked_until: float = 0.0
    pending: int = 0


class SourceTable:
    """Failure budgets and unauthenticated-connection counts per source."""

    MAX_SOURCES = 65536

    def __init__(self, policy: AdmissionPolicy) -> None:
        self.policy = policy
        self._sources: dict[str, _Source] = {}

    def _get(self, key: str, now: float) -> _Source:
        src = self._sources.get(key)
        if src is None:
            if len(self._sources) >= self.MAX_SOURCES:
                self.prune(now)
            src = self._sources[key] = _Source(updated=now)
        elif src.score:
            src.score = max(0.0, src.score - (now - src.updated) / self.policy.failure_decay)
        src.updated = now
        return src

    def blocked_for(self, key: str, now: float) -> float:
        """Seconds the source is still refused for (0 when it may connect)."""
        src = self._sources.get(key)
        return max(0.0, src.blocked_until - now) if src is not None else 0.0

    def failure(self, key: str, now: float) -> float:
        """Record a failed authentication; return the back-off it starts (0 while within the budget)."""
        src = self._get(key, now)
        src.score += 1
        excess = src.score - self.policy.failure_budget
        if excess <= 0:
            return 0.0
        backoff = min(self.policy.backoff_max, self.policy.backoff_base * 2 ** min(int(excess) - 1, 30))
        src.blocked_until = max(src.blocked_until, now + backoff)
        return backoff

    def pending(self, key: str) -> int:
        """Unauthenticated connections currently held from the source."""
        src = self._sources.get(key)
        return src.pending if src is not None else 0

    def add_pending(self, key: str, delta: int, now: float) -> None:
        """Count a connection in (+1) or out (-1)."""
        self._get(key, now).pending += delta

    def prune(self, now: float) -> None:
        """Forget sources that hold nothing, owe nothing and are not blocked."""
        for key in [k for k, s in self._sources.items() if not s.pending and s.blocked_until <= now]:
            src = self._sources[key]
            if src.score - (now - src.updated) / self.policy.failure_decay <= 0:
                del self._sources[key]

    def __len__(self) -> int:
        return len(self._sources)


# ---- logging without floods -----------------------------------------------------------------------------------------


class RejectionLog:
    """Log the first `burst` rejections of each interval individually, then only count them; `flush` writes one
    summary line per interval (per reason and per source) for what was not logged."""

    def __init__(self, logger: logging.Logger, interval: float, burst: int) -> None:
        self.logger, self.interval, self.burst = logger, interval, burst
        self._start = time.monotonic()
        self._logged = 0
        self._reasons: dict[str, int] = {}
        self._sources: dict[str, int] = {}
        self.total = 0

    def event(self, reason: str, source: str, detail: str = "", now: float | None = None) -> None:
        """One rejected connection; `reason` is a short fixed label (e.g. "authentication failed")."""
        self.total += 1
        self.flush(now)
        if self._logged < self.burst:
            self._logged += 1
            self.logger.warning("%s: rejected: %s%s", source, reason, f" ({detail})" if detail else "")
            return
        self.logger.debug("%s: rejected: %s%s", source, reason, f" ({detail})" if detail else "")
        self._reasons[reason] = self._reasons.get(reason, 0) + 1
        if source in self._sources or len(self._sources) < 1000:
            self._sources[source] = self._sources.get(source, 0) + 1

    def flush(self, now: float | None = None, force: bool = False) -> None:
        """Write the summary of the interval if it is over (or `force`), and start a new one."""
        now = time.monotonic() if now is None else now
        if not force and now - self._start < self.interval:
            return
        if self._reasons:
            count = sum(self._reasons.values())
            reasons = ", ".join(f"{n} {r}" for r, n in sorted(self._reasons.items(), key=lambda kv: -kv[1]))
            top = sorted(self._sources.items(), key=lambda kv: -kv[1])[:5]
            sources = ", ".join(f"{s}: {n}" for s, n in top)
            more = f" and {len(self._sources) - len(top)} more" if len(self._sources) > len(top) else ""
            self.logger.warning(
                "%d more connections rejected in the last %.0fs (%s) from %s%s",
                count,
                now - self._start,
                reasons,
                sources,
                more,
            )
        self._start, self._logged = now, 0
        self._reasons.clear()
        self._sources.clear()


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
