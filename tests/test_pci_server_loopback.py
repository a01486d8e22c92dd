"""End to end: tg.drivers' RemotePCIDevice against a real `tg-pci-server` process serving simulated devices.

1. Integration: config reads, BAR reads/writes, sysmem alloc/read/write, reset, resize, state persisting across
   sessions, the token every TCP listener requires (generated into a 0600 token file the client reads, or given).
2. Socket-level fuzzing of the server process (spec §8.4 b): thousands of malformed frames over hundreds of
   connections (random bytes, boundary-valued headers, truncated/overlong payloads, mutated recorded sessions, bad
   commands and BAR indices, abrupt disconnects, a slow drip, concurrent clients). Oracles: the process stays alive
   and answers a fresh PING after every batch, valid requests still work afterwards, the guard bands around the
   simulated BARs (file-backed, inspected from this process) never change, the mock records no out-of-bounds access,
   every connection ends within 2 s of our half-close, and the server's fds and memory do not grow.

Every socket operation has a timeout, and the server runs with `--io-timeout 1`, so nothing here can hang.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import struct
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tg.drivers.errors import RemoteError
from tg.drivers.mmio import HostMMIO
from tg.drivers.remote import RemoteCmd, RemotePCIDevice, remote_list
from tg.drivers.remote.client import clear_connections
from tg.drivers.remote.protocol import PAYLOAD_CMDS, RESPONSE_SIZE, encode_probe_payload, pack_request

NAVI31 = ((0xFFFF, (0x744C,)),)
MIB = 1 << 20
GUARD = 4096
CANARY = 0xA5
FUZZ_BARS = {"bar0": 65536, "bar2": 4096}


def server_command() -> list[str]:
    """The installed console script when it sits next to this interpreter, else `python -m tg_pci_server`."""
    script = Path(sys.executable).with_name("tg-pci-server")
    if script.exists():
        return [str(script)]
    found = shutil.which("tg-pci-server")
    return [found] if found else [sys.executable, "-m", "tg_pci_server"]


class ServerProcess:
    """A `tg-pci-server` child process on an ephemeral loopback port; output goes to files in `workdir`."""

    def __init__(self, workdir: Path, *args: str, env: dict[str, str] | None = None) -> None:
        self.log = workdir / "server.log"
        out = workdir / "server.out"
        full_env = {**os.environ, "TG_DRIVERS_LOCK_DIR": str(workdir), "XDG_CONFIG_HOME": str(workdir / "config")}
        for name in ("TG_REMOTE_TOKEN", "REMOTE_TOKEN", "TG_REMOTE_TOKEN_FILE"):
            full_env.pop(name, None)
        full_env.update(env or {})
        self.token_file: str | None = None
        with open(out, "wb") as stdout, open(self.log, "wb") as stderr:
            self.proc = subprocess.Popen(
                [*server_command(), "--port", "0", *args], stdout=stdout, stderr=stderr, env=full_env
            )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            text = out.read_text()
            if "listening on " in text:
                if "token file: " in text:  # printed before "listening on" when the server made or read one
                    self.token_file = text.split("token file: ", 1)[1].split()[0]
                self.address = text.split("listening on ", 1)[1].split()[0]
                if self.address.startswith("/"):  # a unix socket
                    self.address, self.host, self.port = f"unix:{self.address}", "", 0
                else:
                    self.host, port = self.address.rsplit(":", 1)
                    self.port = int(port)
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"tg-pci-server did not start: {self.log.read_text()}")

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    @property
    def auth(self) -> bytes:
        """The AUTH frame a raw client sends first (nothing for a server without a token file)."""
        if self.token_file is None:
            return b""
        token = Path(self.token_file).read_bytes().strip()
        return pack_request(RemoteCmd.AUTH, arg1=len(token), payload=token)

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        return self.proc.returncode

    def fd_count(self) -> int:
        return len(os.listdir(f"/proc/{self.proc.pid}/fd"))

    def rss(self) -> int:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        return 0


def connect(srv: ServerProcess, timeout: float = 2.0, source: str | None = None) -> socket.socket:
    """A raw connection; `source` picks another loopback address to come from (another source for the server's
    per-source failure budget, so deliberate failures there never throttle this test's own clients)."""
    sock = socket.create_connection(
        (srv.host, srv.port), timeout=timeout, source_address=(source, 0) if source else None
    )
    sock.settimeout(timeout)
    return sock


def recv_until_eof(sock: socket.socket, timeout: float) -> tuple[bytes, bool]:
    """Read until the server closes; returns (data, closed in time). Stops after `timeout` seconds overall."""
    data = bytearray()
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return bytes(data), False
        sock.settimeout(left)
        try:
            chunk = sock.recv(1 << 16)
        except TimeoutError:
            return bytes(data), False
        except OSError:  # reset by the server: closed
            return bytes(data), True
        if not chunk:
            return bytes(data), True
        data += chunk


def ping(srv: ServerProcess, within: float = 5.0) -> None:
    """A fresh connection completes a PING (retrying while the previous session is torn down: "server busy")."""
    deadline = time.monotonic() + within
    last = b""
    auth = srv.auth
    want = RESPONSE_SIZE * (2 if auth else 1)
    while time.monotonic() < deadline:
        try:
            with connect(srv, 1.0) as sock:
                sock.sendall(auth + pack_request(RemoteCmd.PING))
                last = b""
                while len(last) < want:
                    chunk = sock.recv(want - len(last))
                    if not chunk:
                        break
                    last += chunk
                if len(last) == want and last[0] == 0 and last[-RESPONSE_SIZE] == 0:  # OK; resp0: feature flags
                    return
        except OSError:
            pass
        time.sleep(0.02)
    raise AssertionError(f"server did not answer PING within {within}s (last reply {last!r})")


@pytest.fixture(autouse=True)
def _clean_client_state(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    monkeypatch.setenv("TG_DRIVERS_LOCK_DIR", str(tmp_path))
    for name in ("TG_REMOTE_TOKEN", "REMOTE_TOKEN", "TG_REMOTE_TOKEN_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "client-config"))  # no token file of the developer's
    clear_connections()
    yield
    clear_connections()


@pytest.fixture
def demo_server(tmp_path: Path) -> Iterator[ServerProcess]:
    srv = ServerProcess(tmp_path, "--backend", "mock")
    yield srv
    assert srv.stop() == 0, srv.log.read_text()


def open_device(address: str, monkeypatch: pytest.MonkeyPatch, token_file: str | None = None) -> RemotePCIDevice:
    """`REMOTE=address` (and `TG_REMOTE_TOKEN_FILE=token_file`), then the device, as a user's program would."""
    monkeypatch.setenv("REMOTE", address)
    if token_file is not None:
        monkeypatch.setenv("TG_REMOTE_TOKEN_FILE", token_file)
    ((conn, name),) = remote_list(0x1002, NAVI31)
    return RemotePCIDevice("AM", name, conn)


def test_remote_device_against_server_process(demo_server: ServerProcess, monkeypatch: pytest.MonkeyPatch) -> None:
    # the README's example: no token given, so the server generated one into a private token file and printed its path
    assert demo_server.token_file is not None
    assert Path(demo_server.token_file).stat().st_mode & 0o777 == 0o600
    monkeypatch.setenv("REMOTE", demo_server.address)
    with pytest.raises(RemoteError, match="authentication required"):
        remote_list(0x1002, NAVI31)  # a client without the token gets nothing
    clear_connections()
    dev = open_device(demo_server.address, monkeypatch, demo_server.token_file)
    assert dev.pcibus == f"remote:{demo_server.address}:mock:0:0"
    # config space
    assert dev.read_config(0, 2) == 0x1002 and dev.read_config(2, 2) == 0x744C
    assert dev.read_config(0x0B, 1) == 0x03  # display controller
    dev.write_config(0x04, 0x6, 2)
    assert dev.read_config(0x04, 2) == 0x6
    # BARs
    assert dev.bar_info(0)[1] == 64 * MIB and dev.bar_info(5)[1] == MIB
    regs = dev.map_bar(5, fmt="I")
    regs[0x10] = 0x12345678
    assert regs[0x10] == 0x12345678 and dev.map_bar(5).read(0x40, 4) == bytes.fromhex("78563412")
    vram = dev.map_bar(0, off=32 * MIB)
    block = os.urandom(MIB)
    vram.write(123, block)
    assert vram.read(123, MIB) == block
    with pytest.raises(ValueError, match="exceeds the BAR size"):
        dev.map_bar(5, off=MIB - 4, size=8)
    # system memory
    mem, paddrs = dev.alloc_sysmem(3 * 4096 + 1)
    assert len(paddrs) == 4 and all(p % 4096 == 0 for p in paddrs)
    mem.write(4095, b"across pages")
    assert mem.read(4095, 12) == b"across pages"
    with pytest.raises(IndexError):
        mem.read(3 * 4096, 2)
    # reset and resize
    dev.reset()
    assert regs[0x10] == 0  # the register file is cleared by a reset
    dev.resize_bar(0)
    assert dev.bar_info(0)[1] == 256 * MIB
    assert dev.map_bar(0).read(256 * MIB - 4, 4) == bytes(4)
    with pytest.raises(RemoteError, match="Cannot resize BAR 5"):
        dev.resize_bar(5)
    dev.close()


def test_simulated_state_persists_across_sessions(demo_server: ServerProcess, monkeypatch: pytest.MonkeyPatch) -> None:
    dev = open_device(demo_server.address, monkeypatch, demo_server.token_file)
    dev.map_bar(2).write(0x100, b"flash contents")
    dev.close()
    clear_connections()  # a new connection is a new session
    ping(demo_server)
    dev = open_device(demo_server.address, monkeypatch, demo_server.token_file)
    assert dev.map_bar(2).read(0x100, 14) == b"flash contents"
    dev.close()
    clear_connections()
    # one stderr line per connection opened and closed (spec 6.7 rule 10); the last close is logged asynchronously
    deadline = time.monotonic() + 5
    while demo_server.log.read_text().count("session closed") < 3 and time.monotonic() < deadline:
        time.sleep(0.02)
    log = demo_server.log.read_text()
    assert log.count("session open") >= 3 and log.count("session closed") >= 3, log


def test_token_protected_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("correct horse\n")
    token_file.chmod(0o600)  # the server refuses a token file that group or others can read
    srv = ServerProcess(tmp_path, "--backend", "mock", "--token-file", str(token_file))
    try:
        monkeypatch.setenv("REMOTE", srv.address)
        with pytest.raises(RemoteError, match="authentication required"):
            remote_list(0x1002, NAVI31)
        clear_connections()
        ping_denied = connect(srv)
        ping_denied.sendall(pack_request(RemoteCmd.AUTH, arg1=5, payload=b"wrong"))
        data, closed = recv_until_eof(ping_denied, 3.0)
        ping_denied.close()
        assert closed and b"authentication failed" in data
        monkeypatch.setenv("TG_REMOTE_TOKEN", "correct horse")  # the variable the server reads, on both sides
        dev = open_device(srv.address, monkeypatch)
        assert dev.read_config(0, 2) == 0x1002
        dev.close()
    finally:
        assert srv.stop() == 0


def test_unix_socket_server_shares_dma_memory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sock_path = tmp_path / "pci.sock"
    srv = ServerProcess(tmp_path, "--backend", "mock", "--unix", str(sock_path))
    try:
        assert srv.address == f"unix:{sock_path}" and sock_path.stat().st_mode & 0o777 == 0o600
        dev = open_device(srv.address, monkeypatch)
        assert dev.pcibus == f"remote:unix:{sock_path}:mock:0:0"
        mem, paddrs = dev.alloc_sysmem(64 * 1024)
        assert isinstance(mem, HostMMIO) and len(paddrs) == 16  # MAP_SYSMEM_FD: the server's pages, mapped here
        mem.write(100, b"shared pages")
        assert mem.read(100, 12) == b"shared pages"
        regs = dev.map_bar(5, fmt="I")
        regs[3] = 0xFEEDF00D
        assert regs[3] == 0xFEEDF00D
        dev.close()
    finally:
        assert srv.stop() == 0, srv.log.read_text()
    assert not sock_path.exists()


# ---- fuzzing --------------------------------------------------------------------------------------------------------

MODEL = textwrap.dedent(
    """
    import mmap, os
    from tg.drivers.mock import BarSpec, MockPCIDevice

    GUARD = {guard}
    DIR = os.environ["FUZZ_DIR"]

    class GuardedFile:
        # raw memory between two guard bands in a shared file; it trusts every offset, so only the server's
        # validation keeps accesses inside the BAR
        def __init__(self, name, size):
            self.size = size
            with open(os.path.join(DIR, name), "r+b") as f:
                self.mm = mmap.mmap(f.fileno(), 2 * GUARD + size)

        def read(self, offset, size):
            return bytes(self.mm[GUARD + offset : GUARD + offset + size])

        def write(self, offset, data):
            self.mm[GUARD + offset : GUARD + offset + len(data)] = data

    class RecordedViolations(list):
        def append(self, item):
            super().append(item)
            with open(os.path.join(DIR, "violations"), "a") as f:
                f.write(str(item) + "\\n")

    def make():
        bars = {{0: BarSpec({bar0}, is64=True, backing=GuardedFile("bar0", {bar0})),
                2: BarSpec({bar2}, backing=GuardedFile("bar2", {bar2}))}}
        return MockPCIDevice("SV", "mock:fuzz", bars=bars, lock=False, violations=RecordedViolations())
    """
).format(guard=GUARD, **FUZZ_BARS)

BOUNDARY = [
    0,
    1,
    2,
    3,
    4,
    8,
    255,
    256,
    4092,
    4095,
    4096,
    4097,
    65532,
    65535,
    65536,
    65537,
    2**31,
    2**32 - 1,
    2**32,
    2**63,
    2**64 - 1,
]


def _u(rng: random.Random, bits: int) -> int:
    return rng.choice([v for v in BOUNDARY if v < 1 << bits]) if rng.random() < 0.75 else rng.getrandbits(bits)


def _recorded() -> bytes:
    probe = encode_probe_payload(NAVI31)
    return b"".join(
        [
            pack_request(RemoteCmd.PROBE, 0, 0, 0, len(probe), 0x1002, probe),
            pack_request(RemoteCmd.MAP_BAR, 0, 2),
            pack_request(RemoteCmd.MMIO_WRITE, 0, 2, 4092, 4, 0, b"WXYZ"),
            pack_request(RemoteCmd.MMIO_READ, 0, 0, 65532, 4),
            pack_request(RemoteCmd.CFG_READ, 0, 0, 0, 4),
            pack_request(RemoteCmd.MAP_SYSMEM, 0, 0, 8192, 0),
            pack_request(RemoteCmd.SYSMEM_WRITE, 0, 0, 8188, 4, 0, b"abcd"),
            pack_request(RemoteCmd.SYSMEM_READ, 0, 0, 0, 16),
            pack_request(RemoteCmd.PING),
        ]
    )


def fuzz_input(rng: random.Random, recorded: bytes) -> bytes:
    kind = rng.randrange(6)
    if kind == 0:  # random bytes (often a truncated header)
        return rng.randbytes(rng.randrange(201))
    if kind == 1:  # byte-level mutations of a real session
        data = bytearray(recorded)
        for _ in range(rng.randint(1, 6)):
            pos = rng.randrange(len(data))
            op = rng.randrange(3)
            if op == 0:
                data[pos] ^= 1 << rng.randrange(8)
            elif op == 1:
                data.insert(pos, rng.randrange(256))
            else:
                del data[pos]
        return bytes(data)
    out = bytearray(recorded[: 33 + 8] if rng.random() < 0.7 else b"")  # usually PROBE first, so dev 0 exists
    for _ in range(rng.randint(1, 5)):
        cmd = rng.choice([*RemoteCmd, *RemoteCmd, rng.randrange(256)])
        bar = rng.choice([0, 1, 2, 5, 6, 7, 2**32 - 1, rng.getrandbits(32)])
        fields = (rng.choice([0, 0, 1, 2**32 - 1]), bar, _u(rng, 64), _u(rng, 64), _u(rng, 64))
        out += struct.pack("<BIIQQQ", cmd, *fields)
        if cmd in PAYLOAD_CMDS:
            want = min(fields[3], 1024)
            shape = rng.randrange(4)  # exact, truncated, overlong, absent
            size = [want, max(0, want - rng.randint(1, 16)), want + rng.randint(1, 16), 0][shape]
            out += bytes([0xEE]) * size  # a recognisable pattern: must never land outside a BAR
    return bytes(out)


def _guards_intact(workdir: Path) -> list[str]:
    bad = []
    for name, size in FUZZ_BARS.items():
        data = (workdir / name).read_bytes()
        canary = bytes([CANARY]) * GUARD
        if data[:GUARD] != canary or data[GUARD + size :] != canary or len(data) != 2 * GUARD + size:
            bad.append(name)
    return bad


def test_fuzz_server_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name, size in FUZZ_BARS.items():
        (tmp_path / name).write_bytes(bytes([CANARY]) * GUARD + bytes(size) + bytes([CANARY]) * GUARD)
    model = tmp_path / "fuzz_model.py"
    model.write_text(MODEL)
    srv = ServerProcess(
        tmp_path,
        "--mock-model",
        f"{model}:make",
        "--io-timeout",
        "1",
        "--idle-timeout",
        "10",
        "--max-xfer",
        "64K",
        "--max-alloc",
        "64K",
        "--max-total",
        "256K",
        env={"FUZZ_DIR": str(tmp_path)},
    )
    try:
        ping(srv)
        fds_before, rss_before = srv.fd_count(), srv.rss()
        rng = random.Random(20261130)
        recorded = _recorded()
        cases = int(os.environ.get("TG_FUZZ_CASES", "600"))
        frames = 0
        auth = srv.auth
        for case in range(cases):
            data = fuzz_input(rng, recorded)
            frames += max(1, len(data) // 33)
            ending = rng.randrange(10)
            # most cases authenticate and reach the session's parser; the rest probe the admission of strangers
            authenticated = rng.random() < 0.85
            with connect(srv, source=None if authenticated else "127.0.0.2") as sock:
                data = (auth if authenticated else b"") + data
                try:
                    if ending == 0:  # abrupt disconnect mid-stream (RST)
                        sock.sendall(data[: rng.randrange(len(data) + 1)])
                        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                        continue
                    pos = 0
                    while pos < len(data):
                        step = rng.choice([1, 5, 33, 64, len(data)])
                        sock.sendall(data[pos : pos + step])
                        pos += step
                    sock.shutdown(socket.SHUT_WR)
                except OSError:
                    continue  # the server closed first (e.g. an invalid posted write): allowed
                _, closed = recv_until_eof(sock, 2.0)
                assert closed, f"case {case}: server neither answered nor closed within 2 s of our half-close"
            if case % 50 == 49:
                assert srv.alive, srv.log.read_text()[-2000:]
                ping(srv, 1.0 + 1.0)
        # connection-level oddities: a slow drip inside a session (cut by --io-timeout 1) and concurrent clients
        with connect(srv, 5.0) as drip:
            closed_early = False
            drip.sendall(auth)
            for byte in pack_request(RemoteCmd.PING)[:20]:
                try:
                    drip.sendall(bytes([byte]))
                except OSError:
                    closed_early = True
                    break
                time.sleep(0.05)
            if not closed_early:
                _, closed = recv_until_eof(drip, 3.0)
                assert closed, "a slow-drip connection was not closed by the I/O timeout"
        ping(srv)
        crowd = [connect(srv) for _ in range(4)]
        for sock in crowd:
            sock.sendall(auth + pack_request(RemoteCmd.PING))
        for sock in crowd:
            data, _ = recv_until_eof(sock, 3.0) if sock is not crowd[0] else (sock.recv(RESPONSE_SIZE), True)
            assert data[:1] in (b"\0", b"\1")  # an answer or "server busy"
            sock.close()
        # oracles
        ping(srv)
        assert srv.alive
        assert _guards_intact(tmp_path) == []
        violations = tmp_path / "violations"
        assert not violations.exists(), violations.read_text()[:2000]
        time.sleep(0.2)
        assert srv.fd_count() <= fds_before
        assert srv.rss() - rss_before < 64 * MIB
        assert frames > 1000
        # valid requests still work, through the real client
        dev = open_device(srv.address, monkeypatch, srv.token_file)
        bar2 = dev.map_bar(2)
        bar2.write(0, b"still works")
        assert bar2.read(0, 11) == b"still works"
        view, _ = dev.alloc_sysmem(4096)
        view.write(0, b"ok")
        assert view.read(0, 2) == b"ok"
        dev.close()
        clear_connections()
        assert _guards_intact(tmp_path) == []
    finally:
        assert srv.stop() == 0, srv.log.read_text()[-2000:]
