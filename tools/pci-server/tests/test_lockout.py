"""The lock-out scenario against a real `tg-pci-server` process: connections that never finish their first request
(silent, or one byte per second) block nobody and are dropped 5 s after connecting."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from tg.drivers.remote import RemoteCmd
from tg.drivers.remote.client import RemoteAddress, RemoteConnection
from tg.drivers.remote.protocol import pack_request


def server_command() -> list[str]:
    script = shutil.which("tg-pci-server", path=os.path.dirname(sys.executable)) or shutil.which("tg-pci-server")
    return [script] if script else [sys.executable, "-m", "tg_pci_server.cli"]


@pytest.fixture
def server() -> Iterator[tuple[str, int]]:
    env = {**os.environ, "TG_REMOTE_TOKEN": "lockout-test"}
    p = subprocess.Popen(
        [*server_command(), "--backend", "mock", "--port", "0"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert p.stdout is not None
        line = p.stdout.readline()
        assert line.startswith("listening on "), line
        host, port = line.split()[-1].rsplit(":", 1)
        yield host, int(port)
    finally:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def test_unauthenticated_connections_never_lock_out_an_authenticated_client(server: tuple[str, int]) -> None:
    host, port = server
    auth = pack_request(RemoteCmd.AUTH, arg1=12, payload=b"lockout-test")
    with socket.create_connection(server) as silent, socket.create_connection(server) as drip:
        connected = time.monotonic()
        drip.settimeout(0.05)
        for i in range(3):  # one byte per ~second would hold the old server for its whole idle timeout
            drip.sendall(auth[i : i + 1])
            start = time.monotonic()
            conn = RemoteConnection.connect(RemoteAddress(host, port), token="lockout-test")
            conn.rpc(RemoteCmd.PING)
            assert time.monotonic() - start < 2.0  # served at once, not "server busy", not after a timeout
            conn.close()
            time.sleep(0.5)
        for sock in (silent, drip):  # both are told and closed by the server 5 s after connecting
            sock.settimeout(max(0.1, connected + 8 - time.monotonic()))
            data = b""
            while chunk := sock.recv(4096):
                data += chunk
            assert b"no complete first request" in data
        assert time.monotonic() - connected >= 4.5
    wrong = RemoteConnection.connect(RemoteAddress(host, port), token=None)
    with pytest.raises(Exception, match="authentication required"):
        wrong.rpc(RemoteCmd.PING)
