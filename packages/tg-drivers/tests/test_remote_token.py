"""The remote server's token file (`tg.drivers.remote.token`): generation, safe reading, and the client's lookup."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tg.drivers.remote.client import remote_token
from tg.drivers.remote.token import (
    TokenFileError,
    default_token_path,
    ensure_token_file,
    read_token_file,
    token_from_environment,
)


def test_a_new_token_file_is_private_random_and_reused(tmp_path: Path) -> None:
    path = tmp_path / "cfg" / "tg" / "remote-token"
    with pytest.raises(FileNotFoundError):
        ensure_token_file(str(path))  # the directory is only made on request
    token, created = ensure_token_file(str(path), make_parents=True)
    assert created and len(token) >= 32 and path.read_bytes() == token + b"\n"
    assert path.stat().st_mode & 0o777 == 0o600 and path.parent.stat().st_mode & 0o777 == 0o700
    assert ensure_token_file(str(path)) == (token, False)
    other, _ = ensure_token_file(str(tmp_path / "other"))
    assert other != token


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o620, 0o602])
def test_token_files_others_can_reach_are_refused(tmp_path: Path, mode: int) -> None:
    path = tmp_path / "token"
    path.write_text("s3cret\n")
    path.chmod(mode)
    with pytest.raises(TokenFileError, match=f"mode {mode:04o}.*chmod 600"):
        read_token_file(str(path))


def test_symlinks_empty_and_oversized_token_files_are_refused(tmp_path: Path) -> None:
    target = tmp_path / "target"
    target.write_text("s3cret")
    target.chmod(0o600)
    link = tmp_path / "link"
    link.symlink_to(target)
    with pytest.raises(OSError):  # O_NOFOLLOW: ELOOP
        read_token_file(str(link))
    with pytest.raises(OSError):
        ensure_token_file(str(link))
    assert target.read_text() == "s3cret"
    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "victim")
    with pytest.raises(OSError):  # never created through a symlink
        ensure_token_file(str(dangling))
    assert not (tmp_path / "victim").exists()
    for content in ("  \n", "x" * 300):
        path = tmp_path / "bad"
        path.write_text(content)
        path.chmod(0o600)
        with pytest.raises(TokenFileError, match=r"must hold 1\.\.256 bytes"):
            read_token_file(str(path))


def test_the_client_looks_in_the_variables_then_the_token_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    assert default_token_path() == str(tmp_path / "tg" / "remote-token")
    assert token_from_environment() is None and remote_token() is None
    file_token, _ = ensure_token_file(default_token_path(), make_parents=True)
    assert remote_token() == file_token  # what a local server generated
    monkeypatch.setenv("REMOTE_TOKEN", "alias")
    assert remote_token() == b"alias"
    monkeypatch.setenv("TG_REMOTE_TOKEN", "main")
    assert remote_token() == b"main"
    monkeypatch.delenv("TG_REMOTE_TOKEN")
    monkeypatch.delenv("REMOTE_TOKEN")
    named = tmp_path / "named"
    monkeypatch.setenv("TG_REMOTE_TOKEN_FILE", str(named))
    with pytest.raises(FileNotFoundError, match="TG_REMOTE_TOKEN_FILE names"):
        remote_token()  # a token file named on purpose must exist
    named.write_text("named\n")
    os.chmod(named, 0o600)
    assert remote_token() == b"named"
