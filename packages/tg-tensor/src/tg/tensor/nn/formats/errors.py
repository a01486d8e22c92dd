"""The one exception every weight loader raises for a corrupt, truncated or hostile file."""

from __future__ import annotations


class FormatError(ValueError):
    """A weights file is malformed: the message names the file, the field, its byte offset and the bad value."""


def fail(path: str, message: str, offset: int | None = None) -> FormatError:
    """A FormatError for `path` (`raise fail(...)`), with the byte offset when one is known."""
    where = f" at byte {offset}" if offset is not None else ""
    return FormatError(f"{path}: {message}{where}")
