"""Property tests: resolver hardening, flash-model programming semantics, cyclic JEDEC detection."""

from __future__ import annotations

import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from amdflash.gd25 import has_jedec
from amdflash.ifwi import locate_ifwi_item
from amdflash.sim import build_ifwi
from amdflash.sim.flash import GD25Model

BASE = build_ifwi(11)
ITEMS = [0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, *range(0x80, 0x8A), 0x42]


@settings(max_examples=20, deadline=None)
@given(
    patches=st.lists(
        st.tuples(
            st.sampled_from([0x1000, 0x2008, 0x3008, 0x12010, 0x12018, 0x14000, 0x14008, 0x14010, 0x1401C]),
            st.integers(0, 0xFFFFFFFF),
        ),
        max_size=4,
    ),
    cut=st.integers(0, 0x200000),
)
def test_resolver_only_raises_value_error(patches: list[tuple[int, int]], cut: int) -> None:
    image = bytearray(BASE)
    for off, value in patches:
        struct.pack_into("<I", image, off, value)
    data = bytes(image[:cut])
    for item in ITEMS:
        try:
            offset, size = locate_ifwi_item(data, item)
        except ValueError:
            continue
        assert offset >= 0 and size >= 0


@settings(max_examples=30, deadline=None)
@given(
    addr=st.integers(0, 0x1FFFFF),
    old=st.binary(min_size=256, max_size=256),
    data=st.binary(min_size=1, max_size=256),
)
def test_program_ands_and_wraps_within_the_page(addr: int, old: bytes, data: bytes) -> None:
    page = addr & ~0xFF
    flash = bytearray(b"\xff" * 0x200000)
    flash[page : page + 256] = old
    chip = GD25Model(bytes(flash), jedec=b"\xc8\x60\x15", sr1=0, sr2=0, sr3=0, sfdp=b"", busy_reads=0)
    chip.execute(0x06, b"", b"", 0)
    chip.execute(0x02, addr.to_bytes(3, "big"), data, 0)
    want = bytearray(old)
    for i, byte in enumerate(data):
        want[((addr & 0xFF) + i) & 0xFF] &= byte
    assert chip.flash[page : page + 256] == want
    assert chip.flash[:page] == flash[:page] and chip.flash[page + 256 :] == flash[page + 256 :]


@given(rotation=st.integers(0, 3))
def test_rotated_jedec_capture_is_detected(rotation: int) -> None:
    capture = bytes([0xC8, 0x60, 0x15, 0xC8])
    assert has_jedec(capture[rotation:] + capture[:rotation])
