"""The NULL device: allocates nothing and runs nothing, so scheduling and launch overhead can be measured alone."""

from __future__ import annotations

from typing import Any

from tg.runtime.backends.cpu import clang_renderer
from tg.runtime.device import Allocator, BufferSpec, Compiled, Compiler, Program, check_device_index


class NullAllocator(Allocator["NULLDevice"]):
    """Hands out no memory: copies in are dropped, copies out are refused (there is no data)."""

    def _alloc(self, size: int, options: BufferSpec) -> None:
        return None

    def _offset(self, buf: Any, size: int, offset: int) -> None:
        return None

    def _copyin(self, dest: Any, src: memoryview) -> None:
        pass

    def _copyout(self, dest: memoryview, src: Any) -> None:
        raise RuntimeError("the NULL device holds no data: copying out of a NULL buffer is not possible")


class NullProgram(Program):
    """Does nothing; reports zero run time."""

    def __call__(
        self,
        *bufs: Any,
        global_size: tuple[int, ...] | None = None,
        local_size: tuple[int, ...] | None = None,
        vals: tuple[int, ...] = (),
        wait: bool = False,
    ) -> float | None:
        return 0.0 if wait else None


class NULLDevice(Compiled):
    """Renders kernels like the CPU (so code generation runs) but never compiles or runs them."""

    def __init__(self, device: str = "NULL") -> None:
        check_device_index(device)
        super().__init__(device, NullAllocator(self), Compiler(), NullProgram, clang_renderer)
