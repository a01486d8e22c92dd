"""Device registry, Buffer, views, allocators and the NULL and DISK devices."""

import gc
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from tg.ir.dtype import dtypes
from tg.ir.helpers import Context, GlobalCounters
from tg.runtime.device import Allocator, Buffer, BufferSpec, Compiled, Device, LRUAllocator, _DeviceRegistry


def floats(*xs: float) -> bytes:
    return struct.pack(f"{len(xs)}f", *xs)


def unfloats(mv: memoryview) -> list[float]:
    return list(struct.unpack(f"{mv.nbytes // 4}f", mv))


# ---- registry ----


@pytest.mark.parametrize(
    ("name", "canonical"),
    [("cpu", "CPU"), ("CPU", "CPU"), ("cpu:0", "CPU"), ("cpu:1", "CPU:1"), ("disk:/tmp/A/b", "DISK:/tmp/A/b")],
)
def test_canonicalize(name: str, canonical: str) -> None:
    assert Device.canonicalize(name) == canonical


def test_same_object_per_canonical_name() -> None:
    assert Device["cpu"] is Device["CPU"] is Device["CPU:0"]
    assert Device["CPU:1"] is not Device["CPU"]
    assert Device["CPU:1"].device == "CPU:1" and Device["CPU:1"].device_id == 1


def test_unknown_device_lists_available() -> None:
    with pytest.raises(ValueError, match=r"unknown device 'FOO'.*available devices: .*CPU.*NULL"):
        Device["foo"]


def test_bad_device_names() -> None:
    with pytest.raises(ValueError, match="no backend name"):
        Device.canonicalize(":1")
    with pytest.raises(TypeError, match="must be a str"):
        Device.canonicalize(3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="index must be a non-negative integer"):
        Device["CPU:x"]


def test_default_device_and_dev_override() -> None:
    assert Device.DEFAULT in Device.backends
    with Context(DEV="null"):
        assert Device.DEFAULT == "NULL"
        assert Device.default is Device["NULL"]
        assert Device.canonicalize(None) == "NULL"


def test_default_skips_unavailable_backends(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    registry = _DeviceRegistry()  # a fresh registry: nothing opened yet
    monkeypatch.setenv("PATH", str(tmp_path))  # no C compiler anywhere
    monkeypatch.delenv("CC", raising=False)
    with Context(DEV=""):
        assert "CPU" not in list(registry.get_available_devices())
        if "PYTHON" in registry.backends:
            with pytest.warns(RuntimeWarning, match=r"default device is PYTHON.*CPU is unavailable.*apt-get install"):
                assert registry.DEFAULT == "PYTHON"


def test_import_does_no_work() -> None:
    code = (
        "import sys, tg.runtime; "
        "bad = [m for m in sys.modules if m.startswith(('tg.runtime.backends', 'tg.codegen', 'subprocess'))]; "
        "assert not bad, bad; assert not tg.runtime.Device.opened"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_known_backends() -> None:
    assert {"CPU", "NULL", "DISK"} <= set(Device.backends)
    assert isinstance(Device["CPU"], Compiled)


# ---- Buffer ----


def test_buffer_lazy_allocation_and_copy() -> None:
    buf = Buffer("CPU", 4, dtypes.float32)
    assert not buf.is_allocated() and buf.nbytes == 16
    buf.copyin(floats(1, 2, 3, 4))
    assert buf.is_allocated()
    assert unfloats(buf.as_memoryview()) == [1, 2, 3, 4]
    out = bytearray(16)
    buf.copyout(memoryview(out))
    assert unfloats(memoryview(out)) == [1, 2, 3, 4]


def test_buffer_initial_value_and_mem_used() -> None:
    gc.collect()  # other tests' garbage freed now, not by a collection inside the counted lines
    before = GlobalCounters.mem_used
    buf = Buffer("CPU", 3, dtypes.int32, initial_value=struct.pack("3i", 7, 8, 9))
    assert GlobalCounters.mem_used == before + 12
    assert struct.unpack("3i", buf.as_memoryview()) == (7, 8, 9)
    buf.deallocate()
    assert GlobalCounters.mem_used == before and not buf.is_allocated()


def test_empty_buffer() -> None:
    buf = Buffer("CPU", 0, dtypes.float32).ensure_allocated()
    assert buf.nbytes == 0 and bytes(buf.as_memoryview()) == b""
    buf.copyin(b"")
    buf.deallocate()


def test_buffer_copy_size_mismatch() -> None:
    buf = Buffer("CPU", 4, dtypes.float32)
    with pytest.raises(ValueError, match=r"copyin size mismatch.*16 bytes, got 8"):
        buf.copyin(floats(1, 2))
    with pytest.raises(ValueError, match="copyout size mismatch"):
        buf.copyout(memoryview(bytearray(4)))
    with pytest.raises(ValueError, match="writable"):
        buf.copyout(memoryview(bytes(16)))


def test_buffer_bad_arguments() -> None:
    with pytest.raises(TypeError, match="dtype must be a DType"):
        Buffer("CPU", 4, "float32")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="size must be a non-negative int"):
        Buffer("CPU", -1, dtypes.float32)
    with pytest.raises(ValueError, match="unknown device"):
        Buffer("NOPE", 1, dtypes.float32).ensure_allocated()


def test_views_share_memory() -> None:
    base = Buffer("CPU", 6, dtypes.float32).copyin(floats(0, 1, 2, 3, 4, 5))
    view = base.view(2, dtypes.float32, 8)
    assert unfloats(view.as_memoryview()) == [2, 3]
    view.copyin(floats(20, 30))
    assert unfloats(base.as_memoryview()) == [0, 1, 20, 30, 4, 5]
    # a view of a view is a view of the base, at the summed offset
    inner = view.view(1, dtypes.float32, 4)
    assert inner.base is base and inner.offset == 12
    assert unfloats(inner.as_memoryview()) == [30]
    # reinterpreting bytes through a view
    as_int = base.view(1, dtypes.int32, 0)
    assert struct.unpack("i", as_int.as_memoryview()) == (0,)


def test_view_allocates_base_and_checks_bounds() -> None:
    base = Buffer("CPU", 4, dtypes.float32)
    view = base.view(2, dtypes.float32, 4)
    view.copyin(floats(1, 2))
    assert base.is_allocated()
    assert unfloats(base.as_memoryview())[1:3] == [1, 2]
    with pytest.raises(ValueError, match="exceeds"):
        base.view(4, dtypes.float32, 4)
    with pytest.raises(ValueError, match="offset"):
        base.view(1, dtypes.float32, 16)


def test_zero_copy_memoryview_is_the_memory() -> None:
    buf = Buffer("CPU", 2, dtypes.float32).copyin(floats(1, 2))
    mv = buf.as_memoryview(allow_zero_copy=True)
    mv[:4] = floats(9)
    assert unfloats(buf.as_memoryview()) == [9, 2]


def test_copy_from_other_device(tmp_path: Path) -> None:
    src = Buffer("CPU", 3, dtypes.float32).copyin(floats(1, 2, 3))
    dst = Buffer("CPU:1", 3, dtypes.float32).copy_from(src)
    assert unfloats(dst.as_memoryview()) == [1, 2, 3]
    with pytest.raises(ValueError, match="copy size mismatch"):
        Buffer("CPU", 2, dtypes.float32).copy_from(src)


# ---- allocators ----


class CountingAllocator(LRUAllocator[Compiled]):
    """Host bytearrays, counting real allocations and frees."""

    def __init__(self) -> None:
        super().__init__(Device["NULL"])
        self.allocs = 0
        self.frees = 0

    def _alloc(self, size: int, options: BufferSpec) -> bytearray:
        self.allocs += 1
        return bytearray(size)

    def _free(self, opaque: object, options: BufferSpec) -> None:
        self.frees += 1


def test_lru_allocator_reuses_freed_buffers() -> None:
    alloc = CountingAllocator()
    a = alloc.alloc(64)
    alloc.free(a, 64)
    assert alloc.alloc(64) is a and alloc.allocs == 1
    b = alloc.alloc(32)  # other size: a new allocation
    assert b is not a and alloc.allocs == 2
    alloc.free(b, 32)
    alloc.free_cache()
    assert alloc.frees == 1 and alloc.alloc(32) is not b


def test_lru_allocator_respects_nolru_and_options_key() -> None:
    alloc = CountingAllocator()
    a = alloc.alloc(16, BufferSpec(nolru=True))
    alloc.free(a, 16, BufferSpec(nolru=True))
    assert alloc.frees == 1
    z = alloc.alloc(16, BufferSpec(zero=True))
    alloc.free(z, 16, BufferSpec(zero=True))  # zeroed memory must not come back dirty
    assert alloc.frees == 2
    c = alloc.alloc(16)
    alloc.free(c, 16)
    assert alloc.alloc(16, BufferSpec(host=True)) is not c


def test_lru_allocator_frees_cache_when_out_of_memory() -> None:
    class Tight(CountingAllocator):
        def _alloc(self, size: int, options: BufferSpec) -> bytearray:
            if self.allocs - self.frees >= 1:
                raise MemoryError("full")
            return super()._alloc(size, options)

    alloc = Tight()
    alloc.free(alloc.alloc(8), 8)
    assert alloc.alloc(16) is not None and alloc.frees == 1


def test_allocator_rejects_bad_sizes_and_names_device() -> None:
    class Failing(Allocator[Compiled]):
        def _alloc(self, size: int, options: BufferSpec) -> None:
            raise MemoryError("no room")

    alloc = Failing(Device["NULL"])
    with pytest.raises(ValueError, match="must be positive"):
        alloc.alloc(0)
    with pytest.raises(MemoryError, match="allocation of 8 bytes failed on NULL"):
        alloc.alloc(8)


def test_zero_option_gives_zeroed_memory() -> None:
    dirty = Buffer("CPU", 8, dtypes.uint8).copyin(b"\xff" * 8)
    dirty.deallocate()  # back into the LRU cache, still 0xff
    zeroed = Buffer("CPU", 8, dtypes.uint8, options=BufferSpec(zero=True))
    assert bytes(zeroed.as_memoryview()) == bytes(8)
    zeroed.deallocate()
    assert Buffer("CPU", 8, dtypes.uint8, options=BufferSpec(zero=True)).as_memoryview() == bytes(8)


def test_cpu_buffers_are_recycled() -> None:
    buf = Buffer("CPU", 1000, dtypes.uint8).ensure_allocated()
    mem = buf._buf
    buf.deallocate()
    again = Buffer("CPU", 1000, dtypes.uint8).ensure_allocated()
    assert again._buf is mem


# ---- NULL ----


def test_null_device_allocates_and_runs_nothing() -> None:
    Buffer("NULL", 1 << 40, dtypes.float32).ensure_allocated()  # 4 TiB of nothing
    buf = Buffer("NULL", 4, dtypes.float32).ensure_allocated()
    buf.copyin(floats(1, 2, 3, 4))  # accepted, dropped
    with pytest.raises(RuntimeError, match="NULL device holds no data"):
        buf.as_memoryview()
    prg = Device["NULL"].runtime("k", Device["NULL"].compiler.compile_cached("void k(void) {}"))
    assert prg(buf._buf, vals=(3,), wait=True) == 0.0


# ---- DISK ----


def test_disk_write_then_read_file(tmp_path: Path) -> None:
    path = tmp_path / "x.bin"
    buf = Buffer(f"disk:{path}", 4, dtypes.float32)
    assert buf.device == f"DISK:{path}"
    buf.copyin(floats(1, 2, 3, 4))
    assert path.read_bytes() == floats(1, 2, 3, 4)
    assert unfloats(Buffer("CPU", 4, dtypes.float32).copy_from(buf).as_memoryview()) == [1, 2, 3, 4]


def test_disk_reads_existing_file_and_views(tmp_path: Path) -> None:
    path = tmp_path / "weights.bin"
    path.write_bytes(floats(*range(8)))
    whole = Buffer(f"DISK:{path}", 8, dtypes.float32)
    tail = whole.view(3, dtypes.float32, 20)
    out = bytearray(12)
    tail.copyout(memoryview(out))
    assert unfloats(memoryview(out)) == [5, 6, 7]
    assert path.stat().st_size == 32  # not grown


def test_disk_grows_file(tmp_path: Path) -> None:
    path = tmp_path / "small.bin"
    path.write_bytes(b"\x01\x02")
    buf = Buffer(f"DISK:{path}", 16, dtypes.uint8)
    assert bytes(buf.as_memoryview()) == b"\x01\x02" + bytes(14)
    assert path.stat().st_size == 16


def test_disk_read_only_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "ro.bin"
    path.write_bytes(floats(1, 2))
    real_open = os.open

    def open_without_write_permission(name: str, flags: int, *args: int) -> int:
        if flags & os.O_RDWR:
            raise PermissionError(13, "Permission denied")
        return real_open(name, flags, *args)

    monkeypatch.setattr(os, "open", open_without_write_permission)  # as for a 0444 file (root ignores modes)
    buf = Buffer(f"DISK:{path}", 2, dtypes.float32)
    assert unfloats(buf.as_memoryview()) == [1, 2]
    with pytest.raises(RuntimeError, match=r"ro\.bin' is read-only: cannot write"):
        buf.copyin(floats(3, 4))
    with pytest.raises(RuntimeError, match=r"read-only and holds 8 bytes, 16 needed"):
        Buffer(f"DISK:{path}", 4, dtypes.float32).ensure_allocated()


def test_disk_bad_paths(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="needs a file path"):
        Device["DISK:"]
    with pytest.raises(ValueError, match=f"{tmp_path}.*is a directory"):
        Device[f"DISK:{tmp_path}"]
    with pytest.raises(ValueError, match=r"no/such/dir.*does not exist"):
        Device[f"DISK:{tmp_path}/no/such/dir/x.bin"]
    with pytest.raises(RuntimeError, match="has no renderer"):
        _ = Device[f"DISK:{tmp_path}/ok.bin"].renderer


def test_large_cpu_buffers_get_huge_pages() -> None:
    """Buffers of >= HUGEPAGE_MIN_BYTES are private mappings advised MADV_HUGEPAGE (streaming speed, like numpy)."""
    import pathlib

    from tg.runtime.backends.cpu import HUGEPAGE_MIN_BYTES, alloc_host_memory

    thp = pathlib.Path("/sys/kernel/mm/transparent_hugepage/enabled")
    if not thp.exists() or "[never]" in thp.read_text():
        pytest.skip("no transparent huge pages on this system")
    size = 4 * HUGEPAGE_MIN_BYTES
    mem = alloc_host_memory(size)
    mem.mv[:] = b"\x01" * size  # touch every page
    assert mem.mv[size - 1] == 1 and mem.addr % 4096 == 0
    huge_kb = 0
    lines = pathlib.Path("/proc/self/smaps").read_text().splitlines()
    for i, line in enumerate(lines):
        start, _, end = line.split(" ", 1)[0].partition("-")
        if end and int(start, 16) <= mem.addr < int(end, 16):
            for field in lines[i + 1 : i + 30]:
                if field.startswith("AnonHugePages:"):
                    huge_kb = int(field.split()[1])
                    break
            break
    assert huge_kb > 0, "the buffer got no huge pages"
    small = alloc_host_memory(4096)
    assert small.mv.nbytes == 4096 and bytes(small.mv[:8]) == b"\x00" * 8  # zero-filled, plain pages
