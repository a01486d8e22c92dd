"""What can be checked of an IFWI image before it is written: its own checksums and signature structure, and whether
it was built for the board it is about to be written to.

The PSP verifies the signatures cryptographically at boot; we cannot (AMD's keys are not ours). What we check:

* both `$PSP` directories and the `$SGN` table carry the AMD PSP directory checksum: Fletcher-32 (16-bit little-endian
  words, sums folded modulo 65535, both starting at 0xFFFF) over the table from its entry count to its last entry;
* every signature blob the `$SGN` table lists is neither erased (all 0xFF) nor holds a run of 64 zero bytes (a real
  RSA signature practically never does; zeroed signature bytes do);
* the image holds a VBIOS (a PCI option ROM: `55 AA`, a `PCIR` structure, an ATOM ROM header) whose 8-bit checksum is
  right; its PCI vendor/device and its ATOM subsystem ids say which board it is for.

The board's identity comes from its PCI config space (vendor, device, subsystem ids) and, when the flash still holds
a VBIOS where the image has one, from that VBIOS. Any mismatch is refused unless the user insists (`--force`).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from amdflash.ifwi import PSP_DIRECTORIES, SGN_POINTER

__all__ = [
    "BoardIdentity",
    "VBios",
    "find_vbios",
    "fletcher32",
    "identity_problems",
    "image_problems",
    "parse_vbios",
]

VBIOS_ALIGN = 0x200  # option ROMs start on 512-byte boundaries
#: bytes of a VBIOS that hold everything `parse_vbios` needs (ROM header, PCIR structure, ATOM ROM header)
VBIOS_HEADER_BYTES = 0x400
ZERO_RUN = bytes(64)


def fletcher32(data: bytes) -> int:
    """The AMD PSP directory checksum of `data` (an even number of bytes)."""
    c0 = c1 = 0xFFFF
    words = [w for (w,) in struct.iter_unpack("<H", data[: len(data) & ~1])]
    for start in range(0, len(words), 359):  # 359 words keep both sums below 2**32 between folds
        for w in words[start : start + 359]:
            c0 += w
            c1 += c0
        c0 = (c0 & 0xFFFF) + (c0 >> 16)
        c1 = (c1 & 0xFFFF) + (c1 >> 16)
    c0 = (c0 & 0xFFFF) + (c0 >> 16)
    c1 = (c1 & 0xFFFF) + (c1 >> 16)
    return ((c1 << 16) | c0) & 0xFFFFFFFF


def _u16(data: bytes, off: int) -> int:
    return int.from_bytes(data[off : off + 2], "little") if 0 <= off and off + 2 <= len(data) else -1


def _u32(data: bytes, off: int) -> int:
    return int.from_bytes(data[off : off + 4], "little") if 0 <= off and off + 4 <= len(data) else -1


def table_checksum_problem(image: bytes, offset: int, what: str) -> str | None:
    """The problem with the checksum of the directory-style table at `offset` (None when it is right)."""
    count = _u32(image, offset + 8)
    end = offset + 16 + 16 * count
    if count < 0 or end > len(image):
        return f"{what} at {offset:#x}: its entries run past the image"
    stored, actual = _u32(image, offset + 4), fletcher32(image[offset + 8 : end])
    if stored != actual:
        return f"{what} at {offset:#x}: checksum {stored:#010x} does not match its contents ({actual:#010x})"
    return None


def signature_problems(image: bytes) -> list[str]:
    """Problems with the signature blobs the `$SGN` table lists (the table itself was validated structurally)."""
    table = _u32(image, SGN_POINTER)
    count = min(_u32(image, table + 8), max(0, (len(image) - table - 0x10) // 16))
    problems = []
    for i in range(count):
        entry = table + 0x10 + 16 * i
        kind, size, offset = _u32(image, entry), _u32(image, entry + 8), _u32(image, entry + 12)
        blob = image[offset : offset + size]
        if not blob or blob.count(0xFF) == len(blob):
            problems.append(f"signature {kind} at {offset:#x} is erased (all 0xff)")
        elif ZERO_RUN in blob:
            problems.append(f"signature {kind} at {offset:#x} has zeroed bytes (a run of {len(ZERO_RUN)} zeros)")
    return problems


@dataclass(frozen=True)
class BoardIdentity:
    """Which board something is for (an image's VBIOS) or is (a board's config space): PCI ids and subsystem ids."""

    vendor: int
    device: int
    subsystem_vendor: int = 0
    subsystem_id: int = 0

    @property
    def subsystem(self) -> tuple[int, int]:
        """`(subsystem vendor, subsystem id)`; `(0, 0)` when unknown."""
        return self.subsystem_vendor, self.subsystem_id

    def __str__(self) -> str:
        ids = f"{self.vendor:04x}:{self.device:04x}"
        return f"{ids} subsystem {self.subsystem_vendor:04x}:{self.subsystem_id:04x}" if any(self.subsystem) else ids


@dataclass(frozen=True)
class VBios:
    """A VBIOS found at `offset` of an image: its identity, size and whether its 8-bit checksum is right."""

    offset: int
    size: int
    identity: BoardIdentity
    checksum_ok: bool


def parse_vbios(data: bytes, offset: int = 0) -> tuple[BoardIdentity, int] | None:
    """The identity and size of a PCI option ROM starting at `data[offset]`, or None if there is none.

    Reads the `55 AA` signature, the PCIR structure (pointer at +0x18: vendor, device) and the ATOM ROM header
    (pointer at +0x48: subsystem vendor at +0x18, subsystem id at +0x1A); only the first `VBIOS_HEADER_BYTES` matter.
    """
    if data[offset : offset + 2] != b"\x55\xaa":
        return None
    pcir = offset + _u16(data, offset + 0x18)
    if data[pcir : pcir + 4] != b"PCIR":
        return None
    vendor, device = _u16(data, pcir + 4), _u16(data, pcir + 6)
    atom = offset + _u16(data, offset + 0x48)
    sub_vendor = sub_id = 0
    if data[atom + 4 : atom + 8] == b"ATOM":
        sub_vendor, sub_id = max(0, _u16(data, atom + 0x18)), max(0, _u16(data, atom + 0x1A))
    return BoardIdentity(vendor, device, sub_vendor, sub_id), data[offset + 2] * 512


def find_vbios(image: bytes) -> VBios | None:
    """The first VBIOS in the image (searched at 512-byte boundaries), or None."""
    for offset in range(0, len(image) - 0x50, VBIOS_ALIGN):
        if image[offset] != 0x55 or image[offset + 1] != 0xAA:
            continue
        parsed = parse_vbios(image, offset)
        if parsed is None:
            continue
        identity, size = parsed
        body = image[offset : offset + size]
        checksum_ok = size > 0 and len(body) == size and sum(body) & 0xFF == 0
        return VBios(offset, size, identity, checksum_ok)
    return None


def image_problems(image: bytes) -> list[str]:
    """What is wrong with a structurally valid IFWI image on its own: checksums, signature blobs, its VBIOS."""
    problems = [
        p
        for p in (
            *(table_checksum_problem(image, off, "$PSP directory") for off in sorted(PSP_DIRECTORIES.values())),
            table_checksum_problem(image, _u32(image, SGN_POINTER), "$SGN table"),
        )
        if p is not None
    ]
    problems += signature_problems(image)
    vbios = find_vbios(image)
    if vbios is None:
        problems.append("no VBIOS (PCI option ROM) in the image: which board it is for cannot be checked")
    elif not vbios.checksum_ok:
        problems.append(f"the VBIOS at {vbios.offset:#x} ({vbios.size:#x} bytes) fails its checksum")
    return problems


def identity_problems(image: VBios | None, board: BoardIdentity | None, on_flash: BoardIdentity | None) -> list[str]:
    """Mismatches between the board an image is for and the board it is about to be written to.

    `board` comes from the target's config space (None if unreadable; subsystem ids 0 when not programmed, as on a
    board whose flash is blank), `on_flash` from the VBIOS the flash holds now where the image has its own (None
    if there is none there).
    """
    if image is None:
        return []  # reported by image_problems
    want, problems = image.identity, []
    if board is not None and (board.vendor, board.device) != (want.vendor, want.device):
        problems.append(f"the image is for a {want.vendor:04x}:{want.device:04x} GPU, this board is {board}")
    elif board is not None and any(board.subsystem) and board.subsystem != want.subsystem:
        problems.append(f"the image is for board {want}, this board reports {board}")
    if on_flash is not None and on_flash.subsystem != want.subsystem:
        problems.append(f"the image is for board {want}, the flash now holds the VBIOS of board {on_flash}")
    return problems
