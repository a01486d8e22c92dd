"""`romsw flash` and `romsw restore`: checked, backed-up, journaled and resumable writes of flash sectors.

A flash goes through these steps, and nothing is erased before the last check has passed:

1. `--yes` (unless `--dry-run`), the image's size, the sector range;
2. the image's structure (`validate_ifwi`), its checksums and signature blobs (`amdflash.image`);
3. an unfinished journal in the backup directory must be for this image (it is then resumed);
4. the device: JEDEC id, then the image's VBIOS against the board (config-space ids, the VBIOS on the flash);
   a mismatch in 2 or 4 is refused unless `--force`;
5. SR2.CMP (`--clear-cmp`);
6. every sector of the range is read; the ones that differ from the image are the ones to write;
7. `--dry-run` stops here and reports them;
8. their current contents go to the backup file and the journal (fsynced) before the first erase;
9. each sector is erased, programmed and read back inside a `critical()` section, and recorded as done.
"""

from __future__ import annotations

import hashlib
import time
from typing import Any

from amdflash.commands import Context, mismatch, read_image, romsw_preflight, sector_range
from amdflash.device import board_identity
from amdflash.gd25 import GD25LQ16E, OP_RDSR2, SECTOR_SIZE, SR2_CMP
from amdflash.ifwi import validate_ifwi
from amdflash.image import VBIOS_HEADER_BYTES, find_vbios, identity_problems, image_problems, parse_vbios
from amdflash.journal import FlashJournal, JournalError
from amdflash.romsw import check_prescale
from amdflash.settings import Settings
from tg.drivers.interrupts import critical

__all__ = ["romsw_flash", "romsw_restore", "sector_list", "write_sector"]


def write_sector(chip: GD25LQ16E, addr: int, want: bytes, settings: Settings) -> None:
    """Erase the sector at `addr`, program its pages that are not all 0xFF, and read it back; raise on a mismatch."""
    chip.erase_sector(addr, timeout=settings.erase_timeout)
    for off in range(0, SECTOR_SIZE, 0x100):
        page = want[off : off + 0x100]
        if page.count(0xFF) != len(page):
            chip.program_page(addr + off, page, timeout=settings.program_timeout)
    got = chip.read(addr, SECTOR_SIZE)
    if got != want:
        raise mismatch(addr, got, want)


def sector_list(sectors: list[int]) -> str:
    """`[1, 2, 3, 7]` -> `"1-3, 7"`."""
    runs: list[list[int]] = []
    for s in sectors:
        if runs and runs[-1][1] == s - 1:
            runs[-1][1] = s
        else:
            runs.append([s, s])
    return ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in runs)


def _check_image(ctx: Context, image: bytes, chip: GD25LQ16E, dev: Any, problems: list[str]) -> None:
    """Add the board-identity problems to `problems`; refuse them all unless `--force` (then warn about each)."""
    vbios = find_vbios(image)
    on_flash = None
    if vbios is not None:
        parsed = parse_vbios(chip.read(vbios.offset, VBIOS_HEADER_BYTES))
        on_flash = parsed[0] if parsed is not None else None
    problems = problems + identity_problems(vbios, board_identity(dev), on_flash)
    if not problems:
        return
    if not ctx.args.force:
        raise RuntimeError(
            "the image fails its checks: " + "; ".join(problems) + ". Nothing was written; --force writes it anyway"
        )
    for problem in problems:
        ctx.err(f"warning: --force: {problem}")


def _resume(journal: FlashJournal, current: dict[int, bytes], image: bytes) -> None:
    """Check that the flash is the one the unfinished journal was written on: every backed-up sector still holds its
    original or the image, except at most the one sector that was being written when the flash stopped."""
    strange = []
    for sector in sorted(journal.backed_up):
        if sector not in current:
            continue
        data, addr = current[sector], sector * SECTOR_SIZE
        if data != image[addr : addr + SECTOR_SIZE] and data != journal.original(sector):
            strange.append(sector)
    if len(strange) > 1:
        raise JournalError(
            f"the flash does not match the unfinished journal {journal.path}: sectors {sector_list(strange)} hold "
            "neither their backed-up original nor the image. Is this the board it was started on?"
        )


def romsw_flash(ctx: Context) -> int:
    """`romsw flash IMAGE`: check, back up, then erase, program and read back each sector that differs."""
    args = ctx.args
    check_prescale(args.prescale)
    if not args.yes and not args.dry_run:
        raise RuntimeError("refusing to write without --yes")
    image = read_image(args.image)
    start, count = sector_range(args.start_sector, args.sector_count)
    end = start + count
    romsw_preflight(ctx)
    problems: list[str] = []
    if args.skip_image_check:
        ctx.err("warning: --skip-image-check: the image is written without checking that it is a valid IFWI")
    else:
        validate_ifwi(image)  # the whole image, before the device is even opened
        problems = image_problems(image)
    digest = hashlib.sha256(image).hexdigest()
    backup_dir = ctx.backup_dir()
    journal = None if args.dry_run else FlashJournal.unfinished(backup_dir)
    if journal is not None and journal.image_sha256 != digest:
        raise JournalError(
            f"an unfinished flash of another image (sha256 {journal.image_sha256[:16]}..., started {journal.started}) "
            f"is recorded in {journal.path}: finish it with that image, put the original sectors back with "
            f"'amdflash romsw restore {journal.path} --yes', or move the journal away"
        )
    with ctx.flash() as chip:
        dev = ctx.current_device
        if not args.skip_image_check:
            _check_image(ctx, image, chip, dev, problems)
        elif args.force:
            ctx.err("warning: --force has no effect with --skip-image-check (no check is made)")
        cmp = bool(chip.status(OP_RDSR2) & SR2_CMP)
        if cmp and not args.clear_cmp and not args.dry_run:
            raise RuntimeError("CMP protects the full array; rerun with --clear-cmp")
        current: dict[int, bytes] = {}
        with ctx.progress(count * SECTOR_SIZE, "read") as bar:
            for sector in range(start, end):
                current[sector] = chip.read(sector * SECTOR_SIZE, SECTOR_SIZE)
                bar.update(SECTOR_SIZE)
        changed = [s for s in range(start, end) if current[s] != image[s * SECTOR_SIZE : (s + 1) * SECTOR_SIZE]]
        if args.dry_run:
            ctx.out(
                f"dry run: {len(changed)} of {count} sectors differ from the image"
                + (f" ({sector_list(changed)})" if changed else "")
            )
            if cmp:
                ctx.out("dry run: SR2.CMP protects the array; the flash needs --clear-cmp")
            ctx.out("dry run: nothing was erased, programmed or backed up")
            return 0
        if cmp:
            chip.clear_cmp()
            ctx.out("cleared SR2.CMP")
        if journal is not None:
            _resume(journal, current, image)
            ctx.err(f"resuming the unfinished flash recorded in {journal.path} (its backup keeps the originals)")
        elif changed:
            identity = board_identity(dev)
            target = f"{getattr(dev, 'pcibus', '?')} {identity if identity is not None else 'unknown ids'}"
            journal = FlashJournal.start(backup_dir, digest, target)
        if journal is not None:
            journal.add_backup({s: current[s] for s in changed if s not in journal.backed_up})
        _write_sectors(ctx, chip, image, start, end, set(changed), journal)
        if journal is not None:
            path = journal.finish()
            if journal.backed_up:
                ctx.out(
                    f"backup of the {len(journal.backed_up)} replaced sectors: {journal.backup_path} "
                    f"(put them back with: amdflash romsw restore {path} --yes)"
                )
    ctx.out(f"flash complete: sectors {start}..{end - 1} verified")
    return 0


def _write_sectors(
    ctx: Context, chip: GD25LQ16E, image: bytes, start: int, end: int, changed: set[int], journal: FlashJournal | None
) -> None:
    """Write the changed sectors of `start..end-1` in order; on any exception print the resume hint, then re-raise."""
    current, erased = start, False  # `current`: the first sector not yet verified
    t0 = time.monotonic()
    try:
        with ctx.progress(len(changed) * SECTOR_SIZE, "flash") as bar:
            for sector in range(start, end):
                addr = sector * SECTOR_SIZE
                want = image[addr : addr + SECTOR_SIZE]
                if sector not in changed:
                    with critical():
                        current = sector + 1
                        ctx.out(
                            f"OK sector {sector:03d}/511 @{addr:#07x} elapsed={time.monotonic() - t0:.1f}s unchanged"
                        )
                    continue
                erased = True
                with critical():  # a Ctrl-C lets the sector finish (erase, program, read back, report) first
                    write_sector(chip, addr, want, ctx.settings)
                    if journal is not None:
                        journal.sector_done(sector)
                    current = sector + 1
                    ctx.out(f"OK sector {sector:03d}/511 @{addr:#07x} elapsed={time.monotonic() - t0:.1f}s")
                bar.update(SECTOR_SIZE)
    except BaseException:
        if erased and current < end:
            with critical():  # a second Ctrl-C cannot cut the hints short
                if journal is not None and journal.backed_up:
                    ctx.err(
                        f"hint: the original contents of the sectors being replaced are in {journal.backup_path}; "
                        f"a resumed flash keeps them, 'amdflash romsw restore {journal.path} --yes' puts them back"
                    )
                ctx.err(
                    f"hint: flash stopped at sector {current}; resume with --start-sector {current} "
                    f"--sector-count {end - current} --yes"
                )
        raise


def romsw_restore(ctx: Context) -> int:
    """`romsw restore JOURNAL`: write the sectors a flash backed up back to their original contents."""
    args = ctx.args
    check_prescale(args.prescale)
    if not args.yes and not args.dry_run:
        raise RuntimeError("refusing to write without --yes")
    journal = FlashJournal.load(args.journal)
    if not journal.backed_up:
        raise JournalError(f"{args.journal} records no backed-up sector: there is nothing to restore")
    originals = {s: journal.original(s) for s in sorted(journal.backed_up)}  # all of them checked before the device
    romsw_preflight(ctx)
    with ctx.flash() as chip:
        cmp = bool(chip.status(OP_RDSR2) & SR2_CMP)
        if cmp and not args.clear_cmp and not args.dry_run:
            raise RuntimeError("CMP protects the full array; rerun with --clear-cmp")
        differ = [s for s, data in originals.items() if chip.read(s * SECTOR_SIZE, SECTOR_SIZE) != data]
        if args.dry_run:
            ctx.out(
                f"dry run: {len(differ)} of {len(originals)} backed-up sectors differ from their originals"
                + (f" ({sector_list(differ)})" if differ else "")
            )
            ctx.out("dry run: nothing was erased or programmed")
            return 0
        if cmp:
            chip.clear_cmp()
            ctx.out("cleared SR2.CMP")
        t0 = time.monotonic()
        with ctx.progress(len(differ) * SECTOR_SIZE, "restore") as bar:
            for sector in differ:
                addr = sector * SECTOR_SIZE
                with critical():
                    write_sector(chip, addr, originals[sector], ctx.settings)
                    ctx.out(f"OK sector {sector:03d}/511 @{addr:#07x} elapsed={time.monotonic() - t0:.1f}s restored")
                bar.update(SECTOR_SIZE)
        if not journal.complete:
            journal.finish()  # its flash is over: the board holds the originals again
    ctx.out(f"restore complete: {len(originals)} sectors hold their original contents ({len(differ)} rewritten)")
    return 0
