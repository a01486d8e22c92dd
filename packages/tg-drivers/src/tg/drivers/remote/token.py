"""The shared secret of a remote PCI server: where it lives, how it is read, and how a fresh one is made.

Every TCP listener of `tg-pci-server` requires a token (only `--insecure` opts out). When none is given, the server
generates one and writes it to the token file (mode 0600, in a 0700 directory), so a client of the same user on the
same machine finds it without any setting. Clients look in this order: `TG_REMOTE_TOKEN`, `REMOTE_TOKEN` (an older
alias), the file named by `TG_REMOTE_TOKEN_FILE`, then the default token file if it exists.

A token file that its group or others can read or write is refused on both sides: it would hand raw device access
to every local user. The file is opened without following symlinks.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat

from tg.drivers.remote.protocol import MAX_TOKEN_LEN

__all__ = ["TokenFileError", "default_token_path", "ensure_token_file", "read_token_file", "token_from_environment"]

TOKEN_FILE_VARIABLE = "TG_REMOTE_TOKEN_FILE"


class TokenFileError(PermissionError):
    """A token file that cannot be used: unsafe permissions, another owner, not a regular file, empty or too long."""


def default_token_path() -> str:
    """`$TG_REMOTE_TOKEN_FILE`, else `$XDG_CONFIG_HOME/tg/remote-token` (`~/.config/tg/remote-token`)."""
    explicit = os.environ.get(TOKEN_FILE_VARIABLE, "").strip()
    if explicit:
        return os.path.abspath(os.path.expanduser(explicit))
    config = os.environ.get("XDG_CONFIG_HOME", "").strip() or os.path.join(os.path.expanduser("~"), ".config")
    return os.path.join(os.path.abspath(config), "tg", "remote-token")


def _check_private(path: str, st: os.stat_result) -> None:
    if not stat.S_ISREG(st.st_mode):
        raise TokenFileError(f"token file {path} is not a regular file")
    if st.st_mode & 0o077:
        raise TokenFileError(
            f"token file {path} is readable or writable by group or others (mode {stat.S_IMODE(st.st_mode):04o}); "
            f"run: chmod 600 {path}"
        )
    if hasattr(os, "geteuid") and st.st_uid != os.geteuid():
        raise TokenFileError(f"token file {path} belongs to uid {st.st_uid}, not to this user ({os.geteuid()})")


def read_token_file(path: str) -> bytes:
    """The token stored in `path` (surrounding whitespace stripped); `TokenFileError` for an unsafe or bad file,
    `FileNotFoundError` when it does not exist. Symlinks are not followed."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | getattr(os, "O_NOCTTY", 0))
    try:
        _check_private(path, os.fstat(fd))
        raw = os.read(fd, MAX_TOKEN_LEN + 64).strip()
    finally:
        os.close(fd)
    if not 0 < len(raw) <= MAX_TOKEN_LEN:
        raise TokenFileError(f"token file {path} must hold 1..{MAX_TOKEN_LEN} bytes, it holds {len(raw)}")
    return raw


def ensure_token_file(path: str, *, make_parents: bool = False) -> tuple[bytes, bool]:
    """The token in `path`, creating the file with a fresh random token if it does not exist.

    Returns `(token, created)`. A new file is created exclusively (never through a symlink, never replacing a file
    another process created meanwhile) with mode 0600; with `make_parents`, a missing parent directory is created
    with mode 0700.
    """
    with contextlib.suppress(FileNotFoundError):
        return read_token_file(path), False
    directory = os.path.dirname(path)
    if make_parents and directory and not os.path.isdir(directory):
        os.makedirs(directory, mode=0o700, exist_ok=True)
    token = secrets.token_urlsafe(32).encode()
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except FileExistsError:  # another server created it first: use that one
        return read_token_file(path), False
    try:
        os.fchmod(fd, 0o600)  # whatever the umask
        os.write(fd, token + b"\n")
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(path)
        raise
    os.close(fd)
    return token, True


def token_from_environment() -> bytes | None:
    """The token a client sends: `TG_REMOTE_TOKEN`, `REMOTE_TOKEN`, the `TG_REMOTE_TOKEN_FILE` file, or the default
    token file when it exists; None when there is none. A named token file that is missing is an error."""
    for name in ("TG_REMOTE_TOKEN", "REMOTE_TOKEN"):
        value = os.environ.get(name)
        if value:
            return value.encode()
    path = default_token_path()
    try:
        return read_token_file(path)
    except FileNotFoundError:
        if os.environ.get(TOKEN_FILE_VARIABLE, "").strip():
            raise FileNotFoundError(f"{TOKEN_FILE_VARIABLE} names {path}, which does not exist") from None
        return None
