"""Pattern rewriting: UPat (a pattern over UOps), PatternMatcher (rules indexed by op) and graph_rewrite.

Each UPat is compiled to a Python closure the first time its matcher runs (plain nested `if`s and `for`s over the
node's fields), so matching costs a few attribute loads per rule. A rule's function receives the bound names it
declares (plus `ctx` if it declares it) and returns a replacement UOp, or None for "no match".
"""

from __future__ import annotations

import contextlib
import inspect
import itertools
import keyword
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from tg.ir.dtype import ConstType, DType, dtypes
from tg.ir.helpers import DEBUG, TRACK_MATCH_STATS, colored
from tg.ir.mathtrait import MathMixin
from tg.ir.ops import GroupOp, Ops
from tg.ir.uop import UOp


class UPat(MathMixin):
    """A pattern: matches UOps by op set, dtype set, sources, arg and binds the match to `name`.

    `src` is a tuple (sources in order; with allow_any_len=True extra trailing sources are allowed), a list (sources
    in any order: commutative matching), or a single UPat (every source must match it, any count).
    Operators build patterns: `UPat.var("x") + UPat.cvar("c")` matches ADD(x, CONST) in either order.
    """

    __slots__ = ("_alts", "allow_any_len", "arg", "match_dtype", "name", "op", "src", "src_kind")

    def __init__(self, op: Ops | Sequence[Ops] | frozenset[Ops] | set[Ops] | None = None,
                 dtype: DType | Sequence[DType] | None = None, src: Any = None, arg: Any = None,
                 name: str | None = None, allow_any_len: bool = False) -> None:  # fmt: skip
        if op is None or isinstance(op, Ops):
            self.op: frozenset[Ops] | None = None if op is None else frozenset((op,))
        else:
            self.op = frozenset(op)
            if not self.op or not all(isinstance(o, Ops) for o in self.op):
                raise TypeError(f"UPat op must be an Ops, a collection of Ops or None, got {op!r}")
        if dtype is None or isinstance(dtype, DType):
            self.match_dtype: tuple[DType, ...] | None = None if dtype is None else (dtype,)
        else:
            self.match_dtype = tuple(dtype)
            if not all(isinstance(d, DType) for d in self.match_dtype):
                raise TypeError(f"UPat dtype must be a DType, a collection of DTypes or None, got {dtype!r}")
        if name is not None and (not isinstance(name, str) or not name.isidentifier() or keyword.iskeyword(name)
                                 or name == "ctx"):  # fmt: skip
            raise ValueError(f"UPat name must be a Python identifier other than 'ctx', got {name!r}")
        self.name, self.arg, self.allow_any_len = name, arg, allow_any_len
        self._alts: tuple[UPat, ...] | None = None
        if src is None:
            self.src: Any = None
            self.src_kind = "none"
        elif isinstance(src, UPat):
            self.src, self.src_kind = src, "repeat"
        elif isinstance(src, (tuple, list)):
            if not all(isinstance(s, UPat) for s in src):
                raise TypeError(f"UPat src entries must be UPats, got {[type(s).__name__ for s in src]}")
            self.src, self.src_kind = tuple(src), ("perm" if isinstance(src, list) else "tuple")
            if self.src_kind == "perm" and len(self.src) > 6:
                raise ValueError(f"UPat: any-order src with {len(self.src)} entries is too many permutations")
        else:
            raise TypeError(f"UPat src must be None, a UPat, a tuple or a list of UPats, got {src!r}")
        if allow_any_len and self.src_kind not in ("tuple", "perm"):
            raise ValueError("UPat allow_any_len needs a tuple or list src")

    @property
    def dtype(self) -> DType:  # type: ignore[override]
        """The first dtype matched (void if any)."""
        return self.match_dtype[0] if self.match_dtype else dtypes.void

    def __repr__(self) -> str:
        if self._alts is not None:
            return "UPat.any(" + ", ".join(repr(a) for a in self._alts) + ")"
        ops = None if self.op is None else tuple(sorted(self.op))
        fields = [f"{ops[0] if ops and len(ops) == 1 else ops}"]
        if self.match_dtype:
            fields.append(f"dtype={self.match_dtype}")
        if self.src is not None:
            fields.append(f"src={list(self.src) if self.src_kind == 'perm' else self.src}")
        if self.arg is not None:
            fields.append(f"arg={self.arg!r}")
        if self.name:
            fields.append(f"name={self.name!r}")
        return f"UPat({', '.join(fields)})"

    # ---- constructors ----

    @staticmethod
    def any(*pats: UPat) -> UPat:
        """Match any of `pats` (tried in order)."""
        if not pats or not all(isinstance(p, UPat) for p in pats):
            raise TypeError("UPat.any needs one or more UPats")
        ret = UPat()
        ret._alts = tuple(a for p in pats for a in (p._alts if p._alts is not None else (p,)))
        return ret

    def named(self, name: str) -> UPat:
        """A copy of this pattern that binds `name`."""
        if self._alts is not None:
            return UPat.any(*(a.named(name) for a in self._alts))
        return UPat(self.op, self.match_dtype, list(self.src) if self.src_kind == "perm" else self.src, self.arg, name,
                    self.allow_any_len)  # fmt: skip

    @staticmethod
    def var(name: str | None = None, dtype: DType | Sequence[DType] | None = None) -> UPat:
        """Any node, bound to `name`."""
        return UPat(dtype=dtype, name=name)

    @staticmethod
    def cvar(name: str | None = None, dtype: DType | Sequence[DType] | None = None, vec: bool = True) -> UPat:
        """Any constant (CONST, and VCONST if `vec`), bound to `name`."""
        return UPat((Ops.CONST, Ops.VCONST) if vec else Ops.CONST, dtype, name=name)

    @staticmethod
    def const(dtype: DType | Sequence[DType] | None, b: ConstType) -> UPat:
        """The constant `b` (compared with ==, so 1 matches 1.0 and True)."""
        return UPat(Ops.CONST, dtype, arg=b)

    def const_like(self, b: ConstType) -> UPat:
        return UPat.const(self.match_dtype, b)

    def alu(self, op: Ops, *src: Any) -> UPat:
        asrc = (self, *src)
        out_dtype = dtypes.bool if op in GroupOp.Comparison else None
        return UPat(op, out_dtype, list(asrc) if op in GroupOp.Commutative else asrc)

    def f(self, op: Ops, **kwargs: Any) -> UPat:
        """UPat(op, src=(self,), ...)."""
        return UPat(op, src=(self,), **kwargs)

    def cast(self, dtype: Any = None, **kwargs: Any) -> UPat:
        """CAST(self) to `dtype` (any dtype if None)."""
        return UPat(Ops.CAST, dtype, (self,), **kwargs)

    def bitcast(self, dtype: DType | None = None) -> UPat:
        """BITCAST(self) to `dtype`."""
        return UPat(Ops.BITCAST, dtype, (self,))

    def load(self, *src: UPat, **kwargs: Any) -> UPat:
        """LOAD(self, *src)."""
        return UPat(Ops.LOAD, src=(self, *src), **kwargs)

    def store(self, *src: UPat, **kwargs: Any) -> UPat:
        """STORE(self, *src)."""
        return UPat(Ops.STORE, dtypes.void, (self, *src), **kwargs)

    def index(self, *src: UPat, **kwargs: Any) -> UPat:
        """INDEX(self, *src)."""
        return UPat(Ops.INDEX, src=(self, *src), **kwargs)

    def sink(self, *src: UPat, **kwargs: Any) -> UPat:
        """SINK(self, *src)."""
        return UPat(Ops.SINK, src=(self, *src), **kwargs)

    def where(self, x: Any, y: Any) -> UPat:
        return UPat(Ops.WHERE, src=(self, x if isinstance(x, UPat) else UPat.const(None, x),
                                    y if isinstance(y, UPat) else UPat.const(None, y)))  # fmt: skip

    # ---- interpreted matching (reference semantics; the compiled closures must agree) ----

    def match(self, uop: UOp, store: dict[str, UOp]) -> list[dict[str, UOp]]:
        """All ways `uop` matches, each a dict of bindings extending `store`."""
        if self._alts is not None:
            return [s for a in self._alts for s in a.match(uop, dict(store))]
        if self.op is not None and uop.op not in self.op:
            return []
        if self.match_dtype is not None and uop.dtype not in self.match_dtype and \
                uop.dtype.scalar() not in self.match_dtype:  # fmt: skip
            return []
        if self.arg is not None and self.arg != uop.arg:
            return []
        if self.name is not None:
            if self.name in store and store[self.name] is not uop:
                return []
            store = {**store, self.name: uop}
        if self.src_kind == "none":
            return [store]
        if self.src_kind == "repeat":
            stores = [store]
            for s in uop.src:
                stores = [s2 for st in stores for s2 in self.src.match(s, st)]
            return stores
        n = len(self.src)
        if len(uop.src) < n or (not self.allow_any_len and len(uop.src) != n):
            return []
        orders = itertools.permutations(self.src) if self.src_kind == "perm" else (self.src,)
        res: list[dict[str, UOp]] = []
        for order in orders:
            stores = [store]
            for p, s in zip(order, uop.src, strict=False):
                stores = [s2 for st in stores for s2 in p.match(s, st)]
                if not stores:
                    break
            res.extend(stores)
        return res

    def _has_repeat_names(self) -> bool:
        if self._alts is not None:
            return any(a._has_repeat_names() for a in self._alts)
        if self.src_kind == "repeat":
            return any(p.name is not None for p in _walk(self.src)) or self.src._has_repeat_names()
        return self.src_kind in ("tuple", "perm") and any(s._has_repeat_names() for s in self.src)


def _walk(p: UPat) -> Iterator[UPat]:
    yield p
    for a in p._alts or ():
        yield from _walk(a)
    if p.src_kind == "repeat":
        yield from _walk(p.src)
    elif p.src_kind in ("tuple", "perm"):
        for s in p.src:
            yield from _walk(s)


# ---- compiling a pattern to a closure ----------------------------------------------------------------------------


class _Compiler:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.consts: dict[str, Any] = {}
        self.nvar = 0

    def const(self, obj: Any) -> str:
        name = f"k{len(self.consts)}"
        self.consts[name] = obj
        return name

    def newvar(self) -> str:
        self.nvar += 1
        return f"v{self.nvar}"

    def emit(self, depth: int, line: str) -> None:
        self.lines.append("  " * depth + line)

    def gen(self, pat: UPat, expr: str, bound: dict[str, str], depth: int,
            cont: Callable[[dict[str, str], int], None], known_op: Ops | None = None) -> None:  # fmt: skip
        """Emit nested checks for `pat` on the node in variable `expr`; `cont` emits what follows a match.
        `known_op`: the caller already knows the node's op (skip that check; skip alternatives that can't match)."""
        if pat._alts is not None:
            for alt in pat._alts:
                if known_op is None or alt.op is None or known_op in alt.op:
                    self.gen(alt, expr, dict(bound), depth, cont, known_op)
            return
        conds: list[str] = []
        if pat.op is not None and known_op is None:
            conds.append(f"{expr}.op is {self.const(next(iter(pat.op)))}" if len(pat.op) == 1 else
                         f"{expr}.op in {self.const(pat.op)}")  # fmt: skip
        if pat.match_dtype is not None:
            if len(pat.match_dtype) == 1:
                d = self.const(pat.match_dtype[0])
                conds.append(f"({expr}.dtype is {d} or {expr}.dtype.scalar() is {d})")
            else:
                d = self.const(frozenset(pat.match_dtype))
                conds.append(f"({expr}.dtype in {d} or {expr}.dtype.scalar() in {d})")
        if pat.arg is not None:
            conds.append(f"{expr}.arg == {self.const(pat.arg)}")
        bound = dict(bound)
        if pat.name is not None:
            if pat.name in bound:
                conds.append(f"{expr} is {bound[pat.name]}")
            else:
                bound[pat.name] = expr
        if pat.src_kind == "repeat":
            sub = self.const(_compile_predicate(pat.src))
            conds.append(f"all({sub}(x) for x in {expr}.src)")
        elif pat.src_kind in ("tuple", "perm"):
            n = len(pat.src)
            conds.append(f"len({expr}.src) {'>=' if pat.allow_any_len else '=='} {n}")
        if conds:
            self.emit(depth, f"if {' and '.join(conds)}:")
            depth += 1
        if pat.src_kind not in ("tuple", "perm") or len(pat.src) == 0:
            cont(bound, depth)
            return
        names = [self.newvar() for _ in pat.src]
        if pat.src_kind == "tuple" or len(pat.src) == 1:
            self.emit(depth, f"{', '.join(names)}, = {expr}.src[:{len(names)}]")
        elif len(pat.src) == 2:
            s = self.newvar()
            self.emit(depth, f"{s} = {expr}.src")
            self.emit(depth, f"for {', '.join(names)} in (({s}[0], {s}[1]), ({s}[1], {s}[0])):")
            depth += 1
        else:
            perms = self.const(itertools.permutations)
            self.emit(depth, f"for {', '.join(names)} in {perms}({expr}.src[:{len(names)}]):")
            depth += 1

        def chain(i: int, bnd: dict[str, str], d: int) -> None:
            if i == len(pat.src):
                cont(bnd, d)
            else:
                self.gen(pat.src[i], names[i], bnd, d, lambda b2, d2: chain(i + 1, b2, d2))

        chain(0, bound, depth)


def _compile_predicate(pat: UPat) -> Callable[[UOp], bool]:
    """A closure returning True if `pat` matches (used for repeated sources, which bind no names)."""
    c = _Compiler()
    c.emit(0, "def pred(u):")

    def cont(bound: dict[str, str], depth: int) -> None:
        c.emit(depth, "return True")

    c.gen(pat, "u", {}, 1, cont)
    c.emit(1, "return False")
    ns: dict[str, Any] = dict(c.consts)
    exec("\n".join(c.lines), ns)
    return ns["pred"]


def _fxn_params(fxn: Callable[..., Any]) -> tuple[set[str], bool, bool]:
    """(parameter names, takes ctx, takes **kwargs)."""
    try:
        sig = inspect.signature(fxn)
    except (TypeError, ValueError):
        return set(), False, True
    params = sig.parameters
    has_kw = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    return set(params) - {"ctx"}, "ctx" in params, has_kw


def _check_rule(pat: UPat, fxn: Callable[..., Any]) -> tuple[set[str], bool, bool]:
    """Validate a rule at construction: the function may only require names the pattern binds."""
    names = {p.name for p in _walk(pat) if p.name is not None}
    params, takes_ctx, has_kw = _fxn_params(fxn)
    try:
        sig_params = inspect.signature(fxn).parameters
    except (TypeError, ValueError):
        return params, takes_ctx, has_kw
    required = {n for n, p in sig_params.items() if p.default is inspect.Parameter.empty and n != "ctx"
                and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}  # fmt: skip
    if missing := required - names:
        raise ValueError(f"rule function {fxn.__qualname__} needs {sorted(missing)} which the pattern never binds "
                         f"(pattern binds {sorted(names)}): {pat}")  # fmt: skip
    return params, takes_ctx, has_kw


def _emit_rule(c: _Compiler, pat: UPat, fxn: Callable[..., Any], known_op: Ops | None) -> None:
    """Emit one rule's matching code into the function being built by `c` (falls through when it doesn't fire)."""
    params, takes_ctx, has_kw = _check_rule(pat, fxn)
    if pat._has_repeat_names():
        m = c.const(_interpreted_rule(pat, fxn, params, takes_ctx, has_kw))
        c.emit(1, f"r = {m}(u, ctx)")
        c.emit(1, "if r is not None and r is not u: return r")
        return
    f = c.const(fxn)

    def cont(bound: dict[str, str], depth: int) -> None:
        args = [f"{k}={v}" for k, v in bound.items() if has_kw or k in params]
        if takes_ctx:
            args.append("ctx=ctx")
        c.emit(depth, f"r = {f}({', '.join(args)})")
        c.emit(depth, "if r is not None and r is not u: return r")

    c.gen(pat, "u", {}, 1, cont, known_op)


def _build(c: _Compiler, name: str) -> Callable[[UOp, Any], Any] | None:
    c.emit(1, "return None")
    ns: dict[str, Any] = dict(c.consts)
    try:
        exec("\n".join(c.lines), ns)
    except (SyntaxError, RecursionError, MemoryError):
        return None
    fn = ns["match"]
    fn.__qualname__ = name
    return fn


def compile_rule(pat: UPat, fxn: Callable[..., Any]) -> Callable[[UOp, Any], Any]:
    """Compile (pattern, function) into `match(uop, ctx) -> replacement | None`."""
    c = _Compiler()
    c.emit(0, "def match(u, ctx):")
    _emit_rule(c, pat, fxn, None)
    ret = _build(c, f"match<{getattr(fxn, '__qualname__', fxn)}>")
    return ret if ret is not None else _interpreted_rule(pat, fxn, *_check_rule(pat, fxn))


def compile_op_matcher(op: Ops, rules: Sequence[tuple[UPat, Callable[..., Any]]]) -> Callable[[UOp, Any], Any] | None:
    """One function trying every rule for nodes of `op` in order (no per-rule call overhead)."""
    c = _Compiler()
    c.emit(0, "def match(u, ctx):")
    for pat, fxn in rules:
        _emit_rule(c, pat, fxn, op)
    return _build(c, f"match<{op.name}>")


def _interpreted_rule(pat: UPat, fxn: Callable[..., Any], params: set[str], takes_ctx: bool,
                      has_kw: bool) -> Callable[[UOp, Any], Any]:  # fmt: skip
    def match(u: UOp, ctx: Any) -> Any:
        for store in pat.match(u, {}):
            kw = {k: v for k, v in store.items() if has_kw or k in params}
            if takes_ctx:
                kw["ctx"] = ctx
            if (r := fxn(**kw)) is not None:
                return r
        return None

    return match


def rule_location(fxn: Callable[..., Any]) -> str:
    """`file:line` of a rule function (how traces name rules)."""
    code = getattr(fxn, "__code__", None)
    return f"{code.co_filename.rsplit('/', 1)[-1]}:{code.co_firstlineno}" if code else repr(fxn)


def _unbuilt(u: UOp, ctx: Any) -> Any:  # a sentinel for "not compiled yet"
    raise AssertionError("unreachable")


def _chain(matchers: list[Callable[[UOp, Any], Any]]) -> Callable[[UOp, Any], Any]:
    def match(u: UOp, ctx: Any) -> Any:
        for m in matchers:
            if (r := m(u, ctx)) is not None and r is not u:
                return r
        return None

    return match


class PatternMatcher:
    """An ordered list of (UPat, function) rules, indexed by op. `pm1 + pm2` concatenates (pm1's rules first)."""

    def __init__(self, patterns: Sequence[tuple[UPat, Callable[..., Any]]], compiled: bool = True) -> None:
        if not isinstance(patterns, (list, tuple)):
            raise TypeError(f"PatternMatcher needs a list of (UPat, callable) rules, got {type(patterns).__name__}")
        for i, rule in enumerate(patterns):
            if not (isinstance(rule, tuple) and len(rule) == 2 and isinstance(rule[0], UPat) and callable(rule[1])):
                raise TypeError(f"PatternMatcher rule {i} must be a (UPat, callable) pair, got {rule!r}")
            _check_rule(*rule)  # malformed rules fail here, not at match time
        self.patterns: list[tuple[UPat, Callable[..., Any]]] = list(patterns)
        self.compiled = compiled
        # op -> indices of the rules that can match it, in order
        self.pdict: dict[Ops, list[int]] = {}
        for idx, (pat, _) in enumerate(self.patterns):
            ops: set[Ops] = set()
            for alt in pat._alts if pat._alts is not None else (pat,):
                ops |= set(alt.op) if alt.op is not None else set(Ops)
            for op in ops:
                self.pdict.setdefault(op, []).append(idx)
        # compiled lazily, per op, on first use (keeps import time low)
        self._fast: dict[Ops, Callable[[UOp, Any], Any] | None] = {}
        self._rule_fns: dict[int, Callable[[UOp, Any], Any]] = {}

    def __add__(self, other: PatternMatcher) -> PatternMatcher:
        if not isinstance(other, PatternMatcher):
            return NotImplemented
        return PatternMatcher(self.patterns + other.patterns, self.compiled and other.compiled)

    def __len__(self) -> int:
        return len(self.patterns)

    def _rule_fn(self, idx: int) -> Callable[[UOp, Any], Any]:
        if (m := self._rule_fns.get(idx)) is None:
            pat, fxn = self.patterns[idx]
            m = compile_rule(pat, fxn) if self.compiled else _interpreted_rule(pat, fxn, *_check_rule(pat, fxn))
            self._rule_fns[idx] = m
        return m

    def _build(self, op: Ops) -> Callable[[UOp, Any], Any] | None:
        idxs = self.pdict.get(op)
        fn: Callable[[UOp, Any], Any] | None = None
        if idxs:
            if self.compiled:
                fn = compile_op_matcher(op, [self.patterns[i] for i in idxs])
            if fn is None:
                fn = _chain([self._rule_fn(i) for i in idxs])
        self._fast[op] = fn
        return fn

    def rewrite(self, uop: UOp, ctx: Any = None) -> UOp | None:
        """Apply the first rule that matches `uop` and returns something other than None/uop."""
        m = self._fast.get(uop.op, _unbuilt)
        if m is _unbuilt:
            m = self._build(uop.op)
        return None if m is None else m(uop, ctx)

    def rewrite_traced(self, uop: UOp, ctx: Any = None) -> UOp | None:
        """rewrite() that records which rule fired in the active trace and in `match_stats`."""
        for idx in self.pdict.get(uop.op, ()):
            m, fxn = self._rule_fn(idx), self.patterns[idx][1]
            st = time.perf_counter()
            r = m(uop, ctx)
            loc = rule_location(fxn)
            stat = match_stats.setdefault(loc, [0, 0, 0.0])
            stat[1] += 1
            stat[2] += time.perf_counter() - st
            if r is not None and r is not uop:
                stat[0] += 1
                for tr in _active_traces:
                    tr.append(RewriteEvent(loc, uop, r))
                if DEBUG >= 7:
                    print(colored(f"rule {loc} fired: {uop.op} -> {r.op}", "green"))
                return r
        return None


class RewriteEvent:
    """One rule firing: where the rule lives, the node before and the replacement."""

    __slots__ = ("after", "before", "rule")

    def __init__(self, rule: str, before: UOp, after: UOp) -> None:
        self.rule, self.before, self.after = rule, before, after

    def __repr__(self) -> str:
        return f"RewriteEvent({self.rule}: {self.before.op} -> {self.after.op})"


# rule location -> [times fired, times tried, seconds spent]; filled while tracing or TRACK_MATCH_STATS is on
match_stats: dict[str, list[Any]] = {}
_active_traces: list[list[RewriteEvent]] = []


@contextlib.contextmanager
def track_rewrites() -> Iterator[list[RewriteEvent]]:
    """Collect a RewriteEvent for every rule that fires in graph_rewrite inside the block."""
    events: list[RewriteEvent] = []
    _active_traces.append(events)
    try:
        yield events
    finally:
        _active_traces.remove(events)


def print_match_stats(top: int = 20) -> str:
    """A table of the rules that fired most (needs TRACK_MATCH_STATS=1 or a track_rewrites block); also printed."""
    rows = sorted(match_stats.items(), key=lambda kv: -kv[1][2])[:top]
    lines = [f"{'rule':40s} {'fired':>8s} {'tried':>8s} {'ms':>9s}"]
    lines += [f"{loc:40s} {f:8d} {t:8d} {sec * 1e3:9.2f}" for loc, (f, t, sec) in rows]
    out = "\n".join(lines)
    print(out)
    return out


class RewriteError(RuntimeError):
    """graph_rewrite did not reach a fixed point (a rule cycle)."""


REWRITE_LIMIT = 1_000_000  # rule firings per graph_rewrite call before we call it a cycle


def _bad_result(pm: PatternMatcher, node: UOp, r: Any, ctx: Any) -> TypeError:
    """The error for a rule that returned something other than a UOp or None, naming the rule when it can."""
    loc = "a rule"
    for idx in pm.pdict.get(node.op, ()):
        got = pm._rule_fn(idx)(node, ctx)
        if got is not None and got is not node and got.__class__ is not UOp:
            loc = f"rule {rule_location(pm.patterns[idx][1])}"
            break
    return TypeError(f"{loc} returned {type(r).__name__} {r!r} for {node.op}; rules must return a UOp or None")


def graph_rewrite(root: UOp, pm: PatternMatcher, ctx: Any = None, bottom_up: bool = False, name: str | None = None,
                  skip: frozenset[Ops] = frozenset()) -> UOp:  # fmt: skip
    """Rewrite the DAG under `root` with `pm` until no rule applies, memoising per node.

    Default order: sources first, then the node (with rewritten sources); a replacement is itself rewritten.
    bottom_up=True: rules are applied to a node before its sources (top of the graph first), then again after.
    A node whose op is in `skip` is kept as it is: neither it nor its sources are rewritten (a rule may return one).
    """
    return graph_rewrite_map(root, pm, ctx, bottom_up, name, skip)[root]


def graph_rewrite_map(root: UOp, pm: PatternMatcher, ctx: Any = None, bottom_up: bool = False,
                      name: str | None = None, skip: frozenset[Ops] = frozenset()) -> dict[UOp, UOp]:  # fmt: skip
    """Like graph_rewrite, returning the map from every visited original node to its rewritten node."""
    if not isinstance(root, UOp):
        raise TypeError(f"graph_rewrite needs a UOp, got {type(root).__name__}")
    if not isinstance(pm, PatternMatcher):
        raise TypeError(f"graph_rewrite needs a PatternMatcher, got {type(pm).__name__}")
    verbose = DEBUG >= 6
    rewrite = pm.rewrite_traced if (_active_traces or TRACK_MATCH_STATS or DEBUG >= 7) else pm.rewrite
    st = time.perf_counter() if verbose else 0.0
    replace: dict[UOp, UOp] = {}
    stack: list[tuple[UOp, int, UOp]] = [(root, 0, root)]
    steps = 0
    while stack:
        n, stage, cur = stack.pop()
        if stage == 0:
            if n in replace:
                continue
            if skip and n.op in skip:
                replace[n] = n
                continue
            if bottom_up:
                seen: set[UOp] | None = None  # made on the first firing (most nodes match no rule)
                while (r := rewrite(cur, ctx)) is not None:
                    if r.__class__ is not UOp:
                        raise _bad_result(pm, cur, r, ctx)
                    steps += 1
                    if seen is None:
                        seen = {n}
                    if r in seen or steps > REWRITE_LIMIT:
                        raise RewriteError(f"graph_rewrite {name or ''}: no fixed point (rules cycle), node {r.op}")
                    seen.add(r)
                    cur = r
                    if skip and r.op in skip:
                        break
                if cur is not n and cur in replace:
                    replace[n] = replace[cur]
                    continue
            if skip and cur.op in skip:
                replace[n] = cur
                continue
            stack.append((n, 1, cur))
            for s in reversed(cur.src):
                if s not in replace:
                    stack.append((s, 0, s))
        elif stage == 1:
            src = cur.src
            new_src = tuple([replace[s] for s in src])
            new_n = cur if new_src == src else UOp(cur.op, cur.dtype, new_src, cur.arg, cur.tag)
            if bottom_up:
                if new_n is cur:
                    replace[n] = cur
                else:
                    stack.append((n, 2, new_n))
                    stack.append((new_n, 0, new_n))
                continue
            r = rewrite(new_n, ctx)
            if r is None:
                replace[n] = new_n
                if new_n is not n:
                    replace[new_n] = new_n
            else:
                if r.__class__ is not UOp:
                    raise _bad_result(pm, new_n, r, ctx)
                steps += 1
                if steps > REWRITE_LIMIT:
                    raise RewriteError(f"graph_rewrite {name or ''}: no fixed point, last node {r.op}")
                stack.append((n, 2, r))
                stack.append((r, 0, r))
        else:
            replace[n] = replace[cur]
    if verbose:
        print(f"graph_rewrite {name or ''}: {len(replace)} nodes, {steps} rewrites, "
              f"{(time.perf_counter() - st) * 1e3:.2f} ms")  # fmt: skip
    return replace
