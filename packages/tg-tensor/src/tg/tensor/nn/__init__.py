"""tg.tensor.nn: PyTorch's module habits on tg tensors.

`Module` (parameters, buffers and submodules registered by attribute; `parameters()`, `state_dict()` with torch's
keys, `train()`/`eval()`, `zero_grad()`), the containers `Sequential`, `ModuleList`, `ModuleDict`, the layers
(Linear, convolutions, normalisations, Embedding, LSTMCell) with torch's attribute names, state-dict keys and
initialisation, activation/pooling/dropout/loss modules, and `nn.functional` (imported as `F`). Mode-dependent
layers (BatchNorm, InstanceNorm with running stats, Dropout) follow `Tensor.training` (`with Tensor.train():`)
until their module is switched with `model.train()` / `model.eval()` (or the functions `nn.train(model)` /
`nn.eval(model)`, which also reach tinygrad-style plain objects). Plain classes holding tensors keep working:
`nn.state.get_parameters(obj)` walks them.
"""

from __future__ import annotations

from typing import Any

from tg.tensor.nn import functional, optim, state
from tg.tensor.nn.activation import (
    CELU,
    ELU,
    GELU,
    GLU,
    SELU,
    AdaptiveAvgPool2d,
    AvgPool1d,
    AvgPool2d,
    BCELoss,
    BCEWithLogitsLoss,
    CrossEntropyLoss,
    Dropout,
    Dropout1d,
    Dropout2d,
    Flatten,
    Hardsigmoid,
    Hardswish,
    Hardtanh,
    Identity,
    L1Loss,
    LeakyReLU,
    LogSigmoid,
    LogSoftmax,
    MaxPool1d,
    MaxPool2d,
    Mish,
    MSELoss,
    NLLLoss,
    ReLU,
    ReLU6,
    Sigmoid,
    SiLU,
    SmoothL1Loss,
    Softmax,
    Softmin,
    Softplus,
    Softsign,
    Tanh,
    Unflatten,
)  # fmt: skip
from tg.tensor.nn.layers import (
    BatchNorm,
    BatchNorm1d,
    BatchNorm2d,
    BatchNorm3d,
    Conv1d,
    Conv2d,
    ConvTranspose1d,
    ConvTranspose2d,
    Embedding,
    GroupNorm,
    InstanceNorm,
    InstanceNorm1d,
    InstanceNorm2d,
    InstanceNorm3d,
    LayerNorm,
    LayerNorm2d,
    Linear,
    LSTMCell,
    RMSNorm,
    kaiming_bound,
    uniform_param,
)  # fmt: skip
from tg.tensor.nn.module import Module, ModuleDict, ModuleList, Parameter, ParameterDict, ParameterList, Sequential
from tg.tensor.tensor import Tensor

__all__ = [
    "CELU", "ELU", "GELU", "GLU", "SELU", "AdaptiveAvgPool2d", "AvgPool1d", "AvgPool2d", "BCELoss", "BCEWithLogitsLoss",
    "BatchNorm", "BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "Conv1d", "Conv2d", "ConvTranspose1d", "ConvTranspose2d",
    "CrossEntropyLoss", "Dropout", "Dropout1d", "Dropout2d", "Embedding", "Flatten", "GroupNorm", "Hardsigmoid",
    "Hardswish", "Hardtanh", "Identity", "InstanceNorm", "InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d",
    "L1Loss", "LSTMCell", "LayerNorm", "LayerNorm2d", "LeakyReLU", "Linear", "LogSigmoid", "LogSoftmax", "MSELoss",
    "MaxPool1d", "MaxPool2d", "Mish", "Module", "ModuleDict", "ModuleList", "NLLLoss", "Parameter", "ParameterDict",
    "ParameterList", "RMSNorm", "ReLU", "ReLU6", "Sequential", "SiLU", "Sigmoid", "SmoothL1Loss", "Softmax", "Softmin",
    "Softplus", "Softsign", "Tanh", "Unflatten", "eval", "functional", "kaiming_bound", "optim", "state", "train",
    "uniform_param",
]  # fmt: skip


def _set_mode(model: Any, mode: bool | None) -> Any:
    seen: set[int] = set()
    stack = [model]
    while stack:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, (Tensor, str, bytes, int, float, type)):
            continue
        seen.add(id(obj))
        if isinstance(obj, Module):
            obj.training = mode  # a Module's submodules are in its registries, walked below
        elif hasattr(obj, "training") and not isinstance(obj, type):
            obj.training = mode
        if isinstance(obj, dict):
            stack.extend(obj.values())
        elif isinstance(obj, (list, tuple)):
            stack.extend(obj)
        elif hasattr(obj, "__dict__"):
            stack.extend(vars(obj).values())
    return model


def train(model: Any, mode: bool = True) -> Any:
    """torch's `model.train(mode)`: set `training` on every mode-dependent layer reachable from `model`."""
    return _set_mode(model, mode)


def eval(model: Any) -> Any:
    """torch's `model.eval()`: every mode-dependent layer reachable from `model` runs in inference mode."""
    return _set_mode(model, False)
