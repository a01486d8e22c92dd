"""Small helpers shared by the drivers and the CLI: polling, atomic files, integer parsing."""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
import time
from collections.abc import Callable, Iterator
from typing import IO, Protocol, TypeVar

T = TypeVar("T")


class RegisterAccessor(Protocol):
    """A 32-bit register window (BAR5): what `Navi31SPI`, the PSP mailbox and the aperture dump need."""

    def read32(self, off: int) -> int:
        """One aligned 32-bit read."""
        ...

    def write32(self, off: int, value: int) -> None:
        """One aligned 32-bit write."""
        ...

    def read(self, off: int, n: int) -> bytes:
        """Read `n` bytes (4-aligned offset and length for register windows)."""
        ...

    def write(self, off: int, data: bytes) -> None:
        """Write `data` (4-aligned offset and length for register windows)."""
        ...


MAX_WAIT_S = 60.0


def wait_until(fn: Callable[[], T], timeout: float, message: str, interval: float = 0.001) -> T:
    """Poll `fn` until it returns a truthy value and return that value.

    `timeout` must be in (0, 60] seconds. The first poll happens at once; a poll that fails after the deadline raises
    `TimeoutError(message)`.
    """
    if not 0 < timeout <= MAX_WAIT_S:
        raise ValueError("timeout must be in (0, 60] seconds")
    deadline = time.monotonic() + timeout
    while True:
        value = fn()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise TimeoutError(message)
        if interval > 0:
            time.sleep(interval)


def bswap32(value: int) -> int:
    """Reverse the four bytes of a 32-bit value."""
    return int.from_bytes((value & 0xFFFFFFFF).to_bytes(4, "little"), "big")


def parse_int(text: str) -> int:
    """Parse an integer with base auto-detection (`0x`, `0o`, `0b`, decimal); raise ValueError otherwise."""
    return int(text, 0)


def create_exclusive(path: str, mode: int = 0o666) -> int:
    """Create `path` for writing and return its descriptor; fail if anything exists there, a symlink included.

    `O_EXCL` with `O_NOFOLLOW`: a file, a symlink or a dangling symlink planted at `path` is never opened, followed or
    truncated. The mode is filtered by the umask, as `open()` would do.
    """
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)


def _create_partial(tmp: str) -> int:
    """Create the `.partial` file of a dump; a stale one of our own (a regular file of this user, no other links, left
    by a killed run) is replaced, anything else there (a symlink, someone else's file, a directory) is refused."""
    try:
        return create_exclusive(tmp)
    except FileExistsError:
        st = os.lstat(tmp)
        ours = stat.S_ISREG(st.st_mode) and st.st_nlink == 1 and st.st_uid == os.geteuid()
        if not ours:
            kind = "a symlink" if stat.S_ISLNK(st.st_mode) else "not a plain file of this user"
            raise FileExistsError(
                f"{tmp} already exists and is {kind}; refusing to write through it (remove it if it is yours)"
            ) from None
        os.unlink(tmp)
        return create_exclusive(tmp)  # if something appeared again meanwhile, this fails: never followed


@contextlib.contextmanager
def atomic_writer(
    path: str | os.PathLike[str], *, suffix: str = ".partial", tmp_path: str | None = None
) -> Iterator[IO[bytes]]:
    """Open a temporary file beside `path` for writing; on success fsync it and rename it onto `path`.

    The temporary file is `tmp_path` when given, else a unique hidden name in the same directory; either way it is
    created exclusively and never through a symlink (`create_exclusive`), so a link planted there cannot redirect the
    write. The rename replaces `path` itself (a symlink at `path` is replaced, its target is untouched). On any
    exception, including KeyboardInterrupt, the temporary file is removed and nothing appears at `path`.
    """
    target = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(target))
    if tmp_path is None:
        fd, tmp = _create_unique(directory, f".{os.path.basename(target)}.", suffix)
    else:
        tmp = tmp_path
        fd = _create_partial(tmp)
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    with contextlib.suppress(OSError):
        dfd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)


def _create_unique(directory: str, prefix: str, suffix: str) -> tuple[int, str]:
    for _ in range(100):
        tmp = os.path.join(directory, f"{prefix}{secrets.token_hex(6)}{suffix}")
        try:
            return create_exclusive(tmp), tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"could not create a temporary file in {directory}")


def check_output_path(path: str | os.PathLike[str]) -> None:
    """Check, before any device is opened, that `path` can receive an atomically written file.

    A dump that fails only after minutes of reading (a missing directory, a directory as target) would lose the data.
    """
    target = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(target))
    if os.path.isdir(target):
        raise ValueError(f"output path is a directory: {target}")
    if not os.path.isdir(directory):
        raise ValueError(f"output directory does not exist: {directory}")
    if not os.access(directory, os.W_OK | os.X_OK):
        raise PermissionError(f"output directory is not writable: {directory}")


def atomic_write(path: str | os.PathLike[str], data: bytes) -> None:
    """Write `data` to `path` atomically (temporary file in the same directory, fsync, rename)."""
    with atomic_writer(path) as f:
        f.write(data)
