"""Model state: walking a model for its tensors, loading state dicts into it, and the weight-file formats.

`get_state_dict(model)` names every tensor by its attribute path (`layers.0.weight`), the same keys torch uses,
so checkpoints from torch load into the same structure. `load_state_dict` checks keys and shapes, then streams the
values in one tensor at a time (peak memory: the model plus one tensor, never a second copy of the file).
"""

from __future__ import annotations

from typing import Any

from tg.tensor.nn.formats.errors import FormatError
from tg.tensor.nn.formats.gguf import GGUFTensorInfo, gguf_index, gguf_load
from tg.tensor.nn.formats.safetensors import safe_load, safe_load_metadata, safe_metadata, safe_save
from tg.tensor.nn.formats.torch import torch_load
from tg.tensor.nn.module import Module, StateDictError, load_into
from tg.tensor.tensor import Tensor

__all__ = [
    "FormatError",
    "GGUFTensorInfo",
    "StateDictError",
    "get_parameters",
    "get_state_dict",
    "gguf_index",
    "gguf_load",
    "load_state_dict",
    "safe_load",
    "safe_load_metadata",
    "safe_metadata",
    "safe_save",
    "torch_load",
]


def get_state_dict(obj: Any, prefix: str = "", tensor_type: type = Tensor) -> dict[str, Tensor]:
    """`{attribute path: Tensor}` for every tensor reachable from `obj` through attributes, lists/tuples (by
    index), dicts (by key) and namedtuples; `None` and other values are skipped. An `nn.Module` contributes its
    `state_dict()` (parameters and persistent buffers, torch's keys).

    >>> class Net:
    ...     def __init__(self):
    ...         self.fc = Linear(2, 3)
    >>> sorted(get_state_dict(Net()))  # doctest: +SKIP
    ['fc.bias', 'fc.weight']
    """
    out: dict[str, Tensor] = {}
    seen: set[int] = set()
    stack: list[tuple[str, Any]] = [(prefix.rstrip("."), obj)]
    while stack:  # iterative depth-first walk, children in attribute order
        name, value = stack.pop()
        if isinstance(value, tensor_type):
            out.setdefault(name, value)  # type: ignore[arg-type]
            continue
        if id(value) in seen:
            continue
        children: list[tuple[str, Any]]
        if isinstance(value, Module):
            children = list(value.state_dict().items())
        elif isinstance(value, tuple) and hasattr(value, "_asdict"):
            children = list(value._asdict().items())
        elif isinstance(value, (list, tuple)):
            children = [(str(i), v) for i, v in enumerate(value)]
        elif isinstance(value, dict):
            children = [(str(k), v) for k, v in value.items()]
        elif hasattr(value, "__dict__") and not isinstance(value, type):
            children = list(vars(value).items())
        else:
            continue
        seen.add(id(value))
        stack.extend((f"{name}.{key}" if name else key, child) for key, child in reversed(children))
    return out


def get_parameters(obj: Any) -> list[Tensor]:
    """Every tensor reachable from `obj` (parameters and buffers), each once, in state-dict order."""
    unique: dict[int, Tensor] = {}
    for t in get_state_dict(obj).values():
        unique.setdefault(id(t), t)
    return list(unique.values())


def load_state_dict(
    model: Any,
    state_dict: dict[str, Tensor],
    strict: bool = True,
    verbose: bool = True,
    consume: bool = False,
    realize: bool = True,
) -> tuple[list[str], list[str]]:
    """Copy `state_dict`'s tensors into `model`'s tensors of the same name; returns `(missing, unexpected)`.

    With `strict=True` (default) any missing or unexpected key raises StateDictError; shape mismatches always do
    (the message lists every problem with both shapes). Values are cast to the model tensor's dtype and moved to
    its device; `requires_grad` of the model tensor is kept. Tensors are realized one at a time (a tqdm bar shows
    progress when `verbose` and there are many), so a large lazily loaded file never sits in memory twice;
    `consume=True` deletes each entry from `state_dict` once loaded.
    """
    return load_into(get_state_dict(model), state_dict, strict, verbose, consume, realize)
