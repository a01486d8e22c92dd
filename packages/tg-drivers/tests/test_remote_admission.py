"""Admission of remote PCI connections (`tg.drivers.remote.admission`): who a peer is, per-source failure budgets and
back-off, log aggregation, and the log flood of issue 29 (finding 6) against the real server in a thread."""

from __future__ import annotations

import logging
import os
import re
import socket
import sys
import threading
import time
from collections.abc import Iterator

import pytest

from tg.drivers.mock import MockPCIDevice, RemoteServerThread
from tg.drivers.remote import RemoteCmd
from tg.drivers.remote.admission import AdmissionPolicy
from tg.drivers.remote.client import RemoteAddress, RemoteConnection
from tg.drivers.remote.protocol import pack_request
from tg.drivers.remote.sources import RejectionLog, SourceTable, peer_source


def _accepted_pair(family: int = socket.AF_INET) -> tuple[socket.socket, socket.socket]:
    """(client, server side) of one loopback connection."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        client = socket.create_connection(listener.getsockname())
        server, _ = listener.accept()
    return client, server


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="sock_diag and SO_PEERCRED are Linux interfaces")
def test_a_loopback_or_unix_peer_is_its_address_and_user(tmp_path: object) -> None:
    client, server = _accepted_pair()
    with client, server:
        assert peer_source(server, "tcp") == f"127.0.0.1 uid {os.geteuid()}"  # two local users are two sources
    a, b = socket.socketpair(socket.AF_UNIX)
    with a, b:
        assert peer_source(b, "unix") == f"unix uid {os.geteuid()}"


def test_failure_budget_then_doubling_back_off_that_decays() -> None:
    table = SourceTable(AdmissionPolicy(failure_budget=3, failure_decay=2.0, backoff_base=0.5, backoff_max=4.0))
    now = 100.0
    assert [table.failure("a", now) for _ in range(3)] == [0.0, 0.0, 0.0]  # within the budget
    assert table.blocked_for("a", now) == 0.0
    assert [table.failure("a", now) for _ in range(5)] == [0.5, 1.0, 2.0, 4.0, 4.0]  # doubling, capped
    assert table.blocked_for("a", now + 1) == 3.0 and table.blocked_for("b", now) == 0.0  # others: untouched
    # one failure is forgiven every 2 s: after 20 s the budget is whole again
    assert table.failure("a", now + 20) == 0.0
    table.add_pending("c", +1, now)
    table.prune(now + 1000)
    assert table.pending("c") == 1 and len(table) == 1  # only sources that hold nothing and owe nothing are dropped


def test_rejection_log_logs_a_burst_then_one_summary_per_interval(caplog: pytest.LogCaptureFixture) -> None:
    logger = logging.getLogger("test.rejections")
    start = time.monotonic()
    rejections = RejectionLog(logger, interval=10.0, burst=2)
    with caplog.at_level(logging.DEBUG, logger="test.rejections"):
        for i in range(50):
            rejections.event("authentication failed", f"10.0.0.{i % 3}", now=start + 1)
        assert sum(r.levelno == logging.WARNING for r in caplog.records) == 2
        rejections.event("timed out", "10.0.0.9", now=start + 11)  # the next interval: the summary comes first
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 4
    assert warnings[2].startswith("48 more connections rejected in the last 11s (48 authentication failed) from ")
    assert "10.0.0.0: 16" in warnings[2] and "rejected: timed out" in warnings[3]


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.levelno >= logging.INFO:
            self.lines.append(record.getMessage())


@pytest.fixture
def server_log() -> Iterator[_Collect]:
    logger = logging.getLogger("tg.drivers.remote.server")
    handler, level = _Collect(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    yield handler
    logger.removeHandler(handler)
    logger.setLevel(level)


def test_unauthenticated_spam_is_logged_in_aggregate(server_log: _Collect) -> None:
    """Finding 6: each unauthenticated connection logged three lines (PING spam: 111,257 lines in 34 s). Now a few
    rejections are logged one by one per interval, the rest in one summary line per interval, and nothing is lost."""
    n = 300
    device = MockPCIDevice("SV", "mock:log", lock=False)
    with RemoteServerThread(device=device, admission=AdmissionPolicy(log_interval=0.4)) as srv:

        def spam(count: int) -> None:
            for _ in range(count):
                with socket.create_connection((srv.host, srv.port), timeout=5) as sock:
                    sock.sendall(pack_request(RemoteCmd.PING))
                    while sock.recv(4096):
                        pass

        threads = [threading.Thread(target=spam, args=(n // 4,)) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert srv.token is not None
        conn = RemoteConnection.connect(RemoteAddress(srv.host, srv.port), token=srv.token)  # the owner still gets in
        conn.rpc(RemoteCmd.PING)
        conn.close()  # the last summary is written when the server stops
    single = sum("rejected: authentication required" in line for line in server_log.lines)
    summaries = [int(m.group(1)) for line in server_log.lines if (m := re.match(r"(\d+) more connections", line))]
    assert single + sum(summaries) == n, server_log.lines  # every rejection is accounted for
    assert len(server_log.lines) < 60, len(server_log.lines)  # not 3 per connection (900)
    assert all("authentication required" in line for line in server_log.lines if "more connections" in line)


def test_an_error_while_admitting_costs_only_that_connection(monkeypatch: pytest.MonkeyPatch) -> None:
    from tg.drivers.remote import admission

    real, calls = admission.peer_source, []

    def failing_once(sock: socket.socket, transport: str) -> str:
        calls.append(transport)
        if len(calls) == 1:
            raise RuntimeError("unexpected")
        return real(sock, transport)

    monkeypatch.setattr(admission, "peer_source", failing_once)
    with RemoteServerThread(device=MockPCIDevice("SV", "mock:err", lock=False)) as srv:
        with socket.create_connection((srv.host, srv.port), timeout=5) as sock:
            assert sock.recv(1) == b""  # closed
        assert srv.token is not None
        conn = RemoteConnection.connect(RemoteAddress(srv.host, srv.port), token=srv.token)
        conn.rpc(RemoteCmd.PING)  # the accept loop is still there
        conn.close()
        assert srv.alive
