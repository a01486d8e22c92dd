"""Reverse-mode differentiation on tensor-level UOp graphs: the rule table `pm_gradient` and `compute_gradient`.

Every rule receives the incoming gradient `ctx` (same shape and dtype as the node) and returns one gradient per source
(`None` = no gradient flows there). Gradients are ordinary tensor-level UOps built over the forward nodes, so the
scheduler fuses backward chains with the forward values they need exactly as it fuses forward code.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import cast

from tg.ir import Ops, PatternMatcher, UOp, UPat, argsort, dtypes, sum_acc_dtype


def _zero(like: UOp) -> UOp:
    return like.const_like(0.0 if dtypes.is_float(like.dtype) else 0)


def _sum_to(g: UOp, axes: tuple[int, ...]) -> UOp:
    """`g` summed over `axes` (kept as size 1), accumulated in float32 or wider and cast back."""
    acc = sum_acc_dtype(g.dtype)
    return g.cast(acc).r(Ops.ADD, axes).cast(g.dtype)


def _reduce_gradient(ctx: UOp, ret: UOp) -> tuple[UOp | None, ...]:
    op, axes = ret.arg
    x = ret.src[0]
    grad = ctx.expand(x.shape)
    if op is Ops.ADD:
        return (grad,)
    if op is Ops.MAX:
        # ties share the gradient equally (torch's amax / full max do the same)
        mask = x.eq(ret.expand(x.shape)).cast(ctx.dtype)
        return (mask * grad / _sum_to(mask, axes).expand(x.shape),)
    # MUL: d(prod)/dx_j = product of the others: ret / x_j when x_j != 0; for the single zero of a group, the
    # product of the rest; 0 when there are two zeros or more
    is_zero = x.eq(x.const_like(0.0 if dtypes.is_float(x.dtype) else 0))
    safe_x = is_zero.where(x.const_like(1.0), x)
    zero_count = is_zero.cast(dtypes.int32).r(Ops.ADD, axes).expand(x.shape)
    others = safe_x.r(Ops.MUL, axes).expand(x.shape)
    one_zero = zero_count.eq(zero_count.const_like(1))
    return (grad * is_zero.where(one_zero.where(others, _zero(others)), ret.expand(x.shape) / safe_x),)


def _pow_gradient(ctx: UOp, ret: UOp, b: UOp, e: UOp) -> tuple[UOp | None, ...]:
    zero = _zero(b)
    db = e.eq(zero).where(zero, e * b.alu(Ops.POW, e - 1.0))
    safe_b = b.eq(zero).where(b.const_like(1.0), b)
    de = b.eq(zero).where((e < zero).where(b.const_like(-math.inf), zero), ret * safe_b.log2() * math.log(2))
    return (ctx * db, ctx * de)


def _max_gradient(ctx: UOp, x: UOp, y: UOp) -> tuple[UOp | None, ...]:
    zero, half = _zero(ctx), ctx * 0.5
    tie = x.eq(y)
    return ((x > y).where(ctx, tie.where(half, zero)), (x < y).where(ctx, tie.where(half, zero)))


def _expand_gradient(ctx: UOp, ret: UOp) -> tuple[UOp | None, ...]:
    src = ret.src[0]
    axes = tuple(i for i, (s, n) in enumerate(zip(src.shape, ret.shape, strict=True)) if s != n)
    return (_sum_to(ctx, axes),)


def _multi_gradient(ctx: UOp, ret: UOp) -> tuple[UOp | None, ...]:
    if ret.arg is None:
        return (ctx.mselect(0, None), *([None] * (len(ret.src) - 1)))
    return tuple(ctx.mselect(i, ret.arg) for i in range(len(ret.src)))


def _cast_gradient(ctx: UOp, ret: UOp) -> tuple[UOp | None, ...]:
    src = ret.src[0]
    return (ctx.cast(src.dtype),) if dtypes.is_float(src.dtype) else (None,)


# comparisons, bitwise and integer ops, random bits: nothing flows back through them
_NOT_DIFFERENTIABLE = (Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ, Ops.AND, Ops.OR, Ops.XOR, Ops.SHL, Ops.SHR, Ops.IDIV, Ops.MOD,
                       Ops.THREEFRY)  # fmt: skip

pm_gradient = PatternMatcher(
    [
        # arithmetic: sums pass the gradient on, products scale it by the other factor
        (UPat(Ops.ADD), lambda ctx: (ctx, ctx)),
        (UPat(Ops.SUB), lambda ctx: (ctx, -ctx)),
        (UPat(Ops.NEG), lambda ctx: (-ctx,)),
        (UPat(Ops.MUL, name="ret"), lambda ctx, ret: (ctx * ret.src[1], ctx * ret.src[0])),
        (UPat(Ops.MULACC, name="ret"), lambda ctx, ret: (ctx * ret.src[1], ctx * ret.src[0], ctx)),
        (
            UPat(Ops.FDIV, src=(UPat.var("a"), UPat.var("b"))),
            lambda ctx, a, b: (ctx / b, -ctx * a / (b * b)),
        ),
        (UPat(Ops.POW, name="ret", src=(UPat.var("b"), UPat.var("e"))), _pow_gradient),
        (UPat(Ops.MAX, src=(UPat.var("x"), UPat.var("y"))), _max_gradient),
        (
            UPat(Ops.WHERE, name="ret"),
            lambda ctx, ret: (None, ret.src[0].where(ctx, _zero(ctx)), ret.src[0].where(_zero(ctx), ctx)),
        ),
        # transcendental primitives (in terms of their result where that is cheaper)
        (UPat(Ops.EXP2, name="ret"), lambda ctx, ret: (ctx * ret * math.log(2),)),
        (UPat(Ops.LOG2, name="ret"), lambda ctx, ret: (ctx / (ret.src[0] * math.log(2)),)),
        (UPat(Ops.SQRT, name="ret"), lambda ctx, ret: (ctx / (ret * 2.0),)),
        (UPat(Ops.SIN, name="ret"), lambda ctx, ret: (ctx * (math.pi / 2 - ret.src[0]).sin(),)),
        (UPat(Ops.RECIPROCAL, name="ret"), lambda ctx, ret: (-ctx * ret * ret,)),
        # piecewise-constant and integer-valued ops have zero or no gradient
        (UPat(Ops.TRUNC), lambda ctx: (_zero(ctx),)),
        (UPat(_NOT_DIFFERENTIABLE), lambda: (None, None)),
        (UPat(Ops.BITCAST), lambda: (None,)),
        (UPat(Ops.CAST, name="ret"), _cast_gradient),
        # reductions: the gradient is broadcast back over the reduced axes
        (UPat(Ops.REDUCE_AXIS, name="ret"), _reduce_gradient),
        # movement ops: the inverse movement of the gradient
        (UPat(Ops.RESHAPE, name="ret"), lambda ctx, ret: (ctx.reshape(ret.src[0].shape),)),
        (UPat(Ops.PERMUTE, name="ret"), lambda ctx, ret: (ctx.permute(tuple(argsort(ret.arg))),)),
        (UPat(Ops.FLIP, name="ret"), lambda ctx, ret: (ctx.flip(ret.arg),)),
        (UPat(Ops.EXPAND, name="ret"), _expand_gradient),
        (
            UPat(Ops.PAD, name="ret"),
            lambda ctx, ret: (
                ctx.shrink(tuple((b, b + s) for (b, _), s in zip(ret.arg, ret.src[0].shape, strict=True))),
            ),
        ),
        (
            UPat(Ops.SHRINK, name="ret"),
            lambda ctx, ret: (ctx.pad(tuple((b, s - e) for (b, e), s in zip(ret.arg, ret.src[0].shape, strict=True))),),
        ),
        # storage and device markers
        (UPat(Ops.CONTIGUOUS, name="ret"), lambda ctx, ret: (ctx, *([None] * (len(ret.src) - 1)))),
        (UPat(Ops.CONTIGUOUS_BACKWARD), lambda ctx: (ctx.contiguous(),)),
        (UPat(Ops.COPY, name="ret"), lambda ctx, ret: (ctx.copy_to_device(ret.src[0].device), None)),
        # a sharded tensor: each shard's gradient is its device's part of the gradient; a replicated one is one
        # logical value, so only its first copy gets the gradient (each copy's source would otherwise count n times)
        (UPat(Ops.MULTI, name="ret"), _multi_gradient),
        # a write's value is what the written tensor holds afterwards
        (UPat(Ops.ASSIGN), lambda ctx: (None, ctx)),
    ]
)


# ---- gradients given by the op that built a node -------------------------------------------------------------------

_CUSTOM = "_tg_custom_gradient"  # memo on a node: (inputs, rule) from set_custom_gradient

CustomGradient = Callable[[UOp, tuple[bool, ...], UOp], tuple["UOp | None", ...]]


def set_custom_gradient(node: UOp, inputs: tuple[UOp, ...], rule: CustomGradient) -> None:
    """Differentiate `node` as a function of `inputs` alone: `rule(incoming gradient, needed, node)` returns one
    gradient per input (None where none flows; `needed[i]` says whether input i leads to a target, so a rule may skip
    building the others) and the graph between `inputs` and `node` is never differentiated node by node. The rule is
    stored on `node` and gets it as an argument: a rule that captured `node` (or a tensor of it) would make a reference
    cycle that keeps the whole graph alive until Python's cyclic garbage collector finds it.

    For ops whose node-by-node gradient is a poor program (a convolution's sliding windows give an overlap-add of
    an im2col-shaped product; its input gradient as a convolution of the output gradient vectorises like the forward).
    The rule must describe the same function as the graph: any graph equal to `node` (UOps are hash-consed) gets it.
    """
    node.__dict__[_CUSTOM] = (inputs, rule)


def custom_gradient_of(node: UOp) -> tuple[tuple[UOp, ...], CustomGradient] | None:
    """(inputs, rule) of a node given a custom gradient by `set_custom_gradient`, else None."""
    return node.__dict__.get(_CUSTOM)


def _sources(u: UOp, origins: Mapping[UOp, UOp], targets: set[UOp]) -> tuple[UOp, ...]:
    """The sources of `u` for differentiation: a realized buffer with a recorded forward graph stands for it, a node
    with a custom gradient has its rule's inputs."""
    if u in origins and u not in targets:
        return (origins[u],)
    if (custom := u.__dict__.get(_CUSTOM)) is not None:
        return cast("tuple[UOp, ...]", custom[0])
    return u.src


def _target_path(root: UOp, targets: set[UOp], origins: Mapping[UOp, UOp]) -> list[UOp]:
    """Nodes between root and the targets, consumers after producers (DETACH cuts the path)."""
    in_path: dict[UOp, bool] = {}
    order: list[UOp] = []
    entered: set[UOp] = set()
    stack: list[tuple[UOp, tuple[UOp, ...] | None]] = [(root, None)]  # (node, its sources once entered)
    while stack:
        node, srcs = stack.pop()
        if node in in_path:
            continue
        if srcs is None:
            if node in entered:  # reached again below itself: never loop, say what went wrong
                raise RuntimeError(f"gradient: the graph reaches {node.op} {node.shape} again below itself (a cycle)")
            entered.add(node)
            srcs = _sources(node, origins, targets)
            stack.append((node, srcs))
            stack.extend((s, None) for s in reversed(srcs) if s not in in_path)
            continue
        in_path[node] = node.op is not Ops.DETACH and any(s in targets or in_path[s] for s in srcs)
        if in_path[node]:
            order.append(node)
    return order


def compute_gradient(
    root: UOp,
    root_grad: UOp,
    targets: set[UOp],
    origins: Mapping[UOp, UOp] | None = None,
    stored: Callable[[UOp], bool] | None = None,
) -> dict[UOp, UOp]:
    """Gradients of `root` (seeded with `root_grad`) for every node on a path to `targets`, keyed by node.

    `origins` maps realized buffers to the forward graphs they were computed from, so gradients flow through
    values that were realized before the backward pass; those graphs read the buffers again in the result, except
    where `stored(buffer)` is False (a state that was overwritten: its graph is kept).
    """
    origins = origins or {}
    grads: dict[UOp, UOp] = {root: root_grad}
    used_origins: dict[UOp, UOp] = {}
    path = _target_path(root, targets, origins)
    on_path: set[UOp] | None = None  # built at the first custom rule
    for node in reversed(path):
        if (g := grads.get(node)) is None:
            continue
        if node.op is Ops.GETTUPLE:  # an output of a function call: collected per call, differentiated at the call
            fn = node.src[0]
            prev = list(grads[fn].src) if fn in grads else [UOp(Ops.NOOP)] * len(fn.src[0].src)
            prev[node.arg] = g if prev[node.arg].op is Ops.NOOP else prev[node.arg] + g
            grads[fn] = UOp(Ops.TUPLE, dtypes.void, tuple(prev))
            continue
        if node.op is Ops.FUNCTION:
            local: tuple[UOp | None, ...] | None = function_gradient(node, g)
            srcs: tuple[UOp, ...] = node.src
        elif node in origins and node not in targets:
            if stored is None or stored(node):
                used_origins[origins[node]] = node
            local = (g,)
            srcs = (origins[node],)
        elif (custom := node.__dict__.get(_CUSTOM)) is not None:
            srcs, rule = custom
            on_path = set(path) if on_path is None else on_path
            local = rule(g, tuple(s in targets or s in on_path for s in srcs), node)
        else:
            local = cast("tuple[UOp | None, ...] | None", pm_gradient.rewrite(node, ctx=g))
            srcs = node.src
            if local is None:
                raise RuntimeError(f"no gradient rule for {node.op} (dtype {node.dtype.name}, shape {node.shape})")
        assert local is not None
        if len(local) != len(srcs):
            raise RuntimeError(f"gradient rule for {node.op} gave {len(local)} gradients for {len(srcs)} sources")
        for src, v in zip(srcs, local, strict=True):
            if v is None:
                continue
            if v.shape != src.shape:
                raise RuntimeError(f"gradient of {node.op} has shape {v.shape}, its source {src.shape}")
            grads[src] = grads[src] + v if src in grads else v
    if used_origins:  # read realized values from their buffers instead of recomputing them
        grads = {k: v.substitute(used_origins) for k, v in grads.items()}
    return grads


# ---- function calls ---------------------------------------------------------------------------------------------

_BACKWARD = "_tg_backward"  # memo on a function body: which outputs have gradients -> the backward body


def _grad_placeholder(like: UOp, i: int, body: UOp) -> UOp:
    """Parameter for the incoming gradient of output `i` of `body` (a BUFFER that never holds memory)."""
    numel = math.prod(like.shape) if like.shape else 1
    unique = UOp(Ops.UNIQUE, arg=("grad", id(body), i))
    return UOp(Ops.BUFFER, like.dtype, (unique, UOp(Ops.DEVICE, arg=like.device)), numel).reshape(like.shape)


def function_gradient(fn: UOp, out_grads: UOp) -> tuple[UOp | None, ...]:
    """Gradients of a call `FUNCTION(TUPLE(outputs), *args)` for its sources, given a TUPLE of the outputs' gradients
    (NOOP where an output has none): the body is differentiated once per set of outputs with gradients, into a
    backward body over the same parameters plus one parameter per incoming gradient; each call then gets
    `GETTUPLE(FUNCTION(backward body, *args, *gradients), k)`, so the backward is a reusable call too."""
    body, args, params = fn.src[0], fn.src[1:], fn.arg[1]
    have = tuple(i for i, g in enumerate(out_grads.src) if g.op is not Ops.NOOP)
    memo = body.__dict__.setdefault(_BACKWARD, {})
    if (entry := memo.get(have)) is None:
        targets = {p for p in params if dtypes.is_float(p.dtype)}
        grad_params = tuple(_grad_placeholder(body.src[i], i, body) for i in have)
        total: dict[UOp, UOp] = {}
        for i, gp in zip(have, grad_params, strict=True):
            for p, g in compute_gradient(body.src[i], gp, targets).items():
                if p in targets:
                    total[p] = total[p] + g if p in total else g
        flowing = tuple(k for k, p in enumerate(params) if p in total)
        bwd_body = UOp(Ops.TUPLE, dtypes.void, tuple(total[params[k]] for k in flowing))
        entry = memo[have] = (bwd_body, (*params, *grad_params), flowing)
    bwd_body, bwd_params, flowing = entry
    if not flowing:
        return (None,) * len(fn.src)
    name = f"{fn.arg[0]}.backward"
    call = UOp(Ops.FUNCTION, dtypes.void, (bwd_body, *args, *(out_grads.src[i] for i in have)), (name, bwd_params))
    local: list[UOp | None] = [None] * len(fn.src)
    for j, k in enumerate(flowing):
        local[1 + k] = UOp(Ops.GETTUPLE, bwd_body.src[j].dtype, (call,), j)
    return tuple(local)
