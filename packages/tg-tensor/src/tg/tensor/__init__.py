"""tg.tensor: the user API: Tensor, autograd, nn, optimizers and state loading.

Importing this package does no work: nothing is compiled and no device is opened until a tensor is realized.
"""

from tg.ir import Context, GlobalCounters, Variable, dtypes
from tg.runtime.device import Device
from tg.runtime.jit import JitError
from tg.tensor import nn  # `import tg.tensor as tg; tg.nn.Linear` (as `tinygrad.nn` after `import tinygrad`)
from tg.tensor.__about__ import __version__
from tg.tensor.autograd import enable_grad, is_grad_enabled, no_grad, set_grad_enabled
from tg.tensor.function import function
from tg.tensor.jit import TinyJit
from tg.tensor.tensor import Tensor

__all__ = [
    "Context",
    "Device",
    "GlobalCounters",
    "JitError",
    "Tensor",
    "TinyJit",
    "Variable",
    "__version__",
    "dtypes",
    "enable_grad",
    "function",
    "is_grad_enabled",
    "nn",
    "no_grad",
    "set_grad_enabled",
]
