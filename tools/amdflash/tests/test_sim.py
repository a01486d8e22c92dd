"""The simulated Navi31 board on its own: register behaviour, flash model, PSP model, strictness, images, state."""

from __future__ import annotations

from pathlib import Path

import pytest

from amdflash import regs
from amdflash.sim import (
    BAD_SIZES,
    ModelBar5,
    SimConfig,
    SimulatedNavi31,
    bad_sizes,
    build_ifwi,
    build_mirrored,
    make_sim_device,
)
from amdflash.sim.state import default_state_path, load_board, save_board
from tg.drivers.errors import MockAccessError


def rw(board: SimulatedNavi31) -> ModelBar5:
    return ModelBar5(board)


def prepare(bar: ModelBar5) -> None:
    """Put the GPIO/PAGE_MIRROR/ROM_CNTL registers in the ROM_SW state the strict trigger check expects."""
    for off in (regs.GPIO_PAD_MASK, regs.GPIO_PAD_A, regs.GPIO_PAD_EN):
        bar.write32(off, bar.read32(off) & ~0x780)
    bar.write32(regs.PAGE_MIRROR_CNTL, 0x06000000)
    bar.write32(regs.ROM_CNTL, 0x8)


def txn(bar: ModelBar5, command: int, control: int, tx: bytes = b"") -> None:
    bar.write32(regs.ROM_SW_COMMAND, command)
    for i in range(0, len(tx), 4):
        bar.write32(regs.ROM_SW_DATA + i, int.from_bytes(tx[i : i + 4].ljust(4, b"\0"), "big"))
    bar.write32(regs.ROM_SW_CNTL, control)


def test_initial_registers_and_defaults() -> None:
    board = SimulatedNavi31()
    bar = rw(board)
    assert bar.read32(regs.ROM_CNTL) == 0x07000002
    assert bar.read32(regs.PAGE_MIRROR_CNTL) == 0x08000000
    assert bar.read32(regs.ROM_INDEX) == 0x1234
    assert bar.read32(regs.GPIO_PAD_MASK) == 0xF80
    assert bar.read32(regs.PSP_COMMAND) == 0x80000000
    assert bar.read32(regs.ROM_SW_STATUS) == 0
    assert board.flash == b"\xff" * 0x200000


def test_config_validation() -> None:
    with pytest.raises(ValueError, match="exactly 0x200000 bytes"):
        SimConfig(flash=b"\xff")
    with pytest.raises(ValueError, match="romsw must be one of"):
        SimConfig(romsw="broken")
    with pytest.raises(ValueError, match="busy_reads"):
        SimConfig(busy_reads=-1)


def test_rx_window_lags_by_one_rx_transaction_only() -> None:
    board = SimulatedNavi31(SimConfig(busy_reads=0))
    bar = rw(board)
    prepare(bar)
    txn(bar, 0x9F, 0x80004)  # RDID: window shows the initial zero capture
    assert bar.read(regs.ROM_SW_DATA, 4) == bytes(4)
    txn(bar, 0x06, 0)  # a non-RX transaction in between does not become the lagged capture
    txn(bar, 0x35, 0x80001)
    assert bar.read(regs.ROM_SW_DATA, 4) == bytes([0xC8, 0x60, 0x15, 0xC8])
    txn(bar, 0x05, 0x80002)
    assert bar.read(regs.ROM_SW_DATA, 4)[:1] == bytes([0x00])  # SR2 capture of the previous RX
    assert board.violations == []


def test_tx_is_big_endian_per_dword_and_program_ands() -> None:
    board = SimulatedNavi31(SimConfig(busy_reads=0))
    bar = rw(board)
    prepare(bar)
    txn(bar, 0x06, 0)
    txn(bar, (0x000100 << 8) | 0x02, 0x30005, bytes([0x12, 0x34, 0x56, 0x78, 0x9A]))
    assert board.flash[0x100:0x106] == bytes([0x12, 0x34, 0x56, 0x78, 0x9A, 0xFF])
    assert board.transactions[-1].tx == bytes([0x12, 0x34, 0x56, 0x78, 0x9A])
    assert board.program_count == 1
    # AND-programming: bits only go 1 -> 0; the write wraps inside the page
    txn(bar, 0x06, 0)
    txn(bar, (0x0001FE << 8) | 0x02, 0x30004, bytes([0x0F, 0xF0, 0x00, 0xF0]))
    assert board.flash[0x1FE:0x200] == bytes([0x0F, 0xF0])
    assert board.flash[0x100:0x102] == bytes([0x00, 0x30])
    assert board.violations == []


def test_erase_needs_wel_and_respects_protection() -> None:
    board = SimulatedNavi31(SimConfig(flash=build_ifwi(1), busy_reads=0, sr2=0x40))
    bar = rw(board)
    prepare(bar)
    txn(bar, (0x1000 << 8) | 0x20, 0x30000)  # no WEL: ignored
    assert board.erase_count == 0
    txn(bar, 0x06, 0)
    txn(bar, (0x1000 << 8) | 0x20, 0x30000)  # CMP protects everything: ignored, WEL cleared
    assert board.erase_count == 0 and not board.wel
    board.sr2 = 0
    txn(bar, 0x06, 0)
    txn(bar, (0x1234 << 8) | 0x20, 0x30000)
    assert board.erase_count == 1
    assert board.flash[0x1000:0x2000] == b"\xff" * 0x1000
    assert board.flash[0x2000:0x2004] == b"$PSP"


def test_busy_ignores_other_commands() -> None:
    board = SimulatedNavi31(SimConfig(flash=build_ifwi(1), busy_reads=2))
    bar = rw(board)
    prepare(bar)
    txn(bar, 0x06, 0)
    txn(bar, 0x20, 0x30000)
    assert board.busy and board.wel
    txn(bar, 0x03, 0xB0004)  # READ while busy returns 0xFF (seen one RX later)
    txn(bar, 0x05, 0x80001)
    assert bar.read(regs.ROM_SW_DATA, 4) == b"\xff" * 4
    txn(bar, 0x05, 0x80001)
    assert not board.busy and not board.wel


def test_gated_and_stalled_engines() -> None:
    board = SimulatedNavi31(SimConfig(romsw="gated"))
    bar = rw(board)
    bar.write32(regs.ROM_SW_STATUS, 0)
    assert bar.read32(regs.ROM_SW_STATUS) == 0x04000800
    bar.write32(regs.ROM_SW_CNTL, 0x80004)
    assert board.transactions == []
    board = SimulatedNavi31(SimConfig(romsw="stalled"))
    bar = rw(board)
    prepare(bar)
    bar.write32(regs.ROM_SW_CNTL, 0x80004)
    assert bar.read32(regs.ROM_SW_STATUS) == 0
    assert board.pending == 1


def test_stall_after_txns() -> None:
    board = SimulatedNavi31(SimConfig(stall_after_txns=2))
    bar = rw(board)
    prepare(bar)
    for _ in range(2):
        bar.write32(regs.ROM_SW_CNTL, 0)
        assert bar.read32(regs.ROM_SW_STATUS) == 1
        bar.write32(regs.ROM_SW_STATUS, 0)
    bar.write32(regs.ROM_SW_CNTL, 0)
    assert bar.read32(regs.ROM_SW_STATUS) == 0


@pytest.mark.parametrize(
    ("action", "message"),
    [
        (lambda b: b.read(0x5A3AC, 4), "unmodelled offset 0x5a3ac"),
        (lambda b: b.read(0x40000, 4), "unmodelled offset 0x40000"),
        (lambda b: b.read(regs.ROM_CNTL, 2), "sub-dword read of register 0x5a380"),
        (lambda b: b.write(regs.ROM_CNTL + 1, b"\0"), "sub-dword write"),
        (lambda b: b.write32(regs.ROM_DATA, 0), "write to ROM_DATA"),
        (lambda b: b.read(regs.ROM_INDEX, 8), "ROM_DATA block read"),
        (lambda b: b.write32(regs.PSP_DOORBELL, 1), "doorbell without command"),
    ],
)
def test_strict_violations(action: object, message: str) -> None:
    board = SimulatedNavi31()
    with pytest.raises(MockAccessError, match=message):
        action(rw(board))  # type: ignore[operator]
    assert message in board.violations[0]


@pytest.mark.parametrize(
    ("control", "message"),
    [
        (0x40004, "RETURN_DATA_EN written at bit 18; Navi31 uses bit 19"),
        (0x00101, "exceeds 256"),
        (0x80000, "RX with a data size of 0"),
    ],
)
def test_strict_control_word_violations(control: int, message: str) -> None:
    board = SimulatedNavi31()
    bar = rw(board)
    prepare(bar)
    with pytest.raises(MockAccessError, match=message):
        bar.write32(regs.ROM_SW_CNTL, control)


def test_trigger_requires_romsw_register_state() -> None:
    board = SimulatedNavi31()
    with pytest.raises(MockAccessError, match="GPIO register still claims the SPI pads"):
        rw(board).write32(regs.ROM_SW_CNTL, 0)


def test_non_strict_records_but_does_not_raise() -> None:
    board = SimulatedNavi31(SimConfig(strict=False))
    bar = rw(board)
    assert bar.read(0x5A3AC, 4) == bytes(4)
    assert board.violations


def test_rom_data_wraps_per_aperture_mode() -> None:
    image = build_ifwi(3)
    for mode, length in (("raw", 0x200000), ("mirror_1mib", 0x100000)):
        board = SimulatedNavi31(SimConfig(flash=image, rom_aperture=mode))
        bar = rw(board)
        bar.write32(regs.ROM_INDEX, 0x1FFFFC)
        word = bar.read32(regs.ROM_DATA)
        assert word == int.from_bytes(image[0x1FFFFC % length : 0x1FFFFC % length + 4], "little")
        assert bar.read32(regs.ROM_INDEX) == 0x200000
    board = SimulatedNavi31(SimConfig(rom_aperture="unavailable"))
    bar = rw(board)
    bar.write32(regs.ROM_CNTL, 0)
    assert bar.read32(regs.ROM_CNTL) == 0xFFFFFFFF


def test_psp_modes() -> None:
    board = SimulatedNavi31(SimConfig(psp="sos_gated"))
    bar = rw(board)
    for cmd, want in ((0x07, 0x8000000A), (0x08, 0x8000000E), (0x01, 0x80000000)):
        bar.write32(regs.PSP_COMMAND, cmd << 16)
        bar.write32(regs.PSP_DOORBELL, 1)
        assert bar.read32(regs.PSP_COMMAND) == want
    board = SimulatedNavi31(SimConfig(psp="not_ready"))
    bar = rw(board)
    bar.write32(regs.PSP_COMMAND, 0x10000)
    assert bar.read32(regs.PSP_COMMAND) == 0


def test_images() -> None:
    a, b = build_ifwi(1), build_ifwi(2)
    assert len(a) == 0x200000 and a[:4] == bytes([0xAA, 0x55, 0xAA, 0x55])
    assert a == build_ifwi(1) and a != b
    assert a[:0x100000] != a[0x100000:]
    m = build_mirrored(1)
    assert m[:0x100000] == m[0x100000:] and m[:4] == a[:4]
    assert [len(x) for x in bad_sizes()] == list(BAD_SIZES)


def test_state_roundtrip(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "sub" / "state.bin"
    board = load_board(path)
    assert board.flash == b"\xff" * 0x200000
    board.flash = build_ifwi(9)
    board.sr2 = 0x40
    board.regs[regs.ROM_CNTL] = 0x19000003
    save_board(board, path)
    again = load_board(path)
    assert again.flash == build_ifwi(9)
    assert again.sr2 == 0x40
    assert again.regs[regs.ROM_CNTL] == 0x19000003
    assert again.initial_regs == board.initial_regs
    path.write_bytes(b"garbage")
    with pytest.raises(ValueError, match="not an amdflash simulator state file"):
        load_board(path)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert default_state_path() == tmp_path / "amdflash" / "sim-board.bin"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert default_state_path() == tmp_path / ".cache" / "amdflash" / "sim-board.bin"


def test_make_sim_device_wiring() -> None:
    board = SimulatedNavi31()
    dev = make_sim_device(board)
    try:
        assert dev.read_config(0, 2) == 0x1002
        assert dev.read_config(2, 2) == 0x744C
        assert dev.bar_info(5)[1] == 0x100000
        assert dev.bar_info(0)[1] == 16 << 20
        assert dev.map_bar(5).read32(regs.ROM_CNTL) == 0x07000002
    finally:
        dev.close()
