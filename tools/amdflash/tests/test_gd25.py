"""GD25LQ16E algorithms against the simulated board (ROM_SW engine + flash model)."""

from __future__ import annotations

import pytest

from amdflash.gd25 import GD25LQ16E, has_jedec
from amdflash.romsw import Navi31SPI
from amdflash.sim import ModelBar5, SimConfig, SimulatedNavi31, build_ifwi


def make(**cfg: object) -> tuple[GD25LQ16E, SimulatedNavi31]:
    board = SimulatedNavi31(SimConfig(**cfg))  # type: ignore[arg-type]
    spi = Navi31SPI(ModelBar5(board), timeout=0.05)
    return GD25LQ16E(spi, busy_poll_interval=0), board


def test_rdid_with_priming_and_stale_without() -> None:
    chip, board = make()
    assert has_jedec(chip.rdid())
    assert chip.rdid() == bytes([0xC8, 0x60, 0x15, 0xC8])
    # a single, unprimed read shows the previous RX capture (the RDID above), not the status register
    chip.spi.transfer(0x9F, data_in=4)
    stale = chip.spi.transfer(0x35, data_in=1)
    assert stale == bytes([0xC8])
    assert board.violations == []


def test_unprimed_rdid_on_fresh_board_is_stale_zeroes() -> None:
    chip, _ = make()
    assert chip.spi.transfer(0x9F, data_in=4) == bytes(4)
    assert not has_jedec(bytes(4))


def test_has_jedec_is_cyclic() -> None:
    assert has_jedec(bytes([0x15, 0xC8, 0x60, 0x15]))
    assert has_jedec(bytes([0x15, 0xAA, 0xC8, 0x60]))  # wraps around the end
    assert not has_jedec(bytes([0xEF, 0x40, 0x15, 0xEF]))


@pytest.mark.parametrize("busy_reads", [0, 1, 5])
def test_wait_idle_with_busy_reads(busy_reads: int) -> None:
    chip, board = make(busy_reads=busy_reads)
    chip.erase_sector(0)
    assert not board.busy
    assert board.erase_count == 1
    assert chip.wait_idle(0.1) & 0x03 == 0


def test_wait_idle_timeout_message() -> None:
    chip, _ = make(busy_reads=10**9)
    chip.write_enable()
    chip.spi.transfer(0x20, address=0, address_len=3)
    with pytest.raises(TimeoutError, match=r"flash remained busy for 0.01s"):
        chip.wait_idle(0.01)


def test_wren_ignored_when_flash_refuses_it(monkeypatch: pytest.MonkeyPatch) -> None:
    chip, board = make()
    execute = board.chip.execute
    monkeypatch.setattr(board.chip, "execute", lambda op, a, tx, rx: b"" if op == 0x06 else execute(op, a, tx, rx))
    with pytest.raises(RuntimeError, match=r"WREN failed \(SR1=0x00\)"):
        chip.write_enable()


def test_wren_while_busy_is_ignored_and_status_shows_busy() -> None:
    # during a busy period the flash ignores WREN; RDSR reports BUSY|WEL until the busy captures are used up
    chip, board = make(busy_reads=3)
    board.chip.busy_remaining = 3
    board.chip.wel = False
    chip.write_enable()  # the lagged capture shows BUSY|WEL
    assert chip.status() & 0x03 == 0x03
    assert chip.wait_idle(0.1) & 0x03 == 0
    assert not board.wel


def test_clear_cmp_preserves_bp_bits() -> None:
    chip, board = make(sr1=0x1C, sr2=0x42)
    assert chip.clear_cmp() is True
    assert board.sr1 & 0x7C == 0x1C
    assert board.sr2 == 0x02
    assert board.wrsr_count == 1
    assert board.wrsr_log == [(0x1C, 0x42, 0x1C, 0x02)]
    assert chip.clear_cmp() is False
    assert board.wrsr_count == 1


def test_program_rejects_page_crossing_and_bad_lengths() -> None:
    chip, board = make()
    for addr, n in ((0xF0, 0x20), (0, 0), (0, 257), (0x1FF, 2)):
        with pytest.raises(ValueError, match="page program crosses a 256-byte boundary"):
            chip.program_page(addr, bytes(n))
    assert board.transactions == []


def test_erase_rejects_misalignment() -> None:
    chip, _ = make()
    with pytest.raises(ValueError, match="sector address is not 4 KiB aligned"):
        chip.erase_sector(0x800)


@pytest.mark.parametrize(("addr", "count"), [(-1, 1), (0, -1), (0x1FFFFF, 2), (0x200000, 1)])
def test_read_range_errors(addr: int, count: int) -> None:
    chip, _ = make()
    with pytest.raises(ValueError, match="read outside 2 MiB flash"):
        chip.read(addr, count)


def test_erase_program_read_roundtrip() -> None:
    image = build_ifwi(5)
    chip, board = make()
    chip.erase_sector(0x3000)
    for off in range(0, 0x1000, 0x100):
        chip.program_page(0x3000 + off, image[0x3000 + off : 0x3100 + off])
    assert chip.read(0x3000, 0x1000) == image[0x3000:0x4000]
    assert chip.read(0x1FFF00, 0x100) == b"\xff" * 0x100
    assert chip.read(0, 0) == b""
    assert board.violations == []


def test_sfdp_capture_keeps_dummy_byte() -> None:
    chip, _ = make()
    capture = chip.sfdp(24)
    assert len(capture) == 24
    assert capture.find(b"SFDP") == 1
