"""Printing UOp graphs: a pasteable Python-like repr, a line-per-node listing, and C-like expression rendering."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from tg.ir.alu import cdiv, cmod
from tg.ir.helpers import strip_parens
from tg.ir.ops import Ops

if TYPE_CHECKING:
    from tg.ir.uop import UOp

__all__ = ["cdiv", "cmod", "pretty_print", "print_uops", "pyrender", "render_expr"]


def arg_repr(x: Any) -> str:
    """repr() of an arg that evaluates back to the same value (floats inf/nan as math.*)."""
    if isinstance(x, float):
        if math.isnan(x):
            return "math.nan"
        if math.isinf(x):
            return "math.inf" if x > 0 else "-math.inf"
        return repr(x)
    if isinstance(x, tuple):
        inner = ", ".join(arg_repr(e) for e in x)
        return f"({inner},)" if len(x) == 1 else f"({inner})"
    if isinstance(x, list):
        return "[" + ", ".join(arg_repr(e) for e in x) + "]"
    return repr(x)


# indentation stops growing past this nesting depth: the text of an n-deep graph stays O(n), not O(n^2) (a 10,000-deep
# chain printed 200 MB); it is still valid Python
_MAX_INDENT_LEVELS = 64


def pretty_print(root: UOp, indent: int = 2) -> str:
    """A nested `UOp(Ops.X, dtype, arg=..., src=(...))` rendering; shared nodes are named once with `xN:=` and
    referenced later, so the text is valid Python that rebuilds the same graph (given `from tg.ir import *`)."""
    topo = root.toposort()
    users: dict[UOp, int] = {}
    for u in topo:
        for s in u.src:
            users[s] = users.get(s, 0) + 1
    names: dict[UOp, str] = {}
    named = {u: f"x{i}" for i, u in enumerate(u for u in topo if users.get(u, 0) > 1)}
    out: list[str] = []

    # iterative so deep graphs don't hit the recursion limit
    stack: list[tuple[UOp, int, int, str]] = [(root, 0, 0, "")]
    while stack:
        u, depth, state, suffix = stack.pop()
        pad = " " * (indent * min(depth, _MAX_INDENT_LEVELS))
        if state == 0:
            if u in names:
                out.append(f"{pad}{names[u]}{suffix}")
                continue
            prefix = ""
            if u in named:
                names[u] = named[u]
                prefix = f"{named[u]}:="
            fields = [str(u.op), repr(u.dtype)]
            if u.arg is not None:
                fields.append(f"arg={arg_repr(u.arg)}")
            if u.tag is not None:
                fields.append(f"tag={arg_repr(u.tag)}")
            if not u.src:
                out.append(f"{pad}{prefix}UOp({', '.join(fields)}){suffix}")
                continue
            out.append(f"{pad}{prefix}UOp({', '.join(fields)}, src=(")
            stack.append((u, depth, 1, suffix))
            for i in reversed(range(len(u.src))):
                stack.append((u.src[i], depth + 1, 0, ","))
        else:
            out[-1] += f")){suffix}"
    return "\n".join(out)


def pyrender(root: UOp) -> str:
    """Python statements that rebuild `root`, one node per line (`c3 = UOp(...)`), the last line `ast = cN`."""
    names: dict[UOp, str] = {}
    lines: list[str] = []
    for i, u in enumerate(root.toposort()):
        names[u] = f"c{i}"
        fields = [str(u.op), repr(u.dtype)]
        if u.src:
            fields.append("src=(" + "".join(f"{names[s]}, " for s in u.src).rstrip(" ") + ")")
        if u.arg is not None:
            fields.append(f"arg={arg_repr(u.arg)}")
        if u.tag is not None:
            fields.append(f"tag={arg_repr(u.tag)}")
        lines.append(f"c{i} = UOp({', '.join(fields)})")
    lines.append(f"ast = {names[root]}")
    return "\n".join(lines)


def print_uops(uops: list[UOp]) -> str:
    """A listing of a linear program: index, op, dtype, source indices, arg."""
    idx = {u: i for i, u in enumerate(uops)}
    lines = []
    for i, u in enumerate(uops):
        srcs = [idx.get(s, "--") for s in u.src]
        lines.append(f"{i:4d} {u.op.name:20s}: {u.dtype!s:28s} {srcs!s:32s} {arg_repr(u.arg)}")
    return "\n".join(lines)


_INFIX = {Ops.ADD: "+", Ops.SUB: "-", Ops.MUL: "*", Ops.IDIV: "//", Ops.MOD: "%", Ops.FDIV: "/", Ops.CMPLT: "<",
          Ops.CMPNE: "!=", Ops.CMPEQ: "==", Ops.AND: "&", Ops.OR: "|", Ops.XOR: "^", Ops.SHL: "<<",
          Ops.SHR: ">>"}  # fmt: skip


def render_expr(root: UOp) -> str:
    """Render an index expression as text: variables by name, ranges as ridxN, `//` and `%` are C-style."""
    cache: dict[UOp, str] = {}
    for u in root.toposort():
        s = [cache[x] for x in u.src]
        if u.op is Ops.CONST:
            r = arg_repr(u.arg)
        elif u.op is Ops.DEFINE_VAR:
            r = str(u.arg[0])
        elif u.op is Ops.BIND:
            r = s[0]
        elif u.op is Ops.RANGE:
            r = f"ridx{'_'.join(str(a) for a in (u.arg[0] if isinstance(u.arg[0], tuple) else (u.arg[0],)))}"
        elif u.op is Ops.SPECIAL:
            r = str(u.arg)
        elif u.op is Ops.MUL and u.src[1].op is Ops.CONST and u.src[1].arg == -1:
            r = f"(-{s[0]})"
        elif u.op is Ops.ADD and u.src[1].op is Ops.MUL and u.src[1].src[1].op is Ops.CONST and \
                u.src[1].src[1].arg == -1:  # fmt: skip
            r = f"({s[0]}-{cache[u.src[1].src[0]]})"
        elif u.op is Ops.ADD and u.src[1].op is Ops.CONST and isinstance(u.src[1].arg, int) and u.src[1].arg < 0:
            r = f"({s[0]}-{-u.src[1].arg})"
        elif u.op in _INFIX:
            r = f"({s[0]}{_INFIX[u.op]}{s[1]})"
        elif u.op is Ops.MAX:
            r = f"max({strip_parens(s[0])}, {strip_parens(s[1])})"
        elif u.op is Ops.WHERE:
            r = f"({s[1]} if {s[0]} else {s[2]})"
        elif u.op is Ops.CAST:
            r = f"({u.dtype!r}){s[0]}"
        elif u.op is Ops.NEG:
            r = f"(-{s[0]})"
        else:
            r = f"{u.op.name}({', '.join(strip_parens(x) for x in s)})"
        cache[u] = r
    return strip_parens(cache[root])
