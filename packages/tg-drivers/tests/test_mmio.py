"""MMIO views beyond the shared conformance suite: access widths, violation hooks, backend-specific rules."""

from __future__ import annotations

import ctypes
from typing import Any, ClassVar

import pytest

from tg.drivers.errors import MockAccessError
from tg.drivers.mmio import BufferMMIO, HostMMIO, ModelMMIO
from tg.drivers.mock import DwordRegisterFile


class _Recorder:
    """Substitute scalar types for HostMMIO that log each (width, address) access."""

    log: ClassVar[list[tuple[str, int, int]]] = []

    @classmethod
    def make(cls, size: int, real: Any) -> Any:
        class Scalar:
            @staticmethod
            def from_address(addr: int) -> Any:
                obj = real.from_address(addr)

                class Access:
                    @property
                    def value(self) -> int:
                        cls.log.append(("r", size, addr))
                        return int(obj.value)

                    @value.setter
                    def value(self, v: int) -> None:
                        cls.log.append(("w", size, addr))
                        obj.value = v

                return Access()

        return Scalar


@pytest.fixture
def recorded_host(monkeypatch: pytest.MonkeyPatch) -> tuple[HostMMIO, list[tuple[str, int, int]], Any]:
    types = {s: _Recorder.make(s, t) for s, t in HostMMIO.scalar_types.items()}
    monkeypatch.setattr(HostMMIO, "scalar_types", types)
    _Recorder.log = []
    buf = (ctypes.c_uint8 * 64)()
    return HostMMIO(ctypes.addressof(buf), 64, "I", owner=buf), _Recorder.log, buf


def test_host_element_access_is_one_access_of_its_width(recorded_host: Any) -> None:
    v, log, buf = recorded_host
    base = ctypes.addressof(buf)
    v[3] = 0x01020304
    assert v[3] == 0x01020304
    assert log == [("w", 4, base + 12), ("r", 4, base + 12)]
    log.clear()
    v.view(fmt="H")[1] = 5
    v.view(fmt="Q")[1] = 6
    assert log == [("w", 2, base + 2), ("w", 8, base + 8)]


def test_host_read_write_dword_multiples_use_dword_accesses(recorded_host: Any) -> None:
    v, log, buf = recorded_host
    base = ctypes.addressof(buf)
    v.write(8, bytes(range(8)))
    assert v.read(8, 8) == bytes(range(8))
    assert log == [("w", 4, base + 8), ("w", 4, base + 12), ("r", 4, base + 8), ("r", 4, base + 12)]
    log.clear()
    assert v.read(9, 3) == bytes(range(1, 4)) and v.read(0, 1) == b"\x00"  # unaligned: memmove, no scalar access
    assert log == []


def test_host_read64_is_single_access_when_aligned(recorded_host: Any) -> None:
    v, log, buf = recorded_host
    base = ctypes.addressof(buf)
    v.write64(8, 1 << 40)
    v.write64(4, 7)
    assert [entry[1] for entry in log] == [8, 4, 4]
    assert log[1][2] == base + 4 and log[2][2] == base + 8  # low dword first


def test_host_views_keep_owner_and_rebase() -> None:
    buf = (ctypes.c_uint32 * 4)(1, 2, 3, 4)
    v = HostMMIO(ctypes.addressof(buf), 16, "I", owner=buf)
    sub = v.view(8)
    assert isinstance(sub, HostMMIO) and sub.addr == ctypes.addressof(buf) + 8 and sub.owner is buf
    assert sub[:] == [3, 4]
    with pytest.raises(ValueError):
        HostMMIO(-1, 4)


def test_host_null_or_wrapping_address_is_refused() -> None:
    """A NULL or wrapping address would segfault on first access: refuse it when the view is built."""
    with pytest.raises(ValueError, match=r"address 0 \(NULL\)"):
        HostMMIO(0, 16)
    with pytest.raises(ValueError, match="64-bit address space"):
        HostMMIO((1 << 64) - 8, 16)
    assert len(HostMMIO(0, 0)) == 0  # an empty view touches nothing


def test_bad_format_and_size() -> None:
    with pytest.raises(ValueError, match="unsupported MMIO format"):
        BufferMMIO(bytearray(4), "f")
    with pytest.raises(ValueError, match="non-negative"):
        HostMMIO(0x1000, -1)
    with pytest.raises(TypeError, match="buffer protocol"):
        BufferMMIO(12)


def test_read_only_buffer_rejects_writes() -> None:
    v = BufferMMIO(b"\x00" * 8)
    assert v.read32(4) == 0
    with pytest.raises(TypeError, match="read-only"):
        v.write32(0, 1)


def test_violation_hook_sees_bounds_and_alignment_errors() -> None:
    seen: list[str] = []
    v = BufferMMIO(bytearray(16), "I", on_violation=seen.append)
    with pytest.raises(IndexError):
        v[4]
    with pytest.raises(ValueError):
        v.read32(2)
    with pytest.raises(ValueError):
        v.view(8, 16)
    assert len(seen) == 3 and all(s.startswith("BufferMMIO") for s in seen)


def test_model_view_forwards_exact_access_sizes() -> None:
    model = DwordRegisterFile(256, log_size=16)
    v = ModelMMIO(model, 16, 64, "I")
    v.write32(4, 0xAABBCCDD)
    v[0:4] = [1, 2, 3, 4]
    _ = v.read(0, 12)
    assert [(op, off, size) for op, off, size, _ in model.log] == [("w", 20, 4), ("w", 16, 16), ("r", 16, 12)]
    with pytest.raises(ValueError, match="exceeds the model size"):
        ModelMMIO(model, 200, 64)


def test_model_view_reports_model_errors() -> None:
    seen: list[str] = []
    model = DwordRegisterFile(64, strict=True)
    model.declare(0, 8)
    v = ModelMMIO(model, on_violation=seen.append)
    v.write32(4, 1)
    with pytest.raises(MockAccessError, match="unmodelled register 0x8"):
        v.read32(8)
    assert seen and "unmodelled" in seen[0]


class _Dword32Model(DwordRegisterFile):
    """A register file that also serves int-valued dword accesses (logged as "r32"/"w32")."""

    calls: list[tuple[str, int]]

    def read32(self, offset: int) -> int:
        if offset == 8:
            raise MockAccessError("unmodelled register 0x8")
        self.calls.append(("r32", offset))
        return int.from_bytes(self.read(offset, 4), "little")

    def write32(self, offset: int, value: int) -> None:
        self.calls.append(("w32", offset))
        self.write(offset, value.to_bytes(4, "little"))


def test_model_view_uses_int_dword_accessors_of_a_model_that_has_them() -> None:
    seen: list[str] = []
    model = _Dword32Model(64)
    model.calls = []
    v = ModelMMIO(model, 16, 32, on_violation=seen.append)
    v.write32(4, 0xAABBCCDD)
    assert v.read32(4) == 0xAABBCCDD and v.read64(4) == 0xAABBCCDD
    assert v.read(4, 4) == bytes.fromhex("ddccbbaa")  # block accesses still go through read/write
    assert model.calls == [("w32", 20), ("r32", 20), ("r32", 20), ("r32", 24)]
    with pytest.raises(ValueError):
        v.write32(0, 1 << 32)  # the view's checks still apply
    with pytest.raises(MockAccessError, match="unmodelled register 0x8"):
        ModelMMIO(model, on_violation=seen.append).read32(8)
    assert seen and "unmodelled" in seen[0]


def test_signed_slices() -> None:
    v = BufferMMIO(bytearray(8), "h")
    v[0:4] = [-1, 2, -32768, 32767]
    assert v[:] == [-1, 2, -32768, 32767]
    assert v.read(0, 2) == b"\xff\xff"
