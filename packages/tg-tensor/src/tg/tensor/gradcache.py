"""Gradient templates: a backward pass over a graph of a structure seen before reuses that pass's gradient graph.

An eager training loop differentiates a new graph of one structure every step. The gradient rules (tensor-level
ops, custom rules such as the convolution's) then run again to build the same gradient graph over new buffers.
Here the first backward of a structure runs `compute_gradient` and keeps the targets' gradients with every node of
the forward graph replaced by a placeholder for its position in the walk (so a template holds no buffer of the
step it came from); a later backward of the same structure puts this graph's nodes in the placeholders' places,
which rebuilds only the gradient-only nodes (hash-consing gives back the very nodes the rules would have built).

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
    """Target gradients over placeholders: `sink` is SINK(gradient of the target at position `targets[i]`, ...)."""

    sink: UOp
    targets: tuple[int, ...]
    placeholders: tuple[tuple[UOp, int], ...]  # (placeholder, position of the forward node it stands for)
    made: tuple[UOp, ...]  # UNIQUE markers of storage the rules made (fresh ones at every instantiation)


_templates: OrderedDict[tuple[Any, ...], _Template] = OrderedDict()
_MARK = "gradient template"


def clear_gradient_templates() -> None:
    """Forget every template."""
    _templates.clear()
    stats.update(hits=0, misses=0)


def target_gradients(
    root: UOp, seed: UOp, targets: set[UOp], origins: Mapping[UOp, UOp], stored: Callable[[UOp], bool]
) -> dict[UOp, UOp]:
    """Gradients of `root` (seeded with `seed`) for the `targets` it depends on, as `compute_gradient` gives them,
    from a template when a graph of the same structure was differentiated before."""
    walk = Structure(UOp(Ops.SINK, src=(root, seed))) if GRAD_CACHE.value else None
    key = _key(walk, targets, origins) if walk is not None else None
    if key is None:
        return _only_targets(compute_gradient(root, seed, targets, origins, stored=stored), targets)
    assert walk is not None
    if (template := _templates.get(key)) is not None:
        stats["hits"] += 1
        _templates.move_to_end(key)
        order = walk.order
        fill = {ph: order[i] for ph, i in template.placeholders}
        fill.update({u: UOp.unique() for u in template.made})
        sink = template.sink.substitute(fill)
        return {order[i]: g for i, g in zip(template.targets, sink.src, strict=True)}
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
    for i, u in enumerate(walk.order):
        if u.op in _UNCACHED_OPS or (u in origins and u not in targets):
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
    """The gradients with the forward graph's nodes as placeholders (no buffer of this backward stays pinned)."""
    pos = walk.positions
    swap = {u: UOp(Ops.NOOP, u.dtype, arg=(_MARK, i)) for u, i in pos.items()}
    sink = UOp(Ops.SINK, src=tuple(grads.values())).substitute(swap)
    leaves = [u for u in sink.toposort() if u.op in (Ops.NOOP, Ops.UNIQUE)]
    placeholders = tuple(u for u in leaves if u.op is Ops.NOOP and u.arg.__class__ is tuple and u.arg[0] == _MARK)
    # storage a rule made (`contiguous()`: a UNIQUE marker) is made anew at every instantiation, as the rule would
    made = tuple(u for u in leaves if u.op is Ops.UNIQUE)
    return _Template(sink, tuple(pos[t] for t in grads), tuple((u, u.arg[1]) for u in placeholders), made)
