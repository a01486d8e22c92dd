"""tg.runtime: runtime: devices, buffers, allocators, compilers, backends, execution engine, JIT, BEAM and HCQ.

Importing this package does no work: devices are opened, and compilers looked up, on first use.
"""

from tg.runtime.__about__ import __version__
from tg.runtime.device import (
    Allocator,
    Buffer,
    BufferSpec,
    Compiled,
    CompileError,
    Compiler,
    Device,
    DeviceUnavailable,
    LRUAllocator,
    Program,
)
from tg.runtime.engine import CompiledRunner, ExecItem, Runner, buffer_for, run_linear, run_schedule

__all__ = [
    "Allocator",
    "Buffer",
    "BufferSpec",
    "CompileError",
    "Compiled",
    "CompiledRunner",
    "Compiler",
    "Device",
    "DeviceUnavailable",
    "ExecItem",
    "LRUAllocator",
    "Program",
    "Runner",
    "__version__",
    "buffer_for",
    "run_linear",
    "run_schedule",
]
