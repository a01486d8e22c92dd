"""`@function`: trace a Python function of tensors once per signature into a reusable call node.

The first call with a new signature (argument structure; each tensor's shape, dtype, device and which arguments
share a buffer; non-tensor arguments by value; DEFAULT_FLOAT/DEFAULT_INT/TRAINING) runs the function on
*placeholder* tensors (parameters) and keeps what it returns as the body `TUPLE(out_0, ...)`. Every call, that one
included, builds `FUNCTION(body, *args)` over this call's tensors (and fresh random-number inputs) and returns
`GETTUPLE(call, i)` per output: O(#arguments), the body's Python runs once per signature (its side effects too),
and the body graph is the same object for every call. At realize, calls are inlined (parameters replaced by the
arguments) before scheduling, so fusion, the schedule cache and compiled kernels are those of the plain function.
Gradients differentiate the body once per set of outputs with gradients into a backward function (also a call
node). Assigns to arguments inside the body are applied to the caller's tensors when the function is called.

Limits: reading data (`numpy()`, `item()`) or calling `realize()` inside the body raises; tensors the body reads
that are not arguments (closure weights) raise unless `allow_implicit=True`, which binds them in place (an
`assign` to them is seen by later calls; rebinding the Python name is not; no gradient flows to them through the
call). Sharded arguments get a sharded placeholder (one per device, same axis and uneven length).
"""

from __future__ import annotations

import functools
import itertools
from array import array
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from tg.ir import Ops, UOp, dtypes
from tg.ir.helpers import FUNCTION_CACHE_SIZE
from tg.tensor import autograd as _autograd
from tg.tensor import random as _random
from tg.tensor import realize as _realize
from tg.tensor.args import is_tensor
from tg.tensor.callargs import flatten, flatten_return, graph_settings, unflatten_return

if TYPE_CHECKING:
    from tg.tensor.tensor import Tensor

__all__ = ["function"]

R = TypeVar("R")


_trace_ids = itertools.count()


def _placeholder(trace: int, i: int, t: Tensor) -> UOp:
    """Parameter `i` of trace `trace`: a BUFFER that never holds memory (its UNIQUE is a tuple, never a counter
    value), distinct per trace so that a call inside another function's body is never confused with it."""
    if isinstance(t.device, tuple):  # sharded: one placeholder per device, laid out as the argument's shards
        return _sharded_placeholder(trace, i, t)
    return _buffer_placeholder(("param", trace, i), t.shape, t.dtype, t.device)


def _buffer_placeholder(unique: tuple, shape: tuple, dtype: Any, device: str) -> UOp:
    numel = 1
    for s in shape:
        numel *= int(s)
    return UOp(Ops.BUFFER, dtype, (UOp(Ops.UNIQUE, arg=unique), UOp(Ops.DEVICE, arg=device)), numel).reshape(shape)


def _sharding(t: Tensor) -> tuple[int | None, int | None] | None:
    """(sharded axis, real length of an uneven axis) of a tensor on several devices; None on one device."""
    if not isinstance(t.device, tuple):
        return None
    from tg.codegen.schedule.multi import Sharded, push_multi

    value = push_multi([t.uop])[t.uop]
    return (value.axis, value.valid) if isinstance(value, Sharded) else (None, None)


def _sharded_placeholder(trace: int, i: int, t: Tensor) -> UOp:
    sharding = _sharding(t)
    assert sharding is not None and isinstance(t.device, tuple)
    axis, valid = sharding
    n = len(t.device)
    shape = list(t.shape)
    if axis is not None:
        shape[axis] = -(-int(shape[axis]) // n)
    shards = tuple(_buffer_placeholder(("param", trace, i, d), tuple(shape), t.dtype, dev)
                   for d, dev in enumerate(t.device))  # fmt: skip
    multi = UOp(Ops.MULTI, t.dtype, shards, axis)
    if valid is None:
        return multi
    return multi.shrink(tuple((0, valid) if j == axis else (0, int(s)) for j, s in enumerate(multi.shape)))


def _base_buffer(uop: UOp) -> UOp | None:
    from tg.tensor.movement import storage_base

    uop = storage_base(uop)
    return uop if uop.op is Ops.BUFFER else None


class _Trace:
    """One traced signature: the body TUPLE over parameters, which outputs are None, written arguments, random
    draws to renew per call."""

    def __init__(
        self,
        name: str,
        placeholders: list[UOp],
        outputs: list[UOp | None],
        ret_structure: Any,
        writes: list[tuple[int, UOp]],
        rng: list[tuple[str, UOp, int, int]],
        rng_advance: int,
        tensor_class: Any,
    ) -> None:
        self.name, self.placeholders, self.ret_structure = name, placeholders, ret_structure
        self.body = UOp(Ops.TUPLE, dtypes.void, tuple(u for u in outputs if u is not None))
        self.returns_none = [u is None for u in outputs]
        self.writes, self.rng, self.rng_advance = writes, rng, rng_advance
        self.tensor_class = tensor_class  # the class of the returned tensors (builds each call's outputs)


class Function(Generic[R]):
    """A function traced once per signature (see the module docstring); `trace_count` counts the traces."""

    def __init__(self, fxn: Callable[..., R], allow_implicit: bool = False) -> None:
        self.fxn, self.allow_implicit = fxn, allow_implicit
        self.name = getattr(fxn, "__qualname__", repr(fxn))
        self.cache: OrderedDict[Any, _Trace] = OrderedDict()
        self.cache_size = int(FUNCTION_CACHE_SIZE.value)
        self.trace_count = 0
        functools.update_wrapper(self, fxn)

    def __get__(self, obj: Any, objtype: Any = None) -> Any:
        return self if obj is None else functools.partial(self.__call__, obj)

    def __call__(self, *args: Any, **kwargs: Any) -> R:
        tensors: list[tuple[str, Tensor]] = []
        statics: list[tuple[str, Any]] = []
        structure = (
            flatten(tuple(args), "args", tensors, statics, split=False),
            tuple(sorted(kwargs)),
            tuple(flatten(kwargs[k], f"kwargs[{k!r}]", tensors, statics, split=False) for k in sorted(kwargs)),
        )
        for path, value in statics:
            try:
                hash(value)
            except TypeError:
                raise TypeError(
                    f"@function {self.name}: argument {path} ({type(value).__name__}) is not hashable; non-tensor "
                    "arguments are part of the trace's key"
                ) from None
        # aliasing: which tensor arguments are one buffer (then the trace shares one placeholder)
        first: dict[Any, int] = {}
        alias_keys = [id(t) if (b := _base_buffer(t.uop)) is None else b for _, t in tensors]
        alias = tuple(first.setdefault(k, i) for i, k in enumerate(alias_keys))
        key = (
            structure,
            tuple((t.shape, t.dtype, t.device, _sharding(t)) for _, t in tensors),
            alias,
            tuple((p, type(v), v) for p, v in statics),
            graph_settings(),
        )
        trace = self.cache.get(key)
        if trace is None:
            trace = self._trace(args, kwargs, tensors, alias)
            self.cache[key] = trace
            if len(self.cache) > self.cache_size:
                self.cache.popitem(last=False)
        else:
            self.cache.move_to_end(key)
        return self._bind(trace, tensors, alias)

    def _trace(self, args: tuple, kwargs: dict, tensors: list[tuple[str, Tensor]], alias: tuple[int, ...]) -> _Trace:
        trace_id = next(_trace_ids)
        placeholders = [_placeholder(trace_id, i, t) for i, (_, t) in enumerate(tensors)]
        stand_ins = [t._tensor_class()(placeholders[alias[i]]) for i, (_, t) in enumerate(tensors)]
        for st, (_, t) in zip(stand_ins, tensors, strict=True):
            if t.requires_grad:  # tracked like the argument (not a grad leaf: placeholders get no .grad)
                _autograd.mark(st.uop, True)
                st._requires_grad = True
        replace = {id(t): st for (_, t), st in zip(tensors, stand_ins, strict=True)}
        start_unique = UOp.unique().arg  # buffers made before the trace have smaller UNIQUE numbers
        rng_start, outer_log = _random.rng.counter, _random.rng_log
        rng_log: list[tuple[str, UOp, int, int]] = []
        _random.rng_log = rng_log
        _realize.tracing_functions.append(self.name)
        try:
            ret = self.fxn(*_rebuild_args(args, replace), **_rebuild_args(kwargs, replace))
        finally:
            _realize.tracing_functions.pop()
            _random.rng_log = outer_log
        self.trace_count += 1
        returned: list[Tensor | None] = []
        ret_structure = flatten_return(ret, returned, self.name)
        outputs = [None if t is None else t.uop for t in returned]
        writes = [(i, st.uop) for i, st in enumerate(stand_ins) if st.uop is not placeholders[alias[i]]]
        roots = [u for u in outputs if u is not None] + [w for _, w in writes]
        implicit = [
            u for u in UOp.sink(*roots).toposort() if u.op is Ops.BUFFER and isinstance(u.src[0].arg, int)
            and u.src[0].arg < start_unique
        ] if roots else []  # fmt: skip
        if implicit and not self.allow_implicit:
            desc = ", ".join(f"{u.dtype.name} ({u.arg},) on {u.device}" for u in implicit[:3])
            raise RuntimeError(
                f"function {self.name} reads {len(implicit)} tensor(s) that are not arguments ({desc}); pass them as "
                "arguments or use @function(allow_implicit=True)"
            )
        rng = [(kind, u, value - rng_start if kind == "counter" else 0, num) for kind, u, value, num in rng_log]
        advance, _random.rng.counter = _random.rng.counter - rng_start, rng_start  # the binding draws them
        cls = next((t._tensor_class() for t in returned if t is not None), None)
        return _Trace(self.name, placeholders, outputs, ret_structure, writes, rng, advance, cls)

    def _bind(self, trace: _Trace, tensors: list[tuple[str, Tensor]], alias: tuple[int, ...]) -> R:
        from tg.tensor.autograd import mark, reaches_grad

        params: list[UOp] = []
        args: list[UOp] = []
        for i, (_, t) in enumerate(tensors):
            if alias[i] == i:
                params.append(trace.placeholders[i])
                args.append(t.uop)
        if trace.rng:  # this call's random draws: fresh counters and the current seed
            start, seed = _random.rng.counter, _random.rng.seed & 0xFFFFFFFFFFFFFFFF
            for kind, buf, offset, num in trace.rng:
                values = array("Q", range(start + offset, start + offset + num) if kind == "counter" else [seed])
                params.append(buf)
                args.append(_realize.from_bytes(values.tobytes(), (num,), dtypes.uint64, str(buf.device)).unreshaped)
            _random.rng.counter = start + trace.rng_advance
        returned: list[Tensor | None] = []
        if trace.body.src:
            call = UOp(Ops.FUNCTION, dtypes.void, (trace.body, *args), (trace.name, tuple(params)))
            # gradients flow into the call through its arguments only (the parameters are placeholders)
            mark(call, any(reaches_grad(a) for a in args))
            _realize.note_function_call()
            outs = iter(range(len(trace.body.src)))
            for none in trace.returns_none:
                k = -1 if none else next(outs)
                returned.append(
                    None if none else trace.tensor_class(UOp(Ops.GETTUPLE, trace.body.src[k].dtype, (call,), k))
                )
        else:
            returned = [None] * len(trace.returns_none)
        if trace.writes:  # written arguments get their new state now (ordering rules as for any assign)
            mapping = dict(zip(params, args, strict=True))
            bound = iter(UOp.sink(*(w for _, w in trace.writes)).substitute(mapping).src)
            for i, _ in trace.writes:
                target = tensors[i][1]
                state = target.uop.unreshaped
                target.uop = next(bound)
                _realize.repoint_views(state, target.uop, target)
        return unflatten_return(trace.ret_structure, iter(returned))


def _rebuild_args(value: Any, replace: dict[int, Tensor]) -> Any:
    """`value` with each Tensor swapped for its stand-in (containers rebuilt, other leaves kept)."""
    if is_tensor(value):
        return replace[id(value)]
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return type(value)(*(_rebuild_args(v, replace) for v in value))
    if isinstance(value, (list, tuple)):
        return type(value)(_rebuild_args(v, replace) for v in value)
    if isinstance(value, dict):
        return {k: _rebuild_args(v, replace) for k, v in value.items()}
    return value


def function(fxn: Callable[..., R] | None = None, *, allow_implicit: bool = False) -> Any:
    """Trace `fxn` once per signature and reuse the graph: `@function` or `@function(allow_implicit=True)`.

    >>> @function
    ... def mlp(x, w1, w2):
    ...     return (x @ w1).relu() @ w2
    """
    if fxn is None:
        return lambda f: Function(f, allow_implicit=allow_implicit)
    return Function(fxn, allow_implicit=allow_implicit)
