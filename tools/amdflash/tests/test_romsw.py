"""`Navi31SPI.transfer` against a recording DwordRegisterFile behind a MockPCIDevice."""

from __future__ import annotations

from typing import Any

import pytest

from amdflash import regs
from amdflash.device import Bar5
from amdflash.romsw import Navi31SPI
from tg.drivers.mock import BarSpec, DwordRegisterFile, MockPCIDevice

INITIAL = {
    regs.ROM_CNTL: 0x07000002,
    regs.PAGE_MIRROR_CNTL: 0x08000000,
    regs.GPIO_PAD_MASK: 0x00000F80,
    regs.GPIO_PAD_A: 0x00000780,
    regs.GPIO_PAD_EN: 0x00000300,
}
PERSISTENT_CNTL = (0x07000002 & 0xE0FFFFFF) | 1 << 28 | 8 << 24 | 1


def make_regfile(done: bool = True) -> DwordRegisterFile:
    rf = DwordRegisterFile(regs.BAR5_SIZE, log_size=100000)
    for off, value in INITIAL.items():
        rf.poke(off, value)
    if done:

        def start(value: int) -> None:
            rf.poke(regs.ROM_SW_CNTL, value)
            rf.poke(regs.ROM_SW_STATUS, 1)

        rf.on_write(regs.ROM_SW_CNTL, start)
    return rf


def make_spi(rf: DwordRegisterFile, **kw: Any) -> tuple[Navi31SPI, MockPCIDevice]:
    dev = MockPCIDevice("AM", "t:0", bars={5: BarSpec(regs.BAR5_SIZE, backing=rf)}, lock=False)
    spi = Navi31SPI(Bar5(dev), **kw)
    rf.log.clear()
    return spi, dev


def prologue(rom_cntl: int = PERSISTENT_CNTL) -> list[tuple[str, int, int, int]]:
    return [
        ("r", regs.GPIO_PAD_MASK, 4, 0xF80),
        ("r", regs.GPIO_PAD_A, 4, 0x780),
        ("r", regs.GPIO_PAD_EN, 4, 0x300),
        ("r", regs.PAGE_MIRROR_CNTL, 4, 0x08000000),
        ("r", regs.ROM_CNTL, 4, rom_cntl),
        ("w", regs.GPIO_PAD_MASK, 4, 0x800),
        ("w", regs.GPIO_PAD_A, 4, 0x000),
        ("w", regs.GPIO_PAD_EN, 4, 0x000),
        ("w", regs.PAGE_MIRROR_CNTL, 4, 0x06000000),
        ("w", regs.ROM_CNTL, 4, (rom_cntl & ~0xF) | 8),
        ("w", regs.ROM_SW_CNTL, 4, 0),
        ("w", regs.ROM_SW_STATUS, 4, 0),
        ("r", regs.ROM_SW_STATUS, 4, 0),
    ]


def epilogue(rom_cntl: int = PERSISTENT_CNTL) -> list[tuple[str, int, int, int]]:
    return [
        ("w", regs.ROM_SW_CNTL, 4, 0),
        ("w", regs.ROM_SW_STATUS, 4, 0),
        ("w", regs.ROM_CNTL, 4, rom_cntl),
        ("w", regs.PAGE_MIRROR_CNTL, 4, 0x08000000),
        ("w", regs.GPIO_PAD_A, 4, 0x780),
        ("w", regs.GPIO_PAD_EN, 4, 0x300),
        ("w", regs.GPIO_PAD_MASK, 4, 0xF80),
    ]


def test_construction_writes_persistent_rom_cntl_once() -> None:
    rf = make_regfile()
    dev = MockPCIDevice("AM", "t:0", bars={5: BarSpec(regs.BAR5_SIZE, backing=rf)}, lock=False)
    rf.log.clear()
    Navi31SPI(Bar5(dev), prescale=3)
    assert list(rf.log) == [
        ("r", regs.ROM_CNTL, 4, 0x07000002),
        ("w", regs.ROM_CNTL, 4, (0x07000002 & 0xE0FFFFFF) | 1 << 28 | 3 << 24 | 1),
    ]


def test_tx_sequence_page_program_five_bytes() -> None:
    rf = make_regfile()
    spi, _ = make_spi(rf)
    assert spi.transfer(0x02, address=0x123456, address_len=3, data_out=bytes([1, 2, 3, 4, 5])) == b""
    assert list(rf.log) == [
        *prologue(),
        ("w", regs.ROM_SW_COMMAND, 4, 0x12345602),
        ("w", regs.ROM_SW_DATA, 4, 0x01020304),
        ("w", regs.ROM_SW_DATA + 4, 4, 0x05000000),
        ("w", regs.ROM_SW_CNTL, 4, 0x00030005),
        ("r", regs.ROM_SW_CNTL, 4, 0x00030005),
        ("r", regs.ROM_SW_STATUS, 4, 1),
        *epilogue(),
    ]


def test_rx_sequence_read_six_bytes() -> None:
    rf = make_regfile()
    window = bytes(range(0x40, 0x48))
    rf.mem[regs.ROM_SW_DATA : regs.ROM_SW_DATA + 8] = window
    spi, _ = make_spi(rf)
    assert spi.transfer(0x03, address=0x1000, address_len=3, data_in=6) == window[:6]
    log = list(rf.log)
    assert log[: len(prologue())] == prologue()
    assert log[len(prologue()) :] == [
        ("w", regs.ROM_SW_COMMAND, 4, 0x00100003),
        ("w", regs.ROM_SW_CNTL, 4, 0x000B0006),
        ("r", regs.ROM_SW_CNTL, 4, 0x000B0006),
        ("r", regs.ROM_SW_STATUS, 4, 1),
        ("r", regs.ROM_SW_DATA, 8, int.from_bytes(window, "little")),
        *epilogue(),
    ]


@pytest.mark.parametrize(
    ("kwargs", "control"),
    [
        ({"opcode": 0x9F, "data_in": 4}, 0x00080004),
        ({"opcode": 0x02, "address": 0, "address_len": 3, "data_out": bytes(256)}, 0x00030100),
        ({"opcode": 0x06}, 0),
    ],
)
def test_control_words(kwargs: dict[str, Any], control: int) -> None:
    rf = make_regfile()
    spi, _ = make_spi(rf)
    spi.transfer(**kwargs)
    starts = [v for op, off, _, v in rf.log if op == "w" and off == regs.ROM_SW_CNTL]
    assert starts == [0, control, 0]


def test_timeout_restores_registers() -> None:
    rf = make_regfile(done=False)
    spi, _ = make_spi(rf)
    with pytest.raises(TimeoutError, match=r"ROM_SW transaction timeout \(status=0x0\); engine may be gated"):
        spi.transfer(0x9F, data_in=4, timeout=0.01)
    assert list(rf.log)[-7:] == epilogue()


def test_failing_register_write_restores_and_keeps_original_error() -> None:
    rf = make_regfile()
    spi, _ = make_spi(rf)

    def boom(value: int) -> None:
        raise RuntimeError("command register exploded")

    rf.on_write(regs.ROM_SW_COMMAND, boom)
    calls = {"n": 0}

    def flaky_gpio_a(value: int) -> None:
        calls["n"] += 1
        rf.poke(regs.GPIO_PAD_A, value)
        if calls["n"] == 2:  # the restore write fails too; the original error must win
            raise OSError("restore failed")

    rf.on_write(regs.GPIO_PAD_A, flaky_gpio_a)
    rf.log.clear()
    with pytest.raises(RuntimeError, match="command register exploded"):
        spi.transfer(0x06)
    log = list(rf.log)
    restores = [(off, v) for op, off, _, v in log[-7:]]
    assert restores == [(off, v) for _, off, _, v in epilogue()]


def test_gated_status_message() -> None:
    rf = make_regfile()
    rf.on_read(regs.ROM_SW_STATUS, lambda: regs.ROM_SW_STATUS_GATED)
    spi, _ = make_spi(rf)
    with pytest.raises(RuntimeError, match=r"^ROM_SW_STATUS did not clear \(status=0x04000800\); the ROM_SW engine"):
        spi.transfer(0x9F, data_in=4)
    assert list(rf.log)[-7:] == epilogue()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"data_out": b"\0", "data_in": 1}, "simultaneous TX and RX is unsupported"),
        ({"address_len": 4}, "address_len must be 0..3"),
        ({"address_len": -1}, "address_len must be 0..3"),
        ({"data_out": bytes(257)}, "transfer data must be <= 256 bytes"),
        ({"data_in": 257}, "transfer data must be <= 256 bytes"),
        ({"opcode": 0xC7}, "1-byte destructive command"),
        ({"opcode": 0x60}, "1-byte destructive command"),
    ],
)
def test_argument_validation_before_any_access(kwargs: dict[str, Any], message: str) -> None:
    rf = make_regfile()
    spi, _ = make_spi(rf)
    with pytest.raises(ValueError, match=message):
        spi.transfer(**{"opcode": 0x03, **kwargs})
    assert len(rf.log) == 0


@pytest.mark.parametrize("prescale", [-1, 16, 100])
def test_prescale_range(prescale: int) -> None:
    rf = make_regfile()
    dev = MockPCIDevice("AM", "t:0", bars={5: BarSpec(regs.BAR5_SIZE, backing=rf)}, lock=False)
    rf.log.clear()
    with pytest.raises(ValueError, match=r"prescale must be 0\.\.15"):
        Navi31SPI(Bar5(dev), prescale=prescale)
    assert len(rf.log) == 0


def test_transfer_many_is_the_same_register_sequence_as_one_by_one() -> None:
    """Back-to-back transactions (one round trip remotely) touch the registers exactly as separate transfers do."""
    from amdflash.romsw import Transfer

    batch = [Transfer(0x06), Transfer(0x05, data_in=2), Transfer(0x02, 0x1000, 3, data_out=bytes(range(6)))]
    rf1, rf2 = make_regfile(), make_regfile()
    spi1, _ = make_spi(rf1)
    spi2, _ = make_spi(rf2)
    one_by_one = [spi1.transfer(t.opcode, t.address, t.address_len, t.data_out, t.data_in) for t in batch]
    assert spi2.transfer_many(batch) == one_by_one
    assert list(rf2.log) == list(rf1.log)
    assert len(rf1.log) > 3 * 20
    for off, value in INITIAL.items():  # each transaction restored what it set up
        assert rf2.peek(off) == (PERSISTENT_CNTL if off == regs.ROM_CNTL else value)


def test_transfer_many_finishes_a_slow_transaction_then_the_rest() -> None:
    from amdflash.romsw import Transfer

    rf = make_regfile(done=False)
    polls = {"n": 0}

    def start(value: int) -> None:
        rf.poke(regs.ROM_SW_CNTL, value)
        polls["n"] = 0

    def status_after_two_polls() -> int:  # not done at the first poll of each transaction
        polls["n"] += 1
        return 1 if polls["n"] > 2 else 0

    rf.on_write(regs.ROM_SW_CNTL, start)
    rf.on_read(regs.ROM_SW_STATUS, status_after_two_polls)
    spi, _ = make_spi(rf, poll_interval=0)
    assert spi.transfer_many([Transfer(0x06), Transfer(0x05, data_in=4)]) == [b"", bytes(4)]
    for off, value in INITIAL.items():
        assert rf.peek(off) == (PERSISTENT_CNTL if off == regs.ROM_CNTL else value)
