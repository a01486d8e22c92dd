"""Who a remote PCI connection comes from, and what the server remembers per source.

* `peer_source`: the source a connection is accounted to: the peer's IP address, plus the peer's user for loopback
  peers (asked from the kernel: Linux sock_diag) and unix-socket peers (`SO_PEERCRED`), so two local users are two
  sources that cannot throttle each other;
* `SourceTable`: each source's failure budget (failed authentications, forgiven one every `failure_decay` seconds),
  the doubling back-off once it is spent, and the unauthenticated connections it holds;
* `RejectionLog`: rejected connections logged a few per interval, the rest summarised per reason and per source.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import struct
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tg.drivers.remote.admission import AdmissionPolicy

__all__ = ["RejectionLog", "SourceTable", "peer_source"]


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
