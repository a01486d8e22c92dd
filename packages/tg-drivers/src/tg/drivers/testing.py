"""Reusable pytest suites for tg.drivers backends (import only from tests; needs pytest).

The MMIO conformance suite checks the contract every :class:`~tg.drivers.mmio.MMIOView` backend must honour. To run it
against a backend, subclass :class:`MMIOConformance` in a test file and provide a ``make_view`` fixture returning a
callable ``make_view(nbytes, fmt) -> MMIOView`` over fresh, zero-filled storage of ``nbytes`` bytes (``nbytes`` is a
multiple of 8, at most 256)::

    class TestMyView(MMIOConformance):
        @pytest.fixture
        def make_view(self):
            return lambda nbytes, fmt: MyView(..., nbytes, fmt)

Backends whose ``dword_only`` flag is set (the USB bridge's PCIe memory path) are checked for the 4-byte alignment
rule instead of byte and half-word element access.
"""

from __future__ import annotations

import array
import ast
import re
import tomllib
from collections.abc import Callable
from pathlib import Path

import pytest

from tg.drivers.mmio import MMIOView

__all__ = ["MMIOConformance", "MakeView", "check_test_extra"]

MakeView = Callable[[int, str], MMIOView]

ALL_FORMATS = ["B", "H", "I", "Q", "b", "h", "i", "q"]


def _max_unsigned(size: int) -> int:
    return (1 << (8 * size)) - 1


class MMIOConformance:
    """The MMIO view contract (spec §1, test plan §8.1); subclass it and define the ``make_view`` fixture."""

    @pytest.fixture
    def make_view(self) -> MakeView:
        raise NotImplementedError("subclasses of MMIOConformance must define a make_view fixture")

    # ---- helpers ---------------------------------------------------------------------------------------------------
    @staticmethod
    def _element_ok(view: MMIOView) -> bool:
        return not view.dword_only or view.itemsize >= 4

    # ---- attributes ------------------------------------------------------------------------------------------------
    @pytest.mark.parametrize("fmt", ALL_FORMATS)
    def test_attributes_and_len(self, make_view: MakeView, fmt: str) -> None:
        v = make_view(64, fmt)
        assert isinstance(v, MMIOView)
        assert (v.nbytes, v.fmt, v.itemsize) == (64, fmt, {"B": 1, "H": 2, "I": 4, "Q": 8}[fmt.upper()])
        assert len(v) == 64 // v.itemsize

    def test_len_floors_partial_elements(self, make_view: MakeView) -> None:
        v = make_view(64, "B").view(0, 12, "Q")
        assert len(v) == 1

    # ---- elements --------------------------------------------------------------------------------------------------
    @pytest.mark.parametrize("fmt", ["B", "H", "I", "Q"])
    def test_element_round_trip(self, make_view: MakeView, fmt: str) -> None:
        v = make_view(64, fmt)
        if not self._element_ok(v):
            with pytest.raises(ValueError):
                v[1] = 1
            with pytest.raises(ValueError):
                v[1]
            return
        top = _max_unsigned(v.itemsize)
        v[0], v[1], v[len(v) - 1] = top, 0x5A, 1
        assert (v[0], v[1], v[len(v) - 1]) == (top, 0x5A, 1)
        assert v[2] == 0

    @pytest.mark.parametrize("fmt", ["b", "h", "i", "q"])
    def test_signed_element_round_trip(self, make_view: MakeView, fmt: str) -> None:
        v = make_view(64, fmt)
        if not self._element_ok(v):
            return
        lo = -(1 << (8 * v.itemsize - 1))
        v[0], v[1] = -1, lo
        assert (v[0], v[1]) == (-1, lo)
        assert v.read(0, v.itemsize) == b"\xff" * v.itemsize
        with pytest.raises(ValueError):
            v[0] = -lo
        with pytest.raises(ValueError):
            v[0] = lo - 1

    def test_little_endian_placement(self, make_view: MakeView) -> None:
        v = make_view(16, "I")
        v[1] = 0x11223344
        assert v.read(4, 4) == bytes([0x44, 0x33, 0x22, 0x11])
        q = v.view(fmt="Q")
        q[1] = 0x0102030405060708
        assert v.read(8, 8) == bytes([8, 7, 6, 5, 4, 3, 2, 1])
        assert v[2] == 0x05060708 and v[3] == 0x01020304
        if not v.dword_only:
            b = v.view(fmt="B")
            assert b[4] == 0x44 and b[7] == 0x11
            h = v.view(fmt="H")
            assert h[2] == 0x3344

    @pytest.mark.parametrize("fmt", ["B", "I"])
    def test_value_range_errors(self, make_view: MakeView, fmt: str) -> None:
        v = make_view(16, fmt)
        top = 1 << (8 * v.itemsize)
        for bad in (top, -1):
            with pytest.raises(ValueError):
                v[0] = bad
        with pytest.raises(TypeError):
            v[0] = "1"
        with pytest.raises(TypeError):
            v[0] = 1.0
        assert v.read(0, 4) == bytes(4)  # nothing was written

    def test_index_bounds(self, make_view: MakeView) -> None:
        v = make_view(16, "I")
        with pytest.raises(IndexError):
            v[len(v)]
        with pytest.raises(IndexError):
            v[-1]
        with pytest.raises(IndexError):
            v[len(v)] = 0
        with pytest.raises(IndexError):
            v[-1] = 0
        with pytest.raises(TypeError):
            v["0"]  # type: ignore[index]

    # ---- slices ----------------------------------------------------------------------------------------------------
    def test_slice_read_types(self, make_view: MakeView) -> None:
        v = make_view(32, "B")
        v.write(0, bytes(range(32)))
        got = v[0:8]
        assert isinstance(got, bytes) and got == bytes(range(8))
        assert v[:] == bytes(range(32))
        assert v[8:8] == b""
        w = v.view(fmt="I")
        words = w[1:3]
        assert isinstance(words, list) and words == [0x07060504, 0x0B0A0908]
        assert w[:] == [int.from_bytes(bytes(range(i, i + 4)), "little") for i in range(0, 32, 4)]
        assert w[2:2] == []

    def test_slice_reads_are_copies(self, make_view: MakeView) -> None:
        v = make_view(16, "B")
        before = v[0:8]
        v.write(0, b"\x01" * 8)
        assert before == bytes(8)

    def test_slice_write_sources(self, make_view: MakeView) -> None:
        v = make_view(32, "B")
        v[0:4] = b"\x01\x02\x03\x04"
        v[4:8] = bytearray(b"\x05\x06\x07\x08")
        v[8:12] = memoryview(b"\x09\x0a\x0b\x0c")
        v[12:16] = [13, 14, 15, 16]
        assert v.read(0, 16) == bytes(range(1, 17))
        w = v.view(16, 16, "I")
        w[0:2] = [0xAABBCCDD, 1]
        w[2:4] = array.array("I", [2, 3])
        assert w[:] == [0xAABBCCDD, 1, 2, 3]
        assert v.read(16, 4) == bytes([0xDD, 0xCC, 0xBB, 0xAA])

    def test_slice_write_errors(self, make_view: MakeView) -> None:
        v = make_view(32, "B")
        with pytest.raises(ValueError):
            v[0:4] = b"\x01\x02\x03"
        with pytest.raises(ValueError):
            v[0:4] = [1, 2, 3, 4, 5]
        with pytest.raises(ValueError):
            v[0:4] = [1, 2, 3, 256]
        w = v.view(fmt="I")
        with pytest.raises(ValueError):
            w[0:2] = [1]
        with pytest.raises(ValueError):
            w[0:2] = array.array("H", [1, 2])
        with pytest.raises(TypeError):
            w[0:2] = b"\x00" * 8
        with pytest.raises(ValueError):
            w[0:1] = [1 << 32]
        assert v.read(0, 32) == bytes(32)  # no rejected write reached the storage

    def test_slice_bounds(self, make_view: MakeView) -> None:
        v = make_view(16, "I")
        with pytest.raises(IndexError):
            v[0 : len(v) + 1]
        with pytest.raises(IndexError):
            v[-2:]
        with pytest.raises(IndexError):
            v[0 : len(v) + 1] = [0] * (len(v) + 1)
        with pytest.raises(ValueError):
            v[0:4:2]
        with pytest.raises(ValueError):
            v[0:4:2] = [0, 0]
        assert v[0:4:1] == [0, 0, 0, 0]

    # ---- sub-views -------------------------------------------------------------------------------------------------
    def test_view_shares_storage(self, make_view: MakeView) -> None:
        v = make_view(64, "I")
        sub = v.view(8, 16)
        assert (sub.nbytes, sub.fmt, len(sub)) == (16, "I", 4)
        sub[0] = 0xCAFEBABE
        assert v[2] == 0xCAFEBABE
        v[3] = 7
        assert sub[1] == 7
        nested = sub.view(4, 8, "Q")
        nested[0] = 0x1111111122222222
        assert v[3] == 0x22222222 and v[4] == 0x11111111

    def test_view_defaults_and_empty(self, make_view: MakeView) -> None:
        v = make_view(64, "I")
        assert v.view().nbytes == 64
        assert v.view(16).nbytes == 48
        tail = v.view(16)
        tail[0] = 9
        assert v[4] == 9
        empty = v.view(8, 0)
        assert (empty.nbytes, len(empty)) == (0, 0)
        assert empty[:] == []
        assert v.view(64).nbytes == 0

    def test_view_out_of_range(self, make_view: MakeView) -> None:
        v = make_view(64, "B")
        for off, size in [(60, 8), (-4, None), (0, -1), (65, None), (0, 65)]:
            with pytest.raises(ValueError):
                v.view(off, size)
        with pytest.raises(ValueError):
            v.view(0, 8, "x")

    # ---- byte-offset accessors -------------------------------------------------------------------------------------
    def test_read_write_bytes(self, make_view: MakeView) -> None:
        v = make_view(64, "I")
        v.write(8, b"abcdefgh")
        assert v.read(8, 8) == b"abcdefgh"
        assert v.read(0, 0) == b""
        with pytest.raises(IndexError):
            v.read(60, 8)
        with pytest.raises(IndexError):
            v.write(60, b"12345678")
        assert v.read(56, 8) == bytes(8)

    def test_read32_write32(self, make_view: MakeView) -> None:
        v = make_view(64, "B")
        v.write32(4, 0xDEADBEEF)
        assert v.read32(4) == 0xDEADBEEF
        assert v.read(4, 4) == bytes([0xEF, 0xBE, 0xAD, 0xDE])
        for bad in (1, 2, 3):
            with pytest.raises(ValueError):
                v.read32(bad)
            with pytest.raises(ValueError):
                v.write32(bad, 0)
        with pytest.raises(IndexError):
            v.read32(64)
        with pytest.raises(ValueError):
            v.write32(0, 1 << 32)

    def test_read64_write64(self, make_view: MakeView) -> None:
        v = make_view(64, "B")
        v.write64(8, 0x1122334455667788)
        assert v.read64(8) == 0x1122334455667788
        assert v.read32(8) == 0x55667788 and v.read32(12) == 0x11223344
        v.write64(20, 0xA0A0A0A0B0B0B0B0)  # 4-aligned, not 8-aligned
        assert v.read64(20) == 0xA0A0A0A0B0B0B0B0
        with pytest.raises(ValueError):
            v.read64(2)
        with pytest.raises(IndexError):
            v.read64(60)

    def test_alignment_rule(self, make_view: MakeView) -> None:
        v = make_view(64, "B")
        if not v.dword_only:
            v.write(1, b"xyz")
            assert v.read(1, 3) == b"xyz"
            return
        for off, n in [(1, 4), (2, 4), (0, 3), (0, 5)]:
            with pytest.raises(ValueError):
                v.read(off, n)
            with pytest.raises(ValueError):
                v.write(off, bytes(n))


def check_test_extra(root: Path, test_only: tuple[str, ...] = ("pytest", "hypothesis")) -> None:
    """Assert that the `test` extra of the package at `root` declares every test-only library its tests import.

    So `pip install '<package>[test]'` is all a package's own test suite needs. `test_only` names modules whose
    distribution has the same name.
    """
    imported: set[str] = set()
    for path in (root / "tests").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                imported |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                imported.add(node.module.split(".")[0])
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    extras = project.get("optional-dependencies", {}).get("test", [])
    declared = {re.split(r"[~<>=!\[ ;]", req, maxsplit=1)[0] for req in extras}
    missing = sorted((imported & set(test_only)) - declared)
    assert not missing, f"{root.name}: add {missing} to [project.optional-dependencies] test"
    assert "pytest" in declared, f"{root.name}: the test extra must declare pytest"
