"""Loop-structure passes: one END per range, reductions as accumulators, and shared ranges made unambiguous.

After these passes a kernel has no REDUCE: every loop is a RANGE closed by exactly one single-range END, and every
value that crosses a loop boundary goes through memory (a DEFINE_REG accumulator ordered with AFTER).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from tg.ir.dtype import AddrSpace, ConstType, DType, dtypes
from tg.ir.ops import Ops
from tg.ir.pattern import PatternMatcher, UPat
from tg.ir.uop import UOp

if TYPE_CHECKING:
    from tg.codegen.render.renderer import Renderer


def open_ranges(root: UOp) -> dict[UOp, frozenset[UOp]]:
    """For every node under `root`: the RANGEs it depends on that no END between them and the node has closed."""
    ret: dict[UOp, frozenset[UOp]] = {}
    for u in root.toposort():
        s: frozenset[UOp] = frozenset().union(*(ret[x] for x in u.src))
        if u.op is Ops.RANGE:
            s = s | {u}
        elif u.op is Ops.END:
            s = s - set(u.src[1:])
        ret[u] = s
    return ret


# *** split ENDs: afterwards every END closes exactly one range, outer ranges (lower axis ids) outside ***


def _split_end(e: UOp) -> UOp | None:
    if len(e.src) <= 2:
        return None
    ret = e.src[0]
    for r in sorted(e.src[1:], key=lambda r: r.axis_id, reverse=True):
        ret = UOp(Ops.END, dtypes.void, (ret, r))
    return ret


pm_split_ends = PatternMatcher([(UPat(Ops.END, name="e"), _split_end)])


# *** reduce to accumulator: afterwards no REDUCE remains; each became a register initialised, updated, read ***


def identity_element(op: Ops, dt: DType) -> ConstType:
    """The value `x` with `op(x, y) == y` for every `y` of dtype `dt` (0 for ADD, 1 for MUL, the minimum for MAX)."""
    if op is Ops.ADD:
        return False if dt == dtypes.bool else 0.0 if dtypes.is_float(dt) else 0
    if op is Ops.MUL:
        return True if dt == dtypes.bool else 1.0 if dtypes.is_float(dt) else 1
    if op is Ops.MAX:
        return dt.min
    raise ValueError(f"REDUCE op must be ADD, MUL or MAX, got {op}")


def combine(op: Ops, acc: UOp, x: UOp, renderer: Renderer | None = None) -> UOp:
    """`acc op x` for a reduction; `acc + a*b` becomes MULACC(a, b, acc) when the renderer has a fused multiply-add."""
    # bool accumulators: ADD is OR, MUL is AND, MAX is OR (C's _Bool arithmetic would also do, this is explicit)
    if acc.dtype.scalar() == dtypes.bool and op in (Ops.ADD, Ops.MAX):
        return UOp(Ops.OR, acc.dtype, (acc, x))
    if acc.dtype.scalar() == dtypes.bool and op is Ops.MUL:
        return UOp(Ops.AND, acc.dtype, (acc, x))
    if op is Ops.ADD and x.op is Ops.MUL and getattr(renderer, "has_fma", False) and dtypes.is_float(x.dtype) \
            and x.dtype.scalar() in (dtypes.float32, dtypes.float64):  # fmt: skip
        return UOp(Ops.MULACC, acc.dtype, (x.src[0], x.src[1], acc))
    return UOp(op, acc.dtype, (acc, x))


def _fold(op: Ops, acc: UOp, values: Sequence[UOp], renderer: Renderer | None) -> UOp:
    """`acc` combined with every value: products into a fused multiply-add chain keep their order (one register),
    other values are combined pairwise first (a balanced tree: shorter rounding chains) and added once."""
    if any(combine(op, acc, v, renderer).op is Ops.MULACC for v in values):
        for v in values:
            acc = combine(op, acc, v, renderer)
        return acc
    vals = list(values)
    while len(vals) > 1:
        vals = [combine(op, vals[i], vals[i + 1], renderer) if i + 1 < len(vals) else vals[i]
                for i in range(0, len(vals), 2)]  # fmt: skip
    return combine(op, acc, vals[0], renderer) if vals else acc


def _accumulator(ctx: Iterator[int], op: Ops, dtype: DType, values: Sequence[UOp], reduce_ranges: Sequence[UOp],
                 renderer: Renderer | None) -> UOp:  # fmt: skip
    """One register: the identity before `reduce_ranges`, combined with `values` in them; returns its final read."""
    opened = frozenset().union(*(open_ranges(v)[v] for v in values))
    outer = sorted(opened - set(reduce_ranges), key=lambda r: r.axis_id)
    acc = UOp(Ops.DEFINE_REG, dtype.ptr(1, AddrSpace.REG), (), next(ctx))
    zero = UOp.const(dtypes.int32, 0)
    init_target = UOp(Ops.AFTER, acc.dtype, (acc, *outer)) if outer else acc
    ident = UOp.const(dtype, identity_element(op, dtype.scalar()))
    init = UOp(Ops.STORE, dtypes.void, (UOp(Ops.INDEX, acc.dtype, (init_target, zero)), ident))
    in_loop = UOp(Ops.AFTER, acc.dtype, (acc, init, *reduce_ranges))
    slot = UOp(Ops.INDEX, acc.dtype, (in_loop, zero))
    update: UOp = UOp(Ops.STORE, dtypes.void, (slot, _fold(op, UOp(Ops.LOAD, dtype, (slot,)), values, renderer)))
    for r in sorted(reduce_ranges, key=lambda r: r.axis_id, reverse=True):
        update = UOp(Ops.END, dtypes.void, (update, r))
    done = UOp(Ops.AFTER, acc.dtype, (acc, update))
    return UOp(Ops.LOAD, dtype, (UOp(Ops.INDEX, acc.dtype, (done, zero)),))


def build_accumulator(ctx: Iterator[int], op: Ops, dtype: DType, values: Sequence[UOp], reduce_ranges: Sequence[UOp],
                      renderer: Renderer | None = None) -> UOp:  # fmt: skip
    """A one-element register set to the identity before `reduce_ranges` and combined in them with every value of
    `values` (a fused multiply-add chain in order, other values pairwise first); returns the read of the final value."""
    return _accumulator(ctx, op, dtype, values, reduce_ranges, renderer)


def reduce_to_accumulator(ctx: tuple[Iterator[int], Renderer | None], red: UOp) -> UOp:
    """REDUCE(value, *ranges) -> a one-element register: set to the identity, combined with `value` in the loop.

    `ctx` is (register id counter, renderer): `acc + a*b` becomes a fused MULACC when the renderer has one."""
    value, reduce_ranges = red.src[0], red.src[1:]
    if red.arg not in (Ops.ADD, Ops.MUL, Ops.MAX):
        raise ValueError(f"REDUCE arg must be Ops.ADD, Ops.MUL or Ops.MAX, got {red.arg!r}")
    for r in reduce_ranges:
        if r.op is not Ops.RANGE:
            raise ValueError(f"REDUCE sources after the value must be RANGEs, got {r.op}")
    if not reduce_ranges:
        return value
    return build_accumulator(ctx[0], red.arg, red.dtype, [value], reduce_ranges, ctx[1])


pm_reduce_to_accumulator = PatternMatcher([(UPat(Ops.REDUCE, name="red"), reduce_to_accumulator)])


# *** merge/clone shared ranges: afterwards each RANGE has exactly one END ***


def _substitute_range(root: UOp, old: UOp, new: UOp, stop: set[UOp]) -> UOp:
    """Rebuild `root` with RANGE `old` replaced by `new`, without entering the nodes in `stop` (they keep `old`)."""
    memo: dict[UOp, UOp] = {}  # sources first (a loop: kernels can be thousands of ops deep)
    for u in root.toposort():
        if u is old:
            memo[u] = new
        elif u in stop or all(memo[s] is s for s in u.src):
            memo[u] = u
        else:
            memo[u] = u.replace(src=tuple(memo[s] for s in u.src))
    return memo[root]


def _ends_by_range(sink: UOp) -> dict[UOp, list[UOp]]:
    ret: dict[UOp, list[UOp]] = {}
    for u in sink.toposort():
        if u.op is Ops.END:
            for r in u.src[1:]:
                ret.setdefault(r, []).append(u)
    return ret


def unify_ends(sink: UOp) -> UOp:
    """Make every RANGE closed by one END.

    ENDs of one range that are independent and sit in the same loops merge (their bodies become a GROUP). An END
    that depends on another END of the same range, or sits in different outer loops, gets a fresh copy of the range
    (merging those would run one body too often or form a cycle).

    Still a worklist that finds the ENDs again after each step (issue 30 leaves it so, for now): a merge or a clone
    rebuilds the nodes above it, which can make ENDs of outer ranges equal (hash-consing merges them for free) or give
    them new dependencies, and fresh axis ids are given in the order of the steps, so a one-pass version must
    reproduce that order to keep the generated code. It seldom has work: of the 2,190 lowerings of the kernel-text
    workload (scripts/kernel_text.py; 1,095 kernels for AVX2 C and CUDA), 85 needed steps (128 merges, 47 clones
    of a range in another nest, none of a dependent END), at most 13 for one kernel.
    """
    for _ in range(1000):
        shared = next(((r, es) for r, es in _ends_by_range(sink).items() if len(es) > 1), None)
        if shared is None:
            return sink
        r, ends = shared
        deps = {e: set(e.toposort()) for e in ends}
        later = next((e for e in ends if any(o in deps[e] for o in ends if o is not e)), None)
        if later is None:
            live = open_ranges(sink)
            nests: dict[frozenset[UOp], list[UOp]] = {}
            for e in ends:
                nests.setdefault(live[e], []).append(e)
            if len(nests) == 1:
                body = UOp(Ops.GROUP, dtypes.void, tuple(e.src[0] for e in ends))
                merged = UOp(Ops.END, dtypes.void, (body, r))
                sink = sink.substitute({e: merged for e in ends})
                continue
            later = list(nests.values())[1][0]
        next_axis = 1 + max((u.axis_id for u in sink.toposort() if u.op is Ops.RANGE), default=-1)
        arg = (next_axis, *r.arg[1:]) if isinstance(r.arg, tuple) else next_axis
        fresh = UOp(Ops.RANGE, r.dtype, r.src, arg)
        stop = {e for e in ends if e is not later}
        sink = sink.substitute({later: _substitute_range(later, r, fresh, stop)})
    raise RuntimeError("unify_ends did not converge (ranges shared in a cycle?)")
