"""Raw 2 MiB flash dump through the SMUIO ROM_INDEX/ROM_DATA indexed-read aperture (`fw dump`)."""

from __future__ import annotations

from collections.abc import Callable

from amdflash import regs
from amdflash.ifwi import FLASH_SIZE, IFWI_MAGIC
from amdflash.util import RegisterAccessor, bswap32
from tg.drivers.interrupts import critical

PAGE = 0x10000

UNAVAILABLE = "raw SMUIO ROM controller is unavailable; the SOC15 function-ROM aperture is not a raw SPI dump"
MIRRORED = "ROM aperture contains mirrored 1 MiB halves; refusing to write a non-raw 2 MiB dump"


def fw_rom_reg_encode(value: int) -> int:
    """Encode a value written to ROM_CNTL/ROM_INDEX on the `fw dump` path.

    The original tools byte-swap every such write (reads are used unswapped). Whether this is a hardware quirk or a
    bug is unconfirmed; this single helper is where it would be flipped after a hardware check.
    """
    return bswap32(value)


def validate_dump(data: bytes) -> bytes:
    """Raise RuntimeError unless `data` is a plausible raw image: 2 MiB, IFWI magic, halves not mirrored."""
    if len(data) != FLASH_SIZE or data[:4] != IFWI_MAGIC:
        raise RuntimeError(f"invalid raw flash dump: size={len(data):#x} magic={data[:4].hex()}")
    half = FLASH_SIZE // 2
    if data[:half] == data[half:]:
        raise RuntimeError(MIRRORED)
    return data


def dump_rom_aperture(bar5: RegisterAccessor, progress: Callable[[int, int], None] | None = None) -> bytes:
    """Read the whole flash through ROM_DATA (one 32-bit read per dword) and return it, validated.

    `progress(done, total)` is called after each 64 KiB page.
    ROM_INDEX and ROM_CNTL are restored (through `fw_rom_reg_encode`) in a `finally`.
    """
    with critical():
        c0 = bar5.read32(regs.ROM_CNTL)
        i0 = bar5.read32(regs.ROM_INDEX)
    if c0 == regs.ROM_CNTL_ABSENT:
        raise RuntimeError(UNAVAILABLE)
    out = bytearray()
    try:
        with critical():
            bar5.write32(regs.ROM_CNTL, fw_rom_reg_encode(c0 | regs.ROM_CNTL_INDEXED_DUMP))
        for page in range(0, FLASH_SIZE, PAGE):
            with critical():  # ROM_INDEX and the reads of its page go together
                bar5.write32(regs.ROM_INDEX, fw_rom_reg_encode(page >> 8))
                read32 = bar5.read32
                words = [read32(regs.ROM_DATA) for _ in range(PAGE // 4)]
            out += b"".join(w.to_bytes(4, "little") for w in words)
            if progress is not None:
                progress(page + PAGE, FLASH_SIZE)
    finally:
        with critical():  # both restores happen, whatever arrives meanwhile
            bar5.write32(regs.ROM_INDEX, fw_rom_reg_encode(i0))
            bar5.write32(regs.ROM_CNTL, fw_rom_reg_encode(c0))
    return validate_dump(bytes(out))
