"""amdflash: SPI flash recovery for Navi31 boards, built on tg.drivers."""

from amdflash.__about__ import __version__

__all__ = ["__version__"]
