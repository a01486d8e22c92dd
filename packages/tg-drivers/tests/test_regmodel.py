"""DwordRegisterFile: hooks, strict mode, partial accesses, logging, reset."""

from __future__ import annotations

import pytest

from tg.drivers.errors import MockAccessError
from tg.drivers.mock import DwordRegisterFile, RegisterModel


def test_is_a_register_model_and_plain_memory() -> None:
    rf = DwordRegisterFile(64)
    assert isinstance(rf, RegisterModel)
    rf.write(3, b"\x01\x02\x03")
    assert rf.read(2, 5) == b"\x00\x01\x02\x03\x00"
    assert rf.peek(4) == 0x0302


def test_hooks_on_full_dword_access() -> None:
    rf = DwordRegisterFile(64)
    written: list[int] = []
    rf.on_read(8, lambda: 0x12345678)
    rf.on_write(8, written.append)
    assert rf.read(8, 4) == (0x12345678).to_bytes(4, "little")
    rf.write(8, (0xCAFE).to_bytes(4, "little"))
    assert written == [0xCAFE]
    assert rf.peek(8) == 0  # the hook owns the register; the store is untouched
    # a multi-dword access calls the hook for its dword and uses memory around it
    rf.poke(4, 0x11111111)
    assert rf.read(4, 8) == (0x11111111).to_bytes(4, "little") + (0x12345678).to_bytes(4, "little")


def test_partial_access_to_hooked_register() -> None:
    rf = DwordRegisterFile(64)
    written: list[int] = []
    rf.on_read(0, lambda: 0xAABBCCDD)
    rf.on_write(0, written.append)
    assert rf.read(1, 2) == b"\xcc\xbb"
    rf.write(2, b"\x11")
    assert written == [0xAA11CCDD]  # read-modify-write through the hooks
    strict = DwordRegisterFile(64, strict=True)
    strict.on_read(0, lambda: 0)
    with pytest.raises(MockAccessError, match="partial read"):
        strict.read(0, 2)
    strict.on_write(4, lambda v: None)
    with pytest.raises(MockAccessError, match="partial write"):
        strict.write(5, b"\x00")


def test_strict_mode_and_bounds() -> None:
    rf = DwordRegisterFile(32, strict=True)
    rf.declare(0, 6)  # covers dwords 0 and 4
    rf.write(0, bytes(8))
    with pytest.raises(MockAccessError, match="unmodelled register 0x8"):
        rf.read(4, 8)
    loose = DwordRegisterFile(32)
    with pytest.raises(MockAccessError, match="outside"):
        loose.read(30, 4)
    with pytest.raises(MockAccessError, match="outside"):
        loose.write(-1, b"\x00")
    with pytest.raises(ValueError):
        DwordRegisterFile(30)
    with pytest.raises(ValueError):
        loose.on_read(2, lambda: 0)
    with pytest.raises(ValueError):
        loose.declare(28, 8)


def test_log_counts_and_reset() -> None:
    rf = DwordRegisterFile(16, log_size=2)
    rf.write(0, b"\x01\x00\x00\x00")
    rf.read(0, 4)
    rf.read(4, 4)
    assert list(rf.log) == [("r", 0, 4, 1), ("r", 4, 4, 0)]
    assert (rf.reads, rf.writes) == (2, 1)
    calls: list[int] = []
    rf.on_reset(lambda: calls.append(1))
    rf.reset()
    assert rf.peek(0) == 0 and calls == [1]
    assert not DwordRegisterFile(16).log.maxlen
