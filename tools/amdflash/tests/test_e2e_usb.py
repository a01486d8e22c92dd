"""Scenario 18: the CLI through the USB stack (MockASM24Bridge -> USBPCIDevice), discovered via MockUSBContext."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from amdflash import cli, device
from amdflash.sim import (
    SimConfig,
    SimulatedNavi31,
    assert_fw_dump_restored,
    assert_registers_restored,
    build_ifwi,
    make_sim_device,
)
from amdflash.sim.harness import FAST_SETTINGS, Result, never_happen, run_cli
from tg.drivers.mock import MockASM24Bridge, MockUSBContext
from tg.drivers.usb import USBPCIDevice


@pytest.fixture
def usb_board(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[SimulatedNavi31, MockASM24Bridge]]:
    board = SimulatedNavi31(SimConfig(flash=build_ifwi(1)))
    bridge = MockASM24Bridge(gpu=make_sim_device(board, lock=False))
    MockUSBContext.clear()
    MockUSBContext.register(bridge, 0x3801, 0x0001)
    monkeypatch.setenv("TG_DRIVERS_BACKEND", "mock")
    yield board, bridge
    MockUSBContext.clear()


def usb(*argv: str) -> Result:
    """Run with real discovery (no opener): `--transport usb` lists the registered mock bridge."""
    import io

    out, err = io.StringIO(), io.StringIO()
    code = cli.main(list(argv), stdout=out, stderr=err, settings=FAST_SETTINGS)
    return Result(code, out.getvalue(), err.getvalue())


def test_usb_list_and_info(usb_board: tuple[SimulatedNavi31, MockASM24Bridge]) -> None:
    board, bridge = usb_board
    candidates = device.list_candidates("usb")
    assert [(c.transport, c.ident, c.vid, c.pid) for c in candidates] == [("usb", candidates[0].ident, 0x3801, 1)]
    assert candidates[0].ident.startswith("usb:mock-")
    r = usb("list", "--transport", "usb")
    assert r.lines == [f"0 usb {candidates[0].ident} (0x3801:0x0001)"]
    r = usb("romsw", "info")
    assert r.code == 0, r.err
    assert r.lines[0].startswith("JEDEC capture: c86015c8")
    assert r.lines[2].endswith("signature_offset=1")
    assert r.err == ""
    assert_registers_restored(board)
    assert bridge.violations == []
    never_happen(board, writes_allowed=False)


def test_usb_flash_first_sectors_and_verify(usb_board: tuple[SimulatedNavi31, MockASM24Bridge], tmp_path: Path) -> None:
    board, _ = usb_board
    image1, image2 = build_ifwi(1), build_ifwi(2)
    b = tmp_path / "b.bin"
    b.write_bytes(image2)
    r = usb("romsw", "flash", str(b), "--start-sector", "0", "--sector-count", "8", "--yes")
    assert r.code == 0, r.err
    assert len([line for line in r.lines if line.startswith("OK sector ")]) == 8
    assert r.lines[-1] == "flash complete: sectors 0..7 verified"
    assert board.flash[: 8 * 0x1000] == image2[: 8 * 0x1000]
    assert board.flash[8 * 0x1000 :] == image1[8 * 0x1000 :]
    r = usb("romsw", "read", "0x7f00", "0x200")
    assert r.lines == [image2[0x7F00:0x8000].hex() + image1[0x8000:0x8100].hex()]
    assert_registers_restored(board)
    never_happen(board)


def test_usb_fw_probe_and_unavailable_dump(usb_board: tuple[SimulatedNavi31, MockASM24Bridge], tmp_path: Path) -> None:
    board, _ = usb_board
    r = usb("--transport", "usb", "fw", "probe")
    assert r.code == 0 and len(r.lines) == 4
    board.aperture_mode = "unavailable"
    r = usb("--transport", "usb", "fw", "dump", str(tmp_path / "x.bin"))
    assert r.code == 1 and "raw SMUIO ROM controller is unavailable" in r.err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_usb_fw_dump(usb_board: tuple[SimulatedNavi31, MockASM24Bridge], tmp_path: Path) -> None:
    board, bridge = usb_board
    out = tmp_path / "fw.bin"
    r = usb("--transport", "usb", "fw", "dump", str(out))
    assert r.code == 0, r.err
    assert out.read_bytes() == build_ifwi(1)
    assert r.lines[-1].endswith(f"sha256={hashlib.sha256(build_ifwi(1)).hexdigest()}")
    assert_fw_dump_restored(board, 0x07000002, 0x1234)
    assert bridge.violations == [] and board.violations == []


def test_usb_opener_without_discovery(tmp_path: Path) -> None:
    """The same stack through an explicit opener, e.g. a CMP-protected board."""
    board = SimulatedNavi31(SimConfig(flash=build_ifwi(1), sr2=0x40))

    def opener(index: int, transport: str) -> USBPCIDevice:
        return USBPCIDevice("AM", MockASM24Bridge(gpu=make_sim_device(board, lock=False)), "usb:mock-x")

    b = tmp_path / "b.bin"
    b.write_bytes(build_ifwi(2))
    r = run_cli(opener, "romsw", "flash", str(b), "--yes")
    assert (r.code, r.err.strip()) == (1, "error: CMP protects the full array; rerun with --clear-cmp")
    assert board.erase_count == 0 and board.wrsr_count == 0


@pytest.mark.slow
def test_usb_dump_flash_verify(usb_board: tuple[SimulatedNavi31, MockASM24Bridge], tmp_path: Path) -> None:
    """Scenario 3 over USB (the flash limited to sectors 0..7): dump, flash another image, verify both images."""
    board, bridge = usb_board
    image1, image2 = build_ifwi(1), build_ifwi(2)
    a = tmp_path / "a.bin"
    r = usb("romsw", "dump", str(a))
    assert r.code == 0, r.err
    assert a.read_bytes() == image1
    assert r.lines[-1] == f"wrote {a} sha256={hashlib.sha256(image1).hexdigest()}"
    target = image2[: 8 * 0x1000] + image1[8 * 0x1000 :]
    b = tmp_path / "b.bin"
    b.write_bytes(target)
    r = usb("romsw", "flash", str(b), "--sector-count", "8", "--yes")
    assert r.code == 0, r.err
    r = usb("romsw", "verify", str(b))
    assert r.lines == [f"verified 0x200000 bytes sha256={hashlib.sha256(target).hexdigest()}"]
    r = usb("romsw", "verify", str(a))
    assert (r.code, r.err.strip()) == (1, f"error: verify mismatch at 0x4: flash={image2[4]:02x} image={image1[4]:02x}")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.bin", "b.bin"]
    assert_registers_restored(board)
    assert bridge.violations == []
    never_happen(board)
