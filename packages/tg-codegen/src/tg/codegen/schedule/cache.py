"""The schedule cache: a template per graph *structure*, instantiated with this realize's buffers.

Key: the normalised SINK (callify.py: inputs are numbered placeholder BUFFERs, variables unbound) and the
policy switches. Value: a `Template`: the LINEAR whose arguments are placeholders and buffers the scheduler made
(outputs, intermediates), and the storage of each observable node (`becomes`). Instantiating maps placeholders
to this realize's inputs and every scheduler-made buffer to a fresh one, so two realizes never share
intermediates and the cache holds no buffer that was ever allocated. Bounded LRU (`SCACHE_SIZE`, default 256);
`SCACHE=0` disables it; `clear_schedule_cache()` empties it. A hit skips every scheduling phase.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from tg.codegen.schedule import stats
from tg.codegen.schedule.callify import is_placeholder
from tg.ir import Ops, UOp

# SCACHE=0: schedule every realize from scratch; SCACHE_SIZE: templates kept (least recently used go first)
from tg.ir.helpers import SCACHE, SCACHE_SIZE


@dataclass(frozen=True)
class Template:
    """A scheduled structure: the LINEAR, the storage expression of each observable node, the buffers it made."""

    linear: UOp
    becomes: dict[UOp, UOp]
    made: tuple[UOp, ...]  # BUFFERs created by the scheduler (outputs, intermediates, temporaries)


_cache: OrderedDict[tuple[UOp, tuple], Template] = OrderedDict()
cache_stats = {"hits": 0, "misses": 0}
# bumped by clear_schedule_cache(): caches built on top of this one (tg.tensor's realize plans) drop their entries
generation = 0


def clear_schedule_cache() -> None:
    """Forget every cached schedule (tests, or after changing a policy switch by hand)."""
    global generation
    generation += 1
    _cache.clear()
    cache_stats.update(hits=0, misses=0)


def cache_lookup(key: tuple[UOp, tuple]) -> Template | None:
    """The template for `key`, if cached (and caching is on)."""
    if not SCACHE.value:
        return None
    if (t := _cache.get(key)) is not None:
        _cache.move_to_end(key)
        cache_stats["hits"] += 1
    else:
        cache_stats["misses"] += 1
    return t


def cache_store(key: tuple[UOp, tuple], template: Template) -> None:
    """Remember `template` (evicting the least recently used beyond SCACHE_SIZE)."""
    if not SCACHE.value:
        return
    _cache[key] = template
    while len(_cache) > SCACHE_SIZE.value:
        _cache.popitem(last=False)


def made_buffers(linear: UOp, becomes: dict[UOp, UOp]) -> tuple[UOp, ...]:
    """Every BUFFER in the call arguments and storage expressions that is not an input placeholder."""
    seen: dict[UOp, None] = {}
    for call in linear.src:
        for a in call.src[1:]:
            b = a.src[0] if a.op is Ops.BUFFER_VIEW else a
            if b.op is Ops.BUFFER and not is_placeholder(b):
                seen[b] = None
    for expr in becomes.values():
        for u in expr.toposort():
            if u.op is Ops.BUFFER and not is_placeholder(u):
                seen[u] = None
    return tuple(seen)


def instantiate(t: Template, inputs: list[UOp]) -> tuple[UOp, dict[UOp, UOp]]:
    """The template's LINEAR and storage map with placeholders -> `inputs` and fresh made buffers."""
    mapping: dict[UOp, UOp] = {}
    for b in t.made:
        mapping[b] = UOp.new_buffer(b.src[1].arg, b.arg, b.dtype)

    def arg(a: UOp) -> UOp:
        if a.op is Ops.BUFFER:
            return inputs[-1 - a.src[0].arg] if is_placeholder(a) else mapping[a]
        if a.op is Ops.BUFFER_VIEW:
            return a.replace(src=(arg(a.src[0]),))
        return a

    stats.steps += len(t.linear.src)
    calls = tuple(c.replace(src=(c.src[0], *(arg(a) for a in c.src[1:]))) for c in t.linear.src)
    linear = t.linear.replace(src=calls)
    becomes = {n: _rebase(e, arg) for n, e in t.becomes.items()}
    return linear, becomes


def _rebase(expr: UOp, arg: object) -> UOp:
    """A storage expression (movement ops over one BUFFER) on the mapped buffer."""
    chain = []
    while expr.op is not Ops.BUFFER:
        chain.append(expr)
        expr = expr.src[0]
    out = arg(expr)  # type: ignore[operator]
    for m in reversed(chain):
        out = m.replace(src=(out, *m.src[1:]))
    return out
