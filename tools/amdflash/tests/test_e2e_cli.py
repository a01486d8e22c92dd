"""End-to-end CLI scenarios (spec §13.2) in-process through `main(opener=...)`, simulator behind MockPCIDevice."""

from __future__ import annotations

import hashlib
import io
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from amdflash import cli, device, regs
from amdflash.sim import (
    DEFAULT_PSP_ITEMS,
    SimConfig,
    SimulatedNavi31,
    assert_fw_dump_restored,
    assert_registers_restored,
    bad_sizes,
    build_ifwi,
    make_sim_device,
)
from amdflash.sim.harness import FAST_SETTINGS, PROGRESS_LINE, Result, SimOpener, never_happen

Runner = Callable[..., Result]

DISABLED = (
    "error: firmware writes are disabled: stock reflash validation failed; use 'amdflash romsw flash' for recovery"
)


def write(path: Path, data: bytes) -> str:
    path.write_bytes(data)
    return str(path)


def nonff_pages(image: bytes, start: int = 0, count: int = 512) -> int:
    lo, hi = start * 0x1000, (start + count) * 0x1000
    return sum(1 for a in range(lo, hi, 0x100) if image[a : a + 0x100] != b"\xff" * 0x100)


def first_diff(a: bytes, b: bytes) -> int:
    return next(i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y)


# --- 1, 2: info and dump ----------------------------------------------------------------------------------------------
def test_info(cli: Runner, board: SimulatedNavi31) -> None:
    r = cli(board, "romsw", "info")
    assert r.code == 0, r.err
    assert r.lines[0].startswith("JEDEC capture: c86015c8")
    assert r.lines[1] == "SR1/SR2/SR3: 00/00/00  CMP=clear"
    assert r.lines[2].endswith("  signature_offset=1")
    assert len(r.lines) == 3
    assert r.err == ""
    assert_registers_restored(board)
    never_happen(board, writes_allowed=False)


def test_dump_interrupted_leaves_no_file(cli: Runner, tmp_path: Path) -> None:
    board = SimulatedNavi31(SimConfig(flash=build_ifwi(1)))
    calls = {"n": 0}
    read32 = board._readers[regs.ROM_SW_STATUS]

    def interrupt_later() -> int:
        calls["n"] += 1
        if calls["n"] == 3000:
            raise KeyboardInterrupt
        return read32()

    board._readers[regs.ROM_SW_STATUS] = interrupt_later
    r = cli(board, "romsw", "dump", str(tmp_path / "a.bin"))
    assert r.code == 130
    assert r.err.strip().endswith("error: interrupted")
    assert os.listdir(tmp_path) == []
    board._readers[regs.ROM_SW_STATUS] = read32
    assert_registers_restored(board)


def test_dump_never_writes_through_a_planted_partial_symlink(cli: Runner, tmp_path: Path) -> None:
    """Issue 29 finding 7, as reported: `ln -s victim.txt out.bin.partial; amdflash --sim romsw dump out.bin`."""
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    (tmp_path / "out.bin.partial").symlink_to(victim)
    board = SimulatedNavi31(SimConfig(flash=build_ifwi(1)))
    opener = SimOpener(board)
    r = cli(opener, "romsw", "dump", str(tmp_path / "out.bin"))
    assert r.code == 1 and "out.bin.partial already exists and is a symlink; refusing to write through it" in r.err
    assert victim.read_text() == "precious" and not (tmp_path / "out.bin").exists()
    assert opener.calls == []  # refused before the device was opened


# --- 2, 3: dump -> flash a different image -> verify ------------------------------------------------------------------
def check_dump(r: Result, out: Path, image: bytes) -> None:
    assert r.code == 0, r.err
    assert out.read_bytes() == image
    assert r.lines[-1] == f"wrote {out} sha256={hashlib.sha256(image).hexdigest()}"
    assert len(r.lines) == 1  # progress goes to stderr: one plain line per 10% when stderr is not a terminal
    assert [line.split("%")[0] for line in r.progress] == [f"dump: {p}" for p in range(10, 101, 10)]
    assert r.progress[-1].startswith("dump: 100% (2.0 MiB/2.0 MiB, ")
    assert not [name for name in os.listdir(out.parent) if name.endswith(".partial")]


def test_dump_flash_verify_short(cli: Runner, tmp_path: Path) -> None:
    """Scenario 3 with the flash limited to 8 sectors: the rest of the board already holds image 2."""
    image1, image2 = build_ifwi(1), build_ifwi(2)
    start = image1[: 8 * 0x1000] + image2[8 * 0x1000 :]
    board = SimulatedNavi31(SimConfig(flash=start))
    fast = SimOpener(board, direct=True)  # the 2 MiB reads skip the MMIO view layer (the slow variant keeps it)
    a = tmp_path / "a.bin"
    check_dump(cli(fast, "romsw", "dump", str(a)), a, start)
    assert_registers_restored(board)
    b = write(tmp_path / "b.bin", image2)
    r = cli(board, "romsw", "flash", b, "--sector-count", "8", "--yes")
    assert r.code == 0, r.err
    ok = [line for line in r.lines if line.startswith("OK sector ")]
    expected = [f"OK sector {n:03d}/511 @{n * 0x1000:#07x}" for n in range(8)]
    assert [line.split(" elapsed=")[0] for line in ok] == expected
    assert r.lines[-1] == "flash complete: sectors 0..7 verified"
    assert board.flash == image2
    assert board.erase_count == 8
    assert board.program_count == nonff_pages(image2, 0, 8)
    r = cli(fast, "romsw", "verify", b)
    assert r.lines == [f"verified 0x200000 bytes sha256={hashlib.sha256(image2).hexdigest()}"]
    r = cli(board, "romsw", "verify", str(a))
    assert r.code == 1
    addr = first_diff(image2, start)
    assert addr == 4
    assert r.err.strip() == f"error: verify mismatch at {addr:#x}: flash={image2[addr]:02x} image={start[addr]:02x}"
    assert_registers_restored(board)
    never_happen(board)


@pytest.mark.slow
def test_dump_flash_verify_full(cli: Runner, tmp_path: Path) -> None:
    """Scenario 3 as specified: a full 512-sector flash through MockPCIDevice."""
    image1, image2 = build_ifwi(1), build_ifwi(2)
    board = SimulatedNavi31(SimConfig(flash=image1))
    a = tmp_path / "a.bin"
    check_dump(cli(board, "romsw", "dump", str(a)), a, image1)
    b = write(tmp_path / "b.bin", image2)
    r = cli(board, "romsw", "flash", b, "--yes")
    assert r.code == 0, r.err
    ok = [line for line in r.lines if line.startswith("OK sector ")]
    assert len(ok) == 512
    assert ok[0].startswith("OK sector 000/511 @0x00000 elapsed=")
    assert ok[-1].startswith("OK sector 511/511 @0x1ff000 elapsed=")
    assert r.lines[-1] == "flash complete: sectors 0..511 verified"
    assert board.flash == image2
    assert board.erase_count == 512
    assert board.program_count == nonff_pages(image2)
    r = cli(board, "romsw", "verify", b)
    assert r.code == 0, r.err
    assert r.lines == [f"verified 0x200000 bytes sha256={hashlib.sha256(image2).hexdigest()}"]
    r = cli(board, "romsw", "verify", str(a))
    addr = first_diff(image2, image1)
    assert (r.code, addr) == (1, 4)
    assert r.err.strip() == f"error: verify mismatch at {addr:#x}: flash={image2[addr]:02x} image={image1[addr]:02x}"
    assert_registers_restored(board)
    never_happen(board)


def test_flash_skips_all_ff_pages(cli: Runner, tmp_path: Path) -> None:
    image = bytearray(build_ifwi(2))
    image[0x1100:0x1400] = b"\xff" * 0x300  # three all-FF pages that leave the IFWI structures intact
    board = SimulatedNavi31(SimConfig(flash=build_ifwi(1)))
    r = cli(board, "romsw", "flash", write(tmp_path / "b.bin", bytes(image)), "--sector-count", "2", "--yes")
    assert r.code == 0, r.err
    assert board.program_count == 32 - 3
    assert board.flash[:0x2000] == image[:0x2000]
    never_happen(board)


# --- 4: interrupted flash, resumed ------------------------------------------------------------------------------------
def abort_at(event: tuple[Any, ...], exc: BaseException) -> Any:
    def hook(ev: tuple[Any, ...]) -> None:
        if ev == event:
            raise exc

    return hook


def test_interrupted_flash_resumed(cli: Runner, tmp_path: Path) -> None:
    image1, image2 = build_ifwi(1), build_ifwi(2)
    # sectors before 126 already hold image 2, so a full verify can pass after a short resume
    board = SimulatedNavi31(
        SimConfig(flash=image2[: 126 * 0x1000] + image1[126 * 0x1000 : 135 * 0x1000] + image2[135 * 0x1000 :])
    )
    b = write(tmp_path / "b.bin", image2)
    board.abort_on = abort_at(("erase", 130), KeyboardInterrupt())
    r = cli(board, "romsw", "flash", b, "--start-sector", "126", "--yes")
    assert r.code == 130
    err = r.err.strip().splitlines()
    assert err[1:] == [
        "hint: flash stopped at sector 130; resume with --start-sector 130 --sector-count 382 --yes",
        "error: interrupted",
    ]
    assert err[0].startswith("hint: the original contents of the sectors being replaced are in ")
    assert board.flash[: 130 * 0x1000] == image2[: 130 * 0x1000]
    assert board.flash[130 * 0x1000 : 131 * 0x1000] == image1[130 * 0x1000 : 131 * 0x1000]  # hook fires before erase
    assert_registers_restored(board)
    board.abort_on = None
    r = cli(board, "romsw", "flash", b, "--start-sector", "130", "--sector-count", "5", "--yes")
    assert r.code == 0, r.err
    assert r.err.startswith("resuming the unfinished flash recorded in ")  # its backup keeps sector 130's original
    assert [line.split()[2] for line in r.lines if line.startswith("OK")] == [f"{n:03d}/511" for n in range(130, 135)]
    # the 2 MiB verify skips the MMIO view layer (test_dump_flash_verify_short's verify through it covers that path)
    assert cli(SimOpener(board, direct=True), "romsw", "verify", b).code == 0
    never_happen(board)


@pytest.mark.slow
def test_interrupted_full_flash_resumed_to_the_end(cli: Runner, tmp_path: Path) -> None:
    image1, image2 = build_ifwi(1), build_ifwi(2)
    board = SimulatedNavi31(SimConfig(flash=image1))
    b = write(tmp_path / "b.bin", image2)
    board.abort_on = abort_at(("erase", 130), KeyboardInterrupt())
    r = cli(board, "romsw", "flash", b, "--yes")
    assert r.code == 130
    assert "hint: flash stopped at sector 130; resume with --start-sector 130 --sector-count 382 --yes" in r.err
    assert board.flash[: 130 * 0x1000] == image2[: 130 * 0x1000]
    assert board.flash[130 * 0x1000 : 131 * 0x1000] == image1[130 * 0x1000 : 131 * 0x1000]
    board.abort_on = None
    r = cli(board, "romsw", "flash", b, "--start-sector", "130", "--yes")
    assert r.code == 0
    assert len([line for line in r.lines if line.startswith("OK")]) == 382
    assert cli(board, "romsw", "verify", b).code == 0
    never_happen(board)


def test_stalled_engine_mid_sector_then_resume(cli: Runner, tmp_path: Path) -> None:
    image = build_ifwi(2)
    b = write(tmp_path / "b.bin", image)
    argv = ("romsw", "flash", b, "--start-sector", "10", "--sector-count", "4", "--yes")
    # on an identical board, learn how many ROM_SW transactions have run when sectors 12 and 13 start being erased
    probe_board = SimulatedNavi31(SimConfig(flash=build_ifwi(1)))
    marks: dict[int, int] = {}

    def observe(event: tuple[Any, ...]) -> None:
        if event[0] == "erase":
            marks[event[1]] = len(probe_board.transactions)

    probe_board.abort_on = observe
    assert cli(probe_board, *argv, "--backup-dir", str(tmp_path / "probe")).code == 0
    board = SimulatedNavi31(SimConfig(flash=build_ifwi(1)))
    board.stall_after_txns = (marks[12] + marks[13]) // 2  # in the middle of sector 12
    r = cli(board, *argv)
    assert r.code == 1
    err = [line for line in r.err.strip().splitlines() if not line.startswith("hint: the original contents")]
    assert err[0] == "hint: flash stopped at sector 12; resume with --start-sector 12 --sector-count 2 --yes"
    assert err[1].startswith("error: ROM_SW transaction timeout")
    board.stall_after_txns = None
    r = cli(board, "romsw", "flash", b, "--start-sector", "12", "--sector-count", "2", "--yes")
    assert r.code == 0, r.err
    assert board.flash[0x1000 * 10 : 0x1000 * 14] == image[0x1000 * 10 : 0x1000 * 14]
    assert_registers_restored(board)
    never_happen(board)


def test_partial_range_touches_only_those_sectors(cli: Runner, tmp_path: Path) -> None:
    image1, image2 = build_ifwi(1), build_ifwi(2)
    board = SimulatedNavi31(SimConfig(flash=image1))
    r = cli(
        SimOpener(board, direct=True),
        "romsw",
        "flash",
        write(tmp_path / "b.bin", image2),
        "--start-sector",
        "128",
        "--sector-count",
        "64",
        "--yes",
    )
    assert r.code == 0, r.err
    assert r.lines[-1] == "flash complete: sectors 128..191 verified"
    assert board.erase_count == 64
    lo, hi = 128 * 0x1000, 192 * 0x1000
    assert board.flash[lo:hi] == image2[lo:hi]
    assert board.flash[:lo] == image1[:lo] and board.flash[hi:] == image1[hi:]
    never_happen(board)


# --- 5: CMP protection ------------------------------------------------------------------------------------------------
def test_cmp_requires_clear_cmp(cli: Runner, tmp_path: Path) -> None:
    image1, image2 = build_ifwi(1), build_ifwi(2)
    board = SimulatedNavi31(SimConfig(flash=image1, sr2=0x40))
    b = write(tmp_path / "b.bin", image2)
    r = cli(board, "romsw", "flash", b, "--yes")
    assert r.code == 1
    assert r.err.strip() == "error: CMP protects the full array; rerun with --clear-cmp"
    assert (board.erase_count, board.wrsr_count) == (0, 0)
    assert board.flash == image1
    never_happen(board, writes_allowed=False)
    r = cli(board, "romsw", "flash", b, "--sector-count", "2", "--clear-cmp", "--yes")
    assert r.code == 0, r.err
    assert r.lines[0] == "cleared SR2.CMP"
    assert board.sr2 & 0x40 == 0
    assert board.wrsr_count == 1
    assert board.wrsr_log == [(0, 0x40, 0, 0)]
    assert board.flash[:0x2000] == image2[:0x2000]
    never_happen(board)


def test_bp_protection_shows_up_as_verify_mismatch(cli: Runner, tmp_path: Path) -> None:
    board = SimulatedNavi31(SimConfig(sr1=0x04))
    image = build_ifwi(2)
    r = cli(board, "romsw", "flash", write(tmp_path / "b.bin", image), "--yes")
    assert r.code == 1
    assert "hint: flash stopped at sector 0; resume with --start-sector 0 --sector-count 512 --yes" in r.err
    assert f"error: verify mismatch at 0x0: flash=ff image={image[0]:02x}" in r.err
    assert board.erase_count == 0 and board.program_count == 0


# --- 6, 7, 8, 11: refusals before any device access -------------------------------------------------------------------
@pytest.mark.parametrize("data", bad_sizes(), ids=lambda d: hex(len(d)))
def test_bad_image_sizes_never_open_the_device(cli: Runner, tmp_path: Path, data: bytes) -> None:
    board = SimulatedNavi31()
    path = write(tmp_path / "bad.bin", data)
    for argv, message in (
        (("romsw", "flash", path, "--yes"), f"error: image must be exactly 0x200000 bytes (2 MiB); {path} has "),
        (("romsw", "verify", path), f"error: image must be exactly 0x200000 bytes (2 MiB); {path} has "),
        (("fw", "ifwi-all", path, "--yes"), f"error: IFWI image must be exactly 0x200000 bytes (2 MiB); {path} has "),
    ):
        message += f"{len(data):#x} bytes"  # the same wording everywhere, with the file's actual size
        spy = SimOpener(board)
        r = cli(spy, *argv)
        assert (r.code, r.err.strip()) == (1, message)
        assert spy.calls == []
    assert board.transactions == [] and board.psp_log == []


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (("romsw", "flash", "/nonexistent/img"), "error: refusing to write without --yes"),
        (("fw", "ifwi-all", "/nonexistent/img"), "error: refusing to stream without --yes"),
        (("fw", "stream", "0x1", "x.bin"), DISABLED),
        (("fw", "stream", "0x1", "x.bin", "--yes"), DISABLED),
        (("fw", "ifwi-step", "x.bin", "--yes"), DISABLED),
        (("fw", "live-flash", "x.bin", "--yes"), DISABLED),
        (("fw", "live-flash", "x.bin"), DISABLED),
        (("romsw", "--prescale", "16", "info"), "error: prescale must be 0..15"),
        (("--prescale", "-1", "romsw", "info"), "error: prescale must be 0..15"),
        (("romsw", "read", "0x1FFFFF", "2"), "error: read outside 2 MiB flash"),
    ],
)
def test_refusals_never_open_the_device(
    cli: Runner, board: SimulatedNavi31, argv: tuple[str, ...], message: str
) -> None:
    spy = SimOpener(board)
    r = cli(spy, *argv)
    assert (r.code, r.err.strip()) == (1, message)
    assert spy.calls == [] and r.out == ""


@pytest.mark.parametrize(
    "extra",
    [
        ("--start-sector", "512"),
        ("--sector-count", "0"),
        ("--start-sector", "500", "--sector-count", "13"),
        ("--start-sector", "-1"),
        ("--start-sector", "0x10", "--sector-count", "0x1F1"),
    ],
)
def test_sector_range_errors(cli: Runner, tmp_path: Path, extra: tuple[str, ...]) -> None:
    spy = SimOpener(SimulatedNavi31())
    r = cli(spy, "romsw", "flash", write(tmp_path / "b.bin", build_ifwi(2)), *extra, "--yes")
    assert (r.code, r.err.strip()) == (1, "error: invalid sector range")
    assert spy.calls == []


def test_invalid_image_flashes_only_with_skip_image_check(cli: Runner, tmp_path: Path) -> None:
    board = SimulatedNavi31()
    image = bytes(0x200000)
    path = write(tmp_path / "z.bin", image)
    r = cli(board, "romsw", "flash", path, "--sector-count", "1", "--yes")
    assert (r.code, r.err.strip()) == (1, "error: not an IFWI image: it starts with 00000000, not the magic aa55aa55")
    assert board.transactions == []
    r = cli(board, "romsw", "flash", path, "--sector-count", "1", "--skip-image-check", "--yes")
    assert r.code == 0, r.err
    assert r.err.strip() == "warning: --skip-image-check: the image is written without checking that it is a valid IFWI"
    assert board.flash[:0x1000] == image[:0x1000]


# --- 9, 10: wrong JEDEC, gated engine ---------------------------------------------------------------------------------
def test_wrong_jedec_stops_after_rdid(cli: Runner, tmp_path: Path) -> None:
    board = SimulatedNavi31(SimConfig(jedec=bytes([0xEF, 0x40, 0x15])))
    r = cli(board, "romsw", "flash", write(tmp_path / "b.bin", build_ifwi(2)), "--yes")
    assert (r.code, r.err.strip()) == (1, "error: unexpected GD25LQ16E JEDEC capture: ef4015ef")
    assert {t.opcode for t in board.transactions} <= {0x00, 0x9F}
    assert [t.opcode for t in board.transactions if t.control] == [0x9F, 0x9F]
    assert_registers_restored(board)
    never_happen(board, writes_allowed=False)


def test_gated_engine(cli: Runner) -> None:
    board = SimulatedNavi31(SimConfig(romsw="gated"))
    r = cli(board, "romsw", "info")
    assert r.code == 1
    assert r.err.startswith("error: ROM_SW_STATUS did not clear (status=0x04000800)")
    assert_registers_restored(board)


def test_stalled_engine_times_out(cli: Runner) -> None:
    board = SimulatedNavi31(SimConfig(romsw="stalled"))
    r = cli(board, "romsw", "info")
    assert r.code == 1
    assert r.err.startswith("error: ROM_SW transaction timeout (status=0x0); engine may be gated after SOS boot")


# --- 12: read ---------------------------------------------------------------------------------------------------------
def test_read(cli: Runner, tmp_path: Path) -> None:
    image = build_ifwi(1)
    board = SimulatedNavi31(SimConfig(flash=image))
    r = cli(board, "romsw", "read", "0", "0x40")
    assert r.code == 0 and r.lines == [image[:0x40].hex()]
    assert len(r.lines[0]) == 128
    r = cli(board, "romsw", "read", "0x100", "0")
    assert r.code == 0 and r.out == "\n"
    out = tmp_path / "out"
    r = cli(board, "romsw", "read", "0x100", "0x300", "-o", str(out))
    assert r.code == 0 and r.out == ""
    assert out.read_bytes() == image[0x100:0x400]
    assert os.listdir(tmp_path) == ["out"]
    never_happen(board, writes_allowed=False)


# --- 13: fw probe -----------------------------------------------------------------------------------------------------
def test_fw_probe(cli: Runner, board: SimulatedNavi31) -> None:
    r = cli(board, "fw", "probe")
    assert r.code == 0
    assert r.lines == [
        "boot_partition: error=0x0 response=0x0",
        "fb_state: error=0x0 response=0x0",
        "model_id: error=0x0 response=0x0",
        "transfer_type: error=0x0 response=0x1",
    ]
    assert r.err == ""
    gated = SimulatedNavi31(SimConfig(psp="sos_gated"))
    r = cli(gated, "fw", "probe")
    assert r.code == 0
    assert r.lines[3] == "transfer_type: error=0xa response=0x0"
    assert r.err.strip() == "update commands gated: reset card and do not initialize AMDev/SOS"
    r = cli(SimulatedNavi31(SimConfig(psp="not_ready")), "fw", "probe")
    assert r.code == 1
    assert r.err.splitlines() == [
        "hint: the PSP has not booted (as with an empty or corrupt flash, where its boot loader stalls); "
        "the raw romsw commands work in that state",
        "error: PSP mailbox is not ready before command 0x1: status=0x00000000",
    ]
    for b in (board, gated):
        assert b.transactions == [] and b.violations == []


# --- 14: fw dump ------------------------------------------------------------------------------------------------------
def test_fw_dump(cli: Runner, tmp_path: Path) -> None:
    image = build_ifwi(6)
    board = SimulatedNavi31(SimConfig(flash=image))
    out = tmp_path / "fw.bin"
    r = cli(board, "fw", "dump", str(out))
    assert r.code == 0, r.err
    assert out.read_bytes() == image
    assert len(r.lines) == 1 and r.progress[-1].startswith("fw dump: 100% (2.0 MiB/2.0 MiB")
    assert r.lines[-1].startswith("dumped 0x200000 bytes in ")
    assert r.lines[-1].endswith(f"s sha256={hashlib.sha256(image).hexdigest()}")
    assert_fw_dump_restored(board, 0x07000002, 0x1234)
    never_happen(board, writes_allowed=False)


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"flash": build_ifwi(6), "rom_aperture": "mirror_1mib"}, "error: ROM aperture contains mirrored 1 MiB halves"),
        ({}, "error: invalid raw flash dump: size=0x200000 magic=ffffffff"),
        ({"flash": build_ifwi(6), "rom_aperture": "unavailable"}, "error: raw SMUIO ROM controller is unavailable"),
    ],
)
def test_fw_dump_rejections_write_nothing(cli: Runner, tmp_path: Path, config: dict[str, Any], message: str) -> None:
    board = SimulatedNavi31(SimConfig(**config))
    r = cli(SimOpener(board, direct=True), "fw", "dump", str(tmp_path / "fw.bin"))
    assert r.code == 1
    assert r.err.strip().startswith(message)
    assert os.listdir(tmp_path) == []
    assert board.violations == []
    if config.get("rom_aperture") != "unavailable":
        assert_fw_dump_restored(board, 0x07000002, 0x1234)


# --- 15: fw ifwi-all --------------------------------------------------------------------------------------------------
def expected_slices(image: bytes) -> dict[int, bytes]:
    u32 = lambda off: int.from_bytes(image[off : off + 4], "little")
    table = {
        0x01: (0, 0x54),
        0x02: (0x2000, 0x100),
        0x03: (0x3000, 0x200),
        0x04: (0x10000, 0x1000),
        0x05: (0x11000, 0x1000),
        0x06: (0x12000, 0x20),
        0x07: (0x13000, 0x20),
        0x80: (0x1000, 4),
        0x81: (0x14000, 0x80),
        0x89: (0x1F0000, 0x100),
        0x08: (u32(0x12010), u32(0x12018)),
    }
    for i in range(1, 8):
        table[0x81 + i] = (0x15000 + 0x1000 * (i - 1), 0x100 * i)
    return {item: image[o : o + n] for item, (o, n) in table.items()}


def test_ifwi_all_default_sequence(cli: Runner, tmp_path: Path) -> None:
    image = build_ifwi(3)
    board = SimulatedNavi31()
    r = cli(board, "fw", "ifwi-all", write(tmp_path / "i.bin", image), "--yes")
    assert r.code == 0, r.err
    steps = [line for line in r.lines if line.startswith("IFWI step ")]
    assert len(steps) == 18
    assert steps[0] == "IFWI step 0: state=0x1 item=0x1 phase=0"
    assert steps[17] == "IFWI step 17: state=0x208 item=0x8 phase=2"
    assert r.lines[-1] == "IFWI stream complete after terminal state 0x208; hard power cycle required"
    slices = expected_slices(image)
    assert board.psp_received == [(item, slices[item]) for _, item in DEFAULT_PSP_ITEMS]
    assert board.flash == b"\xff" * 0x200000  # the PSP path never touches the raw engine
    never_happen(board)


def test_ifwi_all_non_terminal_sequence(cli: Runner, tmp_path: Path) -> None:
    board = SimulatedNavi31(SimConfig(psp_items=[(0, 0x01)] * 20))
    r = cli(board, "fw", "ifwi-all", write(tmp_path / "i.bin", build_ifwi(3)), "--yes")
    assert r.code == 1
    assert r.err.strip() == "error: IFWI stream did not reach terminal phase after 19 items (state=0x1)"
    assert len(board.psp_received) == 19
    never_happen(board)


def test_ifwi_all_unsupported_item(cli: Runner, tmp_path: Path) -> None:
    board = SimulatedNavi31(SimConfig(psp_items=[(0, 0x01), (0, 0x42)]))
    r = cli(board, "fw", "ifwi-all", write(tmp_path / "i.bin", build_ifwi(3)), "--yes")
    assert r.code == 1
    assert r.err.strip() == "error: IFWI resolver does not yet support requested item 0x42"
    assert len(board.psp_received) == 1


def test_ifwi_all_data_failure_sends_one_end(cli: Runner, tmp_path: Path) -> None:
    board = SimulatedNavi31(SimConfig(psp_fail={(0x09, 100): 0x0C}))
    r = cli(board, "fw", "ifwi-all", write(tmp_path / "i.bin", build_ifwi(3)), "--yes")
    assert r.code == 1
    assert r.err.strip() == "error: PSP DATA_TRANSFER@0x38 failed: error=0xc (write to SPI error)"
    ends = [entry for entry in board.psp_log if entry[0] == 0x0A]
    assert ends[-1] == (0x0A, (0x38 << 8) | 0x03, 0x11, 0)
    assert len(ends) == 3  # items 0x01 and 0x02 completed, then exactly one best-effort END
    never_happen(board)


# --- 16: transport selection ------------------------------------------------------------------------------------------
def run_main(*argv: str) -> Result:
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(list(argv), stdout=out, stderr=err)
    return Result(code, out.getvalue(), err.getvalue())


def test_list_without_candidates(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli, "list_candidates", lambda transport, warn=None: [])
    r = run_main("list")
    assert (r.code, r.out) == (0, "no devices found\n")


def test_list_and_open_with_one_candidate(monkeypatch: pytest.MonkeyPatch) -> None:
    board = SimulatedNavi31()
    seen: list[str] = []

    def fake(transport: str, warn: Any = None) -> list[device.Candidate]:
        seen.append(transport)
        return [device.Candidate(0, "pci", "0000:03:00.0", 0x1002, 0x744C, lambda: make_sim_device(board))]

    monkeypatch.setattr(device, "list_candidates", fake)
    monkeypatch.setattr(cli, "list_candidates", fake)
    r = run_main("list")
    assert r.out == "0 pci 0000:03:00.0 (0x1002:0x744c)\n"
    r = run_main("--device", "3", "romsw", "--transport", "pci", "info")
    assert (r.code, r.err.strip().splitlines()[-1]) == (1, "error: device index 3 out of range (found 1)")
    r = run_main("romsw", "--device", "0", "--transport", "pci", "info")
    assert r.code == 0
    assert r.err.strip() == "warning: raw ROM_SW access over pci has not been validated on hardware"
    r = run_main("fw", "probe")
    assert r.code == 0
    assert seen == ["auto", "pci", "pci", "auto"]
    monkeypatch.setattr(device, "list_candidates", lambda transport, warn=None: [])
    r = run_main("romsw", "info")
    assert (r.code, r.err.strip()) == (1, "error: no supported usb AMD GPU found")


def test_default_transports_and_no_warning_for_usb(cli: Runner, board: SimulatedNavi31) -> None:
    spy = SimOpener(board)
    r = cli(spy, "romsw", "info")
    assert r.err == ""
    cli(spy, "fw", "probe")
    cli(spy, "--transport", "remote", "romsw", "info")
    assert spy.calls == [(0, "usb"), (0, "auto"), (0, "remote")]


def test_global_options_after_group_name(cli: Runner, board: SimulatedNavi31) -> None:
    spy = SimOpener(board)
    cli(spy, "romsw", "--device", "2", "--transport", "usb", "--prescale", "4", "info")
    cli(spy, "--device", "1", "fw", "probe")
    cli(spy, "--device", "1", "fw", "--device", "5", "probe")
    assert spy.calls == [(2, "usb"), (1, "auto"), (5, "auto")]
    assert_registers_restored(board, prescale=4)


# --- 17: locking ------------------------------------------------------------------------------------------------------
def test_second_open_fails_while_locked(cli: Runner, board: SimulatedNavi31) -> None:
    holder = make_sim_device(board)
    try:
        r = cli(board, "romsw", "info")
        assert r.code == 1
        assert r.err.startswith("error: Failed to acquire lock file")
    finally:
        holder.close()
    assert cli(board, "romsw", "info").code == 0


# --- exit codes -------------------------------------------------------------------------------------------------------
def test_internal_error_exit_code(cli: Runner, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(index: int, transport: str) -> Any:
        raise ZeroDivisionError("oops")

    r = cli(broken, "fw", "probe")
    assert (r.code, r.err.strip()) == (3, "error: internal error: ZeroDivisionError: oops")
    r = cli(broken, "--verbose", "fw", "probe")
    assert r.code == 3 and "Traceback" in r.err
    monkeypatch.setenv("AMDFLASH_DEBUG", "1")
    r = cli(broken, "fw", "probe")
    assert r.code == 3 and "Traceback" in r.err
    assert r.err.strip().endswith("error: internal error: ZeroDivisionError: oops")


def test_device_closed_after_error(cli: Runner) -> None:
    board = SimulatedNavi31(SimConfig(psp="not_ready"))
    spy = SimOpener(board)
    assert cli(spy, "fw", "probe").code == 1
    assert cli(spy, "fw", "probe").code == 1  # the lock was released
    assert len(spy.devices) == 2


def test_interrupt_while_reporting_a_verified_sector_resumes_after_it(tmp_path: Path) -> None:
    """Ctrl-C landing while the OK line of a verified sector is printed must not send the user back to that sector."""

    class Interrupting(io.StringIO):
        def write(self, text: str) -> int:
            if text.startswith("OK sector 001/511"):
                raise KeyboardInterrupt
            return super().write(text)

    board = SimulatedNavi31()
    out, err = Interrupting(), io.StringIO()
    image = write(tmp_path / "b.bin", build_ifwi(2))
    code = cli.main(
        ["romsw", "flash", image, "--sector-count", "4", "--yes"],
        opener=SimOpener(board),
        stdout=out,
        stderr=err,
        settings=FAST_SETTINGS,
    )
    assert code == 130
    lines = [line for line in err.getvalue().splitlines() if not PROGRESS_LINE.match(line)]
    assert lines[1:] == [
        "hint: flash stopped at sector 2; resume with --start-sector 2 --sector-count 2 --yes",
        "error: interrupted",
    ]
    assert lines[0].startswith("hint: the original contents of the sectors being replaced are in ")


# --- output files: checked before the device is opened, never half-written ------------------------------------------
@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (("fw", "dump", "{missing}/fw.bin"), "error: output directory does not exist: {missing}"),
        (("romsw", "dump", "{missing}/a.bin"), "error: output directory does not exist: {missing}"),
        (("romsw", "read", "0", "0x10", "-o", "{missing}/r.bin"), "error: output directory does not exist: {missing}"),
        (("fw", "dump", "{tmp}"), "error: output path is a directory: {tmp}"),
        (("romsw", "dump", "{tmp}"), "error: output path is a directory: {tmp}"),
    ],
)
def test_unusable_output_path_is_refused_before_reading(
    cli: Runner, board: SimulatedNavi31, tmp_path: Path, argv: tuple[str, ...], message: str
) -> None:
    """A dump that could only fail at the rename would read the whole flash first and then lose it."""
    names = {"missing": str(tmp_path / "missing"), "tmp": str(tmp_path)}
    spy = SimOpener(board)
    r = cli(spy, *(a.format(**names) for a in argv))
    assert (r.code, r.err.strip()) == (1, message.format(**names))
    assert spy.calls == [] and r.out == ""
    assert os.listdir(tmp_path) == []


def test_failed_dump_keeps_the_previous_file_and_leaves_no_partial(cli: Runner, tmp_path: Path) -> None:
    board = SimulatedNavi31(SimConfig(flash=build_ifwi(1)))
    out = tmp_path / "a.bin"
    out.write_bytes(b"previous backup")
    board.stall_after_txns = 200  # the engine hangs in the middle of the first 64 KiB block
    r = cli(board, "romsw", "dump", str(out))
    assert r.code == 1
    assert r.err.strip().startswith("error: ROM_SW transaction timeout")
    assert r.out == ""
    assert os.listdir(tmp_path) == ["a.bin"]
    assert out.read_bytes() == b"previous backup"
    assert_registers_restored(board)


def test_dropped_page_program_stops_at_its_sector_then_resumes(cli: Runner, tmp_path: Path) -> None:
    """The read-back after each sector catches a page the flash silently did not program (fault `drop_program`)."""
    image1, image2 = build_ifwi(1), build_ifwi(2)
    board = SimulatedNavi31(SimConfig(flash=image1, drop_program={0x3200}))
    b = write(tmp_path / "b.bin", image2)
    r = cli(board, "romsw", "flash", b, "--sector-count", "6", "--yes")
    assert r.code == 1
    assert [line.split(" elapsed=")[0] for line in r.lines] == [
        f"OK sector {n:03d}/511 @{n * 0x1000:#07x}" for n in range(3)
    ]
    addr = 0x3200 + first_diff(board.flash[0x3200:0x3300], image2[0x3200:0x3300])
    assert r.err.strip().splitlines()[1:] == [
        "hint: flash stopped at sector 3; resume with --start-sector 3 --sector-count 3 --yes",
        f"error: verify mismatch at {addr:#x}: flash=ff image={image2[addr]:02x}",
    ]
    assert board.flash[0x3200:0x3300] == b"\xff" * 0x100  # erased, never programmed
    assert board.flash[0x4000:] == image1[0x4000:]  # nothing after the failing sector was touched
    board.drop_program = set()
    r = cli(board, "romsw", "flash", b, "--start-sector", "3", "--sector-count", "3", "--yes")
    assert r.code == 0, r.err
    assert board.flash[: 6 * 0x1000] == image2[: 6 * 0x1000]
    assert_registers_restored(board)
    never_happen(board)
