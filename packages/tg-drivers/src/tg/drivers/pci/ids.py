"""Device-id filters shared by every discovery backend (sysfs scan, mocks, the remote server's PROBE)."""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["DeviceFilter", "device_matches", "normalize_devices"]

#: ``((mask, (id, ...)), ...)``: a device matches when ``(device_id & mask) in ids`` for some entry
DeviceFilter = tuple[tuple[int, tuple[int, ...]], ...]


def normalize_devices(devices: Iterable[tuple[int, Iterable[int]]]) -> DeviceFilter:
    """Turn any iterable of ``(mask, iterable_of_ids)`` into hashable tuples, validating every number."""
    out: list[tuple[int, tuple[int, ...]]] = []
    try:
        entries = list(devices)
    except TypeError as e:
        raise TypeError(f"devices must be an iterable of (mask, ids) pairs, got {devices!r}") from e
    for entry in entries:
        try:
            mask, ids = entry
            id_tuple = tuple(ids)
        except (TypeError, ValueError) as e:
            raise TypeError(f"each devices entry must be a (mask, iterable_of_ids) pair, got {entry!r}") from e
        for value, what in [(mask, "mask"), *((i, "device id") for i in id_tuple)]:
            if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= 0xFFFF:
                raise ValueError(f"{what} must be an int in 0..0xffff, got {value!r}")
        out.append((mask, id_tuple))
    return tuple(out)


def device_matches(
    vendor: int,
    device: int,
    class_code: int | None,
    want_vendor: int,
    devices: DeviceFilter,
    base_class: int | None = None,
) -> bool:
    """The discovery match rule: same vendor, ``(device & mask) in ids`` for some entry, optional base class.

    ``class_code`` is the 24-bit class (``0x030000`` for a VGA controller); ``base_class`` compares its top byte.
    A mask of 0 with ids ``(0,)`` matches every device of the vendor.
    """
    if vendor != want_vendor:
        return False
    if base_class is not None and (class_code is None or class_code >> 16 != base_class):
        return False
    return any((device & mask) in ids for mask, ids in devices)
