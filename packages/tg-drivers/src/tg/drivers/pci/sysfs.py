"""Where the Linux sysfs tree is mounted: discovery scans it, Linux devices bind drivers and map BARs through it."""

from __future__ import annotations

import os


def sysfs_root() -> str:
    """The sysfs mount point: ``$TG_DRIVERS_SYSFS_ROOT`` (a fake tree, in tests) or ``/sys``."""
    return os.environ.get("TG_DRIVERS_SYSFS_ROOT") or "/sys"
