"""tg-pci-server: serves local (or simulated) PCI devices to tg.drivers' RemotePCIDevice."""

from tg_pci_server.__about__ import __version__

__all__ = ["__version__"]
