import os
from pathlib import Path

import pytest

from amdflash.util import atomic_write, atomic_writer, bswap32, parse_int, wait_until


def test_wait_until_bounds() -> None:
    for bad in (0, -1, 60.0001, 1e9):
        with pytest.raises(ValueError, match=r"timeout must be in \(0, 60\] seconds"):
            wait_until(lambda: True, bad, "x")
    assert wait_until(lambda: 7, 60, "x") == 7


def test_wait_until_times_out_with_message() -> None:
    with pytest.raises(TimeoutError, match="never"):
        wait_until(lambda: 0, 0.01, "never", interval=0.001)


def test_wait_until_returns_first_truthy() -> None:
    values = iter([0, None, "", 5, 6])
    assert wait_until(lambda: next(values), 1, "x", interval=0) == 5


def test_bswap32_and_parse_int() -> None:
    assert bswap32(0x12345678) == 0x78563412
    assert bswap32(0x100) == 0x10000
    assert [parse_int(t) for t in ("0x10", "0o10", "0b10", "10")] == [16, 8, 2, 10]
    with pytest.raises(ValueError):
        parse_int("zz")


def test_atomic_write_replaces(tmp_path: Path) -> None:
    target = tmp_path / "out.bin"
    atomic_write(target, b"abc")
    atomic_write(target, b"defg")
    assert target.read_bytes() == b"defg"
    assert os.listdir(tmp_path) == ["out.bin"]


@pytest.mark.parametrize("exc", [RuntimeError, KeyboardInterrupt])
def test_atomic_writer_removes_temp_on_error(tmp_path: Path, exc: type[BaseException]) -> None:
    target = tmp_path / "out.bin"
    with pytest.raises(exc), atomic_writer(target, tmp_path=str(target) + ".partial") as f:
        f.write(b"half")
        raise exc()
    assert os.listdir(tmp_path) == []


def test_atomic_write_uses_umask_mode(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        atomic_write(tmp_path / "f", b"x")
    finally:
        os.umask(old)
    assert (tmp_path / "f").stat().st_mode & 0o777 == 0o644


def test_a_symlink_at_the_partial_path_is_never_written_through(tmp_path: Path) -> None:
    """Issue 29 finding 7: `ln -s victim.txt out.bin.partial; amdflash --sim romsw dump out.bin` overwrote victim.txt
    (the .partial file was opened with O_CREAT|O_TRUNC, following the link)."""
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    target = tmp_path / "out.bin"
    partial = tmp_path / "out.bin.partial"
    partial.symlink_to(victim)
    with pytest.raises(FileExistsError, match="is a symlink; refusing to write through it"):
        with atomic_writer(target, tmp_path=str(partial)) as f:
            f.write(b"flash data")
    assert victim.read_text() == "precious" and not target.exists() and partial.is_symlink()
    partial.unlink()
    partial.symlink_to(tmp_path / "not-yet-there")  # a dangling link: nothing may be created at its target
    with pytest.raises(FileExistsError, match="symlink"):
        with atomic_writer(target, tmp_path=str(partial)) as f:
            f.write(b"flash data")
    assert not (tmp_path / "not-yet-there").exists()


def test_a_stale_partial_of_our_own_is_replaced(tmp_path: Path) -> None:
    target = tmp_path / "out.bin"
    partial = tmp_path / "out.bin.partial"
    partial.write_bytes(b"left by a killed run")
    with atomic_writer(target, tmp_path=str(partial)) as f:
        f.write(b"complete")
    assert target.read_bytes() == b"complete" and not partial.exists()
    os.link(target, partial)  # a hard link to another file is not ours to truncate
    with pytest.raises(FileExistsError, match="not a plain file of this user"):
        with atomic_writer(tmp_path / "other.bin", tmp_path=str(partial)):
            pass
    assert target.read_bytes() == b"complete"


def test_the_final_rename_replaces_a_symlink_not_its_target(tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    target = tmp_path / "out.bin"
    target.symlink_to(victim)
    atomic_write(target, b"new")
    assert victim.read_text() == "precious" and not target.is_symlink() and target.read_bytes() == b"new"
