"""Remote PCI client: `RemotePCIDevice`, a `PCIDevice` whose operations travel to a `tg-pci-server` over a socket.

Servers are named by the `REMOTE` environment variable (`host:port[,host:port]`, `[v6addr]:port`, `unix:/path`);
`remote_list` probes them and returns `(connection, name)` pairs. One connection per server is shared by every device
on it; a lock makes each RPC (request plus full response) atomic across threads. Environment: `REMOTE_TIMEOUT`
(connect timeout, default 3 s), `REMOTE_RPC_TIMEOUT` (per-RPC receive timeout, default 60 s), `TG_REMOTE_TOKEN` (sent
with AUTH as the first request of every connection; the same variable the server reads; `REMOTE_TOKEN` is an older
alias; without either, the token file of `tg.drivers.remote.token`: `TG_REMOTE_TOKEN_FILE` or the default file a local
server writes), `DEBUG>=1` (print traffic statistics at exit).
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import mmap
import os
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any

from tg.drivers.errors import ConnectionClosedError, RemoteError
from tg.drivers.lock import acquire_device_lock, lock_name
from tg.drivers.mmio import HostMMIO, MMIOView
from tg.drivers.pci.base import PCIDevice
from tg.drivers.regprog import ProgramResult, RegisterProgram
from tg.drivers.remote.protocol import (
    DEFAULT_PORT,
    FEATURE_MMIO_BATCH,
    MAX_TOKEN_LEN,
    PAGE_SIZE,
    RESPONSE_SIZE,
    STATUS_ERROR,
    STATUS_OK,
    RemoteCmd,
    command_name,
    decode_addr_table,
    decode_paddrs,
    encode_probe_payload,
    pack_request,
    unpack_response_header,
)
from tg.drivers.remote.token import token_from_environment

__all__ = [
    "RemoteAddress",
    "RemoteConnection",
    "RemoteMMIO",
    "RemotePCIDevice",
    "clear_connections",
    "get_connection",
    "parse_remote",
    "remote_list",
    "remote_token",
]

#: largest single transfer the client sends (servers cap MMIO/SYSMEM transfers at 64 MiB by default)
CHUNK = 16 << 20
_MAX_ERROR_MSG = 1 << 16
_MAX_PROBE_TEXT = 16 << 20
_SOCK_BUF = 64 << 20
#: servers round a MAP_SYSMEM_FD mapping up to their page size (4 KiB here, 16 KiB on macOS's TinyGPU server)
_FD_MAPPING_GRANULE = 16 << 10


def _max_mapping(size: int) -> int:
    """The largest mapping a server may announce for a MAP_SYSMEM_FD request of `size` bytes."""
    return -(-max(size, _FD_MAPPING_GRANULE) // _FD_MAPPING_GRANULE) * _FD_MAPPING_GRANULE


def _env_float(name: str, default: float) -> float:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{name} must be a number of seconds, got {raw!r}") from None
    if value <= 0:
        raise ValueError(f"{name} must be positive, got {raw!r}")
    return value


def remote_token() -> bytes | None:
    """The token clients send: `TG_REMOTE_TOKEN` (what the server reads), else the older `REMOTE_TOKEN`, else the
    token file (`TG_REMOTE_TOKEN_FILE`, or the default file a server on this machine generated), else None."""
    return token_from_environment()


@dataclass(frozen=True)
class RemoteAddress:
    """Where a server listens: TCP `host:port`, or a unix socket `path` (then `host` is empty)."""

    host: str = ""
    port: int = DEFAULT_PORT
    path: str | None = None

    @property
    def is_unix(self) -> bool:
        """True for a unix-socket server."""
        return self.path is not None

    @property
    def label(self) -> str:
        """The address as it appears in device names: `host:port`, `[v6]:port` or `unix:/path`."""
        if self.path is not None:
            return f"unix:{self.path}"
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def _parse_port(text: str, entry: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise ValueError(f"bad port {text!r} in REMOTE entry {entry!r}") from None
    if not 0 < port < 65536:
        raise ValueError(f"port must be 1..65535, got {port} in REMOTE entry {entry!r}")
    return port


def _parse_entry(entry: str) -> RemoteAddress:
    if entry.startswith("unix:"):
        path = entry[5:]
        if not path:
            raise ValueError(f"REMOTE entry {entry!r} needs a socket path after 'unix:'")
        return RemoteAddress(path=path)
    if entry.startswith("["):
        end = entry.find("]")
        if end < 0:
            raise ValueError(f"unterminated '[' in REMOTE entry {entry!r}")
        host, rest = entry[1:end], entry[end + 1 :]
        if rest and not rest.startswith(":"):
            raise ValueError(f"expected ':port' after ']' in REMOTE entry {entry!r}")
        return RemoteAddress(host, _parse_port(rest[1:], entry) if rest else DEFAULT_PORT)
    if entry.count(":") > 1:
        raise ValueError(f"IPv6 addresses in REMOTE need brackets ([addr]:port), got {entry!r}")
    host, _, port = entry.partition(":")
    if not host:
        raise ValueError(f"REMOTE entry {entry!r} has no host")
    return RemoteAddress(host, _parse_port(port, entry) if port else DEFAULT_PORT)


def parse_remote(spec: str) -> list[RemoteAddress]:
    """Parse a `REMOTE` value: comma-separated `host[:port]`, `[v6addr][:port]` or `unix:/path` entries.

    >>> parse_remote(" 10.0.0.5, [::1]:7000,,unix:/tmp/pci.sock")
    [RemoteAddress(host='10.0.0.5', port=6667, path=None), RemoteAddress(host='::1', port=7000, path=None), \
RemoteAddress(host='', port=6667, path='/tmp/pci.sock')]
    """
    return [_parse_entry(e.strip()) for e in spec.split(",") if e.strip()]


def _split_name(name: str) -> tuple[RemoteAddress, int]:
    """Split a device name `remote:<address>:<bus>:<idx>` into the server address and the server-side index."""
    if not name.startswith("remote:"):
        raise ValueError(f"remote device names start with 'remote:', got {name!r}")
    rest = name[len("remote:") :]
    if rest.startswith("unix:"):
        path, _, tail = rest[5:].partition(":")
        addr = RemoteAddress(path=path)
    elif rest.startswith("["):
        end = rest.find("]")
        port, _, tail = rest[end + 2 :].partition(":")
        addr = RemoteAddress(rest[1:end], _parse_port(port, name))
    else:
        host, _, tail = rest.partition(":")
        port, _, tail = tail.partition(":")
        addr = RemoteAddress(host, _parse_port(port, name))
    index = tail.rpartition(":")[2]
    if not tail or not index.isdigit():
        raise ValueError(f"remote device name {name!r} must end with ':<bus>:<index>'")
    return addr, int(index)


class _Stats:
    """Process-wide traffic counters, printed at exit when DEBUG>=1."""

    sent = 0
    received = 0
    roundtrips = 0
    start = 0.0
    registered = False

    @classmethod
    def begin(cls) -> None:
        if cls.registered or int(os.environ.get("DEBUG", "0") or 0) < 1:
            return
        cls.registered, cls.start = True, time.perf_counter()
        atexit.register(cls.report)

    @classmethod
    def report(cls) -> None:
        dt = max(time.perf_counter() - cls.start, 1e-9)
        sent, recv = cls.sent / 1e6, cls.received / 1e6
        print(
            f"remote: sent {sent:,.2f} MB ({sent / dt:,.2f} MB/s), recv {recv:,.2f} MB ({recv / dt:,.2f} MB/s), "
            f"{cls.roundtrips:,} roundtrips in {dt:.2f}s"
        )


class RemoteConnection:
    """One client socket to a server; `rpc`/`post` are atomic across threads. A timeout or protocol error breaks it."""

    def __init__(
        self, sock: socket.socket, address: RemoteAddress | None = None, *, rpc_timeout: float | None = None
    ) -> None:
        self.sock = sock
        self.address = address or RemoteAddress(host="socket")
        self.rpc_timeout = rpc_timeout if rpc_timeout is not None else _env_float("REMOTE_RPC_TIMEOUT", 60.0)
        self.is_unix = sock.family == socket.AF_UNIX
        self.broken: str | None = None
        self._features: int | None = None
        self._lock = threading.RLock()
        sock.settimeout(self.rpc_timeout)
        _Stats.begin()

    @classmethod
    def connect(
        cls,
        address: RemoteAddress,
        *,
        timeout: float | None = None,
        rpc_timeout: float | None = None,
        token: str | bytes | None = None,
    ) -> RemoteConnection:
        """Connect to `address` (`REMOTE_TIMEOUT` seconds by default) and authenticate with `token` (default:
        `remote_token()`)."""
        timeout = timeout if timeout is not None else _env_float("REMOTE_TIMEOUT", 3.0)
        sock: socket.socket | None = None
        try:
            if address.path is not None:
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                target: Any = address.path
            else:
                family, _, _, _, target = socket.getaddrinfo(address.host, address.port, type=socket.SOCK_STREAM)[0]
                sock = socket.socket(family, socket.SOCK_STREAM)
            sock.settimeout(timeout)
            sock.connect(target)
            if address.path is None:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            for opt in (socket.SO_SNDBUF, socket.SO_RCVBUF):
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.SOL_SOCKET, opt, _SOCK_BUF)
        except OSError as e:
            if sock is not None:
                sock.close()
            raise ConnectionError(f"cannot connect to remote PCI server {address.label}: {e}") from e
        conn = cls(sock, address, rpc_timeout=rpc_timeout)
        if token is None:
            token = remote_token()
        if token is not None:
            conn.authenticate(token)
        return conn

    @property
    def features(self) -> int:
        """The server's optional-command flags (`PING`'s `resp0`; 0 from servers older than them), asked once."""
        if self._features is None:
            self._features = self.rpc(RemoteCmd.PING)[0]
        return self._features

    def authenticate(self, token: str | bytes) -> None:
        """Send AUTH with `token` (at most 256 bytes)."""
        raw = token.encode() if isinstance(token, str) else bytes(token)
        if not 0 < len(raw) <= MAX_TOKEN_LEN:
            raise ValueError(f"remote token must be 1..{MAX_TOKEN_LEN} bytes, got {len(raw)}")
        self.rpc(RemoteCmd.AUTH, arg1=len(raw), payload=raw)

    # ---- low level ---------------------------------------------------------------------------------------------------

    def _fail(self, reason: str) -> None:
        self.broken = reason
        with contextlib.suppress(OSError):
            self.sock.close()

    def _check_usable(self) -> None:
        if self.broken is not None:
            raise ConnectionClosedError(f"Connection closed ({self.address.label}: {self.broken})")

    def _recv_exact(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(min(n - len(buf), 1 << 22))
            if not chunk:
                self._fail("server closed the connection")
                raise ConnectionClosedError(f"Connection closed by {self.address.label}")
            buf += chunk
        _Stats.received += n
        return bytes(buf)

    def _recv_header_with_fd(self) -> tuple[bytes, int | None]:
        data, fds, _, _ = socket.recv_fds(self.sock, RESPONSE_SIZE, 4)
        if not data:
            self._fail("server closed the connection")
            raise ConnectionClosedError(f"Connection closed by {self.address.label}")
        fd = fds[0] if fds else None
        for extra in fds[1:]:
            os.close(extra)
        try:
            rest = self._recv_exact(RESPONSE_SIZE - len(data)) if len(data) < RESPONSE_SIZE else b""
        except BaseException:
            if fd is not None:
                os.close(fd)
            raise
        return data + rest, fd

    def _send(self, data: bytes) -> None:
        try:
            self.sock.sendall(data)
        except TimeoutError:
            self._fail("send timed out")
            raise TimeoutError(f"sending to remote PCI server {self.address.label} timed out") from None
        except OSError as e:
            self._fail(f"send failed: {e}")
            raise ConnectionClosedError(f"Connection closed ({self.address.label}: {e})") from e
        _Stats.sent += len(data)

    def post(
        self, cmd: int, dev_id: int = 0, bar: int = 0, arg0: int = 0, arg1: int = 0, arg2: int = 0, payload: bytes = b""
    ) -> None:
        """Send a posted request (MMIO_WRITE/SYSMEM_WRITE): no response; a failure shows up on the next RPC."""
        with self._lock:
            self._check_usable()
            self._send(pack_request(cmd, dev_id, bar, arg0, arg1, arg2, payload))

    def rpc(
        self,
        cmd: int,
        dev_id: int = 0,
        bar: int = 0,
        arg0: int = 0,
        arg1: int = 0,
        arg2: int = 0,
        payload: bytes = b"",
        *,
        trailing: int | None = 0,
        max_trailing: int = 0,
        want_fd: bool = False,
        announced: bool = False,
    ) -> tuple[int, int, bytes, int | None]:
        """Send a request and wait for its response; return `(resp0, resp1, trailing_data, fd)`.

        `trailing` is the exact number of bytes expected after an OK header, or `None` for "`resp0` bytes, at most
        `max_trailing`"; with `announced`, the server's `resp0` must also equal `trailing` (reads announce their
        length). An error response raises `RemoteError`; a timeout raises `TimeoutError` and breaks the connection, as
        does any framing inconsistency (a length the server announces is never trusted beyond what was asked for).
        """
        name = command_name(cmd)
        with self._lock:
            self._check_usable()
            self._send(pack_request(cmd, dev_id, bar, arg0, arg1, arg2, payload))
            fd: int | None = None
            try:
                if want_fd:
                    header, fd = self._recv_header_with_fd()
                else:
                    header = self._recv_exact(RESPONSE_SIZE)
                status, resp0, resp1 = unpack_response_header(header)
                if status not in (STATUS_OK, STATUS_ERROR):  # e.g. an HTTP server or proxy on that port
                    if fd is not None:
                        os.close(fd)
                    self._fail(f"invalid response status {status:#04x}")
                    raise ConnectionClosedError(
                        f"Connection closed: {self.address.label} is not a remote PCI server "
                        f"(invalid response status {status:#04x} to {name}; the reply starts {header!r})"
                    )
                if status != STATUS_OK:
                    if fd is not None:
                        os.close(fd)
                        fd = None
                    if resp0 > _MAX_ERROR_MSG:
                        self._fail(f"error message of {resp0} bytes")
                        raise ConnectionClosedError(f"Connection closed: {name} error message of {resp0} bytes")
                    msg = self._recv_exact(resp0).decode("utf-8", errors="replace") if resp0 else "unknown error"
                    raise RemoteError(f"RPC failed: {msg}")
                if announced and trailing is not None and resp0 != trailing:
                    self._fail(f"{name} response announces {resp0} bytes for a {trailing}-byte request")
                    raise ConnectionClosedError(
                        f"Connection closed: {name} response announces {resp0} bytes, {trailing} were requested"
                    )
                if trailing is None:
                    if resp0 > max_trailing:
                        self._fail(f"{name} response announces {resp0} bytes")
                        raise ConnectionClosedError(f"Connection closed: {name} response of {resp0} bytes is too long")
                    trailing = resp0
                data = self._recv_exact(trailing) if trailing else b""
            except TimeoutError:
                if fd is not None:
                    os.close(fd)
                self._fail("RPC timed out")
                raise TimeoutError(
                    f"remote PCI server {self.address.label} did not answer {name} within {self.rpc_timeout}s"
                ) from None
            except OSError as e:
                if fd is not None:
                    os.close(fd)
                self._fail(f"receive failed: {e}")
                raise ConnectionClosedError(f"Connection closed ({self.address.label}: {e})") from e
            _Stats.roundtrips += 1
            return resp0, resp1, data, fd

    def close(self) -> None:
        """Close the socket (devices using this connection become unusable)."""
        with self._lock:
            if self.broken is None:
                self._fail("closed by client")

    def __repr__(self) -> str:
        return f"RemoteConnection({self.address.label}{', broken' if self.broken else ''})"


_connections: dict[RemoteAddress, RemoteConnection] = {}
_connections_lock = threading.Lock()


def get_connection(address: RemoteAddress, token: str | bytes | None = None) -> RemoteConnection:
    """The shared connection to `address`, (re)connecting when there is none or the previous one broke.

    A new connection authenticates with `token` (default: `remote_token()`).
    """
    with _connections_lock:
        conn = _connections.get(address)
        if conn is None or conn.broken is not None:
            conn = RemoteConnection.connect(address, token=token)
            _connections[address] = conn
        return conn


def clear_connections() -> None:
    """Close and forget every shared connection (tests call this between servers)."""
    with _connections_lock:
        for conn in _connections.values():
            conn.close()
        _connections.clear()


def remote_list(
    vendor: int,
    devices: Any,
    base_class: int | None = None,
    *,
    remote: str | None = None,
    token: str | bytes | None = None,
) -> list[tuple[RemoteConnection, str]]:
    """PROBE every server in `remote` (default: env `REMOTE`); return `(connection, name)` per device found.

    Names are `remote:<host>:<port>:<bus>:<index>` (`[v6]:port` and `unix:/path` for the other address forms); an empty
    server list gives `[]`. New connections authenticate with `token` (default: `remote_token()`).
    """
    groups = tuple((int(mask), tuple(int(i) for i in ids)) for mask, ids in devices)
    payload = encode_probe_payload(groups)
    out: list[tuple[RemoteConnection, str]] = []
    for address in parse_remote(os.environ.get("REMOTE", "") if remote is None else remote):
        conn = get_connection(address) if token is None else get_connection(address, token)
        _, count, text, _ = conn.rpc(
            RemoteCmd.PROBE,
            0,
            0,
            base_class or 0,
            len(payload),
            vendor,
            payload,
            trailing=None,
            max_trailing=_MAX_PROBE_TEXT,
        )
        lines = [line for line in text.decode("utf-8", errors="replace").split("\n") if line] if count else []
        if len(lines) != count:
            raise RemoteError(f"RPC failed: PROBE of {address.label} announced {count} devices and listed {len(lines)}")
        out.extend((conn, f"remote:{address.label}:{line}") for line in lines)
    return out


class RemoteMMIO(MMIOView):
    """An MMIO view whose reads and writes are RPCs: BAR accesses (MMIO_*) or sysmem accesses (SYSMEM_*).

    A read of `n` bytes is one `*_READ` RPC (split at 16 MiB); a write is one posted `*_WRITE`. 4-byte aligned element
    accesses reach the device as single 32-bit accesses on the server.
    """

    def __init__(
        self,
        dev: RemotePCIDevice,
        residx: int,
        nbytes: int,
        fmt: str = "B",
        off: int = 0,
        rd_cmd: int = RemoteCmd.MMIO_READ,
        wr_cmd: int = RemoteCmd.MMIO_WRITE,
    ) -> None:
        super().__init__(nbytes, fmt)
        self.dev, self.residx, self.off = dev, residx, off
        self.rd_cmd, self.wr_cmd = rd_cmd, wr_cmd

    def _rebase(self, off: int) -> None:
        self.off += off

    def _read_bytes(self, off: int, n: int) -> bytes:
        out = bytearray()
        conn = self.dev.connection
        for pos in range(0, n, CHUNK):
            size = min(CHUNK, n - pos)
            _, _, data, _ = conn.rpc(
                self.rd_cmd, self.dev.dev_id, self.residx, self.off + off + pos, size, trailing=size, announced=True
            )
            out += data
        return bytes(out)

    def run_program(self, program: RegisterProgram) -> ProgramResult:
        """Run a register program on the server in one round trip (`MMIO_BATCH`); op by op on older servers."""
        conn = self.dev.connection
        if self.rd_cmd != RemoteCmd.MMIO_READ or not conn.features & FEATURE_MMIO_BATCH:
            return program.run_local(self)
        for op in program.ops:  # the same bounds as every other access of this view, checked before sending
            width = op[2] if op[0] == 5 else 4
            self._check_range(op[3], width)
        payload = program.encode(base=self.off)
        _, executed, data, _ = conn.rpc(
            RemoteCmd.MMIO_BATCH,
            self.dev.dev_id,
            self.residx,
            len(program.ops),
            len(payload),
            0,
            payload,
            trailing=None,
            max_trailing=program.read_bytes,
        )
        return program.decode(executed, data)

    def post_program(self, program: RegisterProgram) -> bool:
        """Send a writes-only register program without waiting (`MMIO_BATCH_POSTED`); False if the server is too old
        for it (the caller then writes op by op). Like every posted write, a failure shows up on the next RPC."""
        conn = self.dev.connection
        if self.rd_cmd != RemoteCmd.MMIO_READ or not conn.features & FEATURE_MMIO_BATCH:
            return False
        if program.read_bytes:
            raise ValueError("a posted register program may only write")
        for op in program.ops:
            self._check_range(op[3], 4)
        payload = program.encode(base=self.off)
        conn.post(RemoteCmd.MMIO_BATCH_POSTED, self.dev.dev_id, self.residx, len(program.ops), len(payload), 0, payload)
        return True

    def _write_bytes(self, off: int, data: bytes) -> None:
        conn = self.dev.connection
        for pos in range(0, len(data), CHUNK):
            piece = data[pos : pos + CHUNK]
            conn.post(self.wr_cmd, self.dev.dev_id, self.residx, self.off + off + pos, len(piece), 0, piece)

    def __repr__(self) -> str:
        return (
            f"RemoteMMIO({command_name(self.rd_cmd)} res={self.residx}, off={self.off:#x}, "
            f"nbytes={self.nbytes:#x}, fmt={self.fmt!r})"
        )


class RemotePCIDevice(PCIDevice):
    """A PCI device served by a remote `tg-pci-server`.

    `name` is `remote:<address>:<bus>:<index>` as returned by `remote_list`; `sock` is the connection to use (a
    `RemoteConnection` or a connected socket; `None` connects to the address in the name). Takes a client-side lock
    named after the full remote name.
    """

    def __init__(
        self, devpref: str, name: str, sock: RemoteConnection | socket.socket | None = None, *, lock: bool = True
    ) -> None:
        address, dev_id = _split_name(name)
        super().__init__(devpref, name, peer_group=address.label if address.is_unix else address.host)
        self.dev_id = dev_id
        self._sysmem_maps: dict[int, mmap.mmap] = {}
        if lock:
            # the unix socket path may contain '/', which a lock file name cannot
            self._lock = acquire_device_lock(lock_name(devpref, name.replace("/", "_")))
        try:
            if sock is None:
                self.connection = get_connection(address)
            elif isinstance(sock, socket.socket):
                self.connection = RemoteConnection(sock, address)
            else:
                self.connection = sock
        except BaseException:
            self._release_lock()
            raise

    def _rpc(self, cmd: int, bar: int = 0, arg0: int = 0, arg1: int = 0, arg2: int = 0, **kw: Any) -> tuple[int, int]:
        self._check_open()
        resp0, resp1, _, _ = self.connection.rpc(cmd, self.dev_id, bar, arg0, arg1, arg2, **kw)
        return resp0, resp1

    def read_config(self, offset: int, size: int) -> int:
        """CFG_READ of `size` (1, 2, 4) bytes at `offset`."""
        self._check_config(offset, size)
        return self._rpc(RemoteCmd.CFG_READ, 0, offset, size)[0]

    def write_config(self, offset: int, value: int, size: int) -> None:
        """CFG_WRITE of `value` as `size` bytes at `offset`."""
        self._check_config(offset, size, value)
        self._rpc(RemoteCmd.CFG_WRITE, 0, offset, size, value)

    def bar_info(self, bar: int) -> tuple[int, int]:
        """MAP_BAR: `(bus_address, size)`, cached per BAR."""
        self._check_bar_index(bar)
        if bar not in self._bar_info_cache:
            self._bar_info_cache[bar] = self._rpc(RemoteCmd.MAP_BAR, bar)
        return self._bar_info_cache[bar]

    def map_bar(self, bar: int, off: int = 0, addr: int = 0, size: int | None = None, fmt: str = "B") -> MMIOView:
        """A `RemoteMMIO` over bytes `[off, off+size)` of the BAR (bounds checked locally against `bar_info`)."""
        self._check_open()
        off, size = self._bar_window(bar, off, size, fmt)
        return RemoteMMIO(self, bar, size, fmt, off)

    def resize_bar(self, bar: int) -> None:
        """RESIZE_BAR on the server; forgets the cached `bar_info`."""
        self._check_bar_index(bar)
        self._bar_info_cache.pop(bar, None)
        self._rpc(RemoteCmd.RESIZE_BAR, bar)

    def reset(self) -> None:
        """Function-level reset on the server (RESET)."""
        self._rpc(RemoteCmd.RESET)

    def alloc_sysmem(self, size: int, vaddr: int = 0, contiguous: bool = False) -> tuple[MMIOView, list[int]]:
        """Server-side DMA memory: MAP_SYSMEM (accessed by RPC), or MAP_SYSMEM_FD (mapped locally) on unix sockets."""
        self._check_open()
        self._check_sysmem(size, contiguous)
        if self.connection.is_unix:
            try:
                return self._alloc_sysmem_fd(size, contiguous)
            except RemoteError as e:
                if "not supported" not in str(e):
                    raise
        npages = -(-size // PAGE_SIZE)
        _, handle, data, _ = self.connection.rpc(
            RemoteCmd.MAP_SYSMEM, self.dev_id, 0, size, int(contiguous), trailing=None, max_trailing=8 * npages
        )
        paddrs = decode_paddrs(data)
        if len(paddrs) != npages:
            raise RemoteError(f"RPC failed: server returned {len(paddrs)} page addresses for {npages} pages")
        if handle > 0xFFFFFFFF:  # handles travel back in the 32-bit `bar` field
            raise RemoteError(f"RPC failed: server returned sysmem handle {handle:#x}, which does not fit 32 bits")
        return RemoteMMIO(self, handle, size, "B", 0, RemoteCmd.SYSMEM_READ, RemoteCmd.SYSMEM_WRITE), paddrs

    def _alloc_sysmem_fd(self, size: int, contiguous: bool) -> tuple[MMIOView, list[int]]:
        mapped, handle, _, fd = self.connection.rpc(
            RemoteCmd.MAP_SYSMEM_FD, self.dev_id, 0, size, int(contiguous), want_fd=True
        )
        if fd is None:
            raise RemoteError("RPC failed: MAP_SYSMEM_FD response carried no file descriptor")
        try:
            # the server's numbers are checked against the request before anything is mapped or expanded
            if not size <= mapped <= _max_mapping(size):
                raise RemoteError(
                    f"RPC failed: MAP_SYSMEM_FD announced a mapping of {mapped:#x} bytes for a request of {size:#x}"
                )
            actual = os.fstat(fd).st_size
            if actual < mapped:  # touching pages past the end of the file would kill this process (SIGBUS)
                raise RemoteError(f"RPC failed: MAP_SYSMEM_FD sent a {actual:#x}-byte file for {mapped:#x} bytes")
            mm = mmap.mmap(fd, mapped, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)
        npages = -(-size // PAGE_SIZE)
        try:
            paddrs = decode_addr_table(mm[: min(mapped, 16 * (npages + 1))], size, mapped)
        except ValueError as e:
            mm.close()
            raise RemoteError(f"RPC failed: MAP_SYSMEM_FD address table: {e}") from None
        addr = ctypes.addressof(ctypes.c_char.from_buffer(mm))
        self._sysmem_maps[addr] = mm
        del handle
        return HostMMIO(addr, size, "B", owner=mm), paddrs

    def free_sysmem(self, view: MMIOView) -> None:
        """No protocol command frees memory: the server frees a session's allocations when it disconnects."""
        self._check_open()

    def __repr__(self) -> str:
        return f"<RemotePCIDevice {self.pcibus} dev_id={self.dev_id}{' closed' if self.closed else ''}>"
