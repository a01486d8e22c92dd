"""Grad-mode helpers for nn code, tolerant of a Tensor without autograd (the switch lives on tg.tensor)."""

from __future__ import annotations

import contextlib
from typing import Any


def no_grad() -> Any:
    """`tg.tensor.no_grad()` when autograd is available, else a context that does nothing."""
    import tg.tensor

    factory = getattr(tg.tensor, "no_grad", None)
    return factory() if factory is not None else contextlib.nullcontext()
