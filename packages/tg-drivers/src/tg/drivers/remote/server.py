"""The remote PCI server: configuration, the socket adapters (TCP, unix) and the thread of the active session.

The pieces, each in its own module: which devices are served (`devices`: providers, allowlist), how connections are
admitted before they hold anything (`admission`), one client's state machine (`session`) and what each command does
(`commands`). `RemoteServer` ties them together: the accept loop runs the `Gatekeeper`; the one admitted client at a
time gets a `Session` in its own thread, whose replies are sent before more of its requests are read. Every offset
and size is checked against the BAR, config-space and allocation sizes *before* the device is touched.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import stat
import threading
import time
from collections.abc import Iterable

from tg.drivers.remote.admission import AdmissionPolicy, Gatekeeper
from tg.drivers.remote.commands import Reply, RequestError
from tg.drivers.remote.devices import DeviceFactory, DeviceFilter, DeviceProvider, StaticProvider, parse_allow
from tg.drivers.remote.protocol import DEFAULT_PORT, MAX_TOKEN_LEN
from tg.drivers.remote.session import FeedResult, Limits, Session

log = logging.getLogger("tg.drivers.remote.server")


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


# the names below were all defined here before the split; they stay importable from this module
__all__ = [
    "AdmissionPolicy",
    "DeviceFactory",
    "DeviceFilter",
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
