"""Small utilities every layer of tg needs: environment settings, scoped contexts, counters, timing, list helpers."""

from __future__ import annotations

import contextlib
import functools
import os
import pathlib
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, ClassVar, Generic, TypeVar, overload

from tg.ir.target import Target

T = TypeVar("T")
U = TypeVar("U")

OSX = sys.platform == "darwin"
WIN = sys.platform == "win32"


# ---- environment ------------------------------------------------------------------------------------------------


@functools.cache
def getenv(key: str, default: Any = 0) -> Any:
    """Read environment variable `key`, converted to the type of `default` (cached: the environment is read once)."""
    return read_env(key, default)


def read_env(key: str, default: Any = 0) -> Any:
    """Environment variable `key` now (not cached), converted to the type of `default`."""
    val = os.environ.get(key)
    if val is None:
        return default
    if isinstance(default, bool):
        return val.lower() not in ("", "0", "false", "no", "off")
    try:
        return type(default)(val)
    except ValueError as e:
        raise ValueError(f"environment variable {key}={val!r} is not a valid {type(default).__name__}") from e


class ContextVar:
    """A named setting read from the environment variable of the same name and changed in scope by `Context`.

    Example: `DEBUG = ContextVar("DEBUG", 0)`; `if DEBUG >= 2: ...`; `with Context(DEBUG=3): ...`.
    The environment is read at the first use of the value, not when the module defining the setting is imported:
    a program (or a pytest plugin) may import tg first and set `os.environ["SPEC"] = "1"` afterwards.
    """

    _cache: ClassVar[dict[str, ContextVar]] = {}
    value: Any  # set at the first read by __getattr__ (a plain attribute afterwards: no cost per use) or by Context
    key: str

    def __init__(self, key: str, default_value: Any) -> None:
        if key in ContextVar._cache:
            raise RuntimeError(f"ContextVar {key!r} is already defined; use ContextVar.get({key!r})")
        self.key, self.default = key, default_value
        ContextVar._cache[key] = self

    def __getattr__(self, name: str) -> Any:
        # only reached while `value` is unset: the first read takes the environment's value
        if name != "value":
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        self.value = getenv(self.key, self.default)
        return self.value

    @staticmethod
    def get(key: str) -> ContextVar:
        """Return the registered ContextVar named `key` (KeyError naming the known ones otherwise)."""
        try:
            return ContextVar._cache[key]
        except KeyError:
            raise KeyError(f"unknown ContextVar {key!r}, known: {sorted(ContextVar._cache)}") from None

    def __bool__(self) -> bool:
        return bool(self.value)

    def __index__(self) -> int:
        return int(self.value)

    def __int__(self) -> int:
        return int(self.value)

    def __ge__(self, x: Any) -> bool:
        return bool(self.value >= x)

    def __gt__(self, x: Any) -> bool:
        return bool(self.value > x)

    def __lt__(self, x: Any) -> bool:
        return bool(self.value < x)

    def __le__(self, x: Any) -> bool:
        return bool(self.value <= x)

    def __repr__(self) -> str:
        return f"ContextVar({self.key!r}, value={self.value!r})"

    def _snapshot(self) -> Any:
        """What `Context` saves on entry and gives back to `_restore` on exit."""
        return self.value

    def _restore(self, saved: Any) -> None:
        self.value = saved


_UNSET: Any = object()


class LiveContextVar(ContextVar):
    """A ContextVar read from the environment at every use, not once at import (unless a `Context` sets it): for
    settings that tests and tools change in `os.environ` while a process runs (paths, the compiler, search limits).

    Example: `CC = LiveContextVar("CC", "")`; `CC.value` is `$CC` now; `with Context(CC="gcc"): ...`.
    """

    def __init__(self, key: str, default_value: Any) -> None:
        super().__init__(key, default_value)
        self._override = _UNSET

    @property
    def value(self) -> Any:
        return read_env(self.key, self.default) if self._override is _UNSET else self._override

    @value.setter
    def value(self, v: Any) -> None:
        self._override = v

    def _snapshot(self) -> Any:
        return self._override

    def _restore(self, saved: Any) -> None:
        self._override = saved


class Context(contextlib.ContextDecorator):
    """Scoped, nestable override of ContextVars: `with Context(DEBUG=2, BEAM=0): ...` or `@Context(NOOPT=1)`.

    Unknown names raise KeyError. Values are restored on exit, also when an exception propagates.
    """

    def __init__(self, **kwargs: Any) -> None:
        for k in kwargs:
            ContextVar.get(k)  # validate names early
        self.kwargs = kwargs
        self._stack: list[dict[str, Any]] = []

    def __enter__(self) -> Context:
        self._stack.append({k: ContextVar.get(k)._snapshot() for k in self.kwargs})
        for k, v in self.kwargs.items():
            ContextVar.get(k).value = v
        return self

    def __exit__(self, *exc: object) -> None:
        for k, v in self._stack.pop().items():
            ContextVar.get(k)._restore(v)


DEBUG = ContextVar("DEBUG", 0)
BEAM = ContextVar("BEAM", 0)
NOOPT = ContextVar("NOOPT", 0)
JIT = ContextVar("JIT", 1)
CACHELEVEL = ContextVar("CACHELEVEL", 2)
# device string(s): [IFACE[:indices]+]DEVICE[:RENDERER[:ARCH]], ';'-separated (tg.ir.target); read with dev_targets()
DEV = ContextVar("DEV", "")
SPEC = ContextVar("SPEC", 0)
TRACK_MATCH_STATS = ContextVar("TRACK_MATCH_STATS", 0)
CAPTURE_PROCESS_REPLAY = ContextVar("CAPTURE_PROCESS_REPLAY", 0)
IGNORE_OOB = ContextVar("IGNORE_OOB", 1)
DEFAULT_FLOAT = ContextVar("DEFAULT_FLOAT", "float32")
DEFAULT_INT = ContextVar("DEFAULT_INT", "int32")
# multi-device allreduce: auto | naive | ring (auto: ring above the threshold, in elements, on more than 2 devices)
ALLREDUCE = ContextVar("ALLREDUCE", "auto")
RING_ALLREDUCE_THRESHOLD = ContextVar("RING_ALLREDUCE_THRESHOLD", 256_000)
# 1: math ops (EXP2, LOG2, SIN, SQRT, POW) native where the target has them (libm on CPU); 2: polynomial
# decompositions on every target (what GPUs without these ops run), to check them on CPU and PYTHON
TRANSCENDENTAL = ContextVar("TRANSCENDENTAL", 1)
# hardware command queues (tg.runtime.hcq, shared/specs/hcq.md): where submitter programs run (CPU: compiled C,
# PYTHON: interpreted over MMIO views, auto: CPU when every bound region is host memory), the host wait timeout
# without progress, the first-submit cap of a queue (doubling; 0 = none), executions of one linked program in flight,
# linked programs kept, and the timeline value above which an idle device rebases its timeline
HCQ_RUNTIME_DEV = ContextVar("HCQ_RUNTIME_DEV", "auto")
HCQDEV_WAIT_TIMEOUT_MS = ContextVar("HCQDEV_WAIT_TIMEOUT_MS", 30000)
HCQ_BATCH_SIZE = ContextVar("HCQ_BATCH_SIZE", 32)
HCQ_LINK_COPIES = ContextVar("HCQ_LINK_COPIES", 2)
HCQ_LINK_CACHE = ContextVar("HCQ_LINK_CACHE", 256)
HCQ_TIMELINE_WRAP = ContextVar("HCQ_TIMELINE_WRAP", 1 << 31)
# AMD: 1 = no SDMA copy queue (copies run as kernels on the compute queue)
AMD_DISABLE_SDMA = ContextVar("AMD_DISABLE_SDMA", 0)
# 1: HCQ devices record start/end timestamps of every command (tg.runtime.hcq.profile) and write a Chrome/Perfetto
# trace at exit (to PROFILE_PATH when set)
PROFILE = ContextVar("PROFILE", 0)
# AM, the user-space AMD driver (PCI+AMD, USB+AMD; specs/amd.md 5): 1 = full boot with a mode-1 reset even after a
# clean AM session; a power limit in watts (0: highest clocks); where firmware files are looked for first; 1 = download
# missing firmware from linux-firmware (pinned commit, sha256-checked); the mock AM GPU's VRAM in MiB
AM_RESET = ContextVar("AM_RESET", 0)
AM_POWER_LIMIT = ContextVar("AM_POWER_LIMIT", 0.0)
TG_AMD_FW_DIR = ContextVar("TG_AMD_FW_DIR", "")
TG_AMD_FW_FETCH = ContextVar("TG_AMD_FW_FETCH", 0)
TG_MOCKAM_VRAM_MB = ContextVar("TG_MOCKAM_VRAM_MB", 512)
# mock AMD GPUs (MOCKKFD, MOCKPCI, MOCKUSB): how many, 0 = retire dispatches without emulating them (submit-cost
# benchmarks), and an address the next dispatch of the first mock KFD GPU faults at (reported through KFD's events)
TG_MOCKGPU_COUNT = ContextVar("TG_MOCKGPU_COUNT", 2)
TG_MOCKGPU_EMU = ContextVar("TG_MOCKGPU_EMU", 1)
TG_MOCKGPU_FAULT_VA = ContextVar("TG_MOCKGPU_FAULT_VA", "")
# training mode (dropout, batchnorm statistics): `Tensor.train()`, `Context(TRAINING=1)` (tg.tensor.autograd)
TRAINING = ContextVar("TRAINING", 0)
# default of every optimizer's `fused=` (tg.tensor.nn.optim)
FUSE_OPTIM = ContextVar("FUSE_OPTIM", 0)
# 0: an eager optimizer step builds its update graph every step instead of replaying a captured update
OPTIM_REPLAY = ContextVar("OPTIM_REPLAY", 1)
# 0: every backward pass runs the gradient rules, also for a graph structure differentiated before (tg.tensor.gradcache)
GRAD_CACHE = ContextVar("GRAD_CACHE", 1)
# scheduler (tg.codegen.schedule): a kernel's buffer limit (0: the renderer's), no memory planning, the schedule cache
MAX_KERNEL_BUFFERS = ContextVar("MAX_KERNEL_BUFFERS", 0)
NO_MEMORY_PLANNER = ContextVar("NO_MEMORY_PLANNER", 0)
SCACHE = ContextVar("SCACHE", 1)
SCACHE_SIZE = ContextVar("SCACHE_SIZE", 256)

# settings read from the environment at each use (tests and tools change them while a process runs)
TG_CACHE_DIR = LiveContextVar("TG_CACHE_DIR", "")  # where caches live; see cache_dir()
CC = LiveContextVar("CC", "")  # the C compiler of the CPU backend ("" = clang, gcc or cc, whichever exists)
NVRTC = LiveContextVar("NVRTC", "")  # path of the NVRTC library for CUDA ("" = search)
CPU_COUNT = LiveContextVar("CPU_COUNT", 0)  # threads a CPU kernel may use (0 = the cores this process may use)
LRU = LiveContextVar("LRU", 1)  # 0: free buffers at once instead of caching them for reuse
BEAM_TIME = LiveContextVar("BEAM_TIME", 8.0)  # seconds of BEAM search per kernel, the final pick included
IGNORE_BEAM_CACHE = LiveContextVar("IGNORE_BEAM_CACHE", 0)  # 1: search again instead of replaying the cached winner
BEAM_PROGRESS = LiveContextVar("BEAM_PROGRESS", 0)  # 1: a progress bar while searching
FUNCTION_CACHE_SIZE = LiveContextVar("FUNCTION_CACHE_SIZE", 256)  # traces kept per @function
PROFILE_PATH = LiveContextVar("PROFILE_PATH", "")  # where PROFILE=1 writes its Chrome trace ("" = a temp file)
TG_EMU_DIFF = LiveContextVar("TG_EMU_DIFF", "")  # tests only: the AMD emulator's differential checks (tiny | full)


def dev_targets() -> tuple[Target, ...]:
    """The targets of the current ``DEV`` setting, parsed (TargetError naming the bad part otherwise); () when unset."""
    return _parse_dev(str(DEV.value))


@functools.lru_cache(maxsize=64)
def _parse_dev(value: str) -> tuple[Target, ...]:
    return Target.parse(value)


def cache_dir() -> pathlib.Path:
    """The directory for tg's on-disk caches: $TG_CACHE_DIR, else $XDG_CACHE_HOME/tg, else ~/.cache/tg (not created)."""
    if d := TG_CACHE_DIR.value:
        return pathlib.Path(d)
    default = os.path.join(os.path.expanduser("~"), "Library/Caches" if OSX else ".cache")
    base = os.environ.get("XDG_CACHE_HOME") or default
    return pathlib.Path(base) / "tg"


# ---- counters and timing ----------------------------------------------------------------------------------------


class GlobalCounters:
    """Process-wide counters updated by the runtime: ops, memory traffic, kernels run, time spent."""

    global_ops: ClassVar[int] = 0
    global_mem: ClassVar[int] = 0
    time_sum_s: ClassVar[float] = 0.0
    kernel_count: ClassVar[int] = 0
    mem_used: ClassVar[int] = 0

    @staticmethod
    def reset() -> None:
        """Zero the per-run counters (mem_used, the live allocation total, is kept)."""
        GlobalCounters.global_ops, GlobalCounters.global_mem, GlobalCounters.time_sum_s = 0, 0, 0.0
        GlobalCounters.kernel_count = 0


class Timing(contextlib.ContextDecorator):
    """Print how long a block took: `with Timing("load "): ...` prints `load  12.34 ms`."""

    def __init__(self, prefix: str = "", on_exit: Callable[[int], str] | None = None, enabled: bool = True) -> None:
        self.prefix, self.on_exit, self.enabled = prefix, on_exit, enabled
        self.st = 0
        self.et = 0

    def __enter__(self) -> Timing:
        self.st = time.perf_counter_ns()
        return self

    def __exit__(self, *exc: object) -> None:
        self.et = time.perf_counter_ns() - self.st
        if self.enabled:
            print(f"{self.prefix}{self.et * 1e-6:6.2f} ms" + (self.on_exit(self.et) if self.on_exit else ""))


# ---- list and number helpers ------------------------------------------------------------------------------------


def prod(x: Iterable[T]) -> T | int:
    """Product of the items of `x` (1 for an empty iterable); works with symbolic ints."""
    return functools.reduce(lambda a, b: a * b, x, 1)  # type: ignore[operator]


def flatten(x: Iterable[Iterable[T]]) -> list[T]:
    """Flatten one level of nesting."""
    return [item for sub in x for item in sub]


def dedup(x: Iterable[T]) -> list[T]:
    """Remove duplicates, keeping first-seen order."""
    return list(dict.fromkeys(x))


def argsort(x: Sequence[Any]) -> list[int]:
    """Indices that sort `x` ascending (stable)."""
    return sorted(range(len(x)), key=x.__getitem__)


def all_same(items: Sequence[Any]) -> bool:
    """True if every item equals the first (true for an empty sequence)."""
    return all(x == items[0] for x in items)


def all_int(t: Sequence[Any]) -> bool:
    """True if every item is a Python int (not a symbolic UOp)."""
    return all(isinstance(s, int) for s in t)


def round_up(num: int, amt: int) -> int:
    """Round `num` up to a multiple of `amt`."""
    if amt <= 0:
        raise ValueError(f"round_up: amt must be positive, got {amt}")
    return (num + amt - 1) // amt * amt


def ceildiv(num: Any, amt: Any) -> Any:
    """Ceiling division `-(-num // amt)`; works with symbolic ints too."""
    return -(num // -amt) if isinstance(num, int) and isinstance(amt, int) else (num + amt - 1) // amt


def partition(itr: Iterable[T], fxn: Callable[[T], bool]) -> tuple[list[T], list[T]]:
    """Split `itr` into (items where fxn is true, the rest)."""
    ret: tuple[list[T], list[T]] = ([], [])
    for s in itr:
        ret[0 if fxn(s) else 1].append(s)
    return ret


def unwrap(x: T | None) -> T:
    """Return `x`, raising ValueError if it is None."""
    if x is None:
        raise ValueError("unwrap: value is None")
    return x


def argfix(*x: Any) -> tuple[Any, ...]:
    """Accept both f(1, 2, 3) and f((1, 2, 3)) style arguments."""
    if x and x[0].__class__ in (tuple, list):
        if len(x) != 1:
            raise ValueError(f"bad argument: pass either a sequence or separate values, got {x}")
        return tuple(x[0])
    return x


def merge_dicts(ds: Iterable[dict[T, U]]) -> dict[T, U]:
    """Merge dicts, raising ValueError if a key appears with two different values."""
    out: dict[T, U] = {}
    for d in ds:
        for k, v in d.items():
            if k in out and out[k] != v:
                raise ValueError(f"merge_dicts: conflicting values for {k!r}: {out[k]!r} vs {v!r}")
            out[k] = v
    return out


def strip_parens(fst: str) -> str:
    """Remove one pair of enclosing parentheses if they wrap the whole string."""
    if not (fst.startswith("(") and fst.endswith(")")):
        return fst
    depth = 0
    for i, c in enumerate(fst):
        depth += {"(": 1, ")": -1}.get(c, 0)
        if depth == 0 and i != len(fst) - 1:
            return fst
    return fst[1:-1]


def to_function_name(s: str) -> str:
    """Make a valid C identifier out of a (possibly colored) name."""
    s = ansistrip(s)
    return "".join(c if c.isalnum() or c == "_" else f"{ord(c):02X}" for c in s)


_COLORS = ["black", "red", "green", "yellow", "blue", "magenta", "cyan", "white"]


def colored(st: str, color: str | None, background: bool = False) -> str:
    """Wrap `st` in ANSI color codes (`color` one of black red green yellow blue magenta cyan white, UPPER = bright)."""
    if color is None:
        return st
    if color.lower() not in _COLORS:
        raise ValueError(f"unknown color {color!r}, known: {_COLORS}")
    code = 10 * background + 60 * (color.upper() == color) + 30 + _COLORS.index(color.lower())
    return f"\u001b[{code}m{st}\u001b[0m"


def ansistrip(s: str) -> str:
    """Remove ANSI escape sequences."""
    import re

    return re.sub(r"\x1b\[(K|.*?m)", "", s)


def ansilen(s: str) -> int:
    """Printed length of `s` ignoring ANSI codes."""
    return len(ansistrip(s))


def get_single_element(x: Sequence[T]) -> T:
    """Return the only element of `x`, raising ValueError otherwise."""
    if len(x) != 1:
        raise ValueError(f"expected exactly one element, got {len(x)}: {x!r}")
    return x[0]


def is_pow2(x: int) -> bool:
    """True for 1, 2, 4, 8, ..."""
    return x > 0 and (x & (x - 1)) == 0


class cached_property(Generic[T]):
    """A lock-free functools.cached_property: computes once, stores in the instance __dict__ (which then wins)."""

    def __init__(self, fxn: Callable[[Any], T]) -> None:
        self.fxn = fxn
        self.name = fxn.__name__
        self.__doc__ = fxn.__doc__

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, obj: None, owner: type | None = None) -> cached_property[T]: ...
    @overload
    def __get__(self, obj: object, owner: type | None = None) -> T: ...
    def __get__(self, obj: object | None, owner: type | None = None) -> T | cached_property[T]:
        if obj is None:
            return self
        val = obj.__dict__[self.name] = self.fxn(obj)
        return val
