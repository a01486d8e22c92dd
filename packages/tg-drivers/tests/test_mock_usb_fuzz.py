"""MockASM24Bridge under random vendor requests: it answers or raises MockAccessError, never anything else."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tg.drivers.errors import MockAccessError
from tg.drivers.mock.usb import MockASM24Bridge

u16 = st.one_of(st.integers(0, 0xFFFF), st.sampled_from([0, 1, 0x7F, 0x8000, 0xB450, 0xF000, 0xFFFF]))
request = st.one_of(
    st.tuples(
        st.just("out"), st.sampled_from([0xE4, 0xE5, 0xF0, 0xF2, 0xF3, 0x00, 0xFF]), u16, u16, st.binary(max_size=16)
    ),
    st.tuples(st.just("in"), st.sampled_from([0xE4, 0xF0, 0x12]), u16, u16, st.integers(0, 300)),
    st.tuples(st.just("bulk_out"), st.just(0), st.just(0), st.just(0), st.binary(max_size=600)),
    st.tuples(st.just("bulk_in"), st.just(0), st.just(0), st.just(0), st.integers(0, 2048)),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(request, max_size=12), st.booleans())
def test_random_requests_never_crash(sequence: list[tuple[str, int, int, int, object]], enable: bool) -> None:
    bridge = MockASM24Bridge(link_up=True)
    if enable:
        bridge.gpu.write_config(0x04, 0x6, 2)
    for kind, req, value, index, extra in sequence:
        try:
            if kind == "out":
                assert isinstance(extra, bytes)
                bridge.control_write(req, value, index, extra)
            elif kind == "in":
                assert isinstance(extra, int)
                data = bridge.control_read(req, extra, value, index)
                assert len(data) == extra
            elif kind == "bulk_out":
                assert isinstance(extra, bytes)
                bridge.bulk_write(extra)
            else:
                assert isinstance(extra, int)
                assert len(bridge.bulk_read(extra)) == extra
        except MockAccessError:
            pass
