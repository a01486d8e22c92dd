"""Model state: walking a model for its tensors, loading state dicts into it (both defined in nn.module, beside the
Module whose `state_dict()` they walk), and the weight-file formats.

`get_state_dict(model)` names every tensor by its attribute path (`layers.0.weight`), the same keys torch uses,
so checkpoints from torch load into the same structure. `load_state_dict` checks keys and shapes, then streams the
values in one tensor at a time (peak memory: the model plus one tensor, never a second copy of the file).
"""

from __future__ import annotations

from tg.tensor.nn.formats.errors import FormatError
from tg.tensor.nn.formats.gguf import GGUFTensorInfo, gguf_index, gguf_load
from tg.tensor.nn.formats.safetensors import safe_load, safe_load_metadata, safe_metadata, safe_save
from tg.tensor.nn.formats.torch import torch_load
from tg.tensor.nn.module import StateDictError, get_parameters, get_state_dict, load_state_dict

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
