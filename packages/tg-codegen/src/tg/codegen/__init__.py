"""tg.codegen: code generation: scheduler, kernel optimiser, lowering, linearizer and renderers."""

from tg.codegen.__about__ import __version__

__all__ = ["__version__"]
