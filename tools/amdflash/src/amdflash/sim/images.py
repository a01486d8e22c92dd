"""Deterministic synthetic test images (`build_ifwi` and friends) for the simulator and the tests."""

from __future__ import annotations

import random
import struct

FLASH_SIZE = 0x200000
HALF = FLASH_SIZE // 2
MAGIC = bytes([0xAA, 0x55, 0xAA, 0x55])
SGN_TABLE = 0x14000
BAD_SIZES = (0, 0x1FFFFF, 0x200001, 0x100000)


def build_ifwi(seed: int) -> bytes:
    """A 2 MiB synthetic IFWI: random fill from `seed`, plus the structures the resolver reads.

    Layout: magic at 0; `$SGN` pointer at 0x1000; `$PSP` directories at 0x2000 (count 0x0F) and 0x3000 (count 0x1F);
    ISH payload offset/size at 0x12010/0x12018; `$SGN` table at 0x14000 with entries of type 1..7.
    """
    rng = random.Random(seed)
    image = bytearray(rng.randbytes(FLASH_SIZE))
    image[0:4] = MAGIC
    struct.pack_into("<I", image, 0x1000, SGN_TABLE)
    struct.pack_into("<4sII", image, 0x2000, b"$PSP", rng.getrandbits(32), 0x0F)
    struct.pack_into("<4sII", image, 0x3000, b"$PSP", rng.getrandbits(32), 0x1F)
    struct.pack_into("<I", image, 0x12010, 0x20000)
    struct.pack_into("<I", image, 0x12018, 0x8000)
    struct.pack_into("<4sII", image, SGN_TABLE, b"$SGN", rng.getrandbits(32), 7)
    for i in range(1, 8):
        struct.pack_into("<IIII", image, SGN_TABLE + 0x10 + 16 * (i - 1), i, 0, 0x100 * i, 0x15000 + 0x1000 * (i - 1))
    return bytes(image)


def build_mirrored(seed: int) -> bytes:
    """A 2 MiB image made of one random 1 MiB half (starting with the magic) repeated twice."""
    half = bytearray(random.Random(seed).randbytes(HALF))
    half[0:4] = MAGIC
    return bytes(half) * 2


def bad_sizes(seed: int = 0) -> list[bytes]:
    """Images of the wrong size: 0, 2 MiB - 1, 2 MiB + 1 and 1 MiB bytes."""
    rng = random.Random(seed)
    return [MAGIC[:size] + rng.randbytes(max(0, size - 4)) if size else b"" for size in BAD_SIZES]


def corrupt_sgn(seed: int) -> bytes:
    """`build_ifwi(seed)` with the `$SGN` magic broken."""
    image = bytearray(build_ifwi(seed))
    image[SGN_TABLE : SGN_TABLE + 4] = b"$SGX"
    return bytes(image)


def huge_sgn_count(seed: int) -> bytes:
    """`build_ifwi(seed)` whose `$SGN` entry count is 0xFFFFFFFF."""
    image = bytearray(build_ifwi(seed))
    struct.pack_into("<I", image, SGN_TABLE + 8, 0xFFFFFFFF)
    return bytes(image)
