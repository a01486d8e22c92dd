"""Per-device lock files, so two processes never drive one device.

The scheme matches tinygrad's (``<tmpdir>/<prefix>_<pcibus>.lock``, mode 0666, ``flock(LOCK_EX|LOCK_NB)``) so our
tools and tinygrad exclude each other. The directory can be moved with ``TG_DRIVERS_LOCK_DIR`` (tests use a tmpdir).
The kernel drops the lock when the holding process dies.
"""

from __future__ import annotations

import fcntl
import os
import tempfile

from tg.drivers.errors import DeviceBusyError

__all__ = ["DeviceLock", "acquire_device_lock", "lock_dir", "lock_name"]


def lock_dir() -> str:
    """The directory lock files live in: ``$TG_DRIVERS_LOCK_DIR`` or the system temp directory."""
    return os.environ.get("TG_DRIVERS_LOCK_DIR") or tempfile.gettempdir()


def lock_name(devpref: str, pcibus: str) -> str:
    """The lock file name for a device: ``"{devpref.lower()}_{pcibus.lower()}.lock"``."""
    if "/" in pcibus or "/" in devpref or "\0" in pcibus + devpref:
        raise ValueError(f"invalid device prefix or bus name for a lock file: {devpref!r}, {pcibus!r}")
    return f"{devpref.lower()}_{pcibus.lower()}.lock"


class DeviceLock:
    """An acquired device lock; ``release()`` (idempotent) drops it."""

    def __init__(self, path: str, fd: int) -> None:
        self.path, self.fd = path, fd

    @property
    def held(self) -> bool:
        """Whether this object still holds the lock."""
        return self.fd >= 0

    def release(self) -> None:
        """Unlock and close the lock file (the file itself stays, as in tinygrad)."""
        if self.fd >= 0:
            fd, self.fd = self.fd, -1
            try:
                fcntl.flock(fd, fcntl.LOCK_UN)
            finally:
                os.close(fd)

    def __enter__(self) -> DeviceLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def __repr__(self) -> str:
        return f"DeviceLock({self.path!r}, held={self.held})"


def _open_lock_file(path: str) -> int:
    try:
        return os.open(path, os.O_RDWR | os.O_CLOEXEC)
    except FileNotFoundError:
        pass
    try:
        # create exclusively, then widen the mode: other users must be able to lock it too, and the process umask
        # is never touched
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
    except FileExistsError:  # lost a creation race: the file exists now
        return os.open(path, os.O_RDWR | os.O_CLOEXEC)
    try:
        os.fchmod(fd, 0o666)
    except OSError:
        pass
    return fd


def acquire_device_lock(name: str) -> DeviceLock:
    """Take the exclusive lock ``name`` (a file name in :func:`lock_dir`); raise DeviceBusyError if it is held."""
    if not name or "/" in name or "\0" in name:
        raise ValueError(f"invalid lock name {name!r}")
    path = os.path.join(lock_dir(), name)
    try:
        fd = _open_lock_file(path)
    except PermissionError as e:
        raise PermissionError(
            f"no permission to open the lock file {path} ({e.strerror}): another user created it without write "
            f"access for you; remove it or make it writable (sudo chmod 666 {path}), or choose another lock "
            "directory with TG_DRIVERS_LOCK_DIR"
        ) from e
    except FileNotFoundError as e:
        raise FileNotFoundError(
            f"cannot create the lock file {path}: the lock directory {os.path.dirname(path)} does not exist "
            "(set by TG_DRIVERS_LOCK_DIR or the system temp directory)"
        ) from e
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        os.close(fd)
        raise DeviceBusyError(
            f"Failed to acquire lock file {name}. `sudo lsof {path}` may help identify the process holding the lock."
        ) from e
    return DeviceLock(path, fd)
