"""Gradient templates: a backward pass over a graph of a structure seen before reuses that pass's gradient graph.

An eager training loop differentiates a new graph of one structure every step. The gradient rules (tensor-level
ops, custom rules such as the convolution's) then run again to build the same gradient graph over new buffers.
Here a backward of a structure seen before runs `compute_gradient` and keeps its targets' gradients as a template: the
gradient-only nodes as a program over the forward nodes they read, named by position in the walk (so a template
holds no buffer of the step it came from); a later backward of the same structure runs the program over this
graph's nodes (hash-consing gives back the very nodes the rules would have built). The first backward from a root
of a kind (op, dtype, arg, number of targets) is not even walked: a graph differentiated once costs nothing extra.

The structure key is `tg.tensor.plans.Structure`'s (op, dtype, arg, tag and source positions per node, buffers by
first appearance) plus what else decides the rules' output: which nodes are targets and which have a custom
gradient rule (its code and inputs). Graphs whose gradients depend on more than their structure always take the
full path: a realized value differentiated through its recorded origin, bound Variables (keyed by variable, not
value), assigns, function calls and sharded tensors. Storage a rule makes (`contiguous()`) is made anew at every
instantiation. `GRAD_CACHE=0` turns the templates off; `stats` counts hits and misses (tests).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from tg.ir import Ops, UOp
from tg.ir.dtype import DType
from tg.ir.helpers import GRAD_CACHE
from tg.tensor.gradient import compute_gradient, custom_gradient_of
from tg.tensor.plans import Structure

# hits: backward passes that instantiated a template; misses: those that ran the gradient rules
stats = {"hits": 0, "misses": 0}
_MAX_TEMPLATES = 64
# ops whose gradient graphs are not a function of their structure alone (see the module docstring)
_UNCACHED_OPS = frozenset({Ops.FUNCTION, Ops.GETTUPLE, Ops.BIND})


@dataclass
class _Template:
    """A program that rebuilds the target gradients over a new forward graph. Slots hold, in order: the forward nodes
    the gradients read (at walk positions `inputs`), `made` fresh UNIQUE markers, then one node per entry of `nodes`
    (op, dtype, source slots, arg, tag); target `targets[i]`'s gradient is in slot `outputs[i]`."""

    inputs: tuple[int, ...]
    made: int
    nodes: tuple[tuple[Ops, DType, tuple[int, ...], Any, Any], ...]
    targets: tuple[int, ...]
    outputs: tuple[int, ...]

    def instantiate(self, order: list[UOp]) -> dict[UOp, UOp]:
        """The gradients over the forward graph whose nodes in walk order are `order`."""
        slots = [order[i] for i in self.inputs]
        slots.extend(UOp.unique() for _ in range(self.made))
        for op, dtype, src, arg, tag in self.nodes:
            slots.append(UOp(op, dtype, tuple([slots[i] for i in src]), arg, tag))
        return {order[t]: slots[o] for t, o in zip(self.targets, self.outputs, strict=True)}


_templates: OrderedDict[tuple[Any, ...], _Template] = OrderedDict()
_seen: OrderedDict[tuple[Any, ...], None] = OrderedDict()  # roots differentiated before (see target_gradients)


def clear_gradient_templates() -> None:
    """Forget every template."""
    _templates.clear()
    _seen.clear()
    stats.update(hits=0, misses=0)


def target_gradients(
    root: UOp, seed: UOp, targets: set[UOp], origins: Mapping[UOp, UOp], stored: Callable[[UOp], bool]
) -> dict[UOp, UOp]:
    """Gradients of `root` (seeded with `seed`) for the `targets` it depends on, as `compute_gradient` gives them,
    from a template when a graph of the same structure was differentiated before."""
    # a graph is walked for its key only when a backward from a root like this one (op, dtype, arg, number of
    # targets) ran before: a graph differentiated once (a deep one-off graph, a loop's first step) pays nothing
    first = (root.op, root.dtype, root.arg, len(targets))
    if GRAD_CACHE.value and first not in _seen:
        if len(_seen) >= _MAX_TEMPLATES:
            _seen.popitem(last=False)
        _seen[first] = None
        walk = None
    else:
        walk = Structure(UOp(Ops.SINK, src=(root, seed))) if GRAD_CACHE.value else None
    key = _key(walk, targets, origins) if walk is not None else None
    if key is None:
        stats["misses"] += GRAD_CACHE.value > 0
        return _only_targets(compute_gradient(root, seed, targets, origins, stored=stored), targets)
    assert walk is not None
    if (template := _templates.get(key)) is not None:
        stats["hits"] += 1
        _templates.move_to_end(key)
        return template.instantiate(walk.order)
    stats["misses"] += 1
    grads = _only_targets(compute_gradient(root, seed, targets, origins, stored=stored), targets)
    if len(_templates) >= _MAX_TEMPLATES:
        _templates.popitem(last=False)
    _templates[key] = _make_template(grads, walk)
    return grads


def _only_targets(grads: dict[UOp, UOp], targets: set[UOp]) -> dict[UOp, UOp]:
    return {t: g for t, g in grads.items() if t in targets}


def _key(walk: Structure, targets: set[UOp], origins: Mapping[UOp, UOp]) -> tuple[Any, ...] | None:
    """The template key of a walked graph, or None when its gradients may depend on more than its structure."""
    if walk.sharded or walk.binds or walk.assigns:
        return None
    pos = walk.positions
    decided: list[Any] = []  # (position, custom rule's code, its inputs' positions) and target positions
    any_origins = len(origins) > 0
    for i, u in enumerate(walk.order):
        if u.op in _UNCACHED_OPS or (any_origins and u in origins and u not in targets):
            return None
        if u in targets:
            decided.append(i)
        elif (custom := custom_gradient_of(u)) is not None:
            inputs, rule = custom
            if any(x not in pos for x in inputs):
                return None
            decided.append((i, getattr(rule, "__code__", rule), tuple(pos[x] for x in inputs)))
    return (walk.key, tuple(decided))


def _make_template(grads: dict[UOp, UOp], walk: Structure) -> _Template:
    """The program that rebuilds `grads` (they read the forward graph by walk position: no buffer of this backward
    stays pinned). Storage a rule made (a `contiguous()` UNIQUE marker) is made anew by each instantiation."""
    pos = walk.positions
    sink = UOp(Ops.SINK, src=tuple(grads.values()))
    built = [u for u in sink.toposort(gate=lambda u: u not in pos) if u is not sink]
    inputs = list(dict.fromkeys(s for u in (*built, sink) for s in u.src if s in pos))
    made = [u for u in built if u.op is Ops.UNIQUE]
    slot = {u: i for i, u in enumerate((*inputs, *made))}
    nodes = []
    for u in built:
        if u.op is not Ops.UNIQUE:
            nodes.append((u.op, u.dtype, tuple(slot[s] for s in u.src), u.arg, u.tag))
            slot[u] = len(slot)
    return _Template(tuple(pos[u] for u in inputs), len(made), tuple(nodes), tuple(pos[t] for t in grads),
                     tuple(slot[g] for g in grads.values()))  # fmt: skip
