"""The remote PCI server's session state machine, driven in-process through `Session.feed` (no sockets).

Covers every command, every validation rule of spec §6.7 (the device must never see an invalid access), session
isolation and teardown, authentication, the allowlist, and a seeded in-process fuzzer (§8.4 a).
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import struct
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tg.drivers.errors import DeviceBusyError
from tg.drivers.mock import BarSpec, DwordRegisterFile, MockPCIDevice
from tg.drivers.remote import Limits, RemoteCmd, RemoteServer, Session, StaticProvider
from tg.drivers.remote.protocol import (
    PAYLOAD_CMDS,
    RESPONSE_SIZE,
    SERVER_FEATURES,
    decode_addr_table,
    decode_paddrs,
    encode_probe_payload,
    pack_request,
    unpack_response_header,
)
from tg.drivers.remote.server import parse_allow

NAVI31 = ((0xFFFF, (0x744C,)),)
MIB = 1 << 20


class GuardedMemory:
    """A register model over raw memory with guard bands on both sides; it trusts every offset it is given.

    If validation upstream ever let an out-of-range access through, the guard bands would change (and `oob` records
    it), so the fuzz oracles do not depend on the mock view's own bounds checks.
    """

    GUARD = 256
    CANARY = 0xA5

    def __init__(self, size: int) -> None:
        self.size = size
        self.mem = bytearray([self.CANARY]) * (self.GUARD * 2 + size)
        self.mem[self.GUARD : self.GUARD + size] = bytes(size)
        self.oob: list[tuple[str, int, int]] = []
        self.accesses: list[tuple[str, int, int]] = []

    def read(self, offset: int, size: int) -> bytes:
        self.accesses.append(("r", offset, size))
        if offset < 0 or offset + size > self.size:
            self.oob.append(("r", offset, size))
        return bytes(self.mem[self.GUARD + offset : self.GUARD + offset + size])

    def write(self, offset: int, data: bytes) -> None:
        self.accesses.append(("w", offset, len(data)))
        if offset < 0 or offset + len(data) > self.size:
            self.oob.append(("w", offset, len(data)))
        self.mem[self.GUARD + offset : self.GUARD + offset + len(data)] = data

    def guards_intact(self) -> bool:
        g, c = self.GUARD, bytes([self.CANARY]) * self.GUARD
        return self.mem[:g] == c and self.mem[g + self.size :] == c


@contextlib.contextmanager
def quiet_server_log() -> Iterator[None]:
    logger = logging.getLogger("tg.drivers.remote.server")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(level)


class Rig:
    """A server over two mock devices (GPU 1002:744c with a guarded BAR5 model, NIC 8086:1533) plus helpers."""

    def __init__(self, **server_kwargs: Any) -> None:
        self.violations: list[str] = []
        self.bar5 = GuardedMemory(64 * 1024)
        self.regs = DwordRegisterFile(4096, log_size=64)
        gpu = {
            "pcibus": "mock:gpu",
            "bars": {
                0: BarSpec(MIB, is64=True, prefetch=True),
                2: BarSpec(4096, backing=self.regs),
                5: BarSpec(64 * 1024, backing=self.bar5),
            },
            "rebar": {0: [MIB, 4 * MIB]},
            "violations": self.violations,
        }
        nic = {
            "pcibus": "mock:nic",
            "vendor": 0x8086,
            "device": 0x1533,
            "class_code": 0x020000,
            "bars": {0: BarSpec(128 * 1024)},
            "violations": self.violations,
        }
        self.server = RemoteServer(MockPCIDevice.make_backend([gpu, nic]), **server_kwargs)

    def session(self, transport: str = "tcp") -> Session:
        return self.server.new_session(transport, "test")


def call(
    session: Session,
    cmd: int,
    dev_id: int = 0,
    bar: int = 0,
    arg0: int = 0,
    arg1: int = 0,
    arg2: int = 0,
    payload: bytes = b"",
) -> tuple[int, int, int, bytes, bool]:
    """Feed one request; return `(status, resp0, resp1, trailing bytes, close)` of its single reply."""
    replies, close = session.feed(pack_request(cmd, dev_id, bar, arg0, arg1, arg2, payload))
    assert len(replies) == 1, replies
    data = replies[0].data
    status, resp0, resp1 = unpack_response_header(data[:RESPONSE_SIZE])
    return status, resp0, resp1, data[RESPONSE_SIZE:], close


def ok(session: Session, cmd: int, *args: Any, **kw: Any) -> tuple[int, int, bytes]:
    status, resp0, resp1, data, close = call(session, cmd, *args, **kw)
    assert status == 0, data.decode(errors="replace")
    assert not close
    return resp0, resp1, data


def err(session: Session, cmd: int, *args: Any, **kw: Any) -> tuple[str, bool]:
    status, resp0, _, data, close = call(session, cmd, *args, **kw)
    assert status == 1 and resp0 == len(data)
    return data.decode(), close


def probe(session: Session, vendor: int = 0x1002, devices: Any = NAVI31, base_class: int = 0) -> list[str]:
    payload = encode_probe_payload(devices)
    _, count, text = ok(session, RemoteCmd.PROBE, 0, 0, base_class, len(payload), vendor, payload)
    lines = text.decode().split("\n") if count else []
    assert len(lines) == count
    return lines


def post(session: Session, cmd: int, dev_id: int, bar: int, off: int, data: bytes) -> bool:
    """Feed a posted write; it must produce no reply. Returns whether the session closes."""
    replies, close = session.feed(pack_request(cmd, dev_id, bar, off, len(data), 0, data))
    assert replies == []
    return close


@pytest.fixture
def rig() -> Iterator[Rig]:
    r = Rig()
    yield r
    assert r.violations == []
    assert r.bar5.oob == [] and r.bar5.guards_intact()


def test_probe_filters_and_indices(rig: Rig) -> None:
    s = rig.session()
    assert probe(s) == ["mock:gpu:0"]
    assert probe(s, 0x8086, ((0, (0,)),)) == ["mock:nic:1"]  # mask 0 matches every device of the vendor
    assert probe(s, 0x1002, ((0, (0,)),), base_class=0x03) == ["mock:gpu:0"]  # indices are stable per session
    assert probe(s, 0x1002, ((0, (0,)),), base_class=0x02) == []
    assert probe(s, 0x10DE, NAVI31) == []
    assert probe(s, 0x1002, ()) == []
    s.close()


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"arg1": 7}, "multiple of 8"),
        ({"arg2": 0x10000}, "vendor must be 16-bit"),
        ({"arg0": 0x100}, "base class must be 8-bit"),
    ],
)
def test_probe_validation(rig: Rig, fields: dict[str, int], message: str) -> None:
    s = rig.session()
    args = {"arg0": 0, "arg1": 0, "arg2": 0x1002, **fields}
    text, close = err(s, RemoteCmd.PROBE, 0, 0, args["arg0"], args["arg1"], args["arg2"], b"\0" * args["arg1"])
    assert message in text and not close
    ok(s, RemoteCmd.PING)


def test_probe_payload_over_64k_closes(rig: Rig) -> None:
    s = rig.session()
    replies, close = s.feed(pack_request(RemoteCmd.PROBE, 0, 0, 0, (64 << 10) + 8, 0x1002))
    assert close and b"exceeds the limit" in replies[0].data


def test_unprobed_device_and_lazy_open(rig: Rig) -> None:
    s = rig.session()
    assert "device 0 not probed" in err(s, RemoteCmd.CFG_READ, 0, 0, 0, 4)[0]
    probe(s)
    assert ok(s, RemoteCmd.CFG_READ, 0, 0, 0, 4)[0] == 0x744C1002
    assert "device 1 not probed" in err(s, RemoteCmd.RESET, 1)[0]
    ok(s, RemoteCmd.PING, 12345)  # PING ignores dev_id
    s.close()


def test_map_bar(rig: Rig) -> None:
    s = rig.session()
    probe(s)
    addr, size, _ = ok(s, RemoteCmd.MAP_BAR, 0, 5)
    assert size == 64 * 1024 and addr > 0
    assert ok(s, RemoteCmd.MAP_BAR, 0, 1)[:2] == (0, 0)  # upper half of 64-bit BAR0: absent, size 0
    assert "BAR index must be 0..5" in err(s, RemoteCmd.MAP_BAR, 0, 6)[0]
    assert "BAR index must be 0..5" in err(s, RemoteCmd.MAP_BAR, 0, 2**32 - 1)[0]
    s.close()


def test_config_access_and_validation(rig: Rig) -> None:
    s = rig.session()
    probe(s)
    ok(s, RemoteCmd.CFG_WRITE, 0, 0, 0x40, 2, 0xBEEF)
    assert ok(s, RemoteCmd.CFG_READ, 0, 0, 0x40, 2)[0] == 0xBEEF
    assert ok(s, RemoteCmd.CFG_READ, 0, 0, 0x41, 1)[0] == 0xBE
    assert ok(s, RemoteCmd.CFG_READ, 0, 0, 4092, 4)[0] == 0
    for offset, size in [(4093, 4), (4096, 1), (0, 3), (0, 8), (0, 0), (2**64 - 1, 4)]:
        text, close = err(s, RemoteCmd.CFG_READ, 0, 0, offset, size)
        assert not close and ("config access" in text)
    assert "does not fit in 1 bytes" in err(s, RemoteCmd.CFG_WRITE, 0, 0, 0x40, 1, 0x100)[0]
    assert "config access" in err(s, RemoteCmd.CFG_WRITE, 0, 0, 4095, 2, 0)[0]
    s.close()


def test_mmio_read_write_32bit_path(rig: Rig) -> None:
    s = rig.session()
    probe(s)
    assert not post(s, RemoteCmd.MMIO_WRITE, 0, 2, 0x10, struct.pack("<I", 0xCAFEF00D))
    assert ok(s, RemoteCmd.MMIO_READ, 0, 2, 0x10, 4)[2] == struct.pack("<I", 0xCAFEF00D)
    assert list(rig.regs.log)[-2:] == [("w", 0x10, 4, 0xCAFEF00D), ("r", 0x10, 4, 0xCAFEF00D)]
    assert not post(s, RemoteCmd.MMIO_WRITE, 0, 2, 0x21, b"abc")  # unaligned: one 3-byte access
    resp0, _, data = ok(s, RemoteCmd.MMIO_READ, 0, 2, 0x20, 8)
    assert resp0 == 8 and data == b"\0abc\0\0\0\0"
    assert rig.regs.log[-1][:3] == ("r", 0x20, 8)
    assert ok(s, RemoteCmd.MMIO_READ, 0, 5, 64 * 1024 - 4, 4)[2] == bytes(4)
    assert ok(s, RemoteCmd.MMIO_READ, 0, 5, 64 * 1024, 0)[2] == b""
    s.close()


@pytest.mark.parametrize(
    ("bar", "off", "size", "message"),
    [
        (5, 64 * 1024 - 3, 4, "out of bounds"),
        (5, 64 * 1024, 1, "out of bounds"),
        (5, 2**64 - 1, 2, "out of bounds"),
        (5, 0, 2**63, "exceeds the limit"),
        (1, 0, 4, "BAR 1 of device 0 is absent"),
        (6, 0, 4, "BAR index must be 0..5"),
    ],
)
def test_mmio_read_out_of_bounds_keeps_session(rig: Rig, bar: int, off: int, size: int, message: str) -> None:
    s = rig.session()
    probe(s)
    text, close = err(s, RemoteCmd.MMIO_READ, 0, bar, off, size)
    assert message in text and not close
    ok(s, RemoteCmd.PING)
    assert rig.bar5.accesses == []
    s.close()


def test_mmio_write_out_of_bounds_closes_without_touching_the_device(rig: Rig) -> None:
    s = rig.session()
    probe(s)
    assert post(s, RemoteCmd.MMIO_WRITE, 0, 5, 64 * 1024 - 2, b"\xff" * 4)
    assert rig.bar5.accesses == [] and s.feed(pack_request(RemoteCmd.PING)) == ([], True)
    s.close()
    s = rig.session()  # payload bigger than max_xfer: closed at the header, nothing buffered
    probe(s)
    replies, close = s.feed(pack_request(RemoteCmd.MMIO_WRITE, 0, 5, 0, (64 << 20) + 1))
    assert (replies, close) == ([], True)
    s.close()
    s = rig.session()  # truncated posted write: never applied
    probe(s)
    replies, close = s.feed(pack_request(RemoteCmd.MMIO_WRITE, 0, 5, 0, 16, 0, b"\xee" * 15))
    assert (replies, close) == ([], False) and s.mid_request
    s.close()
    assert rig.bar5.accesses == []


def test_sysmem_roundtrip_and_limits() -> None:
    r = Rig(limits=Limits(max_alloc=3 * 4096, max_total=5 * 4096, max_xfer=8192))
    s = r.session()
    probe(s)
    plen, handle, data = ok(s, RemoteCmd.MAP_SYSMEM, 0, 0, 5000, 0)
    paddrs = decode_paddrs(data)
    assert (plen, handle, len(paddrs)) == (16, 0, 2) and all(p % 4096 == 0 for p in paddrs)
    assert not post(s, RemoteCmd.SYSMEM_WRITE, 0, handle, 4990, b"0123456789")
    assert ok(s, RemoteCmd.SYSMEM_READ, 0, handle, 4988, 12)[2] == b"\0\x000123456789"
    assert "out of bounds" in err(s, RemoteCmd.SYSMEM_READ, 0, handle, 4990, 11)[0]
    assert "exceeds the limit of 8192" in err(s, RemoteCmd.SYSMEM_READ, 0, handle, 0, 8193)[0]
    assert "invalid sysmem handle 1" in err(s, RemoteCmd.SYSMEM_READ, 0, 1, 0, 1)[0]
    assert "sysmem size must be in [1, 12288]" in err(s, RemoteCmd.MAP_SYSMEM, 0, 0, 3 * 4096 + 1, 0)[0]
    assert "sysmem size must be in" in err(s, RemoteCmd.MAP_SYSMEM, 0, 0, 0, 0)[0]
    assert "contiguous flag must be 0 or 1" in err(s, RemoteCmd.MAP_SYSMEM, 0, 0, 4096, 2)[0]
    contiguous = decode_paddrs(ok(s, RemoteCmd.MAP_SYSMEM, 0, 0, 8192, 1)[2])
    assert contiguous[1] == contiguous[0] + 4096
    assert "total would exceed 20480" in err(s, RemoteCmd.MAP_SYSMEM, 0, 0, 4097, 0)[0]
    ok(s, RemoteCmd.MAP_SYSMEM, 0, 0, 4096, 0)  # exactly up to the cap
    assert post(s, RemoteCmd.SYSMEM_WRITE, 0, handle, 5000, b"x")  # posted out of bounds: session closes
    s.close()
    assert r.violations == []


def test_contiguous_cap() -> None:
    r = Rig(limits=Limits(max_alloc=8 * MIB))
    s = r.session()
    probe(s)
    assert "contiguous sysmem is limited" in err(s, RemoteCmd.MAP_SYSMEM, 0, 0, 2 * MIB + 1, 1)[0]
    ok(s, RemoteCmd.MAP_SYSMEM, 0, 0, 2 * MIB + 1, 0)
    s.close()


def test_allocation_growth_is_bounded() -> None:
    r = Rig(limits=Limits(max_alloc=4096, max_total=16 * 4096))
    s = r.session()
    probe(s)
    statuses = [call(s, RemoteCmd.MAP_SYSMEM, 0, 0, 4096, 0)[0] for _ in range(2000)]
    assert statuses.count(0) == 16 and statuses.count(1) == 1984
    s.close()


def test_sysmem_handles_are_per_session_and_per_device(rig: Rig) -> None:
    s1 = rig.session()
    probe(s1)
    probe(s1, 0x8086, ((0, (0,)),))
    _, handle, _ = ok(s1, RemoteCmd.MAP_SYSMEM, 0, 0, 4096, 0)
    assert "invalid sysmem handle 0 for device 1" in err(s1, RemoteCmd.SYSMEM_READ, 1, handle, 0, 4)[0]
    s2 = rig.session()
    probe(s2)
    assert "invalid sysmem handle 0" in err(s2, RemoteCmd.SYSMEM_READ, 0, handle, 0, 4)[0]
    s2.close()
    s1.close()


def test_session_close_releases_devices_and_locks(rig: Rig) -> None:
    s = rig.session()
    probe(s)
    ok(s, RemoteCmd.CFG_READ, 0, 0, 0, 4)
    with pytest.raises(DeviceBusyError):
        MockPCIDevice("SV", "mock:gpu")
    other = rig.session()  # the device is locked by the first session
    probe(other)
    assert "cannot open device mock:gpu: DeviceBusyError" in err(other, RemoteCmd.CFG_READ, 0, 0, 0, 4)[0]
    other.close()
    s.close()
    s.close()  # idempotent
    MockPCIDevice("SV", "mock:gpu").close()
    assert s.feed(pack_request(RemoteCmd.PING)) == ([], True)


def test_reset_and_resize(rig: Rig) -> None:
    s = rig.session()
    probe(s)
    ok(s, RemoteCmd.RESET)
    assert ok(s, RemoteCmd.MAP_BAR, 0, 0)[1] == MIB
    assert not post(s, RemoteCmd.MMIO_WRITE, 0, 0, MIB - 4, b"abcd")
    ok(s, RemoteCmd.RESIZE_BAR, 0, 0)
    assert ok(s, RemoteCmd.MAP_BAR, 0, 0)[1] == 4 * MIB
    assert ok(s, RemoteCmd.MMIO_READ, 0, 0, 4 * MIB - 4, 4)[2] == bytes(4)  # remapped at the new size
    text, close = err(s, RemoteCmd.RESIZE_BAR, 0, 5)
    assert "RESIZE_BAR failed: RuntimeError: Cannot resize BAR 5" in text and not close
    s.close()
    denied = Rig(deny_reset=True).session()
    probe(denied)
    assert "RESET is disabled" in err(denied, RemoteCmd.RESET)[0]
    denied.close()


def test_reset_count_on_a_static_device() -> None:
    dev = MockPCIDevice("SV", "mock:static", lock=False)
    server = RemoteServer(StaticProvider([dev]))
    s = server.new_session()
    assert probe(s) == ["mock:static:0"]
    ok(s, RemoteCmd.RESET)
    ok(s, RemoteCmd.RESET)
    s.close()
    assert dev.reset_count == 2 and not dev.closed  # shared devices outlive sessions


def test_feed_stops_at_its_reply_limit_until_called_again(rig: Rig) -> None:
    """Back-pressure (issue 29 finding 4): with a reply limit, requests beyond it stay buffered, unanswered and not
    executed, until the caller has sent what it got and calls `feed` again."""
    s = rig.session()
    probe(s)
    reads = pack_request(RemoteCmd.MMIO_READ, 0, 5, 0, 4096) * 10
    replies, close = s.feed(reads, reply_limit=8192)
    assert (len(replies), close, s.stalled) == (2, False, True)
    assert len(rig.bar5.accesses) == 2  # the other eight reads have not touched the device
    total = len(replies)
    while s.stalled:
        replies, close = s.feed(b"", reply_limit=8192)
        total += len(replies)
    assert total == 10 and not close and len(rig.bar5.accesses) == 10
    s.close()


def test_unknown_command_closes(rig: Rig) -> None:
    s = rig.session()
    replies, close = s.feed(struct.pack("<BIIQQQ", 42, 0, 0, 0, 0, 0) + pack_request(RemoteCmd.PING))
    assert close and len(replies) == 1 and b"unknown command 42" in replies[0].data


def test_requests_after_a_closing_one_are_ignored(rig: Rig) -> None:
    s = rig.session()
    stream = pack_request(RemoteCmd.PING) + pack_request(RemoteCmd.MMIO_WRITE, 0, 5, 0, 4, 0, b"abcd")
    stream += pack_request(RemoteCmd.PING)
    replies, close = s.feed(stream)  # the write fails (device 0 not probed): close, no further replies
    assert close and len(replies) == 1


class NoSharedMemoryGPU(MockPCIDevice):
    alloc_sysmem_shared = None  # a device that cannot hand out its DMA memory as an fd


class RefusingGPU(MockPCIDevice):
    def alloc_sysmem_shared(self, size: int, contiguous: bool = False) -> Any:
        raise NotImplementedError("no shared memory here")


def test_map_sysmem_fd_needs_unix_and_device_support(rig: Rig) -> None:
    s = rig.session("tcp")
    probe(s)
    assert "MAP_SYSMEM_FD requires a unix socket" in err(s, RemoteCmd.MAP_SYSMEM_FD, 0, 0, 4096, 0)[0]
    s.close()
    plain = RemoteServer(StaticProvider([NoSharedMemoryGPU("SV", "mock:plain", lock=False)]))
    s = plain.new_session("unix")
    probe(s)
    assert "not supported" in err(s, RemoteCmd.MAP_SYSMEM_FD, 0, 0, 4096, 0)[0]
    s.close()
    refusing = RemoteServer(StaticProvider([RefusingGPU("SV", "mock:refusing", lock=False)]))
    s = refusing.new_session("unix")
    probe(s)
    text, close = err(s, RemoteCmd.MAP_SYSMEM_FD, 0, 0, 4096, 0)
    assert text == "MAP_SYSMEM_FD is not supported by device 0: no shared memory here" and not close
    s.close()
    with pytest.raises(ValueError, match="transport"):
        rig.session("udp")


def test_map_sysmem_fd_reply_carries_fd_and_address_table() -> None:
    dev = MockPCIDevice("SV", "mock:shared", lock=False, shared_sysmem=True)
    s = RemoteServer(StaticProvider([dev])).new_session("unix")
    probe(s)
    replies, close = s.feed(pack_request(RemoteCmd.MAP_SYSMEM_FD, 0, 0, 5000, 1))
    assert not close and len(replies) == 1 and replies[0].fd is not None
    status, mapped, handle = unpack_response_header(replies[0].data)
    assert (status, mapped, handle) == (0, 8192, 0)
    table = os.pread(replies[0].fd, 48, 0)
    os.close(replies[0].fd)
    paddrs = decode_addr_table(table, 5000)
    assert len(paddrs) == 2 and paddrs[1] == paddrs[0] + 4096  # contiguous: one (paddr, 8192) range
    assert dev.dma_read(paddrs[0], 16) == table[:16]  # the device sees the same memory
    s.close()


def test_auth_flow() -> None:
    r = Rig(token="s3cret")
    s = r.session()
    text, close = err(s, RemoteCmd.PING)
    assert text == "authentication required" and close
    s = r.session()  # a payload command before AUTH is refused at the header, its payload never buffered
    replies, close = s.feed(pack_request(RemoteCmd.MMIO_WRITE, 0, 0, 0, 1 << 20))
    assert close and b"authentication required" in replies[0].data
    s = r.session()
    text, close = err(s, RemoteCmd.AUTH, arg1=5, payload=b"wrong")
    assert text == "authentication failed" and close and s.close_delay > 0
    s = r.session()
    replies, close = s.feed(pack_request(RemoteCmd.AUTH, arg1=257) + b"x" * 257)
    assert close
    s = r.session()
    ok(s, RemoteCmd.AUTH, arg1=6, payload=b"s3cret")
    assert s.authenticated
    assert probe(s) == ["mock:gpu:0"]
    ok(s, RemoteCmd.AUTH, arg1=6, payload=b"ignored")  # already authenticated
    s.close()
    s = r.session()  # AUTH pipelined with requests that carry payloads, in one chunk
    probe_payload = encode_probe_payload(NAVI31)
    replies, close = s.feed(
        pack_request(RemoteCmd.AUTH, arg1=6, payload=b"s3cret")
        + pack_request(RemoteCmd.PROBE, 0, 0, 0, len(probe_payload), 0x1002, probe_payload)
    )
    assert not close and [r.data[0] for r in replies] == [0, 0] and replies[1].data.endswith(b"mock:gpu:0")
    s.close()
    open_server = Rig().session()
    ok(open_server, RemoteCmd.AUTH, arg1=3, payload=b"any")  # AUTH without a configured token is accepted


def test_allowlist() -> None:
    assert parse_allow("1002:744c") == (0x1002, 0x744C)
    assert parse_allow("0x8086") == (0x8086, None)
    for bad in ("", "xyz", "1:2:3", "10000", "1002:10000"):
        with pytest.raises(ValueError, match=r"VENDOR|16-bit"):
            parse_allow(bad)
    s = Rig(allow=[(0x1002, 0x744C)]).session()
    assert probe(s, 0x1002, ((0, (0,)),)) == ["mock:gpu:0"]
    assert probe(s, 0x8086, ((0, (0,)),)) == []
    s.close()
    s = Rig(allow=[(0x1002, 0x7480)]).session()
    assert probe(s, 0x1002, ((0, (0,)),)) == []
    s.close()
    s = Rig(allow=[(0x8086, None)]).session()
    assert probe(s, 0x8086, ((0xFFFF, (0x1533,)),)) == ["mock:nic:0"]
    assert probe(s) == []
    s.close()


def test_limits_validation() -> None:
    with pytest.raises(ValueError, match="max_xfer must be positive"):
        Limits(max_xfer=0)
    with pytest.raises(ValueError, match="io_timeout"):
        Limits(io_timeout=0)
    with pytest.raises(ValueError, match="idle_timeout"):
        Limits(idle_timeout=-1)
    with pytest.raises(ValueError, match=r"token must be 1\.\.256 bytes"):
        RemoteServer(StaticProvider([]), token="x" * 257)


# ---- in-process fuzzing (spec §8.4 a) ------------------------------------------------------------------------------

BOUNDARY = [
    0,
    1,
    2,
    3,
    4,
    8,
    0xFF,
    0x100,
    4095,
    4096,
    4097,
    0xFFFF,
    0x10000,
    64 * 1024 - 1,
    64 * 1024,
    MIB - 1,
    MIB,
    2**31,
    2**32 - 1,
    2**32,
    2**63,
    2**64 - 1,
]


def _field(rng: random.Random, bits: int) -> int:
    if rng.random() < 0.7:
        return rng.choice([v for v in BOUNDARY if v < 1 << bits])
    return rng.getrandbits(bits)


def _fuzz_case(rng: random.Random, recorded: bytes) -> bytes:
    kind = rng.randrange(5)
    if kind == 0:
        return rng.randbytes(rng.randrange(201))
    if kind == 4:  # byte-level mutation of a recorded valid session
        data = bytearray(recorded)
        for _ in range(rng.randint(1, 8)):
            op, pos = rng.randrange(3), rng.randrange(len(data))
            if op == 0:
                data[pos] ^= 1 << rng.randrange(8)
            elif op == 1:
                data.insert(pos, rng.randrange(256))
            else:
                del data[pos]
        return bytes(data)
    out = bytearray()
    for _ in range(rng.randint(1, 6)):
        cmd = rng.choice([*RemoteCmd, *RemoteCmd, rng.randrange(256)])
        dev_id = rng.choice([0, 0, 1, 2, 2**32 - 1])
        bar = rng.choice([0, 1, 2, 5, 6, 2**32 - 1, rng.getrandbits(32)])
        arg0, arg1, arg2 = _field(rng, 64), _field(rng, 64), _field(rng, 64)
        if cmd == RemoteCmd.PROBE and rng.random() < 0.5:
            arg0, arg1, arg2 = 0, 8, 0x1002
        header = struct.pack("<BIIQQQ", cmd, dev_id, bar, arg0, arg1, arg2)
        if cmd in PAYLOAD_CMDS:
            want = min(arg1, 512)
            shape = rng.randrange(4)
            payload = rng.randbytes(
                want
                if shape == 0
                else max(0, want - rng.randint(1, 8))
                if shape == 1
                else want + rng.randint(1, 8)
                if shape == 2
                else 0
            )
            if cmd == RemoteCmd.PROBE and arg1 == 8:
                payload = encode_probe_payload(NAVI31)
            header += payload
        out += header
    return bytes(out)


def _recorded_session() -> bytes:
    probe_payload = encode_probe_payload(NAVI31)
    return b"".join(
        [
            pack_request(RemoteCmd.PROBE, 0, 0, 0, len(probe_payload), 0x1002, probe_payload),
            pack_request(RemoteCmd.MAP_BAR, 0, 5),
            pack_request(RemoteCmd.MMIO_WRITE, 0, 5, 0x100, 8, 0, b"ABCDEFGH"),
            pack_request(RemoteCmd.MMIO_READ, 0, 5, 0xFFFC, 4),
            pack_request(RemoteCmd.CFG_READ, 0, 0, 0, 4),
            pack_request(RemoteCmd.MAP_SYSMEM, 0, 0, 8192, 0),
            pack_request(RemoteCmd.SYSMEM_WRITE, 0, 0, 4, 4, 0, b"wxyz"),
            pack_request(RemoteCmd.SYSMEM_READ, 0, 0, 0, 16),
            pack_request(RemoteCmd.PING),
        ]
    )


@quiet_server_log()  # thousands of expected error lines
def test_fuzz_session_feed() -> None:
    """5 000 malformed or mixed request streams: no exception escapes, no out-of-bounds device access ever."""
    rig = Rig(limits=Limits(max_xfer=64 * 1024, max_alloc=64 * 1024, max_total=256 * 1024))
    rng = random.Random(0x7A11)
    recorded = _recorded_session()
    device_errors: list[BaseException] = []
    for _ in range(5000):
        s = rig.session()
        data = _fuzz_case(rng, recorded)
        pos = 0
        while pos < len(data) and not s.finished:
            step = rng.choice([1, 7, 33, len(data)])
            _, close = s.feed(data[pos : pos + step])
            pos += step
            if close:
                break
        assert s.total_alloc <= rig.server.limits.max_total
        device_errors += s.device_errors
        s.close()
    # the only device-level failure the server cannot pre-validate: resizing a BAR without a REBAR capability
    assert all(isinstance(e, RuntimeError) and "Cannot resize BAR" in str(e) for e in device_errors), device_errors
    assert rig.violations == []
    assert rig.bar5.oob == [] and rig.bar5.guards_intact()
    fresh = rig.session()
    assert probe(fresh) == ["mock:gpu:0"]
    ok(fresh, RemoteCmd.PING)
    fresh.close()


# ---- desynchronisation oracle (hypothesis): replies to valid requests are exact, whatever surrounds them -------------

_offsets = st.one_of(st.sampled_from(BOUNDARY), st.integers(0, 2**64 - 1))
_sizes = st.one_of(st.sampled_from([0, 1, 2, 3, 4, 5, 8, 16, 4096, 64 * 1024, 2**64 - 1]), st.integers(0, 300))
_reads = st.one_of(
    st.tuples(st.just(RemoteCmd.MMIO_READ), st.sampled_from([0, 1, 2, 5, 6, 99]), _offsets, _sizes),
    st.tuples(st.just(RemoteCmd.CFG_READ), st.just(0), _offsets, st.sampled_from([0, 1, 2, 3, 4, 8])),
    st.tuples(st.just(RemoteCmd.MAP_BAR), st.integers(0, 8), st.just(0), st.just(0)),
    st.tuples(st.just(RemoteCmd.PING), st.just(0), st.just(0), st.just(0)),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(_reads, min_size=1, max_size=12), st.integers(1, 64))
def test_reply_stream_matches_reference(requests: list[tuple[int, int, int, int]], chunk: int) -> None:
    """Mixed valid and invalid non-posted requests: the reply stream equals what a reference computes directly."""
    with quiet_server_log():  # the invalid requests log expected errors
        ref = MockPCIDevice("REF", "mock:ref", bars={0: BarSpec(4096), 2: BarSpec(64 * 1024)}, lock=False)
        ref.map_bar(2).write(0, bytes(range(256)) * 256)
        server = RemoteServer(StaticProvider([ref]), limits=Limits(max_xfer=64 * 1024))
        session = server.new_session()
        stream = pack_request(RemoteCmd.PROBE, 0, 0, 0, 8, 0x1002, encode_probe_payload(NAVI31))
        # each expected reply: None for an error, ("data", bytes) for trailing data, ("fields", resp0, resp1)
        expected: list[tuple[Any, ...] | None] = [("data", b"mock:ref:0")]
        for cmd, bar, off, size in requests:
            stream += pack_request(cmd, 0, bar, off, size)
            if cmd == RemoteCmd.MMIO_READ:
                bar_size = ref.bar_info(bar)[1] if bar < 6 else 0
                good = bar_size > 0 and size <= 64 * 1024 and off + size <= bar_size
                expected.append(("data", ref.map_bar(bar).read(off, size)) if good else None)
            elif cmd == RemoteCmd.CFG_READ:
                good = size in (1, 2, 4) and off + size <= 4096
                expected.append(("fields", ref.read_config(off, size), 0) if good else None)
            elif cmd == RemoteCmd.MAP_BAR:
                expected.append(("fields", *ref.bar_info(bar)) if bar < 6 else None)
            else:  # PING answers the server's optional-command flags
                expected.append(("fields", SERVER_FEATURES, 0))
        out = b""
        for pos in range(0, len(stream), chunk):
            replies, close = session.feed(stream[pos : pos + chunk])
            assert not close
            out += b"".join(r.data for r in replies)
        for want in expected:  # parse the stream with the framing rules alone
            status, resp0, resp1 = unpack_response_header(out[:RESPONSE_SIZE])
            body, out = out[RESPONSE_SIZE:], b""
            if want is None:
                assert status == 1
                out = body[resp0:]
            elif want[0] == "data":
                assert status == 0 and body[:resp0] == want[1]
                out = body[resp0:]
            else:
                assert (status, resp0, resp1) == (0, want[1], want[2])
                out = body
        assert out == b""
        session.close()
