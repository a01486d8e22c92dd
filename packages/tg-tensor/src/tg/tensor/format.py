"""`repr(t)` / `print(t)` like PyTorch: the values (numpy's summarisation above 1000 elements), then dtype, device
and requires_grad when they are not the defaults. Printing realizes, except for DISK tensors and while a TinyJit
is capturing, which print a placeholder instead of running work.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tg.ir import dtypes

if TYPE_CHECKING:
    from tg.tensor.tensor import Tensor


def _lazy_text(t: Tensor, why: str) -> str:
    return f"<Tensor {why} shape={t.shape} dtype={t.dtype.name} device={t.uop.device}>"


def tensor_repr(t: Tensor) -> str:
    """The PyTorch-style text of `t` (realizes it)."""
    import numpy as np

    from tg.runtime import engine
    from tg.runtime.device import Device

    device = t.uop.device
    if not isinstance(device, str):
        return _lazy_text(t, "sharded")
    if device.startswith("DISK"):
        return _lazy_text(t, "on disk")
    if getattr(engine, "capturing", None):
        return _lazy_text(t, "lazy (JIT capture)")
    values = t.float().numpy() if t.dtype is dtypes.bfloat16 or t.dtype in dtypes.fp8s else t.numpy()
    body = np.array2string(values, separator=", ", prefix="tensor(", threshold=1000, edgeitems=3, suppress_small=True)
    extras = []
    if device != Device.DEFAULT:
        extras.append(f"device='{device}'")
    if t.dtype not in (dtypes.default_float, dtypes.default_int, dtypes.bool) or t.numel() == 0:
        extras.append(f"dtype={repr(t.dtype).removeprefix('dtypes.')}")
    if t.requires_grad:
        extras.append("requires_grad=True")
    return "tensor(" + body + "".join(", " + e for e in extras) + ")"
