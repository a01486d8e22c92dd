"""Automatic backups of the sectors a flash replaces, and the journal that makes an interrupted flash resumable.

Before `romsw flash` erases anything it saves the current contents of every sector it is about to change to a backup
file, and records them in a journal (both in the backup directory). The journal is a JSON-lines file, appended to and
fsynced after each event, so it survives a crash or a pulled plug; a torn last line is ignored:

    {"start": {"image_sha256": ..., "target": ..., "backup": "backup-<time>.bin", "time": ...}}
    {"backup": [[sector, offset in the backup file, sha256 of the original], ...]}   (before those sectors are erased)
    {"done": sector}                                                                 (written and read back)
    {"complete": true}

While a journal is unfinished it is `journal.jsonl`; a later flash of the same image on the same board resumes it:
the sectors it backed up keep their original contents in the backup (a half-written sector is never taken for an
original), and sectors already written are found identical and skipped. A complete journal is renamed
`journal-<time>.jsonl`; `amdflash romsw restore <journal>` writes its backed-up sectors back.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
from dataclasses import dataclass, field

from amdflash.gd25 import SECTOR_SIZE
from amdflash.util import create_exclusive

__all__ = ["CURRENT", "FlashJournal", "JournalError", "default_backup_dir"]

CURRENT = "journal.jsonl"


class JournalError(RuntimeError):
    """A journal or backup that cannot be used (unreadable, for another image or board, or damaged)."""


def default_backup_dir() -> str:
    """`$AMDFLASH_BACKUP_DIR`, else `$XDG_STATE_HOME/amdflash/backups` (`~/.local/state/amdflash/backups`)."""
    explicit = os.environ.get("AMDFLASH_BACKUP_DIR", "").strip()
    if explicit:
        return os.path.abspath(os.path.expanduser(explicit))
    state = os.environ.get("XDG_STATE_HOME", "").strip() or os.path.join(os.path.expanduser("~"), ".local", "state")
    return os.path.join(os.path.abspath(state), "amdflash", "backups")


def _stamp() -> str:
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + f"-{os.getpid()}"


def _fsync_append(path: str, data: bytes) -> int:
    """Append `data` to `path` (never through a symlink), fsync it; return the offset it was written at."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        offset = os.lseek(fd, 0, os.SEEK_END)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
        return offset
    finally:
        os.close(fd)


@dataclass
class FlashJournal:
    """One flash's journal: the backed-up sectors (`sector -> (offset, sha256)`) and the sectors done."""

    path: str
    image_sha256: str
    target: str
    backup_path: str
    started: str
    backed_up: dict[int, tuple[int, str]] = field(default_factory=dict)
    done: set[int] = field(default_factory=set)
    complete: bool = False

    # ---- opening -------------------------------------------------------------------------------------------------

    @classmethod
    def unfinished(cls, directory: str) -> FlashJournal | None:
        """The journal of the flash left unfinished in `directory`, if any."""
        path = os.path.join(directory, CURRENT)
        if not os.path.lexists(path):
            return None
        journal = cls.load(path)
        return None if journal.complete else journal

    @classmethod
    def load(cls, path: str) -> FlashJournal:
        """Read a journal (`JournalError` when it is not one)."""
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
            with os.fdopen(fd, "rb") as f:
                lines = f.read().splitlines()
        except OSError as e:
            raise JournalError(f"cannot read the flash journal {path}: {e}") from e
        records = []
        for i, line in enumerate(lines):
            try:
                records.append(json.loads(line))
            except ValueError:
                if i == len(lines) - 1:  # the write of the last event was cut short: that event did not happen
                    break
                raise JournalError(f"{path} line {i + 1} is not a journal record") from None
        if not records or "start" not in records[0]:
            raise JournalError(f"{path} is not an amdflash flash journal")
        start = records[0]["start"]
        backup = os.path.join(os.path.dirname(os.path.abspath(path)), os.path.basename(str(start["backup"])))
        journal = cls(path, str(start["image_sha256"]), str(start["target"]), backup, str(start.get("time", "")))
        for record in records[1:]:
            if "backup" in record:
                for sector, offset, digest in record["backup"]:
                    journal.backed_up[int(sector)] = (int(offset), str(digest))
            elif "done" in record:
                journal.done.add(int(record["done"]))
            elif record.get("complete"):
                journal.complete = True
        return journal

    @classmethod
    def start(cls, directory: str, image_sha256: str, target: str) -> FlashJournal:
        """Begin the journal (and its empty backup file) of a new flash in `directory` (created 0700 if missing)."""
        os.makedirs(directory, mode=0o700, exist_ok=True)
        stamp = _stamp()
        backup = os.path.join(directory, f"backup-{stamp}.bin")
        os.close(create_exclusive(backup))
        path = os.path.join(directory, CURRENT)
        try:
            fd = create_exclusive(path)
        except FileExistsError:
            os.unlink(backup)
            raise JournalError(
                f"{path} appeared meanwhile: another flash is running with this backup directory"
            ) from None
        os.close(fd)
        started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        head = {"image_sha256": image_sha256, "target": target, "backup": os.path.basename(backup), "time": started}
        _fsync_append(path, json.dumps({"start": head}).encode() + b"\n")
        return cls(path, image_sha256, target, backup, started)

    # ---- recording -----------------------------------------------------------------------------------------------

    def add_backup(self, originals: dict[int, bytes]) -> None:
        """Save the original contents of sectors about to be erased: data first (fsynced), then the journal entry."""
        if not originals:
            return
        entries: list[tuple[int, int, str]] = []
        for sector in sorted(originals):
            data = originals[sector]
            if len(data) != SECTOR_SIZE:
                raise ValueError(f"sector {sector} backup holds {len(data):#x} bytes, not {SECTOR_SIZE:#x}")
            offset = _fsync_append(self.backup_path, data)
            entries.append((sector, offset, hashlib.sha256(data).hexdigest()))
        self._record({"backup": [list(e) for e in entries]})
        for sector, offset, digest in entries:  # only once the journal says so
            self.backed_up[sector] = (offset, digest)

    def sector_done(self, sector: int) -> None:
        """Record that `sector` was written and read back."""
        self.done.add(sector)
        self._record({"done": sector})

    def finish(self) -> str:
        """Mark the flash complete and archive the journal under a dated name (returned)."""
        self._record({"complete": True})
        self.complete = True
        archived = os.path.join(os.path.dirname(self.path), f"journal-{_stamp()}.jsonl")
        if os.path.basename(self.path) == CURRENT:
            os.replace(self.path, archived)
            self.path = archived
        return self.path

    def _record(self, event: dict[str, object]) -> None:
        _fsync_append(self.path, json.dumps(event).encode() + b"\n")

    # ---- reading back --------------------------------------------------------------------------------------------

    def original(self, sector: int) -> bytes:
        """The original contents of a backed-up sector, checked against the digest recorded with it."""
        offset, digest = self.backed_up[sector]
        try:
            fd = os.open(self.backup_path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
            try:
                data = os.pread(fd, SECTOR_SIZE, offset)
            finally:
                os.close(fd)
        except OSError as e:
            raise JournalError(f"cannot read the backup {self.backup_path}: {e}") from e
        if hashlib.sha256(data).hexdigest() != digest:
            raise JournalError(f"the backup of sector {sector} in {self.backup_path} is damaged (sha256 mismatch)")
        return data

    def discard_if_empty(self) -> None:
        """Remove a journal that recorded nothing but its start (nothing was backed up or written)."""
        if not self.backed_up and not self.done:
            for path in (self.path, self.backup_path):
                with contextlib.suppress(OSError):
                    os.unlink(path)
