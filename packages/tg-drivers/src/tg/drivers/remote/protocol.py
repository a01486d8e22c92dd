"""Wire format of the remote PCI RPC: commands, fixed-size frames and a pure, incremental request parser.

Every integer on the wire is little-endian and packed. A request is a 33-byte header (`REQUEST_FMT`) optionally
followed by a payload whose length is one of the header fields; a response is a 17-byte header (`RESPONSE_FMT`)
optionally followed by trailing data. Nothing in this module does I/O, so both the client and the server (and the
fuzz tests) build on it.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass, field

REQUEST_FMT = "<BIIQQQ"
RESPONSE_FMT = "<BQQ"
REQUEST_SIZE = struct.calcsize(REQUEST_FMT)  # 33
RESPONSE_SIZE = struct.calcsize(RESPONSE_FMT)  # 17
DEFAULT_PORT = 6667

STATUS_OK = 0
STATUS_ERROR = 1

PAGE_SIZE = 4096
CONTIGUOUS_MAX = 2 << 20  # contiguous sysmem is one 2 MiB huge page at most
MAX_TOKEN_LEN = 256
MAX_PROBE_PAYLOAD = 64 << 10
CFG_SPACE_SIZE = 4096
NUM_BARS = 6

_U8, _U32, _U64 = (1 << 8) - 1, (1 << 32) - 1, (1 << 64) - 1
_REQUEST = struct.Struct(REQUEST_FMT)
_RESPONSE = struct.Struct(RESPONSE_FMT)


class RemoteCmd(enum.IntEnum):
    """Request command codes (u8, first byte of every request)."""

    PROBE = 0
    MAP_BAR = 1
    MAP_SYSMEM_FD = 2
    CFG_READ = 3
    CFG_WRITE = 4
    RESET = 5
    MMIO_READ = 6
    MMIO_WRITE = 7
    MAP_SYSMEM = 8
    SYSMEM_READ = 9
    SYSMEM_WRITE = 10
    RESIZE_BAR = 11
    PING = 12
    MMIO_BATCH = 13
    MMIO_BATCH_POSTED = 14
    AUTH = 0x80


#: commands followed by a payload of `arg1` bytes
PAYLOAD_CMDS = frozenset(
    {
        RemoteCmd.PROBE,
        RemoteCmd.MMIO_WRITE,
        RemoteCmd.SYSMEM_WRITE,
        RemoteCmd.AUTH,
        RemoteCmd.MMIO_BATCH,
        RemoteCmd.MMIO_BATCH_POSTED,
    }
)
#: PING's `resp0` on servers that have them (older servers answer 0): bit flags of optional commands;
#: FEATURE_MMIO_BATCH covers MMIO_BATCH and MMIO_BATCH_POSTED
FEATURE_MMIO_BATCH = 1
SERVER_FEATURES = FEATURE_MMIO_BATCH
#: largest MMIO_BATCH payload (4096 ops of 16 bytes)
MAX_BATCH_PAYLOAD = 64 << 10
#: posted commands: the server sends no response at all
POSTED_CMDS = frozenset({RemoteCmd.MMIO_WRITE, RemoteCmd.SYSMEM_WRITE, RemoteCmd.MMIO_BATCH_POSTED})
#: commands that do not refer to a device (`dev_id` is ignored)
DEVICELESS_CMDS = frozenset({RemoteCmd.PROBE, RemoteCmd.PING, RemoteCmd.AUTH})


def command_name(cmd: int) -> str:
    """`RemoteCmd` name of a command code, or its number for an unknown one."""
    try:
        return RemoteCmd(cmd).name
    except ValueError:
        return str(cmd)


@dataclass(frozen=True)
class Request:
    """One decoded request: header fields plus its payload (empty for commands without one)."""

    cmd: int
    dev_id: int = 0
    bar: int = 0
    arg0: int = 0
    arg1: int = 0
    arg2: int = 0
    payload: bytes = field(default=b"", repr=False)

    def describe(self) -> str:
        """One-line human-readable form for logs."""
        return (
            f"cmd={command_name(self.cmd)} dev={self.dev_id} bar={self.bar} arg0={self.arg0:#x} "
            f"arg1={self.arg1:#x} arg2={self.arg2:#x} payload={len(self.payload)}B"
        )


def _check_range(name: str, value: int, hi: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= hi:
        raise ValueError(f"{name} must be an int in [0, {hi:#x}], got {value!r}")


def pack_request(
    cmd: int, dev_id: int = 0, bar: int = 0, arg0: int = 0, arg1: int = 0, arg2: int = 0, payload: bytes = b""
) -> bytes:
    """Encode a request header (and append `payload`). Raises `ValueError` for fields that do not fit."""
    _check_range("cmd", int(cmd), _U8)
    _check_range("dev_id", dev_id, _U32)
    _check_range("bar", bar, _U32)
    for name, value in (("arg0", arg0), ("arg1", arg1), ("arg2", arg2)):
        _check_range(name, value, _U64)
    return _REQUEST.pack(int(cmd), dev_id, bar, arg0, arg1, arg2) + bytes(payload)


def unpack_request_header(data: bytes) -> Request:
    """Decode exactly `REQUEST_SIZE` header bytes (the payload is not included)."""
    if len(data) != REQUEST_SIZE:
        raise ValueError(f"request header must be {REQUEST_SIZE} bytes, got {len(data)}")
    return Request(*_REQUEST.unpack(data))


def pack_response(resp0: int = 0, resp1: int = 0, data: bytes = b"") -> bytes:
    """Encode an OK response header followed by trailing `data`."""
    return _RESPONSE.pack(STATUS_OK, resp0, resp1) + bytes(data)


def pack_error(message: str) -> bytes:
    """Encode an error response carrying a UTF-8 message."""
    msg = message.encode("utf-8", errors="replace")
    return _RESPONSE.pack(STATUS_ERROR, len(msg), 0) + msg


def unpack_response_header(data: bytes) -> tuple[int, int, int]:
    """Decode exactly `RESPONSE_SIZE` bytes into `(status, resp0, resp1)`."""
    if len(data) != RESPONSE_SIZE:
        raise ValueError(f"response header must be {RESPONSE_SIZE} bytes, got {len(data)}")
    status, resp0, resp1 = _RESPONSE.unpack(data)
    return status, resp0, resp1


def payload_length(cmd: int, arg1: int) -> int | None:
    """Length of the payload that follows a request header; `None` for an unknown command (length unknowable)."""
    if cmd not in RemoteCmd._value2member_map_:
        return None
    return arg1 if cmd in PAYLOAD_CMDS else 0


def encode_probe_payload(devices: tuple[tuple[int, tuple[int, ...]], ...]) -> bytes:
    """Flatten a discovery filter `((mask, (id, ...)), ...)` into the PROBE payload of (mask u32, id u32) pairs."""
    out = bytearray()
    for mask, ids in devices:
        for dev in ids:
            _check_range("device mask", mask, _U32)
            _check_range("device id", dev, _U32)
            out += struct.pack("<II", mask, dev)
    return bytes(out)


def decode_probe_payload(payload: bytes) -> tuple[tuple[int, tuple[int, ...]], ...]:
    """Regroup a PROBE payload of (mask, id) pairs by mask, keeping first-seen order."""
    if len(payload) % 8:
        raise ValueError(f"PROBE payload length must be a multiple of 8, got {len(payload)}")
    groups: dict[int, list[int]] = {}
    for mask, dev in struct.iter_unpack("<II", payload):
        groups.setdefault(mask, []).append(dev)
    return tuple((mask, tuple(ids)) for mask, ids in groups.items())


def encode_paddrs(paddrs: list[int]) -> bytes:
    """Pack a list of page bus addresses as u64s (trailing data of MAP_SYSMEM)."""
    return struct.pack(f"<{len(paddrs)}Q", *paddrs)


def decode_paddrs(data: bytes) -> list[int]:
    """Unpack the u64 page addresses that follow a MAP_SYSMEM response."""
    if len(data) % 8:
        raise ValueError(f"paddr list length must be a multiple of 8, got {len(data)}")
    return [v for (v,) in struct.iter_unpack("<Q", data)]


def encode_addr_table(ranges: list[tuple[int, int]]) -> bytes:
    """Pack (paddr, size) pairs terminated by a zero-size pair: the table MAP_SYSMEM_FD writes into the buffer."""
    return b"".join(struct.pack("<QQ", paddr, size) for paddr, size in ranges) + struct.pack("<QQ", 0, 0)


def decode_addr_table(data: bytes, size: int, mapped: int | None = None) -> list[int]:
    """Expand the (paddr, size) pairs at the start of a MAP_SYSMEM_FD buffer into `ceil(size/4096)` page addresses.

    The table comes from the server, so it is checked against the request rather than trusted: every range must be
    page aligned and inside the 64-bit bus address space, together they may not describe more than `mapped` bytes
    (the size of the mapping the server announced, when given), and only the pages the request needs are expanded,
    so a range that claims 2^46 bytes costs nothing. Raises `ValueError` for any inconsistency.
    """
    npages = (size + PAGE_SIZE - 1) // PAGE_SIZE
    limit = None if mapped is None else mapped // PAGE_SIZE
    pages: list[int] = []
    described = 0
    off = 0
    while len(pages) < npages:
        if off + 16 > len(data):
            raise ValueError(f"address table ends after {len(pages)} pages, need {npages}")
        paddr, length = struct.unpack_from("<QQ", data, off)
        entry = off // 16
        if length == 0:
            raise ValueError(f"address table covers {len(pages)} pages, need {npages}")
        if paddr % PAGE_SIZE or length % PAGE_SIZE:
            raise ValueError(f"address table entry {entry} ({paddr:#x}, {length:#x}) is not page aligned")
        if paddr + length > _U64 + 1:
            raise ValueError(f"address table entry {entry} ({paddr:#x}, {length:#x}) runs past 2**64")
        described += length // PAGE_SIZE
        if limit is not None and described > limit:
            raise ValueError(f"address table describes more than the {mapped:#x} bytes the server mapped")
        take = min(length // PAGE_SIZE, npages - len(pages))
        pages.extend(range(paddr, paddr + take * PAGE_SIZE, PAGE_SIZE))
        off += 16
    return pages


class ProtocolError(Exception):
    """A request that cannot be framed: unknown command or a payload over the parser's cap (the stream is lost)."""

    def __init__(self, message: str, header: Request | None = None) -> None:
        super().__init__(message)
        self.header = header


class RequestParser:
    """Incremental framing of a request stream: feed bytes in, get complete `Request`s out.

    `max_payload(cmd)` caps the payload length accepted per command; a longer payload (or an unknown command) makes
    `feed` raise `ProtocolError`, after which the parser is dead: the byte stream cannot be resynchronised.
    Memory is bounded by `REQUEST_SIZE + max(max_payload)`.
    """

    def __init__(self, max_payload: dict[int, int]) -> None:
        #: per-command payload caps; may be replaced between feeds (e.g. once a session is authenticated)
        self.max_payload = max_payload
        self._buf = bytearray()
        self._header: Request | None = None
        self._need = 0
        self.dead = False

    @property
    def mid_request(self) -> bool:
        """True while part of a request has arrived but not all of it."""
        return bool(self._buf) or self._header is not None

    def push(self, data: bytes) -> None:
        """Append received bytes (call `pop` to take complete requests out)."""
        if self.dead:
            raise ProtocolError("parser already failed")
        self._buf += data

    def pop(self) -> Request | None:
        """The next complete request, or None if more bytes are needed. Caps apply as of this call."""
        if self.dead:
            raise ProtocolError("parser already failed")
        if self._header is None:
            if len(self._buf) < REQUEST_SIZE:
                return None
            header = unpack_request_header(bytes(self._buf[:REQUEST_SIZE]))
            del self._buf[:REQUEST_SIZE]
            need = payload_length(header.cmd, header.arg1)
            if need is None:
                self.dead = True
                raise ProtocolError(f"unknown command {header.cmd}", header)
            cap = self.max_payload.get(header.cmd, 0)
            if need > cap:
                self.dead = True
                raise ProtocolError(
                    f"{command_name(header.cmd)} payload of {need} bytes exceeds the limit of {cap} bytes", header
                )
            self._header, self._need = header, need
        if len(self._buf) < self._need:
            return None
        payload = bytes(self._buf[: self._need])
        del self._buf[: self._need]
        h = self._header
        self._header, self._need = None, 0
        return Request(h.cmd, h.dev_id, h.bar, h.arg0, h.arg1, h.arg2, payload)

    def feed(self, data: bytes) -> list[Request]:
        """Consume `data` and return every request completed by it, in order."""
        self.push(data)
        out: list[Request] = []
        while (req := self.pop()) is not None:
            out.append(req)
        return out
