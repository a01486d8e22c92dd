"""`TinyJit`: run a function of tensors once normally, capture its kernels on the second call, replay them after.

Call 1 runs the function (warming caches, creating lazily made state such as optimizer buffers). Call 2 runs it
again while the engine records every kernel and copy (``tg.runtime.engine.capturing``) and builds a
:class:`~tg.runtime.jit.CapturedProgram`. Later calls check that the arguments look like the captured ones and
replay the program with this call's input buffers: no Python of the function and no scheduling runs.

Arguments are searched at any depth of lists, tuples and dicts: each Tensor is an input, everything else a static
argument compared by value (numbers, strings, dtypes, enums, containers of them) or by identity (other objects) at
every call. Tensors the function reads but does not take as arguments (closure or module weights) are used in
place, so ``assign`` to them is seen by later replays; rebinding such a name to a new Tensor is detected (the old
buffer died) and raises instead of silently replaying with the old values.
"""

from __future__ import annotations

import functools
import inspect
import math
import weakref
from array import array
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from tg.ir import Ops, UOp, dtypes
from tg.ir.helpers import JIT, Context
from tg.runtime.jit import JitError
from tg.tensor import random as _random
from tg.tensor import realize as _realize
from tg.tensor.callargs import flatten, flatten_return, graph_settings, is_value, unflatten_return
from tg.tensor.movement import view_base
from tg.tensor.shapes import has_symbolic
from tg.tensor.tensor import Tensor

ReturnType = TypeVar("ReturnType")

__all__ = ["JitError", "TinyJit"]


def _jit_error() -> type[JitError]:
    return JitError


class _Unchecked:
    """Stands for an argument compared by identity in a jit loaded from a pickle (it cannot be checked)."""

    def __reduce__(self) -> str:
        return "_UNCHECKED"


_UNCHECKED = _Unchecked()
_UNPICKLED = frozenset({"fxn", "_weight_refs", "_written_weights", "_out_handed", "_recorder_marker", "__wrapped__"})


def _canonical(key: UOp) -> UOp:
    """`key` with its placeholder buffers made canonical again (a pickle load gives them fresh UNIQUE numbers)."""
    subs = {u: _placeholder(u) for u in key.toposort() if u.op is Ops.BUFFER}
    return key.substitute(subs) if subs else key


def _same_static(a: Any, b: Any) -> bool:
    if b is _UNCHECKED:
        return True
    if isinstance(b, UOp):  # a bound Variable: same Variable (name and bounds), any value
        return isinstance(a, UOp) and a.op is Ops.BIND and a.src[0] is b.src[0]
    if is_value(a) and is_value(b):
        return _value_equal(a, b)
    return a is b


def _value_equal(a: Any, b: Any) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_value_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_value_equal(a[k], b[k]) for k in a)
    return bool(a == b)


# ---- inputs -----------------------------------------------------------------------------------------------------


def _is_view_of_buffer(uop: UOp) -> bool:
    return view_base(uop).op is Ops.BUFFER


def _storage(t: Tensor) -> UOp:
    """Make `t` a buffer or a view of one (realizing lazy graphs and virtual tensors), return its base BUFFER."""
    if not _is_view_of_buffer(t.uop):
        t.realize()
        if _realize.buffer_of(t.uop) is None:  # realize leaves pure views of buffers lazy
            t.uop = t.uop.contiguous()
            t.realize()
    return view_base(t.uop)


def _placeholder(base: UOp) -> UOp:
    """A stand-in for a base buffer in a view key: equal for any buffer of the same dtype, size and device."""
    return UOp.new_buffer(base.src[1].arg, int(base.arg), base.dtype, num=-1)  # UNIQUE(-1): never a real buffer


def _view_key(uop: UOp, base: UOp) -> UOp:
    """The view structure of `uop` over `base`, independent of which buffer it is (hash-consed: compare by `is`)."""
    if uop.op is Ops.RESHAPE and uop.src[0] is base:
        return _placeholder(base).reshape(uop.shape)
    return uop.substitute({base: _placeholder(base)})


def _describe_view(key: UOp) -> str:
    ops = [u for u in key.toposort() if u.op in (Ops.SHRINK, Ops.PAD, Ops.PERMUTE, Ops.FLIP, Ops.EXPAND)]
    return " ".join(f"{u.op.name.lower()} {u.arg}" for u in ops) or "whole buffer"


def _unbound_view(uop: UOp) -> Any:
    """The normalised form of a view with bound Variables in its shape: its base a placeholder, its Variables
    unbound (the same UOp for every value; `.sink` is the key, `.var_vals` the values, `.inputs[0]` the base)."""
    from tg.codegen.schedule.callify import Normalized

    return Normalized(uop)


class _InputSpec:
    """What the capture saw for one tensor input (`symbolic`: its shape has bound Variables; key and shape are then
    the unbound ones, so every value of the Variables matches)."""

    __slots__ = ("device", "dtype", "key", "path", "shape", "slot", "symbolic", "whole_size")

    def __init__(self, path: str, t: Tensor, base: UOp, slot: int) -> None:
        self.path, self.shape, self.dtype, self.device = path, t.shape, t.dtype, base.device
        self.symbolic = has_symbolic(t.shape)
        if self.symbolic:
            self.key = _unbound_view(t.uop).sink
            self.shape = self.key.shape
        else:
            self.key = _view_key(t.uop, base)
        self.slot = slot
        # the common case, a whole buffer reshaped: validated by comparing the buffer size alone
        whole = self.key.op is Ops.BUFFER or (self.key.op is Ops.RESHAPE and self.key.src[0].op is Ops.BUFFER)
        self.whole_size = int(base.arg) if whole and not self.symbolic else -1


class _Recorder:
    """Collects the schedules (LINEARs of CALLs) the engine runs while a jit captures, and their variable values."""

    def __init__(self, name: str, start_unique: int) -> None:
        self.name, self.start_unique = name, start_unique
        self.calls: list[UOp] = []
        self.var_vals: dict[str, int] = {}
        self.seen: set[UOp] = set()
        self.initial: dict[UOp, bytes] = {}  # contents of buffers uploaded during the capture, before first use

    def add_linear(self, linear: UOp, var_vals: dict[str, int]) -> None:
        from tg.runtime.engine import buffer_for, has_buffer

        for call in linear.src:  # runs before the engine does: uploads still hold what the function put there
            for a in call.src[1:]:
                u = a.src[0] if a.op is Ops.BUFFER_VIEW else a
                if u in self.seen:
                    continue
                self.seen.add(u)
                num = u.src[0].arg
                if isinstance(num, int) and num >= self.start_unique and has_buffer(u) and buffer_for(u)._allocated:
                    self.initial[u] = bytes(buffer_for(u).as_memoryview())
        self.calls.extend(linear.src)
        for name, value in var_vals.items():
            if (was := self.var_vals.setdefault(name, value)) != value:
                raise JitError(
                    f"TinyJit({self.name}): variable {name!r} is bound to {was} and to {value} in one captured call; "
                    "pass it as a Variable argument"
                )


def _held_by_a_tensor(buffer: UOp) -> bool:
    """Whether a live tensor's graph uses `buffer` (found through the tensor index, not a scan)."""
    return any(_realize.index.tensors(root) for root in _realize.index.affected([buffer]))


class _Output:
    """How to rebuild one returned tensor at replay: over a produced slot, an input's base, or a fixed weight."""

    __slots__ = ("axis", "kind", "parts", "reshape_to", "shrink", "slot", "symbolic", "template", "weight_uop")

    def __init__(
        self,
        kind: str,
        slot: int,
        template: UOp | None,
        weight_uop: UOp | None,
        parts: list[_Output] | None = None,
        axis: int | None = None,
        shrink: tuple | None = None,
    ) -> None:
        self.kind, self.slot, self.template, self.weight_uop = kind, slot, template, weight_uop
        self.parts, self.axis, self.shrink = parts or [], axis, shrink  # shrink: uneven shards' logical extent
        self.symbolic = template is not None and has_symbolic(template.shape)
        if self.symbolic:  # kept unbound: each replay binds this call's values
            assert template is not None
            self.template = template = _unbound_view(template).sink
        whole = template is not None and (
            template.op is Ops.BUFFER or (template.op is Ops.RESHAPE and template.src[0].op is Ops.BUFFER)
        )
        self.reshape_to = template.shape if whole and template is not None else None

    def rebuild(self, base: UOp, binds: Any = None) -> UOp:
        """The returned tensor's graph over this call's `base` buffer (`binds`: a normalised graph of this call's
        bound Variables, for outputs of symbolic shape: they get this call's values)."""
        if self.reshape_to is not None:
            return base if base.shape == self.reshape_to else base.reshape(self.reshape_to)
        assert self.template is not None
        if self.symbolic:
            placeholder = next(u for u in self.template.toposort() if u.op is Ops.BUFFER)
            return binds.rebind(self.template.substitute({placeholder: base}))
        return self.template.substitute({_placeholder(base): base})


def _build(out: _Output, bases: list[UOp], out_uops: list[UOp], bound: UOp | None) -> UOp:
    """A replay's graph of returned output `out`: over this call's input `bases` and produced `out_uops`."""
    if out.kind == "produced":
        return out.rebuild(out_uops[out.slot - len(bases)], bound)
    if out.kind == "input":
        return out.rebuild(bases[out.slot], bound)
    if out.kind == "multi":
        shards = tuple(_build(p, bases, out_uops, bound) for p in out.parts)
        multi = UOp(Ops.MULTI, shards[0].dtype, shards, out.axis)
        return multi if out.shrink is None else multi.shrink(out.shrink)
    assert out.weight_uop is not None
    return out.weight_uop


def _leaf_outputs(outputs: list[_Output | None]) -> list[Any]:
    """Every output description that is not a sharded one (the shards of those instead)."""
    leaves: list[Any] = []
    for out in outputs:
        if out is not None:
            leaves.extend(_leaf_outputs(list(out.parts)) if out.kind == "multi" else [out])
    return leaves


# ---- TinyJit ----------------------------------------------------------------------------------------------------


class TinyJit(Generic[ReturnType]):
    """Capture a function of tensors on its 2nd call and replay its kernels on later calls.

    >>> @TinyJit
    ... def step(x):
    ...     return (x * 2 + 1).realize()

    The function must return realized tensors (or None, or lists/tuples/dicts of tensors). ``prune=False`` keeps
    kernels that depend on neither the inputs nor a Variable (by default they run once at capture). ``JIT=0`` turns
    it into a plain call; ``JIT=2`` replays kernel by kernel instead of through the batch executor (for debugging).
    """

    def __init__(self, fxn: Callable[..., ReturnType] | None, prune: bool = True) -> None:
        self.fxn = fxn
        self.prune = prune
        self.name = getattr(fxn, "__qualname__", repr(fxn)) if fxn is not None else "<loaded>"
        self._param_names = _param_names(fxn)
        if fxn is not None:
            functools.update_wrapper(self, fxn)
        self.reset()

    def reset(self) -> None:
        """Forget the capture (its memory is freed); the next call runs normally and the one after captures again."""
        if getattr(self, "fxn", None) is None and getattr(self, "_program", None) is not None:
            raise _jit_error()(f"TinyJit({self.name}) was loaded from a pickle and has no function to re-capture")
        self.reset_state()

    def reset_state(self) -> None:
        """Drop every captured thing (no checks)."""
        self.cnt = 0
        self._program: Any = None
        self._structure: Any = None
        self._inputs: list[_InputSpec] = []
        self._statics: list[tuple[str, Any]] = []
        self._settings: tuple[tuple[str, Any], ...] = ()
        self._outputs: list[_Output | None] = []
        self._ret_structure: Any = None
        self._out_slots: list[Any] = []  # produced output Buffers (rotated)
        self._out_handed: list[weakref.ref[UOp] | None] = []
        self._weight_refs: list[weakref.ref[UOp]] = []
        self._stale: str | None = None
        self._written_weights: list[weakref.ref[UOp]] = []
        self._written_input_slots: list[int] = []
        self._rng: list[tuple[str, Any, int, int]] = []
        self._rng_advance = 0

    def __get__(self, obj: Any, objtype: Any = None) -> Any:
        """As a method: bind the instance as the first (identity-checked) argument."""
        if obj is None:
            return self
        return functools.partial(self.__call__, obj)

    @property
    def captured(self) -> Any:
        """The CapturedProgram (None before the 2nd call)."""
        return self._program

    # ---- calls --------------------------------------------------------------------------------------------------

    def __call__(self, *args: Any, **kwargs: Any) -> ReturnType:
        from tg.runtime import engine

        if self.fxn is None and self._program is None:
            raise _jit_error()(f"TinyJit({self.name}) has not captured yet (2 calls needed)")
        if _realize.tracing_functions:
            raise _jit_error()(f"TinyJit({self.name}) cannot run inside @function {_realize.tracing_functions[-1]}")
        if not JIT.value and self.fxn is not None:
            return self.fxn(*args, **kwargs)
        if engine.capturing and not any(r is self._recorder_marker for r in engine.capturing):
            # inside another jit's capture: run plainly, or replay into the outer recording
            if self._program is None:
                assert self.fxn is not None
                return self.fxn(*args, **kwargs)
            return self._replay(args, kwargs, outer=engine.capturing[0])
        if self.cnt == 0:
            assert self.fxn is not None
            ret = self.fxn(*args, **kwargs)
            _realize_returned(ret, self.name)
            self.cnt = 1
            return ret
        if self.cnt == 1:
            ret = self._capture(args, kwargs)
            self.cnt = 2
            return ret
        ret = self._replay(args, kwargs)
        self.cnt += 1
        return ret

    _recorder_marker: Any = None

    def _flatten_args(self, args: tuple, kwargs: dict) -> tuple[Any, list[tuple[str, Tensor]], list[tuple[str, Any]]]:
        if args and not kwargs and all(a.__class__ is Tensor and a.uop.device.__class__ is str for a in args):
            # the common replay: positional single-device tensors only (what `flatten` returns for them, built here
            # without its recursion: a replay's fixed cost is Python)
            return (("tuple", ("T",) * len(args)), (), ()), [(f"args[{i}]", a) for i, a in enumerate(args)], []
        tensors: list[tuple[str, Tensor]] = []
        statics: list[tuple[str, Any]] = []
        structure = (
            flatten(tuple(args), "args", tensors, statics),
            tuple(sorted(kwargs)),
            tuple(flatten(kwargs[k], f"kwargs[{k!r}]", tensors, statics) for k in sorted(kwargs)),
        )
        return structure, tensors, statics

    def _capture(self, args: tuple, kwargs: dict) -> ReturnType:
        import tg.codegen.schedule.memory  # noqa: F401  (defines NO_MEMORY_PLANNER)
        from tg.runtime import engine
        from tg.runtime.jit import CapturedProgram

        assert self.fxn is not None
        structure, tensors, statics = self._flatten_args(args, kwargs)
        bases: dict[UOp, int] = {}
        inputs: list[_InputSpec] = []
        for path, t in tensors:
            base = _storage(t)
            slot = bases.setdefault(base, len(bases))
            inputs.append(_InputSpec(path, t, base, slot))
        input_buffers = [engine.buffer_for(b) for b in bases]
        start_unique = UOp.unique().arg  # buffers made before the capture have smaller UNIQUE numbers
        recorder = _Recorder(self.name, start_unique)
        self._recorder_marker = recorder
        engine.capturing.append(recorder)
        rng_start, outer_log = _random.rng.counter, _random.rng_log
        rng_log: list[tuple[str, UOp, int, int]] = []
        _random.rng_log = rng_log
        try:
            # each realize's intermediates get buffers of their own: the program plans them all at once
            with Context(NO_MEMORY_PLANNER=1):
                ret = self.fxn(*args, **kwargs)
                _realize_returned(ret, self.name)
        finally:
            engine.capturing.remove(recorder)
            self._recorder_marker = None
            _random.rng_log = outer_log
        if outer_log is not None:
            outer_log.extend(rng_log)
        # random draws: their uploaded counters and seed are rewritten per replay (never pruned)
        self._rng = [(kind, engine.buffer_for(u), value - rng_start if kind == "counter" else 0, num)
                     for kind, u, value, num in rng_log]  # fmt: skip
        self._rng_advance = _random.rng.counter - rng_start
        # what was returned: produced buffers become output slots
        returned: list[Tensor | None] = []
        self._ret_structure = flatten_return(ret, returned, self.name)
        input_ids = {id(b): i for i, b in enumerate(input_buffers)}
        out_buffers: list[Any] = []
        out_uops: list[UOp] = []
        outputs: list[_Output | None] = []
        handed: list[weakref.ref[UOp] | None] = []

        def before(u: UOp) -> bool:
            return isinstance(num := u.src[0].arg, int) and 0 <= num < start_unique

        def classify(uop: UOp) -> _Output:
            if uop.op is Ops.SHRINK and uop.src[0].op is Ops.MULTI:  # uneven shards
                return _Output("multi", -1, None, None, [classify(s) for s in uop.src[0].src], uop.src[0].arg, uop.arg)
            if uop.op is Ops.MULTI:  # a sharded result: each shard on its own
                return _Output("multi", -1, None, None, [classify(s) for s in uop.src], uop.arg)
            base = view_base(uop)
            buf = engine.buffer_for(base)
            if (input_slot := input_ids.get(id(buf))) is not None:
                return _Output("input", input_slot, _view_key(uop, base), None)
            if before(base):
                return _Output("weight", -1, None, uop)
            if (slot := next((i for i, b in enumerate(out_buffers) if b is buf), -1)) < 0:
                slot = len(out_buffers)
                out_buffers.append(buf)
                out_uops.append(base)
                handed.append(weakref.ref(base))
            return _Output("produced", len(input_buffers) + slot, _view_key(uop, base), None)

        for ret_t in returned:
            outputs.append(None if ret_t is None else classify(ret_t.uop))
        # state: buffers made before the capture, random inputs, and buffers some live tensor still holds
        linear = UOp(Ops.LINEAR, dtypes.void, tuple(recorder.calls))
        call_args = [a for c in linear.src for a in c.src[1:]]
        call_bases = list(dict.fromkeys(a.src[0] if a.op is Ops.BUFFER_VIEW else a for a in call_args))
        slot_ids = {id(b) for b in [*input_buffers, *out_buffers]}
        rng_ids = {id(buf) for _, buf, _, _ in self._rng}
        pre_existing = [u for u in call_bases if before(u)]
        persistent = pre_existing + [
            u for u in call_bases
            if not before(u) and id(buf := engine.buffer_for(u)) not in slot_ids
            and (id(buf) in rng_ids or _held_by_a_tensor(u))
        ]  # fmt: skip
        program = CapturedProgram(
            linear, [*bases, *out_uops], persistent, recorder.var_vals, prune=self.prune, initial=recorder.initial
        )
        # weights: pre-existing buffers the program uses; their death means the function's tensor was rebound
        used = {id(b) for b in program.fixed.values()}
        written = {id(b) for b in program.written}
        weight_uops = [u for u in pre_existing if id(engine.buffer_for(u)) in used]
        self._weight_refs = [weakref.ref(u, self._mark_stale(u)) for u in weight_uops]
        self._written_weights = [weakref.ref(u) for u in weight_uops if id(engine.buffer_for(u)) in written]
        self._written_input_slots = [s for s in program.written_slots if s < len(input_buffers)]
        self._program, self._structure, self._inputs, self._statics = program, structure, inputs, statics
        self._settings = graph_settings()
        self._outputs, self._out_slots, self._out_handed = outputs, out_buffers, handed
        self._stale = None
        return ret

    def _mark_stale(self, u: UOp) -> Callable[[Any], None]:
        desc = f"{u.dtype.name} ({int(u.arg)},) on {u.device}"
        me = weakref.ref(self)

        def callback(_: Any) -> None:
            if (jit := me()) is not None and jit._stale is None:
                jit._stale = desc

        return callback

    # ---- pickling -----------------------------------------------------------------------------------------------

    def __getstate__(self) -> dict[str, Any]:
        """A captured jit pickles its program (kernels with binaries, weights and constants by value), its argument
        and output specs; not the function: a loaded jit only replays, on weights of its own."""
        from tg.runtime import engine

        if self._program is None:
            return {"name": self.name, "prune": self.prune, "_param_names": self._param_names}
        state = {k: v for k, v in self.__dict__.items() if k not in _UNPICKLED}
        state["fxn"] = None
        # objects compared by identity cannot exist after loading: those arguments are no longer checked
        state["_statics"] = [(p, v if is_value(v) or isinstance(v, UOp) else _UNCHECKED) for p, v in self._statics]
        state["_weight_buffers"] = [
            engine.buffer_for(view_base(o.weight_uop)) for o in _leaf_outputs(self._outputs) if o.kind == "weight"
        ]  # fmt: skip
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        from tg.runtime import engine

        self.fxn = None
        self.reset_state()
        self.__dict__.update({k: v for k, v in state.items() if k != "_weight_buffers"})
        if self._program is None:
            return
        # placeholders came back with fresh UNIQUE numbers: make them the canonical ones again
        for spec in self._inputs:
            spec.key = _canonical(spec.key)
        weight_buffers = iter(state["_weight_buffers"])
        for out in _leaf_outputs(self._outputs):
            if out.template is not None:
                out.template = _canonical(out.template)
            if out.kind == "weight":
                engine.bind_buffer(view_base(out.weight_uop), next(weight_buffers))
        self._out_handed = [None] * len(self._out_slots)
        self.cnt = 2

    def weights(self) -> list[Tensor]:
        """Tensors over the buffers the program reads or writes in place (for a loaded jit: its own copies);
        `assign` to them is seen by the next replay."""
        from tg.runtime import engine

        program = self._program
        if program is None:
            return []
        slot_ids = {id(b) for b in program.slot_buffers}
        rng_ids = {id(b) for _, b, _, _ in self._rng}
        seen: dict[int, Any] = {}
        for ei in program.items:
            for b in ei.bufs:
                if id(b.base) not in slot_ids and id(b.base) not in rng_ids:
                    seen.setdefault(id(b.base), b.base)
        out = []
        for buf in seen.values():
            uop = UOp.new_buffer(buf.device, buf.size, buf.dtype)
            engine.bind_buffer(uop, buf)
            out.append(Tensor(uop))
        return out

    # ---- replay -------------------------------------------------------------------------------------------------

    def _arg_name(self, path: str) -> str:
        if path.startswith("args[") and self._param_names:
            idx = int(path[5:].split("]", 1)[0])
            if idx < len(self._param_names):
                return f"argument {self._param_names[idx]!r} ({path})"
        return f"argument {path}"

    def _validate(self, structure: Any, tensors: list[tuple[str, Tensor]], statics: list[tuple[str, Any]]) -> None:
        err, f = _jit_error(), f"TinyJit({self.name})"
        if self._stale is not None:
            raise err(
                f"{f}: the tensors owning a captured weight ({self._stale}) are gone; the replay would keep using the "
                "old buffer. Update weights with assign(), or call f.reset()"
            )
        if structure != self._structure:
            raise err(f"{f}: called with {_describe(structure)} but captured with {_describe(self._structure)}")
        for (path, value), (_, old) in zip(statics, self._statics, strict=True):
            if isinstance(old, UOp) and not _same_static(value, old):
                now = value.src[0] if isinstance(value, UOp) else value
                raise err(
                    f"{f}: input {path} uses Variable {_describe_var(now)} where the capture used "
                    f"{_describe_var(old.src[0])}"
                )
            if not _same_static(value, old):
                raise err(
                    f"{f}: {self._arg_name(path)} was {old!r} at capture and is {value!r} now; non-tensor arguments "
                    "are baked into the replay: pass a Tensor, or call f.reset()"
                )
        if (settings := graph_settings()) != self._settings:
            for (name, now), (_, then) in zip(settings, self._settings, strict=True):
                if now != then:
                    raise err(f"{f}: {name} is {now} now but was {then} at capture")
        for (path, t), spec in zip(tensors, self._inputs, strict=True):
            if not spec.symbolic and t.shape != spec.shape:
                raise err(
                    f"{f}: input {path} has shape {t.shape}, captured with {spec.shape}; use f.reset() to capture a "
                    "new shape"
                )
            device = t.uop.device
            if t.dtype is not spec.dtype or device != spec.device:
                raise err(
                    f"{f}: input {path} is {t.dtype.name} on {device}, captured as {spec.dtype.name} on {spec.device}"
                )

    def _replay(self, args: tuple, kwargs: dict, outer: Any = None) -> ReturnType:
        from tg.runtime import engine

        program = self._program
        structure, tensors, statics = self._flatten_args(args, kwargs)
        self._validate(structure, tensors, statics)
        err, f = _jit_error(), f"TinyJit({self.name})"
        bases: list[UOp] = []
        seen: dict[UOp, int] = {}
        var_vals = {str(v.src[0].arg[0]): int(v.src[1].arg) for _, v in statics if isinstance(v, UOp)}
        binds: list[UOp] = [v for _, v in statics if isinstance(v, UOp)]
        for (path, t), spec in zip(tensors, self._inputs, strict=True):
            uop = t.uop
            base = uop if uop.op is Ops.BUFFER else uop.src[0] if uop.op is Ops.RESHAPE else uop
            if spec.symbolic:
                base = self._symbolic_input(path, t, spec, var_vals)
                binds.append(t.uop)
            elif base.op is Ops.BUFFER and spec.whole_size >= 0:
                if base.arg != spec.whole_size:
                    raise err(f"{f}: input {path} is a different view of its buffer than at capture")
            else:
                base = _storage(t)
                if _view_key(t.uop, base) is not spec.key:
                    raise err(
                        f"{f}: input {path} is a different view of its buffer than at capture "
                        f"({_describe_view(_view_key(t.uop, base))} vs {_describe_view(spec.key)})"
                    )
            slot = seen.setdefault(base, len(bases))
            if slot == len(bases):
                bases.append(base)
            if slot != spec.slot:
                other = next(s.path for s in self._inputs if s.slot == (spec.slot if slot > spec.slot else slot))
                now, then = ("one buffer", "two") if slot < spec.slot else ("two buffers", "one")
                raise err(f"{f}: inputs {other} and {path} are {now} now but were {then} at capture")
        if len(bases) != len({s.slot for s in self._inputs}):
            raise err(f"{f}: the inputs share buffers differently than at capture")
        self._settle_pending_readers(bases)
        slots = [engine.buffer_for(b) for b in bases]
        out_uops: list[UOp] = []
        for i, buf in enumerate(self._out_slots):
            ref = self._out_handed[i]
            if ref is not None and ref() is not None:  # the last result is still in use: hand out a fresh buffer
                from tg.runtime.device import Buffer

                buf = self._out_slots[i] = Buffer(buf.device, buf.size, buf.dtype)
            uop = UOp.new_buffer(buf.device, buf.size, buf.dtype)
            engine.bind_buffer(uop, buf)
            self._out_handed[i] = weakref.ref(uop)
            out_uops.append(uop)
            slots.append(buf)
        if self._rng:
            self._redraw()
        if outer is not None:  # inside another jit's capture: run the schedule, so that the outer one records it
            engine.run_linear(program.instantiate_linear([*bases, *out_uops]), {**program.var_vals, **var_vals})
        else:
            program.replay(slots, var_vals)
        bound = _unbound_view(UOp.sink(*binds)) if binds and self._symbolic_outputs else None
        # (a module function, not a nested one: a closure calling itself is a reference cycle that would keep this
        # call's outputs alive until a garbage collection, so each replay would allocate fresh output buffers)
        returned = [None if out is None else Tensor(_build(out, bases, out_uops, bound)) for out in self._outputs]
        return unflatten_return(self._ret_structure, iter(returned))

    def _symbolic_input(self, path: str, t: Tensor, spec: _InputSpec, var_vals: dict[str, int]) -> UOp:
        """Check an input of symbolic shape against the capture (unbound: any values of its Variables), add its
        Variables' values to `var_vals`; returns its base buffer."""
        err, f = _jit_error(), f"TinyJit({self.name})"
        if not has_symbolic(t.shape) or not _is_view_of_buffer(t.uop):
            raise err(f"{f}: input {path} has shape {t.shape}, captured with the symbolic shape {spec.shape}")
        norm = _unbound_view(t.uop)
        if norm.sink is not spec.key:
            now = _variables(norm.sink.shape)
            then = _variables(spec.shape)
            if now != then:
                raise err(
                    f"{f}: input {path} uses Variable {', '.join(map(_describe_var, now))} where the capture used "
                    f"{', '.join(map(_describe_var, then))}"
                )
            if norm.sink.shape != spec.shape:
                raise err(f"{f}: input {path} has shape {norm.sink.shape}, captured with {spec.shape}")
            raise err(f"{f}: input {path} is a different view of its buffer than at capture")
        for name, value in norm.var_vals.items():
            if var_vals.setdefault(name, value) != value:
                raise err(f"{f}: Variable {name!r} is bound to {var_vals[name]} and to {value} in one call's inputs")
        return norm.inputs[0]

    @property
    def _symbolic_outputs(self) -> bool:
        return any(o.symbolic for o in _leaf_outputs(self._outputs))

    def _redraw(self) -> None:
        """Write this replay's counters and seed into the captured random inputs, then advance the counter."""
        start, seed = _random.rng.counter, _random.rng.seed & 0xFFFFFFFFFFFFFFFF
        for kind, buf, offset, num in self._rng:
            values = range(start + offset, start + offset + num) if kind == "counter" else [seed]
            buf.copyin(memoryview(array("Q", values)).cast("B"))
        _random.rng.counter = start + self._rng_advance

    def _settle_pending_readers(self, input_bases: list[UOp]) -> None:
        """Lazy tensors that read a buffer the replay writes are computed first: they keep the values they saw."""
        if not self._written_weights and not self._written_input_slots:
            return
        targets = {u for r in self._written_weights if (u := r()) is not None}
        targets.update(input_bases[s] for s in self._written_input_slots)
        if not targets:
            return
        pending = [t for root in _realize.pending_readers(targets) for t in _realize.index.tensors(root)]
        if pending:
            _realize.realize_tensors(pending)


# ---- helpers --------------------------------------------------------------------------------------------------


def _variables(shape: tuple) -> list[UOp]:
    """The DEFINE_VARs in an unbound shape, in order of first appearance."""
    found: dict[UOp, None] = {}
    for d in shape:
        if isinstance(d, UOp):
            found.update((u, None) for u in d.toposort() if u.op is Ops.DEFINE_VAR)
    return list(found)


def _describe_var(var: Any) -> str:
    if isinstance(var, UOp) and var.op is Ops.DEFINE_VAR:
        name, lo, hi = var.arg if isinstance(var.arg, tuple) else (var.arg, var.vmin, var.vmax)
        return f"{name!r} [{lo}, {hi}]"
    return repr(var)


def _param_names(fxn: Any) -> list[str]:
    try:
        return [
            p.name
            for p in inspect.signature(fxn).parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        ]
    except (TypeError, ValueError):
        return []


def _describe(structure: Any) -> str:
    args_key, kw_names, _ = structure
    n = len(args_key[1])
    return "(" + ", ".join([f"{n} positional"] + [f"{k}=..." for k in kw_names]) + ")"


def _realize_returned(ret: Any, name: str) -> None:
    returned: list[Tensor | None] = []
    flatten_return(ret, returned, name)
    todo = [t for t in returned if t is not None]
    if todo:
        Tensor.realize(*todo)
        for t in todo:  # a returned view is stored as its own buffer so that replays can hand it out
            if _realize.buffer_of(t.uop) is None and not (isinstance(t.device, tuple) and _realize.is_realized(t.uop)):
                t.uop = t.uop.contiguous()
                t.realize()
