"""The expander: UPCAST/UNROLL (and register GROUP_REDUCE) ranges become unrolled copies and one vector axis.

After `opt` splits a kernel's ranges, the ranges of type UPCAST, UNROLL and (on targets without shared memory)
GROUP_REDUCE are no loops: every value that depends on them is computed once per value of those ranges. One of
them, the *vector axis*, becomes the lanes of native vectors (`renderer.vector_bytes` wide): it is an output UPCAST
axis with unit stride in the store (a row of a matmul tile) or, for reductions, a reduce axis with unit stride in a
load (then its lanes are separate accumulators, summed horizontally once after the loop). All other expanded ranges
are unrolled into separate scalar or vector values.

A float16 load whose only uses are casts to float32 may be a vector too (renderers with `half_vector_loads`: the
cast widens the whole vector).
Loads and stores whose index is `base + lane` become one vector access; an index without the lane is a scalar
access splatted to all lanes; any other index (and any gate that depends on the lane) is accessed lane by lane, as
are bools (a byte each in memory; the C target keeps bool vectors as lane masks in registers).
A REDUCE over expanded ranges gets one accumulator per value of its GROUP_REDUCE ranges (and per output lane
value); UNROLL values fold into it serially in lane order, so `acc + a*b` chains stay in one register; the
accumulators are combined by a balanced tree after the loop. THREAD ranges become the `core_id` variable.
On targets without local ids (the PYTHON device) a WARP range (from the TC opt) is expanded too, and a WMMA that
depends on it becomes one WMMA over all lanes' fragments (lane-major), each lane reading its part with GEP.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from typing import NamedTuple

from tg.codegen.lower.structure import build_accumulator, combine, identity_element
from tg.codegen.render.renderer import CORE_ID, Renderer
from tg.ir.dtype import DType, dtypes
from tg.ir.ops import AxisType, GroupOp, Ops
from tg.ir.pattern import PatternMatcher, UPat, graph_rewrite
from tg.ir.symbolic import affine
from tg.ir.uop import UOp

# value dtypes that live in native vectors (others are unrolled as scalars)
VECTOR_DTYPES = frozenset({dtypes.float32, dtypes.float64, dtypes.int32, dtypes.uint32, dtypes.int64, dtypes.uint64})


def widened_half_loads(topo: list[UOp], renderer: Renderer) -> set[UOp]:
    """The float16 loads of a kernel that may be vectors: each used only by casts to float32, on a renderer that
    converts whole float16 vectors (`half_vector_loads`); empty elsewhere."""
    if not getattr(renderer, "half_vector_loads", False):
        return set()
    halves = {u for u in topo if u.op is Ops.LOAD and u.dtype is dtypes.float16}
    if not halves:
        return set()
    ok = set(halves)
    for u in topo:
        for s in u.src:
            if s in ok and not (u.op is Ops.CAST and u.dtype is dtypes.float32):
                ok.discard(s)
    return ok


def gathered_loads(loads: list[UOp], r: UOp) -> int:
    """How many of `loads` move with range `r` other than by one element per step (vector lanes along `r` would load
    them one by one)."""
    return sum(1 for ld in loads if r in ld.src[0].src[1].toposort()
               and ((a := affine(ld.src[0].src[1], r)) is None or a[0] != 1))  # fmt: skip


class Expander:
    """One kernel's expansion (see the module docstring): `run()` applies `EXPAND_RULES` (below the class) to the
    kernel in one iterative walk (`ex`) and returns the rewritten SINK."""

    def __init__(self, sink: UOp, renderer: Renderer, regs: Iterator[int]) -> None:
        self.ren, self.regs = renderer, regs
        self.sink = sink
        shared = renderer.has_shared
        self.expanded = {
            u
            for u in sink.toposort()
            if u.op is Ops.RANGE
            and (
                u.axis_type in (AxisType.UPCAST, AxisType.UNROLL)
                or (u.axis_type is AxisType.GROUP_REDUCE and not shared)
                or (u.axis_type is AxisType.WARP and not renderer.has_local)
            )
        }
        self.warp_ops: dict[tuple[UOp, tuple[tuple[UOp, int], ...]], UOp] = {}
        self.lane: UOp | None = None
        self.chunk: UOp | None = None  # the unrolled part of a vector axis wider than one native vector
        self.width = 1
        self._pick_vector_axis()
        self.deps: dict[UOp, frozenset[UOp]] = {}
        for u in self.sink.toposort():
            d: frozenset[UOp] = frozenset().union(*(self.deps[s] for s in u.src))
            if u in self.expanded or u is self.lane:
                d = frozenset({u})
            elif u.op in (Ops.REDUCE, Ops.END):
                d = self.deps[u.src[0]] - set(u.src[1:])
            self.deps[u] = d
        special = self.expanded | ({self.lane} if self.lane is not None else set())
        self.touched: dict[UOp, bool] = {}
        for u in self.sink.toposort():
            self.touched[u] = u in special or any(self.touched[s] for s in u.src)
        self.memo: dict[tuple[UOp, tuple[tuple[UOp, int], ...]], UOp] = {}
        self.rules: dict[UOp, ExpandRule] = {}  # node -> the rule that expands it

    # ---- choosing the vector axis --------------------------------------------------------------------------

    def _lanes_for(self, dt: DType) -> int:
        return max(1, getattr(self.ren, "vector_bytes", 0) // dt.itemsize) if dt in VECTOR_DTYPES else 1

    def _pick_vector_axis(self) -> None:
        topo = list(self.sink.toposort())
        stores = [u for u in topo if u.op is Ops.STORE]
        loads = [u for u in topo if u.op is Ops.LOAD]
        wide = widened_half_loads(topo, self.ren)
        if any(u.dtype.scalar() not in VECTOR_DTYPES | {dtypes.bool} and u not in wide
               for u in topo if u.op in GroupOp.ALU | {Ops.LOAD}):  # fmt: skip
            return  # emulated or narrow dtypes: unroll as scalars
        cands: list[tuple[int, UOp, DType]] = []
        for r in sorted(self.expanded, key=lambda r: r.axis_id):
            if r.axis_type is AxisType.UPCAST:
                for s in stores:
                    if (a := affine(s.src[0].src[1], r)) is not None and a[0] == 1:
                        cands.append((0, r, s.src[1].dtype))
                        break
            else:
                reduces = [u for u in topo if u.op is Ops.REDUCE and r in u.src[1:]]
                if reduces and reduces[0].arg in (Ops.ADD, Ops.MAX, Ops.MUL):
                    for ld in loads:
                        if (a := affine(ld.src[0].src[1], r)) is not None and a[0] == 1:
                            cands.append((1, r, reduces[0].dtype))
                            break
        # an output axis whose loads would be gathered lane by lane (`x @ W.T`'s columns, W read along K) gives way
        # to a reduce axis that every load moving with it reads contiguously (a dot-product tile)
        for _, r, dt in sorted(cands, key=lambda c: (gathered_loads(loads, c[1]) > 0, c[0])):
            w = self._lanes_for(dt)
            while w > 1 and int(r.range_size) % w:
                w //= 2
            if w < 2:
                continue
            self.width = w
            if int(r.range_size) == w:
                self.lane, self.expanded = r, self.expanded - {r}
                return
            # r -> chunk*w + lane: the chunk keeps r's type (unrolled), the lane is the vector
            next_id = 1 + max(u.axis_id for u in self.sink.toposort() if u.op is Ops.RANGE)
            chunk = UOp.range(int(r.range_size) // w, r.axis_id, r.axis_type, r.dtype)
            lane = UOp.range(w, next_id, r.axis_type, r.dtype)
            self.sink = _substitute_ranges(self.sink, {r: (chunk * w + lane, (chunk, lane))})
            self.expanded = (self.expanded - {r}) | {chunk}
            self.lane, self.chunk = lane, chunk
            return

    # ---- expansion ------------------------------------------------------------------------------------------

    def run(self) -> UOp:
        return self.ex(self.sink, {})

    def _key(self, u: UOp, env: dict[UOp, int]) -> tuple[UOp, tuple[tuple[UOp, int], ...]]:
        return u, tuple(sorted(((r, v) for r, v in env.items() if r in self.deps[u]), key=lambda x: x[0].axis_id))

    def _fix(self, x: UOp, env: dict[UOp, int], lane: int | None = None) -> UOp:
        """Index math with the unrolled ranges (and optionally the lane) replaced by constants."""
        sub = {r: UOp.const(r.dtype, env[r]) for r in self.deps[x] if r in env}
        if lane is not None and self.lane is not None:
            sub[self.lane] = UOp.const(self.lane.dtype, lane)
        return (x.substitute(sub) if sub else x).simplify()

    def vec(self, x: UOp) -> UOp:
        """x as a vector of the kernel's width (a scalar is broadcast)."""
        return x if x.dtype.count == self.width else x.broadcast(self.width)

    def ex(self, u: UOp, env: dict[UOp, int]) -> UOp:
        """u expanded for the values `env` of the unrolled ranges.

        One iterative walk, not recursive (kernels can be 10,000 ops deep), applying `EXPAND_RULES`: a request
        whose inputs (its rule's `inputs`) are not all expanded yet goes back on the stack under them; once they are,
        the rule's `build` makes the node and finds them memoised."""
        if not self.touched[u]:
            return u
        if (m := self.memo.get(key := self._key(u, env))) is not None:
            return m
        stack: list[tuple[UOp, dict[UOp, int], tuple[UOp, tuple[tuple[UOp, int], ...]]]] = [(u, env, key)]
        while stack:
            node, nenv, nkey = stack[-1]
            if nkey in self.memo:
                stack.pop()
                continue
            rule = self.rule(node)
            missing = [(s, senv, skey) for s, senv in rule.inputs(self, node, nenv)
                       if self.touched[s] and (skey := self._key(s, senv)) not in self.memo]  # fmt: skip
            if missing:
                stack.extend(reversed(missing))
                continue
            stack.pop()
            self.memo[nkey] = rule.build(self, node, nenv)
        return self.memo[key]

    def rule(self, u: UOp) -> ExpandRule:
        """The first of `EXPAND_RULES` that matches `u` (memoised: a node is expanded once per env)."""
        if (r := self.rules.get(u)) is None:
            r = self.rules[u] = next(r for r in EXPAND_RULES if r.matches(self, u))
        return r

    def _warp_of(self, u: UOp) -> UOp | None:
        return next((r for r in self.deps[u] if r.axis_type is AxisType.WARP), None)

    def _reduce_axes(self, u: UOp) -> tuple[list[UOp], list[UOp]]:
        """A REDUCE's expanded ranges: (GROUP_REDUCE ones, the others)."""
        rngs = [r for r in u.src[1:] if r in self.expanded]
        group = [r for r in rngs if r.axis_type is AxisType.GROUP_REDUCE]
        return group, [r for r in rngs if r not in group]

    # ---- the builds of the rules (their inputs are expanded already) -------------------------------------------

    def _range(self, u: UOp, env: dict[UOp, int]) -> UOp:
        if u is self.lane:
            return UOp.const(u.dtype.vec(self.width), tuple(range(self.width)))
        return UOp.const(u.dtype, env[u]) if u in self.expanded else u

    def _end_inputs(self, u: UOp, env: dict[UOp, int]) -> list[tuple[UOp, dict[UOp, int]]]:
        ended = [r for r in u.src[1:] if r in self.expanded]
        return [(u.src[0], {**env, **a}) for a in self._assignments(ended, chunk_last=True)]

    def _reduce_inputs(self, u: UOp, env: dict[UOp, int]) -> list[tuple[UOp, dict[UOp, int]]]:
        groups, unrolls = self._reduce_axes(u)
        unrolled = self._assignments(unrolls)
        return [(u.src[0], {**env, **g, **a}) for g in self._assignments(groups) for a in unrolled]

    def _warp_inputs(self, u: UOp, env: dict[UOp, int]) -> list[tuple[UOp, dict[UOp, int]]]:
        warp = self._warp_of(u)
        assert warp is not None
        rest = {r: v for r, v in env.items() if r is not warp}
        return [(s, {**rest, warp: lane}) for s in u.src for lane in range(int(warp.range_size))]

    def _elementwise(self, u: UOp, env: dict[UOp, int]) -> UOp:
        src = tuple(self.ex(s, env) for s in u.src)
        if self.lane is not None and any(s.dtype.count == self.width > 1 for s in src) and \
                (u.op in GroupOp.ALU or u.op in (Ops.CAST, Ops.BITCAST)):  # fmt: skip
            return UOp(u.op, u.dtype.vec(self.width), tuple(self.vec(s) for s in src), u.arg)
        return u if src == u.src else u.replace(src=src)

    def _access(self, idx: UOp, env: dict[UOp, int]) -> tuple[str, UOp | None, UOp | None]:
        """How an INDEX is accessed: ("scalar"|"vector", index, gate) or ("lanes", None, None)."""
        _, off, *gate = idx.src
        g = self._fix(gate[0], env) if gate else None
        if self.lane is None or self.lane not in self.deps[idx]:
            return "scalar", self._fix(off, env), g
        if (gate and self.lane in self.deps[gate[0]]) or idx.dtype.base.scalar() is dtypes.bool:
            return "lanes", None, None  # bools: one byte each in memory, lane masks in registers
        off = self._fix(off, env)
        a = affine(off, self.lane)
        if a is None or a[0] not in (0, 1):
            return "lanes", None, None
        return ("vector" if a[0] == 1 else "scalar"), a[1].simplify(), g

    def _index(self, idx: UOp, off: UOp, gate: UOp | None) -> UOp:
        buf = self.ex(idx.src[0], {})
        return UOp(Ops.INDEX, idx.dtype, (buf, off) if gate is None else (buf, off, gate), idx.arg)

    def _lane_index(self, idx: UOp, env: dict[UOp, int], k: int) -> UOp:
        _, off, *gate = idx.src
        return self._index(idx, self._fix(off, env, k), self._fix(gate[0], env, k) if gate else None)

    def _load(self, u: UOp, env: dict[UOp, int]) -> UOp:
        idx = u.src[0]
        kind, off, gate = self._access(idx, env)
        if kind == "lanes":
            return UOp(
                Ops.VECTORIZE,
                u.dtype.vec(self.width),
                tuple(UOp(Ops.LOAD, u.dtype, (self._lane_index(idx, env, k),), u.arg) for k in range(self.width)),
            )
        assert off is not None
        dt = u.dtype.vec(self.width) if kind == "vector" else u.dtype
        ld = UOp(Ops.LOAD, dt, (self._index(idx, off, gate),), u.arg)
        return ld if kind == "vector" or self.lane is None or self.lane not in self.deps[u] else self.vec(ld)

    def _store(self, u: UOp, env: dict[UOp, int]) -> UOp:
        idx, val = u.src[0], self.ex(u.src[1], env)
        kind, off, gate = self._access(idx, env)
        if kind == "scalar" and val.dtype.count > 1:
            kind = "lanes"  # every lane writes one address: keep the semantics of the last write
        if kind == "lanes":
            return UOp(Ops.GROUP, dtypes.void, tuple(
                UOp(Ops.STORE, dtypes.void, (self._lane_index(idx, env, k), val.gep(k) if val.dtype.count > 1
                                             else val), u.arg) for k in range(self.width)))  # fmt: skip
        assert off is not None
        if kind == "vector":
            val = self.vec(val)
        return UOp(Ops.STORE, dtypes.void, (self._index(idx, off, gate), val, *u.src[2:]), u.arg)

    def _warp_wmma(self, u: UOp, env: dict[UOp, int]) -> UOp:
        """A WMMA of an expanded WARP range: one op over every lane's fragments (lane-major), this lane's part."""
        warp = self._warp_of(u)
        assert warp is not None
        rest = {r: v for r, v in env.items() if r is not warp}
        key = self._key(u, rest)
        if (whole := self.warp_ops.get(key)) is None:
            lanes = range(int(warp.range_size))
            srcs = [[self.ex(s, {**rest, warp: lane}) for lane in lanes] for s in u.src]
            flat = tuple(UOp(Ops.VECTORIZE, s[0].dtype.scalar().vec(s[0].dtype.count * len(s)),
                             tuple(x.gep(i) for x in s for i in range(x.dtype.count))) for s in srcs)  # fmt: skip
            whole = UOp(Ops.WMMA, u.dtype.scalar().vec(u.dtype.count * len(lanes)), flat, u.arg)
            self.warp_ops[key] = whole
        n = u.dtype.count
        return whole.gep(tuple(range(env[warp] * n, env[warp] * n + n)))

    def _assignments(self, rngs: list[UOp], chunk_last: bool = False) -> list[dict[UOp, int]]:
        """Every combination of values of `rngs`, the first range (by id) slowest; with `chunk_last` the vector
        chunk range is the fastest instead."""
        rngs = sorted(rngs, key=lambda r: (chunk_last and r is self.chunk, r.axis_id))
        sizes = (range(int(r.range_size)) for r in rngs)
        return [dict(zip(rngs, vals, strict=True)) for vals in itertools.product(*sizes)]

    def _end(self, u: UOp, env: dict[UOp, int]) -> UOp:
        ended = [r for r in u.src[1:] if r in self.expanded]
        keep = [r for r in u.src[1:] if r not in self.expanded and r is not self.lane]
        # the vector chunks of one tile row next to each other: a register tile's row operand (a broadcast) is
        # then used by all its chunks at once instead of staying live across the whole tile (register spills)
        bodies = [self.ex(u.src[0], {**env, **a}) for a in self._assignments(ended, chunk_last=True)]
        body = bodies[0] if len(bodies) == 1 else UOp(Ops.GROUP, dtypes.void, tuple(bodies))
        return UOp(Ops.END, dtypes.void, (body, *keep), u.arg) if keep else body

    def _reduce(self, u: UOp, env: dict[UOp, int]) -> UOp:
        value, rngs = u.src[0], u.src[1:]
        groups, unrolls = self._reduce_axes(u)
        loops = [r for r in rngs if r not in self.expanded and r is not self.lane]
        horizontal = self.lane is not None and self.lane in rngs
        accs = []
        for g in self._assignments(groups):
            values = [self.ex(value, {**env, **g, **a}) for a in self._assignments(unrolls)]
            if any(v.dtype.count > 1 for v in values):
                values = [self.vec(v) for v in values]
            dt = values[0].dtype
            if loops:
                accs.append(build_accumulator(self.regs, u.arg, dt, values, loops, self.ren))
            else:
                acc = UOp.const(dt, identity_element(u.arg, dt.scalar()))
                for v in values:
                    acc = combine(u.arg, acc, v, self.ren)
                accs.append(acc)
        while len(accs) > 1:  # balanced tree over the separate accumulators
            accs = [combine(u.arg, accs[i], accs[i + 1], self.ren) if i + 1 < len(accs) else accs[i]
                    for i in range(0, len(accs), 2)]  # fmt: skip
        ret = accs[0]
        if horizontal and ret.dtype.count > 1:
            while ret.dtype.count > 1:
                half = ret.dtype.count // 2
                ret = combine(u.arg, ret.gep(tuple(range(half))), ret.gep(tuple(range(half, 2 * half))), self.ren)
        return ret


class ExpandRule(NamedTuple):
    """One rule of the expander: which nodes it takes, the (node, env) requests their expansion reads (expanded
    first by `Expander.ex`), and how the node is built from them."""

    matches: Callable[[Expander, UOp], bool]
    inputs: Callable[[Expander, UOp, dict[UOp, int]], list[tuple[UOp, dict[UOp, int]]]]
    build: Callable[[Expander, UOp, dict[UOp, int]], UOp]


def _same_env(ex: Expander, u: UOp, env: dict[UOp, int]) -> list[tuple[UOp, dict[UOp, int]]]:
    return [(s, env) for s in u.src]


# the expander's rules, the first that matches a node applies; after them no expanded range is left: every value is
# a scalar or a vector of the kernel's width, every END/REDUCE closes only loops
EXPAND_RULES: tuple[ExpandRule, ...] = (
    # a RANGE: the lane numbers (a vector constant) for the vector axis, its value in the env for an unrolled range
    ExpandRule(lambda ex, u: u.op is Ops.RANGE, lambda ex, u, env: [], Expander._range),
    # a LOAD through an INDEX: one vector load (index base + lane), one scalar load (splatted where the lane is
    # used), or one load per lane (any other index, a gate that depends on the lane, bools); the buffer needs no env
    ExpandRule(lambda ex, u: u.op is Ops.LOAD and u.src[0].op is Ops.INDEX and len(u.src) == 1,
               lambda ex, u, env: [(u.src[0].src[0], {})], Expander._load),
    # a STORE through an INDEX: the same three kinds of access, the value expanded in the env
    ExpandRule(lambda ex, u: u.op is Ops.STORE and u.src[0].op is Ops.INDEX,
               lambda ex, u, env: [(u.src[0].src[0], {}), (u.src[1], env)], Expander._store),
    # an END: one body per value of its unrolled ranges (vector chunks of a tile row next to each other), grouped;
    # the END keeps only its loops
    ExpandRule(lambda ex, u: u.op is Ops.END, Expander._end_inputs, Expander._end),
    # a REDUCE: one accumulator per GROUP_REDUCE value, UNROLL values folded into it in lane order, accumulators
    # combined by a balanced tree, a vector axis reduced horizontally at the end
    ExpandRule(lambda ex, u: u.op is Ops.REDUCE, Expander._reduce_inputs, Expander._reduce),
    # a WMMA of an expanded WARP range (targets without local ids): one WMMA over every lane's fragments
    ExpandRule(lambda ex, u: u.op is Ops.WMMA and ex._warp_of(u) is not None, Expander._warp_inputs,
               Expander._warp_wmma),
    # any other op: its sources in the same env; an ALU op or cast with a vector source becomes a vector op
    ExpandRule(lambda ex, u: True, _same_env, Expander._elementwise),
)  # fmt: skip


def _ranges_listed(ctx: dict[UOp, tuple[UOp, tuple[UOp, ...]]], u: UOp) -> UOp | None:
    if not any(r in ctx for r in u.src[1:]):
        return None
    rngs = [x for r in u.src[1:] for x in (ctx[r][1] if r in ctx else (r,))]
    return u.replace(src=(u.src[0], *rngs)) if rngs else u.src[0]


# ranges replaced by expressions (ctx: range -> (expression, the ranges that take its place in range lists)); applied
# top-down, so a REDUCE/END still sees its own ranges: afterwards no replaced range is left anywhere, and a
# REDUCE/END left without ranges is just its value
pm_substitute_ranges = PatternMatcher([
    (UPat((Ops.REDUCE, Ops.END), name="u"), _ranges_listed),
    (UPat(Ops.RANGE, name="r"), lambda ctx, r: ctx[r][0] if r in ctx else None),
])  # fmt: skip


def _substitute_ranges(root: UOp, sub: dict[UOp, tuple[UOp, tuple[UOp, ...]]]) -> UOp:
    """Replace ranges by expressions; in REDUCE/END range lists, by the given ranges."""
    return graph_rewrite(root, pm_substitute_ranges, ctx=sub, bottom_up=True, name="substitute ranges")


def expand_kernel(sink: UOp, renderer: Renderer, regs: Iterator[int]) -> UOp:
    """Expand UPCAST/UNROLL/register GROUP_REDUCE ranges and THREAD ranges of kernel `sink` (see module doc)."""
    threads = {u: (UOp.variable(CORE_ID, 0, int(u.range_size) - 1, u.dtype), ()) for u in sink.toposort()
               if u.op is Ops.RANGE and u.axis_type is AxisType.THREAD}  # fmt: skip
    if len(threads) > 1:
        raise ValueError(f"a kernel can have one THREAD axis, got {len(threads)}")
    if threads:
        sink = _substitute_ranges(sink, threads)  # type: ignore[arg-type]
    lanes = (AxisType.UPCAST, AxisType.UNROLL) if renderer.has_shared else (AxisType.UPCAST, AxisType.UNROLL,
                                                                             AxisType.GROUP_REDUCE)  # fmt: skip
    lanes = lanes if renderer.has_local else (*lanes, AxisType.WARP)
    special = any(u.op is Ops.RANGE and u.axis_type in lanes for u in sink.toposort())
    return Expander(sink, renderer, regs).run() if special else sink
