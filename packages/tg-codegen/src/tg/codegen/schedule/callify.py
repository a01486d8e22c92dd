"""Normalise a tensor SINK into the structural key of its schedule.

Every input BUFFER becomes a placeholder BUFFER numbered by first appearance (`UNIQUE(-1 - slot)`, same device,
size and dtype), and every bound Variable (a BIND, also inside movement arguments) becomes its unbound
DEFINE_VAR, its value going to `var_vals`. A UNIQUE marking a CONTIGUOUS as storage of its own (two equal values
stored apart) is renumbered by first appearance (`UNIQUE(-1 - k)`): distinct markers stay distinct. Two graphs
that differ only in their buffers, variable values or markers normalise to the same UOp (hash-consing makes it
the same object), so it keys the schedule cache.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tg.codegen.schedule import stats
from tg.ir import Ops, UOp


def is_placeholder(buf: UOp) -> bool:
    """Whether a BUFFER is an input slot of a normalised graph."""
    return buf.op is Ops.BUFFER and buf.src[0].arg < 0


class Normalized:
    """A normalised SINK with the map back to this realize's buffers and variable values."""

    def __init__(self, sink: UOp) -> None:
        self.inputs: list[UOp] = []  # slot -> this realize's BUFFER
        self.placeholders: dict[UOp, UOp] = {}  # BUFFER -> placeholder
        self.var_vals: dict[str, int] = {}
        self.nodes: dict[UOp, UOp] = {}  # original node -> normalised node
        self._unbound: dict[UOp, UOp] = {}
        self._bound: dict[UOp, UOp] = {}  # DEFINE_VAR -> the BIND it came from (to give results bound shapes)
        self._markers: dict[UOp, UOp] = {}  # UNIQUE marker of a CONTIGUOUS -> its canonical number
        self._args: dict[Any, Any] = {}  # movement argument -> the same with its Variables unbound
        order = sink.toposort()
        stats.steps += len(order)
        for n in order:
            self.nodes[n] = self._normalise(n)
        self.sink = self.nodes[sink]

    def _bind(self, b: UOp) -> UOp:
        var, val = b.src[0], b.src[1].arg
        self._bound[var] = b
        name = str(var.arg[0])
        if self.var_vals.setdefault(name, val) != val:
            raise ValueError(
                f"variable {name!r} is bound to two values in one schedule: {self.var_vals[name]} and {val}"
            )
        return var

    def _unbind_uop(self, x: UOp) -> UOp:
        """`x` (a UOp of a movement argument) with every BIND replaced by its variable."""
        if (ret := self._unbound.get(x)) is None:
            binds = {b: self._bind(b) for b in x.toposort() if b.op is Ops.BIND}
            ret = self._unbound[x] = x.substitute(binds) if binds else x
        return ret

    def rebind(self, expr: UOp) -> UOp:
        """A storage expression (movement ops over a BUFFER) of the normalised graph with its Variables bound again
        to this realize's values, so a realized tensor's symbolic shape keeps its values."""
        if not self._bound:
            return expr
        chain = []
        while expr.op in SYMBOLIC_ARGS or expr.op in (Ops.PERMUTE, Ops.FLIP):
            chain.append(expr)
            expr = expr.src[0]
        for m in reversed(chain):
            expr = m.replace(src=(expr,), arg=map_uops(m.arg, self._bind_uop))
        return expr

    def _bind_uop(self, x: UOp) -> UOp:
        """`x` (a UOp of a movement argument) with every variable of this realize bound again to its BIND."""
        found = {v: self._bound[v] for v in x.toposort() if v.op is Ops.DEFINE_VAR and v in self._bound}
        return x.substitute(found) if found else x

    def _unbind_arg(self, arg: Any) -> Any:
        """A movement argument with its BINDs replaced by their variables: the same object when it has none (most
        are tuples of ints), memoised per argument (deep graphs repeat the same few shapes)."""
        if (ret := self._args.get(arg)) is None:
            mapped = map_uops(arg, self._unbind_uop)
            ret = self._args[arg] = arg if mapped == arg else mapped
        return ret

    def _marker(self, u: UOp) -> UOp:
        if (m := self._markers.get(u)) is None:
            m = self._markers[u] = UOp.unique(-1 - len(self._markers))
        return m

    def _normalise(self, n: UOp) -> UOp:
        if n.op is Ops.BUFFER:
            if (p := self.placeholders.get(n)) is None:
                p = self.placeholders[n] = UOp(n.op, n.dtype, (UOp.unique(-1 - len(self.inputs)), n.src[1]), n.arg)
                self.inputs.append(n)
            return p
        if n.op is Ops.BIND:
            return self._bind(n)
        nodes = self.nodes
        src = tuple([self._marker(s) if s.op is Ops.UNIQUE else nodes[s] for s in n.src])
        arg = self._unbind_arg(n.arg) if n.op in SYMBOLIC_ARGS else n.arg
        if arg is n.arg and src == n.src:
            return n
        ret = UOp(n.op, n.dtype, src, arg, n.tag)
        known, new = n.__dict__, ret.__dict__
        if not self._bound and arg is n.arg and "_shape" in known and "device" in known:
            # no Variable was unbound below n: inputs became placeholders of the same size on the same device
            new["_shape"], new["device"] = known["_shape"], known["device"]
        else:
            _ = ret._shape, ret.device  # computed now, sources first: lazily on a deep graph they would recurse
        return ret


def map_uops(x: Any, fn: Callable[[UOp], UOp]) -> Any:
    """`x` (a movement argument: ints, UOps and nested tuples of them) with `fn` applied to every UOp in it."""
    if isinstance(x, tuple):
        return tuple(map_uops(v, fn) for v in x)
    return fn(x) if isinstance(x, UOp) else x


# the ops whose argument may hold bound Variables (symbolic shapes): normalising unbinds them there
SYMBOLIC_ARGS = frozenset({Ops.RESHAPE, Ops.EXPAND, Ops.PAD, Ops.SHRINK})
