"""Property tests: random access sequences on MMIO views behave exactly like a plain bytearray."""

from __future__ import annotations

import ctypes
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tg.drivers.mmio import FORMATS, BufferMMIO, HostMMIO, MMIOView, ModelMMIO
from tg.drivers.mock import DwordRegisterFile

SIZE = 64


def _host() -> tuple[MMIOView, Callable[[], bytes]]:
    buf = (ctypes.c_uint8 * SIZE)()
    return HostMMIO(ctypes.addressof(buf), SIZE, owner=buf), lambda: bytes(buf)


def _buffer() -> tuple[MMIOView, Callable[[], bytes]]:
    ba = bytearray(SIZE)
    return BufferMMIO(ba), lambda: bytes(ba)


def _model() -> tuple[MMIOView, Callable[[], bytes]]:
    model = DwordRegisterFile(SIZE)
    return ModelMMIO(model), lambda: bytes(model.mem)


ops = st.lists(
    st.tuples(
        st.sampled_from(["elem", "slice", "bytes", "dword"]),
        st.integers(0, SIZE),  # view offset
        st.sampled_from(sorted(FORMATS)),
        st.integers(0, SIZE),
        st.integers(0, SIZE),
        st.binary(min_size=0, max_size=SIZE),
    ),
    max_size=20,
)


@pytest.mark.parametrize("make", [_host, _buffer, _model], ids=["host", "buffer", "model"])
@settings(max_examples=60, deadline=None)
@given(sequence=ops)
def test_random_writes_match_a_bytearray(
    make: Callable[[], tuple[MMIOView, Callable[[], bytes]]], sequence: list[tuple[str, int, str, int, int, bytes]]
) -> None:
    root, snapshot = make()
    ref = bytearray(SIZE)
    for kind, base, fmt, a, b, data in sequence:
        v = root.view(base, fmt=fmt)
        size = v.itemsize
        n = len(v)
        if kind == "elem":
            if n == 0:
                with pytest.raises(IndexError):
                    v[0]
                continue
            i = a % n
            value = int.from_bytes((data + bytes(8))[:size], "little", signed=fmt.islower())
            v[i] = value
            ref[base + i * size : base + (i + 1) * size] = value.to_bytes(size, "little", signed=fmt.islower())
            assert v[i] == value
        elif kind == "slice":
            lo, hi = sorted((a % (n + 1), b % (n + 1)))
            values = [
                int.from_bytes((data[k * size : (k + 1) * size] + bytes(8))[:size], "little") for k in range(hi - lo)
            ]
            if fmt.islower():
                values = [x - (1 << (8 * size)) if x >= 1 << (8 * size - 1) else x for x in values]
            v[lo:hi] = values
            for k, x in enumerate(values):
                off = base + (lo + k) * size
                ref[off : off + size] = x.to_bytes(size, "little", signed=fmt.islower())
            assert v[lo:hi] == (bytes(values) if fmt == "B" else values)
        elif kind == "bytes":
            off = a % (v.nbytes + 1)
            chunk = data[: v.nbytes - off]
            v.write(off, chunk)
            ref[base + off : base + off + len(chunk)] = chunk
            assert v.read(off, len(chunk)) == chunk
        else:
            off = (a % (v.nbytes // 4 + 1)) * 4
            if off + 4 > v.nbytes or (base + off) % 4:
                continue
            word = int.from_bytes((data + bytes(4))[:4], "little")
            v.write32(off, word)
            ref[base + off : base + off + 4] = word.to_bytes(4, "little")
            assert v.read32(off) == word
        assert snapshot() == bytes(ref)
    assert root.read(0, SIZE) == bytes(ref)
