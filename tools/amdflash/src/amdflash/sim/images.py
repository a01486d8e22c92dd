"""Deterministic synthetic test images (`build_ifwi` and friends) for the simulator and the tests."""

from __future__ import annotations

import random
import struct

FLASH_SIZE = 0x200000
HALF = FLASH_SIZE // 2
MAGIC = bytes([0xAA, 0x55, 0xAA, 0x55])
SGN_TABLE = 0x14000
BAD_SIZES = (0, 0x1FFFFF, 0x200001, 0x100000)
#: where the synthetic images keep their VBIOS (a 64 KiB PCI option ROM), and the board the default images are for
VBIOS_OFFSET, VBIOS_SIZE = 0x40000, 0x10000
DEFAULT_SUBSYSTEM = (0x1002, 0x0E3A)  # = SimConfig().subsystem: default images are for the default board
OTHER_SUBSYSTEM = (0x1DA2, 0xE471)  # "another board" of the same GPU


def build_ifwi(seed: int, *, device: int = 0x744C, subsystem: tuple[int, int] = DEFAULT_SUBSYSTEM) -> bytes:
    """A 2 MiB synthetic IFWI: random fill from `seed`, plus the structures the resolver and the image checks read.

    Layout: magic at 0; `$SGN` pointer at 0x1000; `$PSP` directories at 0x2000 (count 0x0F) and 0x3000 (count 0x1F);
    ISH payload offset/size at 0x12010/0x12018; `$SGN` table at 0x14000 with entries of type 1..7 (their signature
    blobs random); a VBIOS at 0x40000 for GPU 1002:`device` on board `subsystem`. The directories and the `$SGN`
    table carry correct checksums (`amdflash.image.fletcher32`), the VBIOS a correct 8-bit checksum.
    """
    from amdflash.image import fletcher32

    rng = random.Random(seed)
    image = bytearray(rng.randbytes(FLASH_SIZE))
    image[0:4] = MAGIC
    struct.pack_into("<I", image, 0x1000, SGN_TABLE)
    for offset, count in ((0x2000, 0x0F), (0x3000, 0x1F), (SGN_TABLE, 7)):
        struct.pack_into("<4sII", image, offset, b"$SGN" if offset == SGN_TABLE else b"$PSP", 0, count)
    struct.pack_into("<I", image, 0x12010, 0x20000)
    struct.pack_into("<I", image, 0x12018, 0x8000)
    for i in range(1, 8):
        struct.pack_into("<IIII", image, SGN_TABLE + 0x10 + 16 * (i - 1), i, 0, 0x100 * i, 0x15000 + 0x1000 * (i - 1))
    for offset, count in ((0x2000, 0x0F), (0x3000, 0x1F), (SGN_TABLE, 7)):
        struct.pack_into("<I", image, offset + 4, fletcher32(bytes(image[offset + 8 : offset + 16 + 16 * count])))
    image[VBIOS_OFFSET : VBIOS_OFFSET + VBIOS_SIZE] = build_vbios(rng, device, subsystem)
    return bytes(image)


def build_vbios(rng: random.Random, device: int, subsystem: tuple[int, int]) -> bytes:
    """A 64 KiB PCI option ROM: `55 AA`, size 0x80 x 512, PCIR (1002:`device`) at 0x200, ATOM header at 0x220 with
    the subsystem ids, random code, and a checksum byte that makes the 8-bit sum zero."""
    rom = bytearray(rng.randbytes(VBIOS_SIZE))
    rom[0:3] = bytes([0x55, 0xAA, VBIOS_SIZE // 512])
    struct.pack_into("<H", rom, 0x18, 0x200)
    struct.pack_into("<H", rom, 0x48, 0x220)
    struct.pack_into(
        "<4sHHHHBBBBHHBBH", rom, 0x200, b"PCIR", 0x1002, device, 0, 0x18, 0, 0, 0, 3, VBIOS_SIZE // 512, 0, 0, 0x80, 0
    )
    rom[0x220:0x240] = bytes(0x20)
    struct.pack_into("<HBB4s", rom, 0x220, 0x24, 2, 2, b"ATOM")
    struct.pack_into("<HH", rom, 0x220 + 0x18, *subsystem)
    rom[0x21] = 0
    rom[0x21] = -sum(rom) & 0xFF
    return bytes(rom)


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
