"""USB: the libusb transport, the ASM24 bridge protocol and the PCI device behind the bridge.

Importing this package does not import libusb; it is loaded when a USB device is listed or opened.
"""

from tg.drivers.usb.asm24 import USBMMIO, ASM24Controller
from tg.drivers.usb.transport import BRIDGE_USB_IDS, USB3
from tg.drivers.usb.usbpci import USBPCIDevice, setup_usb_bars

__all__ = ["BRIDGE_USB_IDS", "USB3", "USBMMIO", "ASM24Controller", "USBPCIDevice", "setup_usb_bars"]
