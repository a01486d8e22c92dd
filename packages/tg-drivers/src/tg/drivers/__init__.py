"""tg.drivers: raw hardware access: MMIO views, PCI (sysfs/VFIO), USB-to-PCIe bridge, remote PCI client and server."""

from tg.drivers.__about__ import __version__

__all__ = ["__version__"]
