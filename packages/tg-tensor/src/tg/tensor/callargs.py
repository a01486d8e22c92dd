"""The arguments and results of a traced call, shared by TinyJit (jit.py) and @function (function.py): the
tensors found at any depth of lists, tuples, dicts and namedtuples, everything else a static compared by value
(`is_value`) or identity, and the settings that change the graph a function builds.

Tensors are recognised as `args.TensorBase` and built with `_tensor_class()`, so this module and function.py import
no tensor.py (jit.py, the user-level TinyJit, does).
"""

from __future__ import annotations

from enum import Enum
from typing import TYPE_CHECKING, Any

from tg.ir import DType, Ops, UOp
from tg.ir.helpers import DEFAULT_FLOAT, DEFAULT_INT
from tg.runtime.jit import JitError
from tg.tensor import realize as _realize
from tg.tensor.args import is_tensor
from tg.tensor.autograd import TRAINING

if TYPE_CHECKING:
    from tg.tensor.tensor import Tensor

VALUE_TYPES = (type(None), bool, int, float, str, bytes, DType, Enum)


def flatten(
    value: Any, path: str, tensors: list[tuple[str, Tensor]], statics: list[tuple[str, Any]], split: bool = True
) -> Any:
    """A structure key for `value`; Tensors found are appended to `tensors`, other leaves to `statics` (`split`:
    a sharded tensor is one entry per shard)."""
    if is_tensor(value):
        if split and isinstance(value.uop.device, tuple):  # sharded: each shard is an input (slot) of its own
            if not _realize.is_realized(value.uop):
                value.realize()
            multi, shrink = value.uop, None
            if multi.op is Ops.SHRINK and multi.src[0].op is Ops.MULTI:  # uneven shards: a prefix of padded shards
                multi, shrink = multi.src[0], multi.arg
            if multi.op is not Ops.MULTI:
                raise JitError(f"{path}: a tensor on devices {value.uop.device} that is not sharded data")
            for i, shard in enumerate(multi.src):
                tensors.append((f"{path}<shard {i}>", value._tensor_class()(shard)))
            return ("multi", multi.arg, len(multi.src), shrink)
        tensors.append((path, value))
        return "T"
    if isinstance(value, UOp):
        if value.op is not Ops.BIND:
            raise TypeError(f"{path}: a UOp argument must be a bound Variable (Variable(name, lo, hi).bind(v))")
        statics.append((path, value))  # its value changes per call; its Variable must not
        return "V"
    if isinstance(value, (list, tuple)) and not is_value(value):
        kind = type(value).__name__
        return (kind, tuple(flatten(v, f"{path}[{i}]", tensors, statics, split) for i, v in enumerate(value)))
    if isinstance(value, dict) and not is_value(value):
        keys = sorted(value, key=repr)
        return ("dict", tuple(keys), tuple(flatten(value[k], f"{path}[{k!r}]", tensors, statics, split) for k in keys))
    statics.append((path, value))
    return "S"


def is_value(value: Any) -> bool:
    """Whether `value` is compared by value (numbers, strings, dtypes, enums and containers of only those)."""
    if isinstance(value, VALUE_TYPES):
        return True
    if isinstance(value, (list, tuple)):
        return all(is_value(v) for v in value)
    if isinstance(value, dict):
        return all(is_value(k) and is_value(v) for k, v in value.items())
    return False


def graph_settings() -> tuple[tuple[str, Any], ...]:
    """Settings that change the graph a function builds (compared at every replay)."""
    return (("DEFAULT_FLOAT", DEFAULT_FLOAT.value), ("DEFAULT_INT", DEFAULT_INT.value), ("TRAINING", TRAINING.value))


def flatten_return(ret: Any, out: list[Tensor | None], name: str) -> Any:
    if ret is None:
        out.append(None)
        return "N"
    if is_tensor(ret):
        out.append(ret)
        return "T"
    if isinstance(ret, (list, tuple)):
        if hasattr(ret, "_fields"):
            return ("namedtuple", type(ret), tuple(flatten_return(v, out, name) for v in ret))
        return (type(ret).__name__, tuple(flatten_return(v, out, name) for v in ret))
    if isinstance(ret, dict):
        keys = list(ret)
        return ("dict", tuple(keys), tuple(flatten_return(ret[k], out, name) for k in keys))
    raise JitError(
        f"TinyJit({name}): return value contains a {type(ret).__name__}; only tensors (in lists, tuples, dicts) can "
        "be returned"
    )


def unflatten_return(structure: Any, it: Any) -> Any:
    if structure in ("N", "T"):
        return next(it)
    if structure[0] == "namedtuple":
        return structure[1](*(unflatten_return(s, it) for s in structure[2]))
    if structure[0] == "dict":
        return {k: unflatten_return(s, it) for k, s in zip(structure[1], structure[2], strict=True)}
    items = [unflatten_return(s, it) for s in structure[1]]
    return tuple(items) if structure[0] == "tuple" else items
