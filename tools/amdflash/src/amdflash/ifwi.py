"""IFWI image checks and the resolver that maps a PSP-requested item type to a slice of the 2 MiB image."""

from __future__ import annotations

from collections.abc import Callable

FLASH_SIZE = 0x200000
IFWI_MAGIC = bytes([0xAA, 0x55, 0xAA, 0x55])
SGN_POINTER = 0x1000
ISH_PAYLOAD_OFFSET = 0x12010
ISH_PAYLOAD_SIZE = 0x12018

# Items with a fixed (offset, size)
FIXED_ITEMS: dict[int, tuple[int, int]] = {
    0x01: (0x0, 0x54),
    0x04: (0x10000, 0x1000),
    0x05: (0x11000, 0x1000),
    0x06: (0x12000, 0x20),
    0x07: (0x13000, 0x20),
    0x80: (SGN_POINTER, 4),
    0x89: (0x1F0000, 0x100),
}
PSP_DIRECTORIES = {0x02: 0x2000, 0x03: 0x3000}


def size_error(path: str, actual: int, what: str = "image") -> ValueError:
    """The one wording of a wrong-size image, for every command: what was expected and what the file holds."""
    return ValueError(f"{what} must be exactly {FLASH_SIZE:#x} bytes (2 MiB); {path} has {actual:#x} bytes")


def check_image_size(image: bytes, path: str = "the image", actual: int | None = None, what: str = "image") -> bytes:
    """Return `image` if it is exactly 2 MiB, else raise `size_error` (`actual`: the file's size, if known)."""
    if len(image) != FLASH_SIZE:
        raise size_error(path, len(image) if actual is None else actual, what)
    return image


def _u32(image: bytes, off: int, what: str) -> int:
    if off < 0 or off + 4 > len(image):
        raise ValueError(f"malformed IFWI: {what} at {off:#x} is outside the image")
    return int.from_bytes(image[off : off + 4], "little")


def _sgn_table(image: bytes) -> int:
    table = _u32(image, SGN_POINTER, "$SGN table pointer")
    if image[table : table + 4] != b"$SGN":
        raise ValueError("invalid $SGN table pointer")
    return table


def locate_ifwi_item(image: bytes, item: int) -> tuple[int, int]:
    """Return `(offset, size)` of `item` inside the IFWI image; ValueError when unsupported or malformed."""
    if item in FIXED_ITEMS:
        return FIXED_ITEMS[item]
    if item in PSP_DIRECTORIES:
        off = PSP_DIRECTORIES[item]
        if image[off : off + 4] != b"$PSP":
            raise ValueError(f"invalid PSP directory at {off:#x}")
        return off, (_u32(image, off + 8, "PSP directory count") + 1) * 0x10
    if item == 0x81:
        table = _sgn_table(image)
        return table, (_u32(image, table + 8, "$SGN count") + 1) * 0x10
    if 0x82 <= item <= 0x88:
        table = _sgn_table(image)
        wanted = item - 0x81
        count = _u32(image, table + 8, "$SGN count")
        count = min(count, max(0, (len(image) - table - 0x10) // 16))
        found = []
        for i in range(count):
            entry = table + 0x10 + 16 * i
            if _u32(image, entry, "$SGN entry type") == wanted:
                found.append((_u32(image, entry + 12, "$SGN entry offset"), _u32(image, entry + 8, "$SGN entry size")))
        if len(found) != 1:
            raise ValueError(f"missing $SGN type {wanted}")
        return found[0]
    if item == 0x08:
        return _u32(image, ISH_PAYLOAD_OFFSET, "ISH payload offset"), _u32(image, ISH_PAYLOAD_SIZE, "ISH payload size")
    raise ValueError(f"IFWI resolver does not yet support requested item {item:#x}")


def resolve_ifwi_item(image: bytes, item: int, out: Callable[[str], None] | None = print) -> tuple[int, bytes]:
    """Return `(offset, payload)` for the item the PSP requested, printing the resolution through `out`."""
    offset, size = locate_ifwi_item(image, item)
    payload = bytes(image[offset : offset + size])
    if len(payload) < size:
        raise ValueError(f"item {item:#x} extends beyond IFWI")
    if out is not None:
        out(f"resolved requested item {item:#x}: offset={offset:#x} size={size:#x}")
    return offset, payload


#: every item type `locate_ifwi_item` resolves, in the order `validate_ifwi` checks them
ALL_ITEMS: tuple[int, ...] = (*sorted(FIXED_ITEMS), *sorted(PSP_DIRECTORIES), 0x08, 0x81, *range(0x82, 0x89))
MAX_STREAM_SIZE = 0xFFFFFF  # the PSP mailbox's 24-bit size field


def validate_ifwi(image: bytes) -> bytes:
    """Check a whole IFWI image before anything is written or streamed; return it, or raise ValueError.

    Checks the size, the `AA 55 AA 55` magic, both `$PSP` directories, the `$SGN` table and that every item type the
    resolver knows lies inside the image with a size the PSP mailbox can stream (1..0xFFFFFF bytes, a multiple of 4).
    Zeros, all-0xFF, random and truncated files all fail here, so nothing reaches the flash or the PSP.
    """
    check_image_size(image)
    if image[:4] != IFWI_MAGIC:
        raise ValueError(f"not an IFWI image: it starts with {image[:4].hex()}, not the magic aa55aa55")
    for item in ALL_ITEMS:
        try:
            offset, size = locate_ifwi_item(image, item)
        except ValueError as exc:
            raise ValueError(f"invalid IFWI image: item {item:#x}: {exc}") from None
        if not 0 < size <= MAX_STREAM_SIZE or size % 4:
            raise ValueError(
                f"invalid IFWI image: item {item:#x} has size {size:#x} (must be 4..0xffffff, a multiple of 4)"
            )
        if offset + size > len(image):
            raise ValueError(
                f"invalid IFWI image: item {item:#x} at {offset:#x} size {size:#x} extends beyond the image"
            )
    return image
