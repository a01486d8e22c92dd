"""RemotePCIDevice and RemoteConnection against a scripted fake server (a socketpair and canned bytes), plus REMOTE
parsing and device-name handling (spec §6.4, §6.5, test plan §8.2 "Remote client")."""

from __future__ import annotations

import os
import socket
import struct
import threading
from collections.abc import Callable, Iterator

import pytest

from tg.drivers.errors import ConnectionClosedError, DeviceBusyError, RemoteError
from tg.drivers.remote import RemoteCmd, RemotePCIDevice, parse_remote, remote_list
from tg.drivers.remote.client import RemoteAddress, RemoteConnection, _split_name, clear_connections
from tg.drivers.remote.protocol import (
    REQUEST_SIZE,
    encode_addr_table,
    encode_paddrs,
    pack_error,
    pack_request,
    pack_response,
    payload_length,
    unpack_request_header,
)


class FakeServer:
    """The far end of a socketpair: records every request and answers with `script(request) -> bytes | None`."""

    def __init__(self, script: Callable[[bytes, bytes], bytes | None], family: int = socket.AF_INET) -> None:
        if family == socket.AF_UNIX:
            self.client, self.peer = socket.socketpair(socket.AF_UNIX)
        else:  # a real loopback TCP connection (socketpair() is AF_UNIX on Linux)
            with socket.create_server(("127.0.0.1", 0)) as listener:
                self.client = socket.create_connection(listener.getsockname())
                self.peer, _ = listener.accept()
        self.script = script
        self.requests: list[tuple[bytes, bytes]] = []
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _recv(self, n: int) -> bytes | None:
        buf = b""
        while len(buf) < n:
            chunk = self.peer.recv(n - len(buf))
            if not chunk:
                return None
            buf += chunk
        return buf

    def _run(self) -> None:
        try:
            while True:
                header = self._recv(REQUEST_SIZE)
                if header is None:
                    return
                req = unpack_request_header(header)
                payload = self._recv(payload_length(req.cmd, req.arg1) or 0) or b""
                self.requests.append((header, payload))
                answer = self.script(header, payload)
                if answer is not None:
                    self.peer.sendall(answer)
        except OSError:
            return

    def close(self) -> None:
        self.peer.close()
        self.client.close()
        self.thread.join(2)


@pytest.fixture
def fake() -> Iterator[Callable[..., FakeServer]]:
    servers: list[FakeServer] = []

    def make(script: Callable[[bytes, bytes], bytes | None], family: int = socket.AF_INET) -> FakeServer:
        servers.append(FakeServer(script, family))
        return servers[-1]

    yield make
    for s in servers:
        s.close()
    clear_connections()


def device(srv: FakeServer, name: str = "remote:10.0.0.5:6667:0000:03:00.0:3") -> RemotePCIDevice:
    return RemotePCIDevice("AM", name, RemoteConnection(srv.client, RemoteAddress("10.0.0.5"), rpc_timeout=2.0))


def zeros(header: bytes, payload: bytes) -> bytes | None:
    cmd = header[0]
    if cmd in (RemoteCmd.MMIO_WRITE, RemoteCmd.SYSMEM_WRITE):
        return None
    if cmd in (RemoteCmd.MMIO_READ, RemoteCmd.SYSMEM_READ):
        size = unpack_request_header(header).arg1
        return pack_response(size, 0, bytes(range(size % 256)) + bytes(size - size % 256))
    if cmd == RemoteCmd.MAP_BAR:
        return pack_response(0xE0000000, 0x100000)
    if cmd == RemoteCmd.CFG_READ:
        return pack_response(0x744C1002)
    return pack_response()


def test_request_bytes_for_every_command(fake: Callable[..., FakeServer]) -> None:
    srv = fake(zeros)
    dev = device(srv)
    assert dev.dev_id == 3 and dev.peer_group == "10.0.0.5"
    assert dev.read_config(0, 4) == 0x744C1002
    dev.write_config(4, 6, 2)
    assert dev.bar_info(5) == (0xE0000000, 0x100000)
    assert dev.bar_info(5) == (0xE0000000, 0x100000)  # cached: one MAP_BAR only
    bar = dev.map_bar(5, off=0x5A000, fmt="I")
    bar[0xE9] = 0x11223344  # byte offset 0x5A3A4
    assert bar[0] == 0x03020100
    dev.reset()
    dev.resize_bar(5)
    dev.bar_info(5)
    expected = [
        pack_request(RemoteCmd.CFG_READ, 3, 0, 0, 4),
        pack_request(RemoteCmd.CFG_WRITE, 3, 0, 4, 2, 6),
        pack_request(RemoteCmd.MAP_BAR, 3, 5),
        pack_request(RemoteCmd.MMIO_WRITE, 3, 5, 0x5A3A4, 4, 0, struct.pack("<I", 0x11223344)),
        pack_request(RemoteCmd.MMIO_READ, 3, 5, 0x5A000, 4),
        pack_request(RemoteCmd.RESET, 3),
        pack_request(RemoteCmd.RESIZE_BAR, 3, 5),
        pack_request(RemoteCmd.MAP_BAR, 3, 5),
    ]
    assert [h + p for h, p in srv.requests] == expected
    dev.close()


def test_local_validation_before_sending(fake: Callable[..., FakeServer]) -> None:
    srv = fake(zeros)
    dev = device(srv)
    with pytest.raises(ValueError, match="config access size"):
        dev.read_config(0, 3)
    with pytest.raises(ValueError, match="does not fit"):
        dev.write_config(0, 0x100, 1)
    with pytest.raises(ValueError, match="BAR index"):
        dev.bar_info(6)
    with pytest.raises(ValueError, match="exceeds the BAR size"):
        dev.map_bar(0, off=0x100000, size=1)
    view = dev.map_bar(0, off=0xFF000)
    assert view.nbytes == 0x1000
    with pytest.raises(IndexError):
        view.read(0xFFD, 4)
    with pytest.raises(ValueError, match="2 MiB"):
        dev.alloc_sysmem(4 << 20, contiguous=True)
    assert [h[0] for h, _ in srv.requests] == [RemoteCmd.MAP_BAR]
    dev.close()
    with pytest.raises(RuntimeError, match="closed"):
        dev.read_config(0, 4)


def test_error_responses(fake: Callable[..., FakeServer]) -> None:
    answers = iter([pack_error("oops!"), pack_response(), b"\x01" + bytes(16)])
    srv = fake(lambda h, p: next(answers))
    dev = device(srv)
    with pytest.raises(RemoteError, match=r"^RPC failed: oops!$"):
        dev.read_config(0, 4)
    dev.reset()
    with pytest.raises(RemoteError, match=r"^RPC failed: unknown error$"):
        dev.reset()  # a message-less error (TinyGPU style)
    dev.close()


def test_error_message_is_decoded_leniently(fake: Callable[..., FakeServer]) -> None:
    srv = fake(lambda h, p: struct.pack("<BQQ", 1, 3, 0) + b"a\xffb")
    dev = device(srv)
    with pytest.raises(RemoteError, match="RPC failed: a\ufffdb"):
        dev.reset()
    dev.close()


def test_posted_writes_do_not_wait(fake: Callable[..., FakeServer]) -> None:
    gate = threading.Event()

    def script(header: bytes, payload: bytes) -> bytes | None:
        if header[0] == RemoteCmd.PING:
            gate.wait(2)
            return pack_response()
        return zeros(header, payload)

    srv = fake(script)
    dev = device(srv)
    view = dev.map_bar(0)
    for i in range(20):
        view.write32(4 * i, i)  # returns at once: the fake never answers writes
    gate.set()
    dev.connection.rpc(RemoteCmd.PING)
    writes = [unpack_request_header(h) for h, _ in srv.requests if h[0] == RemoteCmd.MMIO_WRITE]
    assert [w.arg0 for w in writes] == [4 * i for i in range(20)]
    dev.close()


def test_connection_closed_mid_response(fake: Callable[..., FakeServer]) -> None:
    srv = fake(lambda h, p: None)
    dev = device(srv)

    def close_soon() -> None:
        srv.peer.sendall(pack_response()[:5])
        srv.peer.shutdown(socket.SHUT_RDWR)

    threading.Timer(0.05, close_soon).start()
    with pytest.raises(ConnectionClosedError, match="Connection closed"):
        dev.reset()
    with pytest.raises(ConnectionClosedError, match="Connection closed"):
        dev.reset()  # the connection is marked unusable
    dev.close()


def test_rpc_timeout(fake: Callable[..., FakeServer]) -> None:
    srv = fake(lambda h, p: None)
    conn = RemoteConnection(srv.client, RemoteAddress("10.0.0.5"), rpc_timeout=0.2)
    with pytest.raises(TimeoutError, match=r"did not answer PING within 0\.2s"):
        conn.rpc(RemoteCmd.PING)
    assert conn.broken
    with pytest.raises(ConnectionClosedError):
        conn.rpc(RemoteCmd.PING)


def test_overlong_trailing_data_breaks_the_connection(fake: Callable[..., FakeServer]) -> None:
    srv = fake(lambda h, p: pack_response(1 << 40, 1))
    conn = RemoteConnection(srv.client, RemoteAddress("h"), rpc_timeout=2.0)
    with pytest.raises(ConnectionClosedError, match="too long"):
        conn.rpc(RemoteCmd.PROBE, trailing=None, max_trailing=100)
    assert conn.broken


def test_a_server_that_is_not_a_pci_server_is_named(fake: Callable[..., FakeServer]) -> None:
    """Something else on the port (here an HTTP server) is reported as such, not as a giant error message."""
    srv = fake(lambda h, p: b"HTTP/1.1 400 Bad Request\r\nconnection: close\r\n\r\n")
    conn = RemoteConnection(srv.client, RemoteAddress("10.0.0.5"), rpc_timeout=2.0)
    not_pci = r"10\.0\.0\.5:6667 is not a remote PCI server .*status 0x48 to PING"
    with pytest.raises(ConnectionClosedError, match=not_pci):
        conn.rpc(RemoteCmd.PING)
    assert conn.broken


def test_sysmem_over_tcp(fake: Callable[..., FakeServer]) -> None:
    def script(header: bytes, payload: bytes) -> bytes | None:
        if header[0] == RemoteCmd.MAP_SYSMEM:
            return pack_response(24, 7, encode_paddrs([0x1000, 0x5000, 0x9000]))
        return zeros(header, payload)

    srv = fake(script)
    dev = device(srv)
    view, paddrs = dev.alloc_sysmem(9000)
    assert paddrs == [0x1000, 0x5000, 0x9000] and view.nbytes == 9000
    view.write(10, b"abc")
    assert view.read(1, 3) == b"\x00\x01\x02"  # the fake answers bytes 0, 1, 2, ... whatever the offset
    dev.free_sysmem(view)
    assert [unpack_request_header(h) for h, _ in srv.requests][1:] == [
        unpack_request_header(pack_request(RemoteCmd.SYSMEM_WRITE, 3, 7, 10, 3)),
        unpack_request_header(pack_request(RemoteCmd.SYSMEM_READ, 3, 7, 1, 3)),
    ]
    assert unpack_request_header(srv.requests[0][0]) == unpack_request_header(
        pack_request(RemoteCmd.MAP_SYSMEM, 3, 0, 9000, 0)
    )
    dev.close()


def test_sysmem_page_count_mismatch_is_an_error(fake: Callable[..., FakeServer]) -> None:
    srv = fake(lambda h, p: pack_response(8, 0, encode_paddrs([0x1000])))
    dev = device(srv)
    with pytest.raises(RemoteError, match="server returned 1 page addresses for 2 pages"):
        dev.alloc_sysmem(8192, contiguous=True)
    dev.close()


def test_map_sysmem_fd_over_unix(fake: Callable[..., FakeServer], tmp_path: object) -> None:
    fd_holder: list[int] = []

    def script(header: bytes, payload: bytes) -> bytes | None:
        if header[0] != RemoteCmd.MAP_SYSMEM_FD:
            return zeros(header, payload)
        size = unpack_request_header(header).arg0
        fd = os.memfd_create("fake-sysmem")
        os.ftruncate(fd, 16384)
        os.pwrite(fd, encode_addr_table([(0x200000, 0x2000), (0x800000, 0x2000)]), 0)
        fd_holder.append(fd)
        socket.send_fds(srv.peer, [pack_response(16384, 1)], [fd])
        del size
        return None

    srv = fake(script, socket.AF_UNIX)
    dev = RemotePCIDevice("AM", "remote:unix:/tmp/x.sock:mock:0:0", RemoteConnection(srv.client, rpc_timeout=2.0))
    view, paddrs = dev.alloc_sysmem(12000)
    assert paddrs == [0x200000, 0x201000, 0x800000]
    assert view.read(0, 16) == struct.pack("<QQ", 0x200000, 0x2000)
    view.write(100, b"shared")
    assert os.pread(fd_holder[0], 6, 100) == b"shared"  # the mapping really is the server's memory
    os.close(fd_holder[0])
    dev.close()


def _fd_server(fake: Callable[..., FakeServer], mapped: int, file_size: int, table: bytes) -> FakeServer:
    srv: FakeServer

    def script(header: bytes, payload: bytes) -> bytes | None:
        if header[0] != RemoteCmd.MAP_SYSMEM_FD:
            return zeros(header, payload)
        fd = os.memfd_create("hostile-sysmem")
        os.ftruncate(fd, file_size)
        os.pwrite(fd, table, 0)
        socket.send_fds(srv.peer, [pack_response(mapped, 1)], [fd])
        os.close(fd)
        return None

    srv = fake(script, socket.AF_UNIX)
    return srv


@pytest.mark.parametrize(
    ("mapped", "file_size", "table", "message"),
    [
        # issue 29 finding 10: a table entry of 2^34 pages was expanded whole (181 MiB) for an 8 KiB request
        (8192, 8192, struct.pack("<QQ", 0x100000, 1 << 46), "describes more than the 0x2000 bytes"),
        (1 << 40, 8192, encode_addr_table([(0x100000, 0x2000)]), "mapping of 0x10000000000 bytes for a request"),
        (4096, 4096, encode_addr_table([(0x100000, 0x2000)]), "mapping of 0x1000 bytes for a request of 0x2000"),
        (16384, 8192, encode_addr_table([(0x100000, 0x2000)]), "0x2000-byte file for 0x4000 bytes"),
        (8192, 8192, struct.pack("<QQ", 0x100800, 0x2000), "not page aligned"),
        (8192, 8192, struct.pack("<QQ", 2**64 - 4096, 0x2000), "runs past 2\\*\\*64"),
    ],
)
def test_map_sysmem_fd_lengths_are_checked_against_the_request(
    fake: Callable[..., FakeServer], mapped: int, file_size: int, table: bytes, message: str
) -> None:
    srv = _fd_server(fake, mapped, file_size, table)
    dev = RemotePCIDevice("AM", "remote:unix:/tmp/x.sock:mock:0:0", RemoteConnection(srv.client, rpc_timeout=2.0))
    with pytest.raises(RemoteError, match=message):
        dev.alloc_sysmem(8192)
    assert dev.connection.rpc(RemoteCmd.PING)[0] == 0  # a refused reply leaves the connection in step
    dev.close()


def test_an_oversized_range_expands_only_the_pages_requested(fake: Callable[..., FakeServer]) -> None:
    srv = _fd_server(fake, 16384, 16384, struct.pack("<QQ", 0x100000, 0x4000))
    dev = RemotePCIDevice("AM", "remote:unix:/tmp/x.sock:mock:0:0", RemoteConnection(srv.client, rpc_timeout=2.0))
    assert dev.alloc_sysmem(5000)[1] == [0x100000, 0x101000]  # a range longer than needed is cut, never expanded
    dev.close()


def test_read_replies_must_announce_the_requested_length(fake: Callable[..., FakeServer]) -> None:
    def script(header: bytes, payload: bytes) -> bytes | None:
        if header[0] == RemoteCmd.MMIO_READ:
            return pack_response(1 << 34, 0, bytes(unpack_request_header(header).arg1))  # lies about its length
        return zeros(header, payload)

    srv = fake(script)
    dev = device(srv)
    with pytest.raises(ConnectionClosedError, match="announces 17179869184 bytes, 16 were requested"):
        dev.map_bar(0).read(0, 16)
    with pytest.raises(ConnectionClosedError):  # the stream can no longer be trusted: the connection is broken
        dev.read_config(0, 4)
    dev.close()


def test_probe_count_must_match_the_listed_devices(
    fake: Callable[..., FakeServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    text = b"0000:03:00.0:0"
    srv = fake(lambda h, p: pack_response(len(text), 5, text))
    monkeypatch.setattr("tg.drivers.remote.client.get_connection", lambda addr: RemoteConnection(srv.client, addr))
    with pytest.raises(RemoteError, match="announced 5 devices and listed 1"):
        remote_list(0x1002, ((0xFFFF, (0x744C,)),), remote="10.0.0.5")


def test_map_sysmem_fd_error_without_fd(fake: Callable[..., FakeServer]) -> None:
    answers = iter(
        [
            pack_error("no memory"),
            pack_error("MAP_SYSMEM_FD is not supported by device 0"),
            pack_response(8, 0, encode_paddrs([0x1000])),
        ]
    )
    srv = fake(lambda h, p: next(answers), socket.AF_UNIX)
    dev = RemotePCIDevice("AM", "remote:unix:/tmp/x.sock:mock:0:0", RemoteConnection(srv.client, rpc_timeout=2.0))
    with pytest.raises(RemoteError, match="no memory"):
        dev.alloc_sysmem(4096)
    _, paddrs = dev.alloc_sysmem(4096)  # falls back to MAP_SYSMEM when the server cannot pass an fd
    assert paddrs == [0x1000]
    assert [h[0] for h, _ in srv.requests] == [RemoteCmd.MAP_SYSMEM_FD, RemoteCmd.MAP_SYSMEM_FD, RemoteCmd.MAP_SYSMEM]
    dev.close()


def test_empty_probe_gives_no_devices(fake: Callable[..., FakeServer], monkeypatch: pytest.MonkeyPatch) -> None:
    srv = fake(lambda h, p: pack_response(0, 0))
    monkeypatch.setattr("tg.drivers.remote.client.get_connection", lambda addr: RemoteConnection(srv.client, addr))
    assert remote_list(0x1002, ((0xFFFF, (0x744C,)),), remote="10.0.0.5") == []
    assert remote_list(0x1002, ((0xFFFF, (0x744C,)),), remote=" , ") == []
    header, payload = srv.requests[0]
    assert header + payload == pack_request(RemoteCmd.PROBE, 0, 0, 0, 8, 0x1002, struct.pack("<II", 0xFFFF, 0x744C))


def test_probe_names(fake: Callable[..., FakeServer], monkeypatch: pytest.MonkeyPatch) -> None:
    text = b"0000:03:00.0:0\n0000:04:00.0:1"
    srv = fake(lambda h, p: pack_response(len(text), 2, text))
    monkeypatch.setattr("tg.drivers.remote.client.get_connection", lambda addr: RemoteConnection(srv.client, addr))
    monkeypatch.setenv("REMOTE", "[::1]:7000")
    names = [name for _, name in remote_list(0x1002, [(0xFFFF, [0x744C])], base_class=3)]
    assert names == ["remote:[::1]:7000:0000:03:00.0:0", "remote:[::1]:7000:0000:04:00.0:1"]
    assert unpack_request_header(srv.requests[0][0]).arg0 == 3


def test_parse_remote() -> None:
    assert parse_remote("") == []
    assert parse_remote(" host ") == [RemoteAddress("host", 6667)]
    assert parse_remote("a:1, ,b:2,") == [RemoteAddress("a", 1), RemoteAddress("b", 2)]
    assert parse_remote("[fe80::1]:99,[::1]") == [RemoteAddress("fe80::1", 99), RemoteAddress("::1", 6667)]
    assert parse_remote("unix:/run/tg.sock") == [RemoteAddress(path="/run/tg.sock")]
    for bad, message in [
        ("h:0", "1..65535"),
        ("h:x", "bad port"),
        ("::1", "brackets"),
        ("[::1", "unterminated"),
        ("unix:", "socket path"),
        (":5", "no host"),
        ("[::1]x", "after ']'"),
    ]:
        with pytest.raises(ValueError, match=message):
            parse_remote(bad)


def test_device_names() -> None:
    assert _split_name("remote:10.0.0.5:6667:0000:03:00.0:2") == (RemoteAddress("10.0.0.5", 6667), 2)
    assert _split_name("remote:[::1]:7000:0000:03:00.0:11") == (RemoteAddress("::1", 7000), 11)
    assert _split_name("remote:unix:/tmp/s.sock:mock:0:1") == (RemoteAddress(path="/tmp/s.sock"), 1)
    for bad in ("10.0.0.5:6667:x:0", "remote:h:6667:bus:x", "remote:h:6667"):
        with pytest.raises(ValueError):
            _split_name(bad)


def test_client_lock(fake: Callable[..., FakeServer]) -> None:
    srv = fake(zeros)
    dev = device(srv)
    with pytest.raises(DeviceBusyError, match=r"Failed to acquire lock file am_remote:10\.0\.0\.5:6667"):
        device(srv)
    dev.close()
    device(srv).close()
    conn = RemoteConnection(srv.client, rpc_timeout=1.0)
    a = RemotePCIDevice("AM", "remote:unix:/tmp/a/b.sock:mock:0:0", conn)  # '/' in the name is fine for the lock
    a.close()


def test_connect_failure_and_token_length() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens on it once closed
    with pytest.raises(ConnectionError, match=f"cannot connect to remote PCI server 127.0.0.1:{port}"):
        RemoteConnection.connect(RemoteAddress("127.0.0.1", port), timeout=1.0)
    a, b = socket.socketpair()
    with pytest.raises(ValueError, match=r"1\.\.256 bytes"):
        RemoteConnection(a).authenticate("x" * 300)
    a.close()
    b.close()


def test_env_timeouts(monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = socket.socketpair()
    monkeypatch.setenv("REMOTE_RPC_TIMEOUT", "1.5")
    assert RemoteConnection(a).rpc_timeout == 1.5
    monkeypatch.setenv("REMOTE_RPC_TIMEOUT", "soon")
    with pytest.raises(ValueError, match="REMOTE_RPC_TIMEOUT must be a number"):
        RemoteConnection(a)
    a.close()
    b.close()


def test_unresolvable_host_is_a_connection_error() -> None:
    with pytest.raises(ConnectionError, match=r"cannot connect to remote PCI server no-such-host\.invalid:6667"):
        RemoteConnection.connect(RemoteAddress("no-such-host.invalid"), timeout=1.0)
