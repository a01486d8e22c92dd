"""Issue 29 finding 8: an image with zeroed signature bytes, and one built for another board, were flashed with exit 0.

Images are now checked against themselves (directory checksums, signature blobs, the VBIOS checksum) and against the
board (its config-space ids, the VBIOS on its flash); mismatches are refused unless `--force`. `--dry-run` reports
what would change; the sectors about to change are backed up first, with a journal that makes an interrupted flash
resumable and `romsw restore` possible.
"""

from __future__ import annotations

import json
import os
import random
import struct
from pathlib import Path
from typing import Any

from amdflash.image import BoardIdentity, find_vbios, fletcher32, identity_problems, image_problems
from amdflash.sim import SimConfig, SimulatedNavi31, build_ifwi
from amdflash.sim.harness import Result, run_cli
from amdflash.sim.images import OTHER_SUBSYSTEM, SGN_TABLE, VBIOS_OFFSET

SECTOR = 0x1000


def write(path: Path, data: bytes) -> str:
    path.write_bytes(data)
    return str(path)


def board_with(flash: bytes, **config: Any) -> SimulatedNavi31:
    return SimulatedNavi31(SimConfig(flash=flash, **config))


def flash(board: SimulatedNavi31, image: str, *argv: str) -> Result:
    return run_cli(board, "romsw", "flash", image, *argv)


# ---- the checks themselves ------------------------------------------------------------------------------------------


def reference_fletcher32(data: bytes) -> int:
    """The same checksum from its definition: both sums modulo 65535, kept in 1..65535."""
    words = [w for (w,) in struct.iter_unpack("<H", data)]
    n = len(words)
    c0 = sum(words) % 65535 or 65535
    c1 = sum((n - j) * w for j, w in enumerate(words)) % 65535 or 65535
    return ((c1 << 16) | c0) & 0xFFFFFFFF


def test_fletcher32_matches_its_definition() -> None:
    rng = random.Random(8)
    for size in (2, 16, 718, 720, 4096, 0x1F0):
        data = rng.randbytes(size)
        assert fletcher32(data) == reference_fletcher32(data), size
    assert fletcher32(b"\xff\xff" * 1000) == reference_fletcher32(b"\xff\xff" * 1000)


def test_synthetic_images_pass_and_each_kind_of_damage_is_named() -> None:
    image = build_ifwi(1)
    assert image_problems(image) == []
    vbios = find_vbios(image)
    assert vbios is not None and vbios.offset == VBIOS_OFFSET and vbios.checksum_ok
    assert vbios.identity == BoardIdentity(0x1002, 0x744C, 0x1002, 0x0E3A)

    def damaged(offset: int, data: bytes) -> list[str]:
        out = bytearray(image)
        out[offset : offset + len(data)] = data
        return image_problems(bytes(out))

    (problem,) = damaged(0x2010, b"\x12")
    assert problem.startswith("$PSP directory at 0x2000: checksum 0x") and "does not match its contents" in problem
    assert damaged(SGN_TABLE + 0x20, b"\x99")[0].startswith("$SGN table at 0x14000: checksum")
    # the signature blob of type 3 (0x300 bytes at 0x17000) with 64 bytes zeroed: what the review did
    assert damaged(0x17000 + 0x40, bytes(64)) == ["signature 3 at 0x17000 has zeroed bytes (a run of 64 zeros)"]
    assert damaged(0x15000, b"\xff" * 0x100) == ["signature 1 at 0x15000 is erased (all 0xff)"]
    assert damaged(VBIOS_OFFSET + 0x1000, b"\x00\x01") == [
        f"the VBIOS at {VBIOS_OFFSET:#x} (0x10000 bytes) fails its checksum"
    ]
    assert damaged(VBIOS_OFFSET, b"\xff\xff") == [
        "no VBIOS (PCI option ROM) in the image: which board it is for cannot be checked"
    ]


def test_identity_mismatches() -> None:
    vbios = find_vbios(build_ifwi(1))
    assert vbios is not None
    mine = BoardIdentity(0x1002, 0x744C, 0x1002, 0x0E3A)
    assert identity_problems(vbios, mine, mine) == []
    assert identity_problems(vbios, BoardIdentity(0x1002, 0x744C), None) == []  # blank board: no subsystem ids yet
    other = BoardIdentity(0x1002, 0x744C, *OTHER_SUBSYSTEM)
    assert identity_problems(vbios, other, None) == [
        "the image is for board 1002:744c subsystem 1002:0e3a, this board reports 1002:744c subsystem 1da2:e471"
    ]
    assert identity_problems(vbios, None, other) == [
        "the image is for board 1002:744c subsystem 1002:0e3a, the flash now holds the VBIOS of board "
        "1002:744c subsystem 1da2:e471"
    ]
    assert identity_problems(vbios, BoardIdentity(0x1002, 0x7448), None) == [
        "the image is for a 1002:744c GPU, this board is 1002:7448"
    ]


# ---- the CLI refuses, unless --force --------------------------------------------------------------------------------


def test_an_image_with_zeroed_signature_bytes_is_refused(tmp_path: Path) -> None:
    tampered = bytearray(build_ifwi(2))
    tampered[0x17040:0x17080] = bytes(64)
    path = write(tmp_path / "t.bin", bytes(tampered))
    board = board_with(build_ifwi(1))
    r = flash(board, path, "--sector-count", "4", "--yes")
    assert r.code == 1
    assert "the image fails its checks: signature 3 at 0x17000 has zeroed bytes" in r.err
    assert "Nothing was written; --force writes it anyway" in r.err
    assert (board.erase_count, board.program_count) == (0, 0)
    r = flash(board, path, "--sector-count", "4", "--yes", "--force")
    assert r.code == 0, r.err
    assert "warning: --force: signature 3 at 0x17000 has zeroed bytes" in r.err
    assert bytes(board.flash[: 4 * SECTOR]) == bytes(tampered[: 4 * SECTOR])


def test_an_image_for_another_board_is_refused(tmp_path: Path) -> None:
    foreign = build_ifwi(2, subsystem=OTHER_SUBSYSTEM)
    path = write(tmp_path / "other.bin", foreign)
    board = board_with(build_ifwi(1))  # the default board, its flash holding its own VBIOS
    r = flash(board, path, "--sector-count", "2", "--yes")
    assert r.code == 1 and board.erase_count == 0
    assert (
        "the image is for board 1002:744c subsystem 1da2:e471, this board reports 1002:744c subsystem 1002:0e3a"
        in r.err
    )
    assert "the flash now holds the VBIOS of board 1002:744c subsystem 1002:0e3a" in r.err
    blank = board_with(b"\xff" * 0x200000)  # a blank flash: the board's config space still says which board it is
    r = flash(blank, path, "--sector-count", "2", "--yes")
    assert r.code == 1 and "this board reports 1002:744c subsystem 1002:0e3a" in r.err and blank.erase_count == 0
    r = flash(board_with(build_ifwi(1)), write(tmp_path / "gpu.bin", build_ifwi(2, device=0x7448)), "--yes")
    assert r.code == 1 and "the image is for a 1002:7448 GPU, this board is 1002:744c" in r.err
    r = flash(board, path, "--sector-count", "2", "--yes", "--force")
    assert r.code == 0 and r.err.count("warning: --force:") == 2


def test_fw_ifwi_all_checks_the_image_too(tmp_path: Path) -> None:
    board = board_with(build_ifwi(1))
    r = run_cli(board, "fw", "ifwi-all", write(tmp_path / "o.bin", build_ifwi(3, subsystem=OTHER_SUBSYSTEM)), "--yes")
    assert r.code == 1 and "Nothing was streamed; --force streams it" in r.err
    assert board.psp_log == []


# ---- --dry-run, backups, the journal, restore -----------------------------------------------------------------------


def test_dry_run_reports_and_writes_nothing(tmp_path: Path) -> None:
    image1, image2 = build_ifwi(1), build_ifwi(2)
    start = image2[: 2 * SECTOR] + image1[2 * SECTOR :]  # sectors 0 and 1 already hold the new image
    board = board_with(start)
    r = flash(board, write(tmp_path / "b.bin", image2), "--sector-count", "6", "--dry-run")  # no --yes needed
    assert r.code == 0, r.err
    assert r.lines == [
        "dry run: 4 of 6 sectors differ from the image (2-5)",
        "dry run: nothing was erased, programmed or backed up",
    ]
    assert (board.erase_count, board.program_count, board.wrsr_count) == (0, 0, 0)
    assert bytes(board.flash) == start
    assert not os.path.exists(os.path.join(os.environ["XDG_STATE_HOME"], "amdflash"))  # no backup either
    r = flash(board_with(start, sr2=0x40), write(tmp_path / "b.bin", image2), "--sector-count", "2", "--dry-run")
    assert r.lines[1] == "dry run: SR2.CMP protects the array; the flash needs --clear-cmp"


def test_sectors_that_already_match_are_not_rewritten(tmp_path: Path) -> None:
    image1, image2 = build_ifwi(1), build_ifwi(2)
    board = board_with(image2[: 2 * SECTOR] + image1[2 * SECTOR :])
    r = flash(board, write(tmp_path / "b.bin", image2), "--sector-count", "4", "--yes")
    assert r.code == 0, r.err
    assert [line.endswith("unchanged") for line in r.lines if line.startswith("OK")] == [True, True, False, False]
    assert board.erase_count == 2


def backup_dir() -> Path:
    return Path(os.environ["XDG_STATE_HOME"]) / "amdflash" / "backups"


def test_backup_then_restore_puts_the_original_sectors_back(tmp_path: Path) -> None:
    image1, image2 = build_ifwi(1), build_ifwi(2)
    board = board_with(image1)
    r = flash(board, write(tmp_path / "b.bin", image2), "--start-sector", "8", "--sector-count", "4", "--yes")
    assert r.code == 0, r.err
    assert r.lines[-2].startswith("backup of the 4 replaced sectors: ") and r.lines[-1].endswith("verified")
    journal = r.lines[-2].split("amdflash romsw restore ")[1].split()[0]
    assert Path(journal).name.startswith("journal-") and not (backup_dir() / "journal.jsonl").exists()
    records = [json.loads(line) for line in Path(journal).read_text().splitlines()]
    assert [list(r) for r in records] == [["start"], ["backup"], *[["done"]] * 4, ["complete"]]
    assert [entry[0] for entry in records[1]["backup"]] == [8, 9, 10, 11]
    backup = Path(r.lines[-2].split(": ")[1].split()[0])
    assert backup.read_bytes() == image1[8 * SECTOR : 12 * SECTOR]  # the originals, before anything was erased
    r = run_cli(board, "romsw", "restore", journal, "--dry-run")
    assert r.lines[0] == "dry run: 4 of 4 backed-up sectors differ from their originals (8-11)"
    r = run_cli(board, "romsw", "restore", journal)
    assert (r.code, r.err.strip()) == (1, "error: refusing to write without --yes")
    r = run_cli(board, "romsw", "restore", journal, "--yes")
    assert r.code == 0, r.err
    assert r.lines[-1] == "restore complete: 4 sectors hold their original contents (4 rewritten)"
    assert bytes(board.flash) == image1


def test_a_resumed_flash_keeps_the_true_originals(tmp_path: Path) -> None:
    """A flash that stopped in the middle of a sector (the engine hung after the erase) leaves that sector half
    written. Resuming must not take the half-written sector for an original: the journal's backup is kept."""
    image1, image2 = build_ifwi(1), build_ifwi(2)
    board = board_with(image1)
    path = write(tmp_path / "b.bin", image2)
    stall: dict[str, int] = {}

    def hang_after_the_erase_of_sector_2(event: tuple[Any, ...]) -> None:
        if event == ("erase", 2):
            stall["at"] = len(board.transactions) + 3  # a few transactions later: erased, not yet programmed
            board.stall_after_txns = stall["at"]

    board.abort_on = hang_after_the_erase_of_sector_2
    r = flash(board, path, "--sector-count", "4", "--yes")
    assert r.code == 1 and "resume with --start-sector 2 --sector-count 2 --yes" in r.err
    assert bytes(board.flash[2 * SECTOR : 3 * SECTOR]) not in (
        image1[2 * SECTOR : 3 * SECTOR],
        image2[2 * SECTOR : 3 * SECTOR],
    )
    board.abort_on, board.stall_after_txns = None, None
    r = flash(board, path, "--start-sector", "2", "--sector-count", "2", "--yes")
    assert r.code == 0, r.err
    assert bytes(board.flash[: 4 * SECTOR]) == image2[: 4 * SECTOR]
    journal = r.lines[-2].split("amdflash romsw restore ")[1].split()[0]
    r = run_cli(board, "romsw", "restore", journal, "--yes")
    assert r.code == 0, r.err
    assert bytes(board.flash) == image1  # sector 2 included: its original came from the first run's backup


def test_an_unfinished_journal_of_another_image_blocks_a_new_flash(tmp_path: Path) -> None:
    image1, image2, image3 = build_ifwi(1), build_ifwi(2), build_ifwi(3)
    board = board_with(image1)
    board.abort_on = lambda event: (_ for _ in ()).throw(KeyboardInterrupt()) if event == ("erase", 1) else None
    r = flash(board, write(tmp_path / "b.bin", image2), "--sector-count", "3", "--yes")
    assert r.code == 130
    board.abort_on = None
    r = flash(board, write(tmp_path / "c.bin", image3), "--sector-count", "3", "--yes")
    assert r.code == 1 and "an unfinished flash of another image" in r.err and "romsw restore" in r.err
    assert bytes(board.flash[SECTOR:]) == image1[SECTOR:]
    r = flash(board_with(image3), write(tmp_path / "b.bin", image2), "--sector-count", "3", "--yes")
    assert r.code == 1 and "Is this the board it was started on?" in r.err  # same image, another board's flash
