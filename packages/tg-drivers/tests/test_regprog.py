"""Register programs: local semantics, the MMIO_BATCH wire form, server-side validation, and remote == local."""

from __future__ import annotations

import pytest

from tg.drivers.mmio import BufferMMIO
from tg.drivers.mock import BarSpec, DwordRegisterFile, MockPCIDevice, RemoteServerThread
from tg.drivers.regprog import RegisterProgram, decode_ops, post_writes, run_program
from tg.drivers.remote import Limits, RemoteCmd, RemotePCIDevice, remote_list
from tg.drivers.remote.client import clear_connections
from tg.drivers.remote.protocol import pack_request, unpack_response_header
from tg.drivers.remote.server import RemoteServer, StaticProvider


def sample_program() -> tuple[RegisterProgram, int, int]:
    prog = RegisterProgram()
    a = prog.read32(0x10)
    prog.write32_from(0x14, a, and_mask=0xFFFF00FF, or_value=0x1200)  # (values[a] & mask) | or
    prog.write32(0x18, 0x1_0000_0007)  # masked to 32 bits
    check = prog.expect32(0x18, mask=0x7, want=0x7)
    prog.read(0x10, 16)
    return prog, a, check


def test_local_run_in_order_with_computed_writes() -> None:
    view = BufferMMIO(bytearray(64))
    view.write32(0x10, 0xAABBCCDD)
    prog, a, check = sample_program()
    result = run_program(view, prog)
    assert result.complete and result.executed == 5
    assert result.values == [0xAABBCCDD, 7] and (a, check) == (0, 1)
    assert view.read32(0x14) == 0xAABB12DD and view.read32(0x18) == 7
    assert result.blocks == [bytes(view.read(0x10, 16))]


def test_extend_appends_a_template_with_its_slots_renumbered_and_new_write_values() -> None:
    template, _, _ = sample_program()
    prog = RegisterProgram()
    prog.read32(0x20)
    prog.read(0x20, 4)
    assert prog.extend(template, writes={2: 0x1_0000_0005}) == (2, 1, 1)
    assert prog.extend(template) == (7, 3, 2)
    # the same program built op by op
    want = RegisterProgram()
    want.read32(0x20)
    want.read(0x20, 4)
    for value in (5, 7):
        a = want.read32(0x10)
        want.write32_from(0x14, a, and_mask=0xFFFF00FF, or_value=0x1200)
        want.write32(0x18, value)
        want.expect32(0x18, mask=0x7, want=0x7)
        want.read(0x10, 16)
    assert prog.ops == want.ops
    assert (prog.slots, prog.nblocks, prog.read_bytes) == (want.slots, want.nblocks, want.read_bytes)
    view = BufferMMIO(bytearray(64))
    view.write32(0x10, 0xAABBCCDD)
    result = run_program(view, prog)
    assert result.executed == 6 and result.values[1:3] == [0xAABBCCDD, 5]  # the first copy's expect stopped it
    with pytest.raises(ValueError, match="op 0 of the appended program is not a write32"):
        prog.extend(template, writes={0: 1})
    big = RegisterProgram()
    for _ in range(200):
        big.read32(0)
    with pytest.raises(ValueError, match="at most 256 read values"):
        big.extend(big)


def test_expect_stops_the_program_and_a_failure_carries_the_partial_result() -> None:
    view = BufferMMIO(bytearray(64))
    prog = RegisterProgram()
    prog.expect32(0x0, mask=1, want=1)  # bit 0 is clear: stop
    prog.write32(0x4, 9)
    result = prog.run_local(view)
    assert (result.complete, result.executed, result.values) == (False, 1, [0])
    assert view.read32(0x4) == 0  # the write after the failed expect never ran
    prog = RegisterProgram()
    prog.write32(0x0, 1)
    prog.read32(0x100)  # outside the 64-byte view
    with pytest.raises(IndexError) as info:
        prog.run_local(view)
    assert info.value.program_result.executed == 2  # type: ignore[attr-defined]
    assert view.read32(0) == 1


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda p: p.read32(2), "4-aligned"),
        (lambda p: p.write32_from(0, 0), "has not been read yet"),
        (lambda p: p.read(0, 6), "multiple of 4"),
        (lambda p: p.read(0, 8192), "4..4096"),
    ],
)
def test_builder_rejects_bad_ops(build: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        build(RegisterProgram())  # type: ignore[operator]


def test_wire_form_round_trip_and_server_side_validation() -> None:
    prog, _, _ = sample_program()
    ops = decode_ops(prog.encode())
    assert [op[0] for op in ops] == [op[0] for op in prog.ops]
    assert decode_ops(prog.encode(base=0x100))[0][3] == 0x110
    for payload, message in (
        (b"\0" * 15, "multiple of 16"),
        (bytes([9]) + bytes(15), "unknown op code 9"),
        (bytes([3, 0]) + bytes(14), "slot 0 has not been read yet"),
        (bytes([1, 0, 0, 0, 2]) + bytes(11), "not 4-aligned"),
    ):
        with pytest.raises(ValueError, match=message):
            decode_ops(payload)


def regs_device(name: str) -> MockPCIDevice:
    return MockPCIDevice("SV", name, bars={5: BarSpec(0x1000, backing=DwordRegisterFile(0x1000))}, lock=False)


def test_remote_program_is_one_round_trip_and_equals_the_local_run(monkeypatch: pytest.MonkeyPatch) -> None:
    local_dev, served = regs_device("mock:local"), regs_device("mock:served")
    for dev in (local_dev, served):
        dev.map_bar(5).write32(0x10, 0xAABBCCDD)
    with RemoteServerThread(device=served) as srv:
        for name, value in srv.env.items():  # REMOTE and its token, as a user's shell would have them
            monkeypatch.setenv(name, value)
        conn, name = remote_list(0x1002, ((0xFFFF, (0x744C,)),))[0]
        remote = RemotePCIDevice("AM", name, conn, lock=False)
        view = remote.map_bar(5)
        prog, _, _ = sample_program()
        want = run_program(local_dev.map_bar(5), prog)
        before = srv.server.sessions_served
        assert conn.features  # asked once (PING), before counting
        calls: list[int] = []
        real_rpc = conn.rpc
        monkeypatch.setattr(conn, "rpc", lambda *a, **k: (calls.append(a[0]), real_rpc(*a, **k))[1])
        got = run_program(view, prog)
        assert calls == [RemoteCmd.MMIO_BATCH]  # the whole program: one round trip
        monkeypatch.setattr(conn, "rpc", real_rpc)
        assert (got.executed, got.values, got.blocks) == (want.executed, want.values, want.blocks)
        assert served.map_bar(5).read32(0x14) == local_dev.map_bar(5).read32(0x14) == 0xAABB12DD
        assert post_writes(view, [(0x20, 5), (0x24, 6)]) is True
        assert view.read32(0x24) == 6 and view.read32(0x20) == 5  # posted, then visible to the next RPC
        monkeypatch.setattr(type(conn), "features", property(lambda self: 0))  # an older server: op by op
        assert run_program(view, prog).values == want.values
        assert post_writes(view, [(0x28, 1)]) is False
        assert srv.server.sessions_served == before
        remote.close()
    clear_connections()


def feed(server: RemoteServer, *requests: bytes) -> tuple[bytes, bool]:
    session = server.new_session()
    replies, close = session.feed(b"".join(requests))
    session.close()
    return b"".join(r.data for r in replies), close


def test_server_validates_the_whole_batch_before_touching_the_device() -> None:
    dev = regs_device("mock:v")
    server = RemoteServer(StaticProvider([dev]), limits=Limits())
    probe = pack_request(
        RemoteCmd.PROBE, 0, 0, 0, 8, 0x1002, (0xFFFF).to_bytes(4, "little") + (0x744C).to_bytes(4, "little")
    )
    prog = RegisterProgram()
    prog.write32(0x0, 0x55)
    prog.read32(0xFFC)
    prog.read32(0x1000)  # one past the end of the 4 KiB BAR
    payload = prog.encode()
    out, close = feed(server, probe, pack_request(RemoteCmd.MMIO_BATCH, 0, 5, 3, len(payload), 0, payload))
    text = out.decode(errors="replace")
    assert "op 2: BAR 5 access [0x1000, 0x1004) is out of bounds" in text and not close
    assert dev.map_bar(5).read32(0) == 0  # op 0 never ran
    reads = RegisterProgram()
    reads.read32(0)
    payload = reads.encode()
    out, close = feed(server, probe, pack_request(RemoteCmd.MMIO_BATCH_POSTED, 0, 5, 1, len(payload), 0, payload))
    assert close  # a posted program with a read drops the session (no reply is expected)
    status, _, _ = unpack_response_header(out[:17])
    assert status == 0  # only PROBE's reply was sent
