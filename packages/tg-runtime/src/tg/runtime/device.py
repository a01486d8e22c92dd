"""Devices, buffers, allocators, compilers and programs: the base classes every backend builds on.

A backend lives in ``tg.runtime.backends.<name>`` (lower-case) and defines a ``<Name>Device`` class (matched
case-insensitively, e.g. ``CPUDevice`` in ``backends/cpu.py``) deriving from :class:`Compiled`. ``Device[name]``
imports the module on first use and opens the device with its :class:`~tg.ir.target.Target`: the first target of
``DEV`` naming that device (``DEV=CPU:CLANG:x86-64-v3`` gives every ``CPU`` instance the C renderer for an AVX2
target), else the plain instance name. The device class says which interfaces, renderers and archs it accepts
(:meth:`Compiled.for_target`); anything else is refused before anything is opened, with a ``TargetError`` naming
the part that is wrong and the choices. One device object is kept per (instance name, target).
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import os
import tempfile
import warnings
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

from tg.ir.dtype import DType
from tg.ir.helpers import CACHELEVEL, DEBUG, DEV, LRU, GlobalCounters, cache_dir, dev_targets
from tg.ir.target import Target, TargetError

if TYPE_CHECKING:
    from tg.codegen.render.renderer import Renderer

# The order in which Device.DEFAULT tries backends when DEV is not set: best first.
DEFAULT_ORDER = ("AMD", "CUDA", "CL", "CPU", "PYTHON")  # AMD: KFD GPUs only (it opens only where one is found)
# Backends that are never picked as a default (they do not compute, or need a path).
NOT_DEFAULT = ("NULL", "DISK")

# **************** Device registry ****************


def _backend_dir() -> Path:
    return Path(__file__).resolve().parent / "backends"


class _DeviceRegistry:
    """``Device[name]`` opens (once) and returns the device object for a device name."""

    def __init__(self) -> None:
        self._opened: dict[Target, Compiled] = {}

    @functools.cached_property
    def _backends(self) -> tuple[str, ...]:
        # listing the folder imports nothing: importing tg.runtime must stay free of work
        names = (p.stem for p in _backend_dir().glob("*.py"))
        return tuple(sorted(n.upper() for n in names if not n.startswith("_") and n.isalnum()))

    @property
    def backends(self) -> tuple[str, ...]:
        """Names of every backend this installation knows (whether or not it can be opened here)."""
        return self._backends

    def canonicalize(self, device: str | None) -> str:
        """The canonical form of a device name: upper-case backend, ``:0`` dropped, paths kept verbatim.

        ``cpu`` -> ``CPU``, ``cpu:0`` -> ``CPU``, ``cpu:1`` -> ``CPU:1``, ``disk:/tmp/x`` -> ``DISK:/tmp/x``.
        ``None`` means ``Device.DEFAULT``.
        """
        if device is None:
            return self.DEFAULT
        if not isinstance(device, str):
            raise TypeError(f"device name must be a str, got {type(device).__name__}: {device!r}")
        return _canonicalize(device)

    def __getitem__(self, name: str) -> Compiled:
        target = self.target(name)
        if (dev := self._opened.get(target)) is not None:
            return dev
        # backend classes take (name, target); Compiled's own constructor is the one they call with their parts
        opener: Callable[[str, Target], Compiled] = self._device_class(target.device).for_target(target)
        dev = opener(target.name, target)
        if DEBUG.value >= 1:
            print(f"opened device {target.name} ({target}) from pid:{os.getpid()}")
        self._opened[target] = dev
        return dev

    def target(self, name: str | None) -> Target:
        """The target ``Device[name]`` opens: the first ``DEV`` target of that device with this instance's index
        (``DEV=CPU:CLANG:x86-64-v2`` gives ``CPU:1`` the target ``CPU:1:CLANG:x86-64-v2``), else the plain name."""
        return _target_of(self.canonicalize(name), str(DEV.value))

    def _device_class(self, backend: str) -> type[Compiled]:
        if not backend or backend not in self.backends:
            raise ValueError(f"unknown device {backend!r}; available devices: {', '.join(self.backends)}")
        module = importlib.import_module(f"tg.runtime.backends.{backend.lower()}")
        for attr, value in vars(module).items():
            if attr.lower() == f"{backend.lower()}device" and isinstance(value, type) and issubclass(value, Compiled):
                return value
        raise RuntimeError(f"backend module tg.runtime.backends.{backend.lower()} defines no {backend}Device class")

    @property
    def opened(self) -> tuple[str, ...]:
        """Canonical names of the devices opened so far in this process (each once, whatever its targets)."""
        return tuple(dict.fromkeys(t.name for t in self._opened))

    def get_available_devices(self) -> Iterator[str]:
        """Yield, best first, the names of the default-capable devices that open on this machine."""
        for name in [*DEFAULT_ORDER, *(b for b in self.backends if b not in DEFAULT_ORDER)]:
            if name in NOT_DEFAULT or name not in self.backends:
                continue
            try:
                dev = self[name]
            except (DeviceUnavailable, ImportError):
                continue
            if dev.default_capable:  # e.g. OpenCL on the CPU (PoCL) opens but is never the default
                yield dev.device

    @property
    def DEFAULT(self) -> str:
        """The default device: ``DEV`` (environment or ``Context(DEV=...)``) if set, else the best that opens here."""
        if DEV.value and (targets := dev_targets()):
            return targets[0].name
        if self._default is None:
            self._default = next(self.get_available_devices(), None)
            if self._default is None:
                raise RuntimeError(f"no usable device; known backends: {', '.join(self.backends)}")
            if self._default == "PYTHON" and "CPU" in self.backends:
                self._warn_cpu_unavailable()
        return self._default

    def _warn_cpu_unavailable(self) -> None:
        """Say why the default fell back to the (slow) PYTHON interpreter, e.g. how to install a C compiler."""
        try:
            self["CPU"]
        except (DeviceUnavailable, ImportError) as e:
            warnings.warn(
                f"the default device is PYTHON (a slow reference interpreter) because CPU is unavailable: {e}",
                RuntimeWarning,
                stacklevel=3,
            )

    _default: str | None = None

    @property
    def default(self) -> Compiled:
        """The device object of ``DEFAULT``."""
        return self[self.DEFAULT]


@functools.lru_cache(maxsize=1024)
def _canonicalize(device: str) -> str:
    backend, sep, rest = device.partition(":")
    if not backend:
        raise ValueError(f"device name {device!r} has no backend name before ':'")
    backend = backend.upper()
    if sep and rest == "0":
        return backend
    return backend + sep + rest


@functools.lru_cache(maxsize=1024)
def _target_of(canonical: str, dev_setting: str) -> Target:
    backend, _, rest = canonical.partition(":")
    if backend == "DISK":
        return Target("DISK", path=rest)
    if rest and not rest.isdigit():
        raise ValueError(
            f"{backend} device index must be a non-negative integer, got {canonical!r} (e.g. {backend}:1); "
            f"a renderer or arch is chosen in the device string, e.g. DEV={canonical}"
        )
    index = int(rest) if rest else None
    for target in Target.parse(dev_setting):
        if target.device == backend:
            return target if target.index == index else replace(target, index=index)
    return Target(backend, index=index)


Device = _DeviceRegistry()


class DeviceUnavailable(RuntimeError):
    """A backend exists but cannot be used on this machine; the message says what is missing."""


# **************** Buffer ****************


@dataclass(frozen=True)
class BufferSpec:
    """Allocation options passed to an allocator (hashable, part of the LRU cache key)."""

    nolru: bool = False  # never keep this buffer in the LRU cache after free
    zero: bool = False  # zero-filled memory: never served from (nor returned to) the LRU cache
    host: bool = False  # memory the host can address directly


class Buffer:
    """Memory for ``size`` elements of ``dtype`` on a device, allocated lazily on first use.

    A view (``buf.view(size, dtype, byte_offset)``) shares its base's allocation; it allocates the base when
    it is allocated itself. ``copyin``/``copyout`` move bytes from/to host memoryviews; no numpy is needed.
    New memory may be recycled from the allocator's cache and hold old data; pass ``options=BufferSpec(zero=True)``
    for zero-filled memory.
    """

    def __init__(
        self,
        device: str,
        size: int,
        dtype: DType,
        opaque: Any = None,
        options: BufferSpec | None = None,
        initial_value: bytes | None = None,
        base: Buffer | None = None,
        offset: int = 0,
        preallocate: bool = False,
    ) -> None:
        if not isinstance(dtype, DType):
            raise TypeError(f"Buffer dtype must be a DType, got {type(dtype).__name__}: {dtype!r}")
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise ValueError(f"Buffer size must be a non-negative int, got {size!r}")
        self.device, self.size, self.dtype, self.options = Device.canonicalize(device), size, dtype, options
        self.offset = offset
        self._opaque: Any = None
        self._allocated = False
        self.allocator: Allocator | None = None
        if base is None:
            if offset != 0:
                raise ValueError(f"only views have an offset; a base buffer got offset {offset}")
            self._base: Buffer | None = None
            if opaque is not None:
                self.allocate(opaque)
            if initial_value is not None:
                self.ensure_allocated().copyin(memoryview(initial_value))
        else:
            if base._base is not None:
                raise ValueError("a view's base must be a base buffer, not another view")
            if base.device != self.device:
                raise ValueError(f"a view must be on its base's device: {self.device} != {base.device}")
            if offset < 0 or offset + self.nbytes > base.nbytes:
                raise ValueError(f"view of {self.nbytes} bytes at offset {offset} exceeds its {base.nbytes}-byte base")
            self._base = base
        if preallocate:
            self.ensure_allocated()

    @property
    def base(self) -> Buffer:
        """The buffer owning the allocation (itself unless this is a view)."""
        return self._base if self._base is not None else self

    @property
    def nbytes(self) -> int:
        """Size in bytes."""
        return self.size * self.dtype.itemsize

    @property
    def _buf(self) -> Any:
        """The backend's handle for this buffer (allocating it first if needed)."""
        if not self._allocated:
            self.allocate()
        return self._opaque

    def is_allocated(self) -> bool:
        """Whether this buffer (or, for a view, this view) has device memory."""
        return self._allocated

    def ensure_allocated(self) -> Buffer:
        """Allocate if not allocated yet; returns self."""
        if not self._allocated:
            self.allocate()
        return self

    def allocate(self, opaque: Any = None) -> Buffer:
        """Get device memory (or adopt ``opaque``, an existing backend handle). Views allocate their base."""
        if self._allocated:
            raise RuntimeError(f"{self!r} is already allocated")
        self.allocator = Device[self.device].allocator
        if self._base is not None:
            self._base.ensure_allocated()
            self._opaque = self.allocator._offset(self._base._opaque, self.nbytes, self.offset)
        else:
            # an empty buffer still gets a (1-byte) allocation so that kernels receive a valid pointer
            self._opaque = opaque if opaque is not None else self.allocator.alloc(max(self.nbytes, 1), self.options)
            if not self.device.startswith("DISK"):
                GlobalCounters.mem_used += self.nbytes
        self._allocated = True
        return self

    def deallocate(self) -> None:
        """Return the memory to the allocator (a view only drops its handle)."""
        if not self._allocated:
            raise RuntimeError(f"{self!r} is not allocated")
        if self._base is None:
            if not self.device.startswith("DISK"):
                GlobalCounters.mem_used -= self.nbytes
            assert self.allocator is not None
            self.allocator.free(self._opaque, max(self.nbytes, 1), self.options)
        self._opaque, self._allocated = None, False

    def __del__(self) -> None:
        try:
            if self._allocated and self._base is None:
                self.deallocate()
        except Exception:  # interpreter shutdown: module globals may already be gone
            pass

    def view(self, size: int, dtype: DType, offset: int) -> Buffer:
        """A buffer of ``size`` elements of ``dtype`` starting ``offset`` bytes into this one, sharing memory."""
        if not 0 <= offset < max(self.nbytes, 1):
            raise ValueError(f"view offset {offset} must be in [0, {self.nbytes}) for {self!r}")
        return Buffer(self.device, size, dtype, base=self.base, offset=self.offset + offset)

    def copyin(self, src: memoryview | bytes | bytearray) -> Buffer:
        """Copy host bytes (exactly ``nbytes`` of them) into this buffer."""
        mv = _flat(src)
        if mv.nbytes != self.nbytes:
            raise ValueError(f"copyin size mismatch: {self!r} holds {self.nbytes} bytes, got {mv.nbytes}")
        if self.nbytes:
            self.ensure_allocated()
            assert self.allocator is not None
            self.allocator._copyin(self._opaque, mv)
        return self

    def copyout(self, dest: memoryview | bytearray) -> memoryview:
        """Copy this buffer's bytes into ``dest`` (a writable host buffer of exactly ``nbytes``); returns it."""
        mv = _flat(dest)
        if mv.readonly:
            raise ValueError("copyout destination must be writable")
        if mv.nbytes != self.nbytes:
            raise ValueError(f"copyout size mismatch: {self!r} holds {self.nbytes} bytes, destination has {mv.nbytes}")
        if self.nbytes:
            self.ensure_allocated()
            assert self.allocator is not None
            self.allocator._copyout(mv, self._opaque)
        return mv

    def as_memoryview(self, allow_zero_copy: bool = False) -> memoryview:
        """The buffer's bytes as a flat byte memoryview: a copy, or the memory itself if allowed and possible."""
        if allow_zero_copy and self.nbytes:
            self.ensure_allocated()
            assert self.allocator is not None
            if (zero_copy := self.allocator._as_buffer(self._opaque)) is not None:
                return zero_copy
        return self.copyout(memoryview(bytearray(self.nbytes)))

    def copy_from(self, src: Buffer) -> Buffer:
        """Copy another buffer's contents (same byte size, any device) into this one, through host memory."""
        if src.nbytes != self.nbytes:
            raise ValueError(f"copy size mismatch: {self.nbytes} bytes <- {src.nbytes} bytes")
        return self.copyin(src.as_memoryview(allow_zero_copy=True))

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickles the contents: a load allocates its own memory (a view pickles its base and offset)."""
        if self._base is not None:
            return _load_buffer_view, (self._base, self.size, self.dtype, self.offset)
        data = bytes(self.as_memoryview()) if self._allocated else None
        return _load_buffer, (self.device, self.size, self.dtype, self.options, data)

    def __repr__(self) -> str:
        view = f" offset:{self.offset}" if self._base is not None else ""
        return f"<buf real:{self._allocated} device:{self.device} size:{self.size} dtype:{self.dtype}{view}>"


def _load_buffer(device: str, size: int, dtype: DType, options: BufferSpec | None, data: bytes | None) -> Buffer:
    buf = Buffer(device, size, dtype, options=options)
    if data is not None:
        buf.ensure_allocated().copyin(data)
    return buf


def _load_buffer_view(base: Buffer, size: int, dtype: DType, offset: int) -> Buffer:
    return Buffer(base.device, size, dtype, base=base, offset=offset)


def _flat(data: memoryview | bytes | bytearray) -> memoryview:
    mv = data if isinstance(data, memoryview) else memoryview(data)
    if not mv.c_contiguous:
        raise ValueError("host buffers must be C-contiguous")
    return mv.cast("B") if (mv.format != "B" or mv.ndim != 1) else mv


# **************** Allocators ****************

DeviceT = TypeVar("DeviceT", bound="Compiled")


class Allocator(Generic[DeviceT]):
    """Allocates device memory and moves bytes between host and device.

    Backends implement ``_alloc``/``_free``/``_copyin``/``_copyout``/``_offset`` (and optionally ``_as_buffer``
    for zero-copy host access and ``_transfer`` for direct device-to-device copies).
    """

    def __init__(self, dev: DeviceT) -> None:
        self.dev: DeviceT = dev
        self.default_buffer_spec = BufferSpec()

    def alloc(self, size: int, options: BufferSpec | None = None) -> Any:
        """Allocate ``size`` bytes; raises MemoryError naming the device when the backend runs out."""
        if size <= 0:
            raise ValueError(f"allocation size must be positive, got {size}")
        try:
            return self._alloc(size, options if options is not None else self.default_buffer_spec)
        except (MemoryError, OSError) as e:
            raise MemoryError(f"allocation of {size} bytes failed on {self.dev.device}: {e}") from e

    def free(self, opaque: Any, size: int, options: BufferSpec | None = None) -> None:
        """Release memory from ``alloc``."""
        self._free(opaque, options if options is not None else self.default_buffer_spec)

    # implemented by backends; _alloc must return zero-filled memory when options.zero is set
    def _alloc(self, size: int, options: BufferSpec) -> Any:
        raise NotImplementedError(f"{type(self).__name__} cannot allocate")

    def _free(self, opaque: Any, options: BufferSpec) -> None:
        """Default: nothing to do (garbage collection frees Python-owned memory)."""

    def _copyin(self, dest: Any, src: memoryview) -> None:
        raise NotImplementedError(f"{type(self).__name__} has no copyin")

    def _copyout(self, dest: memoryview, src: Any) -> None:
        raise NotImplementedError(f"{type(self).__name__} has no copyout")

    def _offset(self, buf: Any, size: int, offset: int) -> Any:
        raise NotImplementedError(f"{type(self).__name__} does not support buffer views")

    def _as_buffer(self, src: Any) -> memoryview | None:
        """A zero-copy host memoryview of a buffer, or None where the memory is not host-addressable."""
        return None


class LRUAllocator(Allocator[DeviceT]):
    """An allocator that keeps freed buffers and hands them out again for allocations of the same size.

    Freed memory goes to a cache keyed by (size, options); when an allocation fails, the cache is emptied
    and the allocation retried. ``LRU=0`` in the environment disables the cache.
    """

    def __init__(self, dev: DeviceT) -> None:
        super().__init__(dev)
        self.cache: dict[tuple[int, BufferSpec | None], list[Any]] = defaultdict(list)

    def alloc(self, size: int, options: BufferSpec | None = None) -> Any:
        """Reuse a cached buffer of this size and options if there is one, else allocate."""
        if cached := self.cache.get((size, options)):
            return cached.pop()
        try:
            return super().alloc(size, options)
        except MemoryError:
            self.free_cache()
            return super().alloc(size, options)

    def free(self, opaque: Any, size: int, options: BufferSpec | None = None) -> None:
        """Keep the buffer for reuse (unless LRU=0 or the options forbid it)."""
        if LRU.value and (options is None or not (options.nolru or options.zero)):
            self.cache[(size, options)].append(opaque)
        else:
            super().free(opaque, size, options)

    def free_cache(self) -> None:
        """Really free every cached buffer."""
        for (size, options), opaques in self.cache.items():
            for opaque in opaques:
                super().free(opaque, size, options)
            opaques.clear()


# **************** Compilers ****************


class CompileError(RuntimeError):
    """Source failed to compile; the message carries the compiler's output."""


class Compiler:
    """Turns source into a binary; ``compile_cached`` keeps results in a persistent on-disk cache.

    ``cachekey`` names the compiler and everything that changes its output (compiler identity, flags); None
    disables the disk cache. ``CACHELEVEL=0`` disables it too.
    """

    def __init__(self, cachekey: str | None = None) -> None:
        self._cachekey = cachekey

    @property
    def cachekey(self) -> str | None:
        """What identifies this compiler's output in the disk cache (None: no caching)."""
        return self._cachekey

    def compile(self, src: str) -> bytes:
        """Compile ``src``; the default compiler passes the source through as bytes."""
        return src.encode()

    def compile_cached(self, src: str) -> bytes:
        """``compile`` with the on-disk cache in front of it."""
        key = self.cachekey if CACHELEVEL.value >= 1 else None
        if key is None or (lib := diskcache_get(key, src)) is None:
            lib = self.compile(src)
            if key is not None:
                diskcache_put(key, src, lib)
        return lib


def _cache_path(cachekey: str, src: str) -> Path:
    digest = hashlib.sha256(cachekey.encode() + b"\0" + src.encode()).hexdigest()
    return Path(cache_dir()) / "compile" / digest[:2] / digest


def diskcache_get(cachekey: str, src: str) -> bytes | None:
    """The cached binary for (cachekey, src), or None (always None when CACHELEVEL < 1)."""
    if CACHELEVEL.value < 1:
        return None
    try:
        return _cache_path(cachekey, src).read_bytes()
    except OSError:
        return None


def diskcache_put(cachekey: str, src: str, lib: bytes) -> None:
    """Store a binary in the compile cache (atomically; a failure to write only costs a recompile later)."""
    if CACHELEVEL.value < 1:
        return
    path = _cache_path(cachekey, src)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp")
        with os.fdopen(fd, "wb") as f:
            f.write(lib)
        os.replace(tmp, path)
    except OSError as e:
        if DEBUG.value >= 1:
            print(f"compile cache: could not write {path}: {e}")


# **************** Programs and devices ****************


Dims = tuple[int, ...] | None  # a launch grid: groups (global size) or the work-group (local size); None: (1,)


class Program:
    """A loaded kernel. Backends subclass it and implement ``launch``; calling it runs it once."""

    def __init__(self, name: str, lib: bytes) -> None:
        self.name, self.lib = name, lib

    def __call__(
        self,
        *bufs: Any,
        global_size: Dims = None,
        local_size: Dims = None,
        vals: tuple[int, ...] = (),
        wait: bool = False,
        threads: int = 1,
    ) -> float | None:
        """Run the kernel once on ``bufs`` (the backend's buffer handles) with the variable values ``vals``: over
        ``global_size`` groups of ``local_size`` (GPUs), or on ``threads`` thread ids (a CPU-like kernel with a THREAD
        axis; others take 1). Returns the seconds it took when ``wait``, else None."""
        return self.launch(bufs, global_size, local_size, vals, wait, threads)

    def launch(self, bufs: tuple, gs: Dims, ls: Dims, vals: tuple[int, ...], wait: bool, threads: int) -> float | None:
        """The backend's launch (see ``__call__``: the same arguments, positionally)."""
        raise NotImplementedError(f"{type(self).__name__} cannot run")


RendererSource = Callable[[], "Renderer"]


class Compiled:
    """A device that runs compiled kernels: an allocator, a compiler, a program class and a renderer.

    ``renderer`` is a Renderer instance or a zero-argument factory (such as the Renderer class) that is called on
    first use, so opening a device never imports code generation it does not need. ``target`` is the parsed device
    string the device was opened with (``Device[...]`` passes it; default: the plain instance name).

    How a backend receives its target: ``Device[name]`` calls ``<Name>Device.for_target(target)``, which picks the
    class (``interfaces``), checks the renderer (``renderers``) and the arch (``check_arch``), then constructs
    ``cls(name, target)``; the constructor builds the compiler and renderer that ``target.renderer``/``target.arch``
    name (None: the backend's default).
    """

    # IFACE+DEVICE: interface name -> "module:Class" of the device class that opens it (imported on first use);
    # e.g. {"HCQ": "tg.runtime.hcq.cpu:HCQCPUDevice"}. A target without an interface opens this class.
    interfaces: ClassVar[dict[str, str]] = {}
    # DEVICE:RENDERER: the renderer names this class accepts, its default first (empty: the slot must stay empty)
    renderers: ClassVar[tuple[str, ...]] = ()
    # driven through hardware command queues (tg.runtime.hcq.HCQDevice): run_linear hands its schedules to hcq.run
    is_hcq: ClassVar[bool] = False

    @classmethod
    def for_target(cls, target: Target) -> type[Compiled]:
        """The class that opens ``target``: this one, or the one its interface names; the renderer and arch are
        checked against that class's choices (TargetError naming the part that is wrong and the choices)."""
        chosen: type[Compiled] = cls
        if target.iface is not None:
            if target.iface not in cls.interfaces:
                choices = ", ".join(cls.interfaces) if cls.interfaces else "none (no IFACE+ prefix)"
                raise TargetError(
                    f"device string {str(target)!r}: {target.device} has no interface {target.iface!r}; "
                    f"available: {choices}"
                )
            chosen = _import_class(cls.interfaces[target.iface])
        if target.renderer is not None and target.renderer not in chosen.renderers:
            choices = ", ".join(chosen.renderers) if chosen.renderers else "none (it renders no kernels)"
            via = f"{target.iface}+{target.device}" if target.iface else target.device
            raise TargetError(
                f"device string {str(target)!r}: {via} has no renderer {target.renderer!r}; available: {choices}"
            )
        chosen.check_arch(target)
        return chosen

    @classmethod
    def check_arch(cls, target: Target) -> None:
        """Refuse an arch this class cannot target (TargetError naming the choices). Default: no arch slot."""
        if target.arch is not None:
            raise TargetError(
                f"device string {str(target)!r}: {target.device} takes no arch (got {target.arch!r}); "
                f"use {target.device}" + (f":{target.renderer}" if target.renderer else "")
            )

    def __init__(
        self,
        device: str,
        allocator: Allocator[Any],
        compiler: Compiler | None,
        runtime: Callable[[str, bytes], Program] | None,
        renderer: Renderer | RendererSource | None = None,
        target: Target | None = None,
    ) -> None:
        self.device, self.allocator = device, allocator
        self.target: Target = target if target is not None else instance_target(device)
        self.compiler: Compiler = compiler if compiler is not None else Compiler()
        self.runtime_t = runtime
        self._renderer_source = renderer
        self._renderer: Renderer | None = None
        index = device.split(":", 1)[1] if ":" in device else "0"
        self.device_id = int(index) if index.isdigit() else 0

    @property
    def renderer(self) -> Renderer:
        """The renderer that generates source for this device."""
        if self._renderer is None:
            source: Any = self._renderer_source
            if source is None:
                raise RuntimeError(
                    f"device {self.device} has no renderer: it does not run kernels; "
                    "copy the data to a compute device first, e.g. t.to('CPU')"
                )
            self._renderer = source() if isinstance(source, type) or _is_factory(source) else source
        assert self._renderer is not None
        return self._renderer

    def runtime(self, name: str, lib: bytes) -> Program:
        """Load a compiled binary as a callable Program."""
        if self.runtime_t is None:
            raise RuntimeError(f"device {self.device} cannot run programs")
        return self.runtime_t(name, lib)

    @property
    def default_capable(self) -> bool:
        """Whether Device.DEFAULT may pick this device when DEV is not set (backends may say no, e.g. PoCL)."""
        return True

    def synchronize(self) -> None:
        """Wait until all work submitted to the device is done (synchronous devices need not override it)."""

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.device}>"


def instance_target(device: str) -> Target:
    """The plain target of an instance name, whatever ``DEV`` says: ``CPU:1`` -> ``Target("CPU", index=1)``."""
    return _target_of(_canonicalize(device), "")


def _import_class(path: str) -> type[Compiled]:
    """``"package.module:Class"`` -> the class (a device class named by an ``interfaces`` entry)."""
    module, _, name = path.partition(":")
    value = getattr(importlib.import_module(module), name, None)
    if not (isinstance(value, type) and issubclass(value, Compiled)):
        raise RuntimeError(f"{path!r} does not name a device class (a subclass of Compiled)")
    return value


def check_device_index(device: str) -> int:
    """The index of ``NAME[:index]`` (0 when absent); raises ValueError for anything after ':' but digits."""
    backend, _, index = device.partition(":")
    if index and not index.isdigit():
        raise ValueError(f"{backend} device index must be a non-negative integer, got {device!r} (e.g. {backend}:1)")
    return int(index) if index else 0


def _is_factory(source: object) -> bool:
    return callable(source) and (isinstance(source, functools.partial) or type(source).__name__ == "function")
