"""IFWI item resolver: expected table for synthetic images and every error path."""

from __future__ import annotations

import struct

import pytest

from amdflash.ifwi import FLASH_SIZE, check_image_size, locate_ifwi_item, resolve_ifwi_item
from amdflash.sim import build_ifwi, corrupt_sgn, huge_sgn_count

EXPECTED = {
    0x01: (0, 0x54),
    0x02: (0x2000, 0x100),
    0x03: (0x3000, 0x200),
    0x80: (0x1000, 4),
    0x81: (0x14000, 0x80),
    0x82: (0x15000, 0x100),
    0x88: (0x1B000, 0x700),
    0x89: (0x1F0000, 0x100),
    0x08: (0x20000, 0x8000),
}


@pytest.mark.parametrize("seed", [1, 7])
def test_expected_table(seed: int) -> None:
    image = build_ifwi(seed)
    lines: list[str] = []
    for item, (off, size) in EXPECTED.items():
        got_off, payload = resolve_ifwi_item(image, item, out=lines.append)
        assert (got_off, len(payload)) == (off, size)
        assert payload == image[off : off + size]
    assert lines[0] == "resolved requested item 0x1: offset=0x0 size=0x54"
    for i in range(1, 8):
        assert locate_ifwi_item(image, 0x81 + i) == (0x15000 + 0x1000 * (i - 1), 0x100 * i)


def test_bad_psp_directory() -> None:
    image = bytearray(build_ifwi(1))
    image[0x3000:0x3004] = b"XXXX"
    with pytest.raises(ValueError, match="invalid PSP directory at 0x3000"):
        locate_ifwi_item(bytes(image), 0x03)


def test_bad_sgn() -> None:
    image = corrupt_sgn(1)
    for item in (0x81, 0x84):
        with pytest.raises(ValueError, match=r"invalid \$SGN table pointer"):
            locate_ifwi_item(image, item)


def test_missing_and_duplicate_type() -> None:
    image = bytearray(build_ifwi(1))
    struct.pack_into("<I", image, 0x14010 + 16 * 2, 9)  # type 3 -> 9
    with pytest.raises(ValueError, match=r"missing \$SGN type 3"):
        locate_ifwi_item(bytes(image), 0x84)
    struct.pack_into("<I", image, 0x14010 + 16 * 2, 2)  # now type 2 twice
    with pytest.raises(ValueError, match=r"missing \$SGN type 2"):
        locate_ifwi_item(bytes(image), 0x83)


def test_item_beyond_image() -> None:
    image = bytearray(build_ifwi(1))
    struct.pack_into("<I", image, 0x12010, FLASH_SIZE - 0x100)
    with pytest.raises(ValueError, match="item 0x8 extends beyond IFWI"):
        resolve_ifwi_item(bytes(image), 0x08, out=None)


def test_unsupported_item() -> None:
    with pytest.raises(ValueError, match="IFWI resolver does not yet support requested item 0x42"):
        resolve_ifwi_item(build_ifwi(1), 0x42)


def test_malformed_pointer() -> None:
    image = bytearray(build_ifwi(1))
    struct.pack_into("<I", image, 0x1000, 0xFFFFFFF0)
    with pytest.raises(ValueError, match=r"invalid \$SGN table pointer"):
        locate_ifwi_item(bytes(image), 0x81)
    short = build_ifwi(1)[:0x1002]
    with pytest.raises(ValueError, match=r"malformed IFWI: \$SGN table pointer at 0x1000 is outside the image"):
        locate_ifwi_item(short, 0x81)


def test_huge_count_is_capped() -> None:
    image = huge_sgn_count(1)
    assert locate_ifwi_item(image, 0x82) == (0x15000, 0x100)
    with pytest.raises(ValueError, match="extends beyond IFWI"):
        resolve_ifwi_item(image, 0x81, out=None)  # (0xFFFFFFFF + 1) * 0x10 bytes


def test_sgn_table_near_the_end_is_bounds_checked() -> None:
    image = bytearray(build_ifwi(1))
    table = FLASH_SIZE - 0x14
    struct.pack_into("<I", image, 0x1000, table)
    struct.pack_into("<4sII", image, table, b"$SGN", 0, 100)
    with pytest.raises(ValueError, match=r"missing \$SGN type 1"):
        locate_ifwi_item(bytes(image), 0x82)


def test_check_image_size() -> None:
    assert check_image_size(bytes(FLASH_SIZE)) == bytes(FLASH_SIZE)
    with pytest.raises(ValueError, match="image must be exactly 0x200000 bytes"):
        check_image_size(bytes(FLASH_SIZE - 1))
