"""tg.runtime: runtime: devices, buffers, allocators, compilers, backends, execution engine, JIT, BEAM and HCQ."""

from tg.runtime.__about__ import __version__

__all__ = ["__version__"]
