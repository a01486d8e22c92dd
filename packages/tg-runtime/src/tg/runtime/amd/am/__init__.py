"""AM: the user-space AMD GPU driver (specs/amd.md 5) on any tg.drivers ``PCIDevice`` (sysfs/VFIO, remote, the USB
bridge, mocks). :class:`~tg.runtime.amd.am.device.AMDev` boots and drives one GPU; the AMD device reaches it through
``DEV=PCI+AMD`` / ``USB+AMD`` (and the mocks ``MOCKPCI+AMD`` / ``MOCKUSB+AMD``). Importing this package touches no
device.
"""

from tg.runtime.amd.am.device import AM_TAG, AMDev
from tg.runtime.amd.am.firmware import FirmwareFiles

__all__ = ["AM_TAG", "AMDev", "FirmwareFiles"]
