"""Remote PCI wire format: byte-exact test vectors (spec §6.3), framing helpers and the incremental request parser."""

from __future__ import annotations

import random
import struct

import pytest

from tg.drivers.remote import DEFAULT_PORT, REQUEST_FMT, RESPONSE_FMT, RemoteCmd
from tg.drivers.remote.protocol import (
    REQUEST_SIZE,
    RESPONSE_SIZE,
    ProtocolError,
    Request,
    RequestParser,
    decode_addr_table,
    decode_paddrs,
    decode_probe_payload,
    encode_addr_table,
    encode_paddrs,
    encode_probe_payload,
    pack_error,
    pack_request,
    pack_response,
    payload_length,
    unpack_request_header,
    unpack_response_header,
)


def h(text: str) -> bytes:
    return bytes.fromhex(text.replace(" ", ""))


def test_constants() -> None:
    assert (REQUEST_FMT, RESPONSE_FMT, DEFAULT_PORT) == ("<BIIQQQ", "<BQQ", 6667)
    assert (REQUEST_SIZE, RESPONSE_SIZE) == (33, 17)
    assert [int(c) for c in RemoteCmd] == [*range(15), 0x80]
    assert RemoteCmd.MMIO_WRITE == 7 and RemoteCmd.PING == 12 and RemoteCmd.AUTH == 0x80


@pytest.mark.parametrize(
    ("request_bytes", "expected"),
    [
        (pack_request(RemoteCmd.PING), "0c 00000000 00000000 0000000000000000 0000000000000000 0000000000000000"),
        (
            pack_request(RemoteCmd.MMIO_READ, 0, 5, 0x5A3A4, 4),
            "06 00000000 05000000 a4a3050000000000 0400000000000000 0000000000000000",
        ),
        (
            pack_request(RemoteCmd.CFG_WRITE, 0, 0, 4, 2, 6),
            "04 00000000 00000000 0400000000000000 0200000000000000 0600000000000000",
        ),
        (
            pack_request(RemoteCmd.PROBE, 0, 0, 0, 8, 0x1002, encode_probe_payload(((0xFFFF, (0x744C,)),))),
            "00 00000000 00000000 0000000000000000 0800000000000000 0210000000000000 ffff0000 4c740000",
        ),
    ],
)
def test_request_vectors(request_bytes: bytes, expected: str) -> None:
    assert request_bytes == h(expected)


def test_response_vectors() -> None:
    assert pack_response() == b"\x00" + bytes(16)
    assert pack_response(4, 0, b"\x01\x02\x03\x04") == h("00 0400000000000000 0000000000000000 01020304")
    assert pack_error("oops!") == h("01 0500000000000000 0000000000000000 6f6f707321")
    probe = pack_response(14, 1, b"0000:03:00.0:0")
    assert probe[:17] == h("00 0e00000000000000 0100000000000000") and probe[17:] == b"0000:03:00.0:0"
    assert unpack_response_header(pack_error("oops!")[:17]) == (1, 5, 0)


def test_request_roundtrip_and_field_ranges() -> None:
    raw = pack_request(RemoteCmd.SYSMEM_READ, 3, 7, 2**64 - 1, 1, 2)
    assert unpack_request_header(raw) == Request(RemoteCmd.SYSMEM_READ, 3, 7, 2**64 - 1, 1, 2)
    with pytest.raises(ValueError, match="arg0"):
        pack_request(RemoteCmd.PING, arg0=2**64)
    with pytest.raises(ValueError, match="dev_id"):
        pack_request(RemoteCmd.PING, dev_id=-1)
    with pytest.raises(ValueError, match="cmd"):
        pack_request(256)
    with pytest.raises(ValueError, match="33 bytes"):
        unpack_request_header(b"\x00" * 32)
    with pytest.raises(ValueError, match="17 bytes"):
        unpack_response_header(b"\x00" * 18)


def test_payload_lengths() -> None:
    assert payload_length(RemoteCmd.MMIO_WRITE, 100) == 100
    assert payload_length(RemoteCmd.SYSMEM_WRITE, 3) == 3
    assert payload_length(RemoteCmd.PROBE, 16) == 16
    assert payload_length(RemoteCmd.AUTH, 5) == 5
    assert payload_length(RemoteCmd.MMIO_READ, 100) == 0
    assert payload_length(99, 100) is None


def test_probe_payload_roundtrip() -> None:
    devices = ((0xFFFF, (0x744C, 0x7480)), (0xFF00, (0x2200,)))
    raw = encode_probe_payload(devices)
    assert len(raw) == 24
    assert decode_probe_payload(raw) == devices
    assert decode_probe_payload(b"") == ()
    with pytest.raises(ValueError, match="multiple of 8"):
        decode_probe_payload(b"\x00" * 7)


def test_paddrs_and_addr_table() -> None:
    assert decode_paddrs(encode_paddrs([0x1000, 0x3000])) == [0x1000, 0x3000]
    table = encode_addr_table([(0x10000, 0x2000), (0x40000, 0x1000)])
    assert len(table) == 48 and table[-16:] == bytes(16)
    assert decode_addr_table(table, 0x3000) == [0x10000, 0x11000, 0x40000]
    assert decode_addr_table(table, 0x1001) == [0x10000, 0x11000]
    with pytest.raises(ValueError, match="covers 3 pages, need 4"):
        decode_addr_table(table, 0x3001)
    with pytest.raises(ValueError, match="ends after"):
        decode_addr_table(table[:16], 0x3000)
    # issue 29 finding 10: a count of 2^34 pages was expanded whole; only the requested pages are, and `mapped` bounds
    huge = struct.pack("<QQ", 0x100000, 1 << 46)
    assert decode_addr_table(huge, 0x2000) == [0x100000, 0x101000]
    with pytest.raises(ValueError, match="describes more than the 0x2000 bytes the server mapped"):
        decode_addr_table(huge, 0x2000, mapped=0x2000)
    assert decode_addr_table(table, 0x3000, mapped=0x3000) == [0x10000, 0x11000, 0x40000]
    with pytest.raises(ValueError, match="not page aligned"):
        decode_addr_table(struct.pack("<QQ", 0x10000, 0x1800), 0x1000)


CAPS = {RemoteCmd.PROBE: 64, RemoteCmd.MMIO_WRITE: 1024, RemoteCmd.SYSMEM_WRITE: 1024, RemoteCmd.AUTH: 256}


def test_parser_byte_by_byte_and_batched() -> None:
    stream = (
        pack_request(RemoteCmd.PING)
        + pack_request(RemoteCmd.MMIO_WRITE, 1, 2, 8, 5, 0, b"hello")
        + pack_request(RemoteCmd.CFG_READ, 0, 0, 4, 2)
    )
    expected = [
        Request(RemoteCmd.PING),
        Request(RemoteCmd.MMIO_WRITE, 1, 2, 8, 5, 0, b"hello"),
        Request(RemoteCmd.CFG_READ, 0, 0, 4, 2),
    ]
    parser = RequestParser(CAPS)
    got: list[Request] = []
    for i in range(len(stream)):
        got += parser.feed(stream[i : i + 1])
        assert parser.mid_request == (i + 1 not in (33, 33 + 38, len(stream)))
    assert got == expected
    assert RequestParser(CAPS).feed(stream) == expected
    rng = random.Random(1)
    for _ in range(50):  # any split of the stream gives the same requests
        parser, got, pos = RequestParser(CAPS), [], 0
        while pos < len(stream):
            step = rng.randint(1, 40)
            got += parser.feed(stream[pos : pos + step])
            pos += step
        assert got == expected and not parser.mid_request


def test_parser_rejects_unknown_command_and_oversized_payload() -> None:
    parser = RequestParser(CAPS)
    with pytest.raises(ProtocolError, match="unknown command 99") as exc:
        parser.feed(struct.pack(REQUEST_FMT, 99, 0, 0, 0, 0, 0))
    assert exc.value.header is not None and exc.value.header.cmd == 99
    assert parser.dead
    with pytest.raises(ProtocolError, match="already failed"):
        parser.feed(b"")
    parser = RequestParser(CAPS)
    with pytest.raises(ProtocolError, match="exceeds the limit of 1024"):
        parser.feed(pack_request(RemoteCmd.MMIO_WRITE, arg1=1025))
    # commands without a cap accept no payload at all: only known commands with zero-length payloads pass
    assert RequestParser({}).feed(pack_request(RemoteCmd.MMIO_WRITE, arg1=0)) == [Request(RemoteCmd.MMIO_WRITE)]
    with pytest.raises(ProtocolError, match="limit of 0"):
        RequestParser({}).feed(pack_request(RemoteCmd.AUTH, arg1=1))


def test_parser_memory_is_bounded_by_caps() -> None:
    parser = RequestParser(CAPS)
    assert parser.feed(pack_request(RemoteCmd.SYSMEM_WRITE, arg1=1024) + b"x" * 1000) == []
    assert parser.mid_request
    (req,) = parser.feed(b"y" * 24 + pack_request(RemoteCmd.PING)[:10])
    assert req.payload == b"x" * 1000 + b"y" * 24
    assert parser.mid_request
