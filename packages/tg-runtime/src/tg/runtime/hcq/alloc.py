"""Memory of HCQ devices (hcq.md section 5): buffers, the allocator with its staging ring, sub-allocated blocks.

- :class:`HCQBuffer`: a buffer's device address ``va``, ``size``, ``view`` (CPU access: a HostView or an MMIO view,
  None where the CPU cannot reach it), ``owner`` (the device), ``base`` (the allocation a sub-buffer lies in),
  ``mappings`` (devices it is mapped into) and ``stamp``: the (device, epoch, generation) of the last execution that
  touched it. The host fence waits for the stamp before the host reads, writes, frees or hands the memory to a
  non-HCQ call.
- :class:`HCQAllocator`: ``_alloc`` through the device, ``_offset`` sub-buffers, ``_as_buffer`` the CPU view (after
  the fence), ``_map`` into another device; memory is really freed only after the fence. A buffer the LRU cache hands
  out again needs no fence: new work on a device is ordered after all earlier work touching its memory (every queue
  starts with a WAIT on the device's timeline, and the timeline waits for every queue that touched its memory), and
  host access fences on the stamp the buffer still carries.
  ``copyin`` goes through the **staging ring** (``staging_slots`` slots of ``staging_slot_size`` bytes of
  host-visible memory, seed sizes 32 x 2 MiB): per chunk, take the next slot, wait until its stamp passed, memmove
  into it, run the device's transfer program (a linked one-COPY program: two input patches, one value patch), stamp
  the slot; the host waits only when every slot is in flight. ``copyout`` synchronizes, then per chunk: transfer into
  a slot, wait, memmove out. A device without a copy queue moves bytes through the buffer's CPU view.
- :class:`BlockPool`: link blocks and tables carved out of larger host-visible regions (size classes, reused).
"""

from __future__ import annotations

import ctypes
from typing import TYPE_CHECKING, Any

from tg.runtime.device import BufferSpec, LRUAllocator

if TYPE_CHECKING:
    from tg.runtime.hcq.device import HCQDevice, Region

Stamp = tuple[Any, int, int]  # (device, epoch, timeline generation)


class HCQBuffer:
    """A buffer of an HCQ device (see the module docstring)."""

    __slots__ = ("__weakref__", "base", "external", "keep", "mappings", "owner", "size", "stamp", "va", "view")

    def __init__(self, va: int, size: int, view: Any, owner: Any, base: HCQBuffer | None = None, keep: Any = None):
        self.va, self.size, self.view, self.owner, self.keep = va, size, view, owner, keep
        self.base: HCQBuffer = base if base is not None else self
        self.mappings: set[str] = set()
        self.stamp: tuple[Stamp, ...] = ()
        self.external = False  # memory the caller owns and reads directly (from_blob): executions finish at once

    @property
    def addr(self) -> int:
        """The host address (same as ``va`` for host memory)."""
        return self.va

    @property
    def mv(self) -> memoryview:
        """The bytes as a host memoryview (host-visible buffers only)."""
        if self.view is None:
            raise RuntimeError(f"{self!r} has no CPU view")
        return self.view.mv.cast("B") if self.view.fmt != "B" else self.view.mv

    def write_bytes(self, data: memoryview) -> None:
        """Copy ``data`` to the start of the buffer through its CPU view (host memory, or an MMIO window such as an
        AM GPU's BAR0)."""
        if self.view is None:
            raise RuntimeError(f"{self!r} has no CPU view")
        if _is_host_buffer(self):
            self.mv[: data.nbytes] = data
        else:
            self.view.write(0, data)

    def read_bytes(self, n: int) -> bytes | memoryview:
        """The first ``n`` bytes through the CPU view."""
        if self.view is None:
            raise RuntimeError(f"{self!r} has no CPU view")
        return self.mv[:n] if _is_host_buffer(self) else self.view.read(0, n)

    def offset(self, offset: int, size: int) -> HCQBuffer:
        """A sub-buffer of ``size`` bytes at ``offset`` (sharing the base's stamp)."""
        view = self.view.view(offset, size) if self.view is not None else None
        return HCQBuffer(self.va + offset, size, view, self.owner, self.base)

    def __repr__(self) -> str:
        return f"<HCQBuffer {self.size} bytes at {self.va:#x} on {getattr(self.owner, 'device', '?')}>"


def stamp(buffers: Any, stamp_: tuple[Stamp, ...]) -> None:
    """Record that the execution ``stamp_`` touches ``buffers`` (their bases)."""
    for b in buffers:
        b.base.stamp = stamp_


def fence(buf: HCQBuffer) -> None:
    """Wait until every execution that touched ``buf`` (its base) finished."""
    for dev, epoch, generation in buf.base.stamp:
        dev.wait_epoch(epoch, generation, what="timeline (host fence)")
    buf.base.stamp = ()


class BlockPool:
    """Small host-visible blocks (link blocks, tables) carved from ``chunk``-byte regions of one device, in power-of-two
    size classes from ``min_size``; freed blocks are reused by their class. Larger requests get their own region."""

    def __init__(self, dev: HCQDevice, chunk: int = 1 << 20, min_size: int = 4096) -> None:
        self.dev, self.chunk, self.min_size = dev, chunk, min_size
        self.free: dict[int, list[Region]] = {}
        self.regions: list[Region] = []

    def alloc(self, size: int) -> Region:
        """A zeroed block of at least ``size`` bytes."""
        cls = max(self.min_size, 1 << max(size - 1, 0).bit_length())
        if cls > self.chunk:
            region = self.dev.alloc_region(cls)
            self.regions.append(region)
            return region
        if not (bucket := self.free.setdefault(cls, [])):
            region = self.dev.alloc_region(self.chunk)
            self.regions.append(region)
            bucket.extend(region.sub(off, cls) for off in reversed(range(0, self.chunk, cls)))
        block = bucket.pop()
        if block.view is not None:
            ctypes.memset(block.va, 0, block.size) if _is_host(block) else block.view.write(0, bytes(block.size))
        return block

    def release(self, block: Region) -> None:
        """Give a block back (the device must be done with it)."""
        cls = max(self.min_size, 1 << max(block.size - 1, 0).bit_length())
        if cls <= self.chunk:
            self.free.setdefault(cls, []).append(block)


def _is_host(region: Region) -> bool:
    from tg.runtime.hcq.views import is_host_view

    return is_host_view(region.view)


class HCQAllocator(LRUAllocator[Any]):
    """The allocator of an HCQ device (see the module docstring). Backends implement ``alloc_buffer``/``free_buffer``
    on the device; copies use the device's transfer program."""

    staging_slot_size = 2 << 20  # seed's batch_size
    staging_slots = 32  # seed's batch_cnt

    def __init__(self, dev: Any) -> None:
        super().__init__(dev)
        self._staging: list[tuple[HCQBuffer, tuple[Stamp, ...]]] | None = None
        self._next_slot = 0

    # ---- allocation -------------------------------------------------------------------------------------------------

    def _alloc(self, size: int, options: BufferSpec) -> HCQBuffer:
        return self.dev.alloc_buffer(size, options)

    def _free(self, opaque: HCQBuffer, options: BufferSpec) -> None:
        fence(opaque)
        self.dev.free_buffer(opaque)

    def _offset(self, buf: HCQBuffer, size: int, offset: int) -> HCQBuffer:
        return buf.offset(offset, size)

    def _as_buffer(self, src: HCQBuffer) -> memoryview | None:
        if src.view is None or not _is_host_buffer(src):
            return None
        fence(src)
        return src.mv

    def from_host_memory(self, mv: memoryview, addr: int) -> HCQBuffer:
        """An HCQBuffer over existing host memory (``Tensor.from_blob``), where the device can map host memory."""
        from tg.runtime.hcq.views import HostView

        if not self.dev.can_map_host:
            raise ValueError(f"{self.dev.device} cannot use host memory at a raw pointer")
        view = HostView(addr, mv.nbytes, "B", owner=mv) if addr else None
        buf = HCQBuffer(addr, mv.nbytes, view, self.dev, keep=mv)
        buf.external = True
        return buf

    def _map(self, buf: HCQBuffer, dev: Any) -> int:
        """Map ``buf`` into device ``dev`` (a peer); returns the address ``dev`` uses."""
        if dev.device not in buf.base.mappings:
            buf.base.mappings.add(dev.device)
        return int(self.dev.map_buffer(buf, dev))

    # ---- copies -----------------------------------------------------------------------------------------------------

    def _staging_ring(self) -> list[tuple[HCQBuffer, tuple[Stamp, ...]]]:
        if self._staging is None:
            size = self.staging_slot_size * self.staging_slots
            region = self.dev.alloc_region(size)
            whole = HCQBuffer(region.va, size, region.view, self.dev, keep=region)
            self._staging = [(whole.offset(i * self.staging_slot_size, self.staging_slot_size), ())
                             for i in range(self.staging_slots)]  # fmt: skip
        return self._staging

    def _copyin(self, dest: HCQBuffer, src: memoryview) -> None:
        if not self.dev.has_copy_queue:
            fence(dest)
            dest.write_bytes(src)
            return
        ring, n = self._staging_ring(), src.nbytes
        last: tuple[Stamp, ...] = ()
        for off in range(0, n, self.staging_slot_size):
            chunk = min(self.staging_slot_size, n - off)
            i = self._next_slot % len(ring)
            self._next_slot = i + 1
            slot, slot_stamp = ring[i]
            for dev, epoch, generation in slot_stamp:
                dev.wait_epoch(epoch, generation, what="timeline (staging slot)")
            slot.write_bytes(src[off : off + chunk])
            last = self.dev.transfer(dest.offset(off, chunk), slot.offset(0, chunk), chunk, touch=(dest,))
            ring[i] = (slot, last)
        dest.base.stamp = last

    def _copyout(self, dest: memoryview, src: HCQBuffer) -> None:
        self.dev.synchronize()
        if not self.dev.has_copy_queue:
            dest[:] = src.read_bytes(dest.nbytes)
            return
        ring, n = self._staging_ring(), dest.nbytes
        slot, _ = ring[0]
        for off in range(0, n, self.staging_slot_size):
            chunk = min(self.staging_slot_size, n - off)
            done = self.dev.transfer(slot.offset(0, chunk), src.offset(off, chunk), chunk)
            for dev, epoch, generation in done:
                dev.wait_epoch(epoch, generation, what="timeline (copyout)")
            dest[off : off + chunk] = slot.read_bytes(chunk)
        ring[0] = (slot, ())

    def transfer(self, dest: HCQBuffer, src: HCQBuffer, nbytes: int, src_dev: Any) -> None:
        """A device-side copy between buffers of devices of one peer group (pushed by the source's copy queue)."""
        if getattr(src_dev, "peer_group", None) != self.dev.peer_group:
            raise RuntimeError(f"transfer between {src_dev.device} and {self.dev.device}: not one peer group")
        src_dev.transfer(dest, src, nbytes, touch=(dest, src))


def _is_host_buffer(buf: HCQBuffer) -> bool:
    from tg.runtime.hcq.views import is_host_view

    return is_host_view(buf.view)
