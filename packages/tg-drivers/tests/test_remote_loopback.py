"""RemotePCIDevice against the real server running in a thread on loopback (spec test plan §8.3), the MMIO
conformance suite over remote BAR and sysmem views, and socket-level server behaviour (busy, timeouts, auth)."""

from __future__ import annotations

import os
import socket
import struct
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tg.drivers.errors import ConnectionClosedError, DeviceBusyError, RemoteError
from tg.drivers.mmio import HostMMIO, MMIOView
from tg.drivers.mock import BarSpec, DwordRegisterFile, MockPCIDevice, RemoteServerThread
from tg.drivers.remote import Limits, RemoteCmd, RemotePCIDevice, RemoteServer, StaticProvider, remote_list
from tg.drivers.remote.admission import AdmissionPolicy
from tg.drivers.remote.client import RemoteAddress, RemoteConnection, clear_connections
from tg.drivers.remote.protocol import RESPONSE_SIZE, pack_request, unpack_response_header
from tg.drivers.testing import MakeView, MMIOConformance

NAVI31 = ((0xFFFF, (0x744C,)),)
MIB = 1 << 20


@pytest.fixture(autouse=True)
def _fresh_connections() -> Iterator[None]:
    clear_connections()
    yield
    clear_connections()


def gpu(regs: DwordRegisterFile | None = None, **kw: Any) -> MockPCIDevice:
    bars = {0: BarSpec(MIB, is64=True, prefetch=True), 5: BarSpec(64 * 1024, backing=regs or DwordRegisterFile(65536))}
    return MockPCIDevice("SV", kw.pop("pcibus", "mock:gpu"), bars=bars, rebar={0: [MIB, 2 * MIB]}, lock=False, **kw)


def open_remote(srv: RemoteServerThread, vendor: int = 0x1002, devices: Any = NAVI31) -> RemotePCIDevice:
    ((conn, name),) = remote_list(vendor, devices, remote=srv.address, token=srv.token)
    return RemotePCIDevice("AM", name, conn)


def auth_frame(token: str | None) -> bytes:
    """The AUTH request a client sends first (nothing when the server has no token)."""
    if token is None:
        return b""
    return pack_request(RemoteCmd.AUTH, arg1=len(token), payload=token.encode())


def read_until_eof(sock: socket.socket) -> bytes:
    data = b""
    while chunk := sock.recv(4096):
        data += chunk
    return data


def raw_connect(srv: RemoteServerThread, timeout: float = 5.0) -> socket.socket:
    sock = socket.create_connection((srv.host, srv.port), timeout=timeout)
    sock.settimeout(timeout)
    return sock


def recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            break
        buf += chunk
    return buf


def read_error(sock: socket.socket) -> str:
    status, length, _ = unpack_response_header(recv_exact(sock, RESPONSE_SIZE))
    assert status == 1
    return recv_exact(sock, length).decode()


def ping(srv: RemoteServerThread, attempts: int = 50) -> None:
    """A fresh connection completes a PING (retrying while the previous session is still being torn down)."""
    for _ in range(attempts):
        with raw_connect(srv, 2.0) as sock:
            sock.sendall(auth_frame(srv.token) + pack_request(RemoteCmd.PING))
            replies = [recv_exact(sock, RESPONSE_SIZE) for _ in range(2 if srv.token else 1)]
            if all(len(r) == RESPONSE_SIZE and unpack_response_header(r)[0] == 0 for r in replies):
                return  # OK (PING's resp0 carries the server's feature flags)
        time.sleep(0.05)
    raise AssertionError("server did not answer PING")


def test_probe_config_bars_and_model_access() -> None:
    regs = DwordRegisterFile(65536, log_size=16)
    nic = MockPCIDevice(
        "SV", "mock:nic", vendor=0x8086, device=0x1533, class_code=0x020000, bars={0: BarSpec(4096)}, lock=False
    )
    with RemoteServerThread(devices=[gpu(regs), nic]) as srv:
        found = remote_list(0x1002, NAVI31, remote=srv.address, token=srv.token)
        assert [name for _, name in found] == [f"remote:{srv.address}:mock:gpu:0"]
        assert [n for _, n in remote_list(0x8086, ((0, (0,)),), remote=srv.address, token=srv.token)] == [
            f"remote:{srv.address}:mock:nic:1"
        ]
        assert remote_list(0x1002, ((0, (0,)),), base_class=0x02, remote=srv.address, token=srv.token) == []
        assert len(remote_list(0x1002, ((0, (0,)),), base_class=0x03, remote=srv.address, token=srv.token)) == 1
        dev = open_remote(srv)
        assert dev.dev_id == 0 and dev.pcibus.startswith("remote:127.0.0.1:")
        assert dev.read_config(0, 2) == 0x1002 and dev.read_config(2, 2) == 0x744C
        dev.write_config_flush(0x40, 0xABCD, 2)
        assert dev.read_config(0x40, 2) == 0xABCD
        assert dev.bar_info(5)[1] == 65536 and dev.bar_info(1) == (0, 0)
        with pytest.raises(ValueError, match="absent"):
            dev.map_bar(1)
        bar5 = dev.map_bar(5)
        bar5.write32(0x100, 0xDEADBEEF)  # posted, then a read on the same connection
        assert bar5.read32(0x100) == 0xDEADBEEF
        assert list(regs.log)[-2:] == [("w", 0x100, 4, 0xDEADBEEF), ("r", 0x100, 4, 0xDEADBEEF)]  # 32-bit path
        regs.on_read(0x200, lambda: 0x5A5A5A5A)
        assert dev.map_bar(5, off=0x200, size=4, fmt="I")[0] == 0x5A5A5A5A
        window = dev.map_bar(5, off=0x1000, size=0x100)
        window.write(3, b"xyz")
        dev.connection.rpc(RemoteCmd.PING)  # posted writes are ordered before any later RPC
        assert regs.mem[0x1003:0x1006] == b"xyz" and regs.log[-1][:3] == ("w", 0x1003, 3)
        dev.close()


def test_sysmem_reset_resize_ping() -> None:
    device = gpu()
    with RemoteServerThread(device=device) as srv:
        dev = open_remote(srv)
        view, paddrs = dev.alloc_sysmem(10000)
        assert len(paddrs) == 3 and view.nbytes == 10000
        view.write(9990, b"0123456789")
        assert view.read(9988, 12) == b"\0\x000123456789"
        big, big_paddrs = dev.alloc_sysmem(3 * MIB)
        assert len(big_paddrs) == 768
        payload = os.urandom(3 * MIB)
        big.write(0, payload)
        assert big.read(0, 3 * MIB) == payload
        dev.reset()
        dev.reset()
        assert device.reset_count == 2
        assert dev.bar_info(0)[1] == MIB
        dev.resize_bar(0)
        assert dev.bar_info(0)[1] == 2 * MIB
        dev.connection.rpc(RemoteCmd.PING)
        dev.close()


def test_out_of_bounds_bypassing_the_client_checks() -> None:
    regs = DwordRegisterFile(65536)
    with RemoteServerThread(device=gpu(regs)) as srv:
        dev = open_remote(srv)
        conn = dev.connection
        with pytest.raises(RemoteError, match="out of bounds"):
            conn.rpc(RemoteCmd.MMIO_READ, 0, 5, 65536 - 2, 4, trailing=4)
        conn.rpc(RemoteCmd.PING)  # the session survives a bad read
        reads, writes = regs.reads, regs.writes
        conn.post(RemoteCmd.MMIO_WRITE, 0, 5, 65536 - 2, 4, 0, b"\xff" * 4)
        with pytest.raises(ConnectionClosedError, match="Connection closed"):
            conn.rpc(RemoteCmd.PING)
        assert (regs.reads, regs.writes) == (reads, writes)  # the model saw no access
        assert regs.mem[-4:] == bytes(4)
        dev.close()
        ping(srv)


def test_sessions_are_isolated_and_released() -> None:
    backend = MockPCIDevice.make_backend([{"pcibus": "mock:iso", "bars": {0: BarSpec(4096)}}])
    with RemoteServerThread(backend) as srv:
        first = open_remote(srv)
        view, _ = first.alloc_sysmem(4096)
        view.write(0, b"secret")
        with pytest.raises(DeviceBusyError):
            MockPCIDevice("SV", "mock:iso")  # the server holds the device lock while the session is open
        first.connection.close()
        first.close()
        ping(srv)
        MockPCIDevice("SV", "mock:iso").close()  # released at disconnect
        second = open_remote(srv)
        with pytest.raises(RemoteError, match="invalid sysmem handle 0"):
            second.connection.rpc(RemoteCmd.SYSMEM_READ, 0, 0, 0, 6, trailing=6)
        second.close()


def test_second_client_is_told_busy() -> None:
    with RemoteServerThread(device=gpu(), admission=AdmissionPolicy(busy_grace=0.1)) as srv:
        dev = open_remote(srv)
        with raw_connect(srv) as other:
            other.sendall(auth_frame(srv.token))  # authenticated, but the slot is taken
            assert read_error(other) == "server busy"
            assert other.recv(1) == b""
        dev.connection.rpc(RemoteCmd.PING)
        dev.close()


def test_token() -> None:
    with RemoteServerThread(device=gpu(), token="hunter2") as srv:
        with raw_connect(srv) as sock:
            sock.sendall(pack_request(RemoteCmd.PING))
            assert read_error(sock) == "authentication required"
            assert sock.recv(1) == b""
        with raw_connect(srv) as sock:
            sock.sendall(pack_request(RemoteCmd.AUTH, arg1=5, payload=b"wrong"))
            assert read_error(sock) == "authentication failed"
            assert sock.recv(1) == b""
        host, port = srv.address.split(":")
        conn = RemoteConnection.connect(RemoteAddress(host, int(port)), token="hunter2")
        conn.rpc(RemoteCmd.PING)
        conn.close()


def test_tcp_listeners_need_a_token_unless_insecure(tmp_path: Any) -> None:
    # issue 29 finding 1: a loopback TCP listener without a token let every local user drive the devices
    with pytest.raises(ValueError, match="a TCP listener needs a token"):
        RemoteServer(StaticProvider([gpu()])).bind_tcp("127.0.0.1", 0)
    with RemoteServerThread(device=gpu()) as srv:  # the test fixture generates one
        assert srv.token and srv.env == {"REMOTE": srv.address, "TG_REMOTE_TOKEN": srv.token}
        with raw_connect(srv) as sock:
            sock.sendall(pack_request(RemoteCmd.PING))
            assert read_error(sock) == "authentication required"
        with pytest.raises(RemoteError, match="authentication required"):
            remote_list(0x1002, NAVI31, remote=srv.address, token=None)
    with RemoteServerThread(device=gpu(), insecure=True) as srv:  # the one opt-out
        assert srv.token is None
        dev = open_remote(srv)
        assert dev.read_config(0, 2) == 0x1002
        dev.close()
    with RemoteServerThread(device=gpu(), unix_path=str(tmp_path / "s.sock")) as srv:  # 0600 socket: no token needed
        assert srv.token is None
        dev = open_remote(srv)
        assert dev.read_config(0, 2) == 0x1002
        dev.close()


@pytest.mark.parametrize("variable", ["TG_REMOTE_TOKEN", "REMOTE_TOKEN"])
def test_token_from_environment(monkeypatch: pytest.MonkeyPatch, variable: str) -> None:
    # TG_REMOTE_TOKEN is what the server reads too; REMOTE_TOKEN stays as the client's older alias
    monkeypatch.delenv("TG_REMOTE_TOKEN", raising=False)
    monkeypatch.delenv("REMOTE_TOKEN", raising=False)
    with RemoteServerThread(device=gpu(), token="envtoken") as srv:
        monkeypatch.setenv(variable, "envtoken")
        dev = open_remote(srv)
        assert dev.read_config(0, 2) == 0x1002
        dev.close()


def test_tg_remote_token_wins_over_the_alias(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TG_REMOTE_TOKEN", "envtoken")
    monkeypatch.setenv("REMOTE_TOKEN", "stale")
    with RemoteServerThread(device=gpu(), token="envtoken") as srv:
        dev = open_remote(srv)
        assert dev.read_config(0, 2) == 0x1002
        dev.close()


def test_silent_and_dripping_connections_never_block_an_authenticated_client() -> None:
    limits = Limits(first_request_timeout=1.0)
    with RemoteServerThread(device=gpu(), token="hunter2", limits=limits) as srv:
        with raw_connect(srv) as silent, raw_connect(srv) as drip:
            drip.sendall(pack_request(RemoteCmd.AUTH, arg1=7, payload=b"hunter2")[:10])  # an AUTH that never ends
            time.sleep(0.2)
            host, port = srv.address.split(":")
            start = time.monotonic()
            conn = RemoteConnection.connect(RemoteAddress(host, int(port)), token="hunter2")
            conn.rpc(RemoteCmd.PING)  # served at once: the others hold nothing
            assert time.monotonic() - start < 1.0
            conn.close()
            for sock in (silent, drip):  # and both are dropped once their first second is over
                sock.settimeout(5)
                assert b"no complete first request" in read_until_eof(sock)


def test_default_bind_is_loopback_and_idle_timeout() -> None:
    with RemoteServerThread(device=gpu(), limits=Limits(idle_timeout=0.3)) as srv:
        assert srv.host == "127.0.0.1" and srv.server.address == ("127.0.0.1", srv.port)
        with raw_connect(srv) as sock:
            start = time.monotonic()
            assert b"no complete first request" in read_until_eof(sock)  # closed by the idle timeout, not by us
            assert time.monotonic() - start < 4.5


def test_slow_drip_is_cut_by_the_io_timeout() -> None:
    with RemoteServerThread(device=gpu(), limits=Limits(io_timeout=0.5)) as srv:
        with raw_connect(srv) as sock:
            request = pack_request(RemoteCmd.PING)
            closed = False
            for byte in request[:-1]:
                try:
                    sock.sendall(bytes([byte]))
                except OSError:
                    closed = True
                    break
                time.sleep(0.05)
            if not closed:
                try:
                    assert b"no complete first request" in read_until_eof(sock)
                except ConnectionResetError:  # our late bytes reached a closed socket: closed all the same
                    pass
        ping(srv)


def test_fds_do_not_leak_across_sessions() -> None:
    with RemoteServerThread(device=gpu()) as srv:
        ping(srv)
        before = len(os.listdir("/proc/self/fd"))
        for _ in range(20):
            dev = open_remote(srv)
            dev.alloc_sysmem(8192)
            dev.connection.close()
            dev.close()
            clear_connections()
        ping(srv)
        time.sleep(0.1)
        assert len(os.listdir("/proc/self/fd")) <= before + 1
        assert srv.alive


def test_unix_socket_with_map_sysmem_fd(tmp_path: Any) -> None:
    path = str(tmp_path / "pci.sock")
    device = MockPCIDevice("SV", "mock:shm", lock=False, shared_sysmem=True)
    with RemoteServerThread(device=device, unix_path=path) as srv:
        assert srv.address == f"unix:{path}"
        assert os.stat(path).st_mode & 0o777 == 0o600
        dev = open_remote(srv)
        assert dev.pcibus == f"remote:unix:{path}:mock:shm:0"
        view, paddrs = dev.alloc_sysmem(10000, contiguous=True)
        assert isinstance(view, HostMMIO)  # mapped locally: no RPC per access
        assert len(paddrs) == 3 and paddrs[1] == paddrs[0] + 4096
        view.write(4096, b"through shared memory")
        assert device.dma_read(paddrs[1], 21) == b"through shared memory"  # the device sees the same pages
        device.dma_write(paddrs[2], b"from the device")
        assert view.read(8192, 15) == b"from the device"
        scattered, pages = dev.alloc_sysmem(3 * 4096)
        assert len(pages) == 3
        scattered.write(3 * 4096 - 2, b"ok")
        assert device.dma_read(pages[2] + 4094, 2) == b"ok"
        assert dev.read_config(0, 2) == 0x1002
        dev.connection.close()
        dev.close()
        ping_unix(path)
    assert not os.path.exists(path)


def ping_unix(path: str) -> None:
    for _ in range(50):
        with socket.socket(socket.AF_UNIX) as sock:
            sock.settimeout(2.0)
            sock.connect(path)
            sock.sendall(pack_request(RemoteCmd.PING))
            if unpack_response_header(recv_exact(sock, RESPONSE_SIZE))[0] == 0:
                return
        time.sleep(0.05)
    raise AssertionError("unix server did not answer PING")


def test_unix_socket_refuses_to_replace_a_regular_file(tmp_path: Any) -> None:
    path = tmp_path / "not-a-socket"
    path.write_text("keep me")
    with pytest.raises(FileExistsError, match="not a socket"):
        RemoteServerThread(device=gpu(), unix_path=str(path)).start()
    assert path.read_text() == "keep me"


def test_server_thread_arguments() -> None:
    with pytest.raises(ValueError, match="exactly one of"):
        RemoteServerThread()
    with pytest.raises(ValueError, match="exactly one of"):
        RemoteServerThread(MockPCIDevice.make_backend([]), device=gpu())


# ---- MMIO conformance over remote views ------------------------------------------------------------------------------


class TestRemoteBarMMIO(MMIOConformance):
    """Windows of a remote BAR (each view a fresh, zero-filled window at a non-zero offset)."""

    @pytest.fixture
    def make_view(self) -> Iterator[MakeView]:
        with RemoteServerThread(device=gpu()) as srv:
            dev = open_remote(srv)
            count = [0]

            def make(nbytes: int, fmt: str) -> MMIOView:
                count[0] += 1
                return dev.map_bar(0, off=512 * count[0] + 8, size=nbytes, fmt=fmt)

            yield make
            dev.close()


class TestRemoteSysmemMMIO(MMIOConformance):
    @pytest.fixture
    def make_view(self) -> Iterator[MakeView]:
        with RemoteServerThread(device=gpu()) as srv:
            dev = open_remote(srv)

            def make(nbytes: int, fmt: str) -> MMIOView:
                view, _ = dev.alloc_sysmem(nbytes + 16)
                return view.view(16, nbytes, fmt)

            yield make
            dev.close()


def test_large_transfers_are_chunked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("tg.drivers.remote.client.CHUNK", 4096)
    with RemoteServerThread(device=gpu(), limits=Limits(max_xfer=4096)) as srv:
        dev = open_remote(srv)
        bar = dev.map_bar(0)
        data = struct.pack("<5000I", *range(5000))
        bar.write(100, data)
        assert bar.read(100, len(data)) == data
        dev.close()
