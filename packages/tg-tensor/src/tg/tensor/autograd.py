"""Autograd bookkeeping with PyTorch's `requires_grad` model: grad mode, training mode, which graph nodes require
grad, the registry of grad leaves, and `backward` / `gradient` on top of `gradient.compute_gradient`
(through `gradcache.target_gradients`, which reuses the gradient graph of a structure differentiated before).

A result requires grad when grad mode is on and its graph reaches a node that requires grad without passing a DETACH.
That is decided once per new UOp (memoised per node, weakly) and costs nothing while no tensor requires grad.
"""

from __future__ import annotations

import contextlib
import threading
import weakref
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, ClassVar, Self

from tg.ir import Context, Ops, UOp, dtypes
from tg.ir.helpers import TRAINING  # training mode: `with Tensor.train():`, `Context(TRAINING=1)` or env TRAINING=1
from tg.tensor import origins as _origins
from tg.tensor.gradcache import target_gradients

if TYPE_CHECKING:
    from tg.tensor.tensor import Tensor

_grad_mode = threading.local()
# per node, kept in the node's __dict__ like its cached properties: does it require grad (reach a grad-requiring
# node without a DETACH)? Decided once per node; only leaves change it (`mark`)
_MEMO = "_autograd_requires_grad"
# nodes that require grad (a fast "is anything tracked at all?" check)
_tracked: weakref.WeakSet[UOp] = weakref.WeakSet()


# leaves with requires_grad=True and non-leaves with retain_grad(): the tensors backward() fills .grad of
class _TensorSet:
    """A weak set of tensors by identity (a WeakSet compares members with `==`, which is elementwise on tensors)."""

    def __init__(self) -> None:
        self._refs: dict[int, weakref.ref[Tensor]] = {}

    def add(self, t: Tensor) -> None:
        key = id(t)
        if key not in self._refs:
            self._refs[key] = weakref.ref(t, lambda r: self._refs.pop(key) if self._refs.get(key) is r else None)

    def discard(self, t: Tensor) -> None:
        if (ref := self._refs.get(id(t))) is not None and ref() is t:
            del self._refs[id(t)]

    def __contains__(self, t: object) -> bool:
        return (ref := self._refs.get(id(t))) is not None and ref() is t

    def __iter__(self) -> Iterator[Tensor]:
        return iter([t for r in list(self._refs.values()) if (t := r()) is not None])

    def __len__(self) -> int:
        return len(self._refs)


grad_leaves = _TensorSet()


# ---- grad mode ------------------------------------------------------------------------------------------------


def is_grad_enabled() -> bool:
    """True unless inside `no_grad()` (per thread)."""
    return getattr(_grad_mode, "enabled", True)


class set_grad_enabled(contextlib.ContextDecorator):  # torch's lower-case name
    """Switch grad mode on or off: as a call (`set_grad_enabled(False)`), a `with` block or a decorator."""

    def __init__(self, mode: bool) -> None:
        self.prev = is_grad_enabled()
        self.mode = bool(mode)
        _grad_mode.enabled = self.mode

    def __enter__(self) -> set_grad_enabled:
        _grad_mode.enabled = self.mode
        return self

    def __exit__(self, *exc: object) -> None:
        _grad_mode.enabled = self.prev


class _GradMode(contextlib.ContextDecorator):
    """A `with` block (or decorator) running in grad mode `enabled`; the previous mode comes back on exit."""

    enabled: ClassVar[bool]

    def __enter__(self) -> Self:
        self.prev = is_grad_enabled()
        _grad_mode.enabled = self.enabled
        return self

    def __exit__(self, *exc: object) -> None:
        _grad_mode.enabled = self.prev


class no_grad(_GradMode):  # torch's lower-case name
    """Results computed inside do not require grad (optimizer steps, evaluation): `with no_grad(): ...`."""

    enabled = False


class enable_grad(_GradMode):  # torch's lower-case name
    """Turn grad mode back on inside a `no_grad` block."""

    enabled = True


class TrainingFlag:
    """`Tensor.training`: reads the TRAINING switch (set it with `Tensor.train()` or `Context(TRAINING=1)`)."""

    def __get__(self, obj: object, owner: type | None = None) -> bool:
        return bool(TRAINING.value)


def train(mode: bool = True) -> Context:
    """Training mode on (or off) inside a `with` block or a decorated function: `with Tensor.train(): ...`."""
    return Context(TRAINING=int(bool(mode)))


# ---- which nodes require grad ---------------------------------------------------------------------------------


def anything_tracked() -> bool:
    """False while no live node requires grad (the fast path for inference code)."""
    return bool(_tracked)


def operand_tensors_add_nothing() -> bool:
    """Whether an op built from its operands' uops has the nodes it would have from operand tensors: in grad mode,
    or with nothing tracked (under no_grad a tracked operand's tensor is cut off by a DETACH)."""
    return is_grad_enabled() or not anything_tracked()


def mark(uop: UOp, flag: bool) -> None:
    """Record whether `uop` itself requires grad (a leaf being switched on or off)."""
    uop.__dict__[_MEMO] = flag
    if flag:
        _tracked.add(uop)
        _origins.remember_key(uop)
    else:
        _tracked.discard(uop)


def _marked(uop: UOp) -> bool:
    return bool(uop.__dict__.get(_MEMO))


def reaches_grad(root: UOp) -> bool:
    """True if `root`'s graph reaches a node that requires grad without passing a DETACH (memoised per node)."""
    if (known := root.__dict__.get(_MEMO)) is not None:
        return known
    if root.op is not Ops.DETACH:  # the usual case (a new op result over known sources): no stack
        flag = False
        for s in root.src:
            if (f := s.__dict__.get(_MEMO)) is None:
                break
            flag = flag or f
        else:
            root.__dict__[_MEMO] = flag
            if flag:
                _tracked.add(root)
            return flag
    stack = [root]
    while stack:
        u = stack[-1]
        memo = u.__dict__
        if _MEMO in memo:
            stack.pop()
            continue
        if u.op is Ops.DETACH:
            memo[_MEMO] = False
            stack.pop()
            continue
        pending = [s for s in u.src if _MEMO not in s.__dict__]
        if pending:
            stack.extend(pending)
            continue
        stack.pop()
        flag = any(s.__dict__[_MEMO] for s in u.src)
        memo[_MEMO] = flag
        if flag:
            _tracked.add(u)
    return bool(root.__dict__[_MEMO])


def track_result(t: Tensor) -> None:
    """Set up a new op result: in grad mode it requires grad if an input does; under no_grad a result that would
    require grad is cut off by a DETACH (views of stored tensors stay views, so writes through them still work)."""
    if not dtypes.is_float(t.dtype) or not reaches_grad(t.uop):  # integer results never carry gradient
        return
    if is_grad_enabled():
        t._requires_grad, t._is_leaf = True, False
        return
    if t.uop.base.op not in (Ops.BUFFER, Ops.ASSIGN):
        t.uop = t.uop.detach()


def note_realized(becomes: dict[UOp, UOp], fresh_from: int | None = None) -> None:
    """Called after a realize: a value that required grad and now lives in a buffer keeps requiring grad, and
    gradients flow through the graph it was computed from (tg.tensor.origins: states of buffers, placeholders).
    `fresh_from`: the first UNIQUE number of the buffers this realize made (a value stored in one of those is in no
    graph built before it: no walk asks)."""
    if not _tracked:
        return
    epoch = _origins.new_epoch()
    # buffers this realize overwrote: their states before the write become placeholders first
    retired: dict[UOp, UOp] = {}
    leaf_writes: set[UOp] = set()
    for old, new in becomes.items():
        if old.op is Ops.ASSIGN and (buf := _origins.base_buffer(new)) is not None and buf not in retired:
            retired[buf], was_leaf = _origins.retire_state(buf, epoch, _marked)
            if was_leaf:
                leaf_writes.add(buf)
    placeholders = set(retired.values())
    for old, new in becomes.items():
        # reaches_grad, not the memo alone: a graph rebuilt by an earlier realize's substitute (a lazy tensor that
        # shared nodes with what was realized) holds new nodes nobody has asked about yet
        if new is old or not reaches_grad(old):
            continue
        if old.op is Ops.ASSIGN:
            # an ASSIGN into a grad leaf's own buffer (an optimizer update) starts afresh: the leaf stays a leaf; one
            # into any other buffer (clone, `copy_` into a plain tensor) keeps its graph, as torch's copy_ does
            if _origins.base_buffer(new) in leaf_writes:
                continue
            graph = old.src[1]
        else:
            graph = old
        reads_old = False
        if retired:  # what this realize's writes replaced is read as the previous state
            if (swapped := graph.substitute(retired)) is not graph:
                graph, reads_old = _origins.drop_assigns_into(swapped, placeholders), True
        if not _made_since(new, fresh_from) and _reads(graph, new):
            continue  # the realize changed nothing (contiguous() of a stored value): the node stands for itself
        mark(new, True)
        _origins.record(new, graph, reads_old)


def keep_overwritten_reads(buf: UOp, value: Tensor) -> Tensor:
    """Before `buf` is overwritten with `value`: if gradients will flow through `value` and it reads `buf`, it reads a
    stored copy instead, so the backward still has the old values (torch saves them too: `b.mul_(w)` needs the old
    `b` for w's gradient). A grad leaf's own update needs none (it starts afresh)."""
    cls = value._tensor_class()
    if not is_grad_enabled() or buf.op is not Ops.BUFFER or not reaches_grad(value.uop):
        return value
    if (_marked(buf) and buf not in _origins.origins) or buf not in value.uop.toposort():
        return value
    old = cls.empty(buf.arg, dtype=buf.dtype, device=str(buf.device))
    old.assign(cls(buf, requires_grad=False)).realize()
    return cls(value.uop.substitute({buf: old.uop}))


def _made_since(u: UOp, fresh_from: int | None) -> bool:
    """Whether `u` is single-source ops over a BUFFER whose UNIQUE number is `fresh_from` or later."""
    if fresh_from is None:
        return False
    while u.op is not Ops.BUFFER and len(u.src) == 1:
        u = u.src[0]
    return u.op is Ops.BUFFER and (n := u.src[0].arg).__class__ is int and n >= fresh_from


def _reads(graph: UOp, node: UOp) -> bool:
    """Whether `graph` contains `node`, walking only the part that may require grad."""
    return graph is node or node in graph.toposort(lambda u: u.__dict__.get(_MEMO, True))


# ---- leaves, backward, gradient -------------------------------------------------------------------------------


def set_requires_grad(t: Tensor, flag: bool) -> None:
    """`t.requires_grad_(flag)`: make `t` a grad leaf (backed by its own buffer) or stop tracking it."""
    if flag:
        if not dtypes.is_float(t.dtype):
            raise RuntimeError(f"only tensors of floating point dtype can require gradients, got {t.dtype.name}")
        if not t._is_leaf:
            return  # already requires grad through its inputs
        from tg.tensor.live import buffer_of, own_storage

        if buffer_of(t.uop) is None:
            # a leaf needs storage of its own: equal lazy graphs (two zeros(3)) would be one node otherwise
            t.uop = own_storage(t.uop)
            t.realize()
        mark(t.uop, True)
        grad_leaves.add(t)
    else:
        if not t._is_leaf:
            raise RuntimeError("you can only change requires_grad flags of leaf tensors; use detach() on a result")
        if t._requires_grad:
            mark(t.uop, False)
        grad_leaves.discard(t)
    t._requires_grad = flag


def _seed(root: Tensor, gradient: Tensor | None, what: str) -> UOp:
    cls = root._tensor_class()
    if not dtypes.is_float(root.dtype):
        raise RuntimeError(f"{what}: only a floating point tensor can be differentiated, got {root.dtype.name}")
    if gradient is None:
        if root.numel() != 1:
            raise RuntimeError(
                f"{what}: grad can be implicitly created only for one-element outputs, got shape {root.shape}; "
                "pass gradient="
            )
        return UOp.full(root.shape, 1.0, root.dtype, root.device)
    if not isinstance(gradient, cls):
        gradient = cls(gradient, device=root.device, dtype=root.dtype)
    if gradient.shape != root.shape:
        raise RuntimeError(f"{what}: gradient has shape {gradient.shape}, the output {root.shape}")
    return gradient.cast(root.dtype).uop


def gradient(root: Tensor, targets: Sequence[Tensor], grad: Tensor | None = None) -> list[Tensor]:
    """d(root)/d(target) for each target (zeros where root does not depend on it), as lazy tensors."""
    cls = root._tensor_class()
    seed = _seed(root, grad, "gradient")
    for t in targets:
        if not isinstance(t, cls):
            raise TypeError(f"gradient targets must be Tensors, got {type(t).__name__}")
    resolved = _origins.ResolvedOrigins()
    grads = target_gradients(root.uop, seed, {t.uop for t in targets}, resolved, resolved.stored)
    grads = resolved.restore_values(grads)
    return [cls(grads[t.uop]) if t.uop in grads else t.zeros_like() for t in targets]


def _unset_tensors_in(root: Tensor) -> list[Tensor]:
    """Live float tensors (root excluded) whose graph is a node of root's graph and whose requires_grad was never
    set, found through the realize index."""
    from tg.tensor.live import index

    found: dict[int, Tensor] = {}
    for node in root.uop.toposort(lambda u: u.op is not Ops.DETACH):
        for t in index.tensors(node):
            if t is not root and t.requires_grad is None and dtypes.is_float(t.dtype):
                found.setdefault(id(t), t)
    return list(found.values())


def backward(
    root: Tensor, grad: Tensor | None = None, retain_graph: bool | None = None, create_graph: bool = False
) -> None:
    """Accumulate d(root)/d(leaf) into `.grad` of every grad leaf (and retained non-leaf) root depends on.

    As in torch, a second backward from the same tensor raises unless the earlier one passed `retain_graph=True`
    (it would add the same gradients again); `create_graph=True` keeps the gradients differentiable (and retains)."""
    from tg.tensor.live import buffer_of

    cls = root._tensor_class()
    leaves = list(grad_leaves)
    if not root.requires_grad:
        # tinygrad's habit: nothing asked for gradients, so every float tensor of the graph whose requires_grad was
        # never set gets one (`x = Tensor.randn(4); (x * x).sum().backward(); x.grad`); torch would raise
        leaves = _unset_tensors_in(root)
        if not leaves:
            raise RuntimeError(
                "backward: the tensor does not require grad (no input has requires_grad=True, or it was computed "
                "under no_grad() or detached)"
            )
    if getattr(root, "_backward_done", False):
        raise RuntimeError(
            "backward: this tensor's backward already ran, and a second one would add the same gradients again. "
            "Pass retain_graph=True to the first backward() if you mean to run it twice, or compute the loss again"
        )
    seed = _seed(root, grad, "backward")
    resolved = _origins.ResolvedOrigins()
    grads = target_gradients(root.uop, seed, {t.uop for t in leaves}, resolved, resolved.stored)
    grads = resolved.restore_values(grads)
    if not (create_graph if retain_graph is None else retain_graph):
        root._backward_done = True
    for t in leaves:
        if (g := grads.get(t.uop)) is None:
            continue
        new = cls(g, requires_grad=None) if create_graph else cls(g.detach(), requires_grad=False)
        if t.grad is None:
            t.grad = new
        elif buffer_of(t.grad.uop) is not None:
            t.grad.assign(t.grad + new)  # keep the buffer (optimizers and the JIT hold on to it)
        else:
            t.grad = t.grad + new
