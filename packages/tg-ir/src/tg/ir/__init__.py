"""tg.ir: the UOp IR: dtypes, ops, pattern rewriting, symbolic index algebra, spec checks and helpers."""

from tg.ir.__about__ import __version__

__all__ = ["__version__"]
