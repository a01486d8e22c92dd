"""`OptKernel`: an immutable view of a kernel AST for one renderer, with `apply(opt)` returning a new kernel.

The optimisable axes are the kernel's RANGEs except size-1 and DEVICE ranges, sorted by (position of the axis
type, axis id) as in shared/specs/optimizer.md §2.2. Legality rules live in `check_split`/`check_*` below; every
failure raises KernelOptError naming the opt, the axes (`shape_str`) and the violated rule.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from tg.codegen.lower.structure import identity_element
from tg.codegen.opt.opts import KernelOptError, Opt, OptOps, split
from tg.codegen.opt.tensor_cores import apply_tc
from tg.ir.dtype import PtrDType, dtypes
from tg.ir.ops import AxisType, KernelInfo, Ops, axis_letters
from tg.ir.pattern import PatternMatcher, UPat, graph_rewrite
from tg.ir.symbolic import affine
from tg.ir.uop import UOp

if TYPE_CHECKING:
    from tg.codegen.render.renderer import Renderer

# a THREAD axis may have up to this many ids per core: the CPU pool hands ids out one at a time, so more ids than
# cores balance the work when a core is busy with another process
THREAD_IDS_PER_CORE = 8

# sort position of each axis type (tinygrad's axis_to_pos, plus THREAD beside GLOBAL)
AXIS_POS = {AxisType.LOOP: -1, AxisType.GLOBAL: 0, AxisType.THREAD: 0, AxisType.WARP: 1, AxisType.LOCAL: 2,
            AxisType.GROUP_REDUCE: 2, AxisType.UPCAST: 3, AxisType.REDUCE: 4, AxisType.UNROLL: 5,
            AxisType.DEVICE: 6}  # fmt: skip

# which axis types a SPLIT may take its new axis from (§2.3)
SPLIT_SOURCES = {
    AxisType.UPCAST: (AxisType.GLOBAL, AxisType.LOCAL, AxisType.LOOP),
    AxisType.UNROLL: (AxisType.REDUCE, AxisType.GROUP_REDUCE),
    AxisType.LOCAL: (AxisType.GLOBAL, AxisType.LOOP),
    AxisType.GROUP_REDUCE: (AxisType.REDUCE,),
    AxisType.THREAD: (AxisType.LOOP, AxisType.GLOBAL),
}
MAX_UNROLL = 32
MAX_REGISTER_ELEMENTS = 1024  # product of UPCAST and register GROUP_REDUCE sizes (accumulator elements)


def const_size(r: UOp) -> int:
    """The trip count of a RANGE when it is a constant, 0 when it is symbolic (the heuristics skip those)."""
    return s if isinstance(s := r.range_size, int) else 0


def index_stride(idx: UOp, r: UOp) -> int | None:
    """How far the index `idx` moves per step of range `r` (its coefficient when `idx` is affine in `r`), or None."""
    return None if (a := affine(idx, r)) is None else a[0]


def vector_lanes(renderer: Renderer, itemsize: int) -> int:
    """Lanes of the widest native vector of elements of `itemsize` bytes (1 without vectors)."""
    return max(1, getattr(renderer, "vector_bytes", 0) // itemsize)


def _flatten_ranges(x: UOp) -> UOp | None:
    if all(s.op is Ops.RANGE for s in x.src[1:]):
        return None
    rngs: list[UOp] = []
    for s in x.src[1:]:
        for r in s.toposort():
            if r.op is Ops.RANGE and r not in rngs:
                rngs.append(r)
    rngs.sort(key=lambda r: r.axis_id)
    if x.op is Ops.REDUCE:
        return x.src[0].reduce(*rngs, arg=x.arg) if rngs else x.src[0]
    return UOp(Ops.END, x.dtype, (x.src[0], *rngs), x.arg) if rngs else x.src[0]


def _simplify_index(x: UOp) -> UOp | None:
    new = (x.src[0], *(s.simplify() for s in x.src[1:]))
    return None if new == x.src else x.replace(src=new)


# after a range substitution: REDUCE/END list the ranges they close (not expressions), indices are simplified
pm_after_split = PatternMatcher([
    (UPat((Ops.END, Ops.REDUCE), name="x"), _flatten_ranges),
    (UPat(Ops.INDEX, name="x"), _simplify_index),
])  # fmt: skip


class OptKernel:
    """A kernel AST with the opts applied so far; `apply` returns a new OptKernel (BEAM branches share nothing
    mutable)."""

    def __init__(self, ast: UOp, renderer: Renderer, applied: tuple[Opt, ...] = ()) -> None:
        self.ast, self.renderer, self.applied = ast, renderer, applied

    @functools.cached_property
    def ranges(self) -> list[UOp]:
        """The optimisable axes in §2.2 order."""
        rngs = {u for u in self.ast.toposort() if u.op is Ops.RANGE}
        keep = [r for r in rngs if r.axis_type is not AxisType.DEVICE and not (isinstance(s := r.range_size, int)
                                                                                and s <= 1)]  # fmt: skip
        return sorted(keep, key=lambda r: (AXIS_POS[r.axis_type], r.axis_id))

    def axes(self) -> list[tuple[UOp, AxisType, int | UOp]]:
        """(range, AxisType, size) of every optimisable axis, in order."""
        return [(r, r.axis_type, r.range_size) for r in self.ranges]

    def shape_str(self) -> str:
        """The axes as letters and sizes, e.g. `L64 L32 u32 u8 R256 r4`."""
        parts = []
        for _, t, s in self.axes():
            parts.append(f"{axis_letters[t]}{s if isinstance(s, int) else s.render()}")
        return " ".join(parts) or "(no axes)"

    @functools.cached_property
    def next_id(self) -> int:
        return 1 + max((u.axis_id for u in self.ast.toposort() if u.op is Ops.RANGE), default=-1)

    @functools.cached_property
    def stores(self) -> list[UOp]:
        return [u for u in self.ast.toposort() if u.op is Ops.STORE]

    @functools.cached_property
    def dtype_itemsize(self) -> int:
        """The largest element size among the kernel's stored values (decides vector lanes)."""
        return max((s.src[1].dtype.itemsize for s in self.stores), default=4)

    def type_product(self, *types: AxisType) -> int:
        ret = 1
        for _, t, s in self.axes():
            if t in types and isinstance(s, int):
                ret *= s
        return ret

    def fail(self, opt: Opt, rule: str) -> KernelOptError:
        return KernelOptError(f"{opt} on axes [{self.shape_str()}]: {rule}")

    # ---- applying -----------------------------------------------------------------------------------------

    def apply(self, opt: Opt) -> OptKernel:
        """A new kernel with `opt` applied; raises KernelOptError when it is not legal here."""
        if not isinstance(opt, Opt):
            raise TypeError(f"apply needs an Opt, got {opt!r}")
        if opt.op is OptOps.TC:  # warp-wide matrix multiply-accumulate (opt/tensor_cores.py)
            return OptKernel(graph_rewrite(apply_tc(self, opt), pm_after_split), self.renderer, (*self.applied, opt))
        if not 0 <= opt.axis < len(self.ranges):
            raise self.fail(opt, f"axis {opt.axis} out of range: the kernel has {len(self.ranges)} optimisable axes")
        r = self.ranges[opt.axis]
        if opt.op is OptOps.SPLIT:
            ast = self._split(opt, r)
        elif opt.op is OptOps.PADTO:
            ast = self._padto(opt, r)
        else:
            ast = self._swap(opt, r)
        return OptKernel(graph_rewrite(ast, pm_after_split), self.renderer, (*self.applied, opt))

    def try_apply(self, opt: Opt) -> OptKernel:
        """`apply(opt)`, or this kernel unchanged when `opt` is not legal here (the heuristics' way to try)."""
        try:
            return self.apply(opt)
        except KernelOptError:
            return self

    def split_axis(self, axis_id: int, types: tuple[AxisType, ...], factor: int, target: AxisType,
                   top: bool = False) -> OptKernel:  # fmt: skip
        """Split the range with axis id `axis_id` (and one of `types`) by `factor` into a `target` range; this
        kernel unchanged when there is no such range, `factor` < 2 or the split is not legal."""
        i = next((i for i, r in enumerate(self.ranges) if r.axis_id == axis_id and r.axis_type in types), None)
        return self if i is None or factor < 2 else self.try_apply(split(i, factor, target, top))

    def _split(self, opt: Opt, r: UOp) -> UOp:
        factor, target, top = opt.arg
        src_t, size = r.axis_type, r.range_size
        if not isinstance(size, int):
            raise self.fail(opt, "the axis has a symbolic size (only constant sizes split)")
        f = size if factor == 0 else factor
        if target not in SPLIT_SOURCES:
            raise self.fail(
                opt, f"cannot split into {target.name} (targets: {', '.join(t.name for t in SPLIT_SOURCES)})"
            )
        if src_t not in SPLIT_SOURCES[target]:
            raise self.fail(opt, f"{target.name} splits only {'/'.join(t.name for t in SPLIT_SOURCES[target])} axes, "
                                 f"axis {opt.axis} is {src_t.name}")  # fmt: skip
        if f < 2 or size % f != 0:
            raise self.fail(opt, f"factor {f} must be >= 2 and divide the axis size {size}")
        if top and target not in (AxisType.GROUP_REDUCE, AxisType.THREAD):
            raise self.fail(opt, f"top=True splits only GROUP_REDUCE and THREAD, not {target.name}")
        ren = self.renderer
        lanes = vector_lanes(ren, self.dtype_itemsize)
        if target is AxisType.UPCAST and f > max(16, 4 * lanes):
            raise self.fail(opt, f"UPCAST factor {f} > {max(16, 4 * lanes)} (4 vectors)")
        if target is AxisType.UNROLL and f > MAX_UNROLL:
            raise self.fail(opt, f"UNROLL factor {f} > {MAX_UNROLL}")
        if target in (AxisType.LOCAL, AxisType.GROUP_REDUCE) and ren.has_shared and not ren.has_local:
            raise self.fail(opt, f"{type(ren).__name__} has no local ids")
        if target is AxisType.LOCAL and not ren.has_local:
            raise self.fail(opt, f"{type(ren).__name__} has no local ids (LOCAL needs a GPU)")
        if target in (AxisType.LOCAL, AxisType.GROUP_REDUCE) and ren.has_local:
            threads = f * self.type_product(AxisType.LOCAL, AxisType.GROUP_REDUCE)
            if threads > ren.max_local_threads:
                raise self.fail(opt, f"{threads} work-items per work-group > {ren.max_local_threads} "
                                     f"(max_local_threads of {type(ren).__name__})")  # fmt: skip
        if target is AxisType.GROUP_REDUCE:
            if ren.has_shared:
                used = f * self.type_product(AxisType.UPCAST, AxisType.WARP, AxisType.LOCAL, AxisType.GROUP_REDUCE)
                if used * self.dtype_itemsize > ren.shared_max:
                    raise self.fail(opt, f"GROUP_REDUCE needs {used * self.dtype_itemsize} bytes of shared memory > "
                                         f"{ren.shared_max}")  # fmt: skip
            if any(u.op is Ops.REDUCE and r in u.src[1:] and any(v.op is Ops.REDUCE for v in u.src[0].toposort())
                   for u in self.ast.toposort()):  # fmt: skip
                raise self.fail(opt, "GROUP_REDUCE of a reduce that contains another reduce")
        if target in (AxisType.UPCAST, AxisType.GROUP_REDUCE) and not ren.has_shared:
            regs = f * self.type_product(AxisType.UPCAST, AxisType.GROUP_REDUCE)
            if regs > MAX_REGISTER_ELEMENTS:
                raise self.fail(opt, f"{regs} accumulator elements > {MAX_REGISTER_ELEMENTS} (register file)")
        if target is AxisType.THREAD:
            if not getattr(ren, "has_threads", False):
                raise self.fail(opt, f"{type(ren).__name__} has no threads")
            if f > (tmax := getattr(ren, "thread_max", 1) * THREAD_IDS_PER_CORE):
                raise self.fail(opt, f"THREAD factor {f} > {THREAD_IDS_PER_CORE} x thread_max = {tmax}")
            if not top:
                raise self.fail(opt, "THREAD needs top=True (each thread owns a contiguous block)")
            if any(t is AxisType.THREAD for _, t, _ in self.axes()):
                raise self.fail(opt, "the kernel already has a THREAD axis")
            if not all(r in s.src[0].toposort() for s in self.stores):
                raise self.fail(opt, f"axis {opt.axis} does not index every store (threads would race)")
        q = size // f
        new = UOp.range(f, self.next_id, target, r.dtype)
        rest = UOp.range(q, r.axis_id, src_t, r.dtype) if q > 1 else UOp.const(r.dtype, 0)
        expr = new * q + rest if top else rest * f + new
        return self.ast.substitute({r: expr})

    def _padto(self, opt: Opt, r: UOp) -> UOp:
        t, size, m = r.axis_type, r.range_size, opt.arg
        if t in (AxisType.UPCAST, AxisType.UNROLL, AxisType.THREAD):
            raise self.fail(opt, f"PADTO cannot pad a {t.name} axis (pad before splitting)")
        if not isinstance(size, int):
            raise self.fail(opt, "PADTO needs a constant axis size")
        if m < 2:
            raise self.fail(opt, f"PADTO multiple {m} must be >= 2")
        padded = (size + m - 1) // m * m
        if padded == size:
            raise self.fail(opt, f"axis size {size} is already a multiple of {m}")
        if padded >= 4 * size:
            raise self.fail(opt, f"padding {size} to {padded} would waste more than 3/4 of the work")
        new = UOp.range(padded, r.axis_id, t, r.dtype)
        for u in self.ast.toposort():
            if u.op in (Ops.IDIV, Ops.MOD) and dtypes.is_int(u.dtype) and any(
                    v.op is Ops.LOAD and r in v.toposort() for v in u.src[1].toposort()):  # fmt: skip
                raise self.fail(opt, "an integer division's divisor is loaded along this axis (0 would trap)")
        valid = new < size
        memo: dict[UOp, UOp] = {}
        for u in self.ast.substitute({r: new}).toposort():
            src = tuple(memo[x] for x in u.src)
            v = u if src == u.src else u.replace(src=src)
            if v.op is Ops.INDEX and any(new in x.toposort() for x in v.src[1:]):
                v = v.replace(src=(v.src[0], v.src[1], valid if len(v.src) < 3 else (v.src[2] & valid)))
            elif v.op is Ops.REDUCE and new in v.src[1:]:
                ident = UOp.const(v.dtype, identity_element(v.arg, v.dtype))
                v = v.replace(src=(valid.where(v.src[0], ident), *v.src[1:]))
            memo[u] = v
        return memo[u]

    def _swap(self, opt: Opt, r: UOp) -> UOp:
        if not 0 <= opt.arg < len(self.ranges) or opt.arg == opt.axis:
            raise self.fail(opt, f"SWAP partner {opt.arg} must be another axis in [0, {len(self.ranges)})")
        o = self.ranges[opt.arg]
        if not (r.axis_type is o.axis_type and r.axis_type in (AxisType.GLOBAL, AxisType.LOOP)):
            raise self.fail(opt, f"SWAP needs two GLOBAL or two LOOP axes, got {r.axis_type.name} and "
                                 f"{o.axis_type.name}")  # fmt: skip
        ra = UOp(Ops.RANGE, r.dtype, r.src, (o.axis_id, r.axis_type))
        rb = UOp(Ops.RANGE, o.dtype, o.src, (r.axis_id, o.axis_type))
        return self.ast.substitute({r: ra, o: rb})

    # ---- results ------------------------------------------------------------------------------------------

    def get_optimized_ast(self) -> UOp:
        """The AST with the applied opts recorded in its SINK's KernelInfo."""
        info = self.ast.arg
        name = info.name if isinstance(info, KernelInfo) else info if isinstance(info, str) else ""
        return self.ast.replace(arg=KernelInfo(name=name, applied_opts=self.applied))


def is_global_store(s: UOp) -> bool:
    """True for a STORE into a kernel buffer (PARAM)."""
    buf = s.src[0].src[0]
    return buf.op is Ops.PARAM and isinstance(buf.dtype, PtrDType)
