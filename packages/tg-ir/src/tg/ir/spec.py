"""Spec verifiers: rule tables that accept well-formed nodes of one pipeline stage, and `verify` to apply them.

A spec is a PatternMatcher whose rules return True (node is fine) or False (node is wrong); a node no rule
matches is wrong too. `verify(graph, spec)` raises SpecError with the offending node printed. Specs:
- `tensor_spec`: the tensor-level graph (buffers, movement ops, elementwise math, REDUCE_AXIS, COPY, ASSIGN, ...).
- `kernel_spec`: a kernel AST (SINK of END(STORE(INDEX(PARAM, idx), value), *ranges), LOAD, RANGE, REDUCE, ...).
- `program_spec`: a linear program (kernel_spec after lowering: no REDUCE, ordered sources).
- `hcq_spec`: a schedule lowered to hardware command queues (LINEARs of QUEUEs of QCMD/CALL/PACKET, tg.ir.hcq).
Later stages extend them with `+`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tg.ir.dtype import AddrSpace, PtrDType, dtypes
from tg.ir.hcq import HCQRole, QOp, QueueKey
from tg.ir.ops import AxisType, GroupOp, KernelInfo, Ops
from tg.ir.pattern import PatternMatcher, UPat
from tg.ir.printer import pretty_print
from tg.ir.uop import UOp


class SpecError(ValueError):
    """A graph broke a spec; the message names the op and shows the node."""


def _const_ok(x: UOp) -> bool:
    c, dt = x, x.dtype
    if c.op is Ops.VCONST:
        return isinstance(c.arg, tuple) and len(c.arg) == dt.count
    if isinstance(c.arg, bool):
        return True
    if dtypes.is_int(dt):
        return isinstance(c.arg, int) and bool(dt.min <= c.arg <= dt.max)
    if dtypes.is_float(dt):
        return isinstance(c.arg, (int, float))
    return dt.scalar() is dtypes.bool and isinstance(c.arg, (bool, int))


def _shape_ok(x: UOp) -> bool:
    try:
        s = x._shape
    except (ValueError, TypeError, IndexError, AttributeError) as e:
        raise SpecError(f"{x.op}: bad shape arguments: {e}") from None
    if x.op in GroupOp.Elementwise:
        shapes = {t._shape for t in x.src if t._shape is not None}
        if len(shapes) > 1:
            raise SpecError(f"{x.op}: sources have different shapes {sorted(shapes, key=str)}")
    return s is not None or x.op in (Ops.SINK, Ops.GROUP)


def _alu_ok(x: UOp) -> bool:
    # construction already checked arity and dtypes of most ALU ops; re-check what can be bypassed
    if x.op in GroupOp.Comparison:
        return x.dtype.scalar() is dtypes.bool
    if x.op in (Ops.SHL, Ops.SHR):
        return dtypes.is_int(x.dtype) and dtypes.is_int(x.src[1].dtype)
    if x.op is Ops.IDIV:
        return dtypes.is_int(x.dtype)
    if x.op is Ops.MOD:  # float MOD is C's fmod (the remainder takes the dividend's sign)
        return dtypes.is_int(x.dtype) or dtypes.is_float(x.dtype)
    if x.op in (Ops.AND, Ops.OR, Ops.XOR):
        return dtypes.is_int(x.dtype) or dtypes.is_bool(x.dtype)
    return True


def _is_sint(v: Any) -> bool:
    return (isinstance(v, int) and not isinstance(v, bool)) or isinstance(v, UOp)


def _mop_arg_ok(x: UOp) -> bool:
    a = x.arg
    if x.op in (Ops.RESHAPE, Ops.EXPAND):
        return isinstance(a, tuple) and all(_is_sint(v) for v in a)
    if x.op is Ops.PERMUTE:
        return isinstance(a, tuple) and sorted(a) == list(range(len(a)))
    if x.op in (Ops.PAD, Ops.SHRINK):
        return isinstance(a, tuple) and all(isinstance(p, tuple) and len(p) == 2 and all(_is_sint(v) for v in p)
                                            for p in a)  # fmt: skip
    if x.op is Ops.FLIP:
        return isinstance(a, tuple) and all(isinstance(v, bool) for v in a)
    return False


shared_spec = PatternMatcher([
    (UPat(Ops.SINK, dtypes.void), lambda: True),
    (UPat(Ops.GROUP, dtypes.void), lambda: True),
    (UPat(Ops.NOOP), lambda: True),
    (UPat(Ops.DEVICE, dtypes.void, src=()), lambda: True),
    (UPat(Ops.UNIQUE, dtypes.void, src=(), name="x"), lambda x: isinstance(x.arg, int)),
    (UPat(Ops.DEFINE_VAR, name="x", src=()),
     lambda x: isinstance(x.arg, tuple) and len(x.arg) == 3 and isinstance(x.arg[0], str) and dtypes.is_int(x.dtype)
     and x.arg[1] <= x.arg[2]),
    (UPat(Ops.BIND, name="x", src=(UPat(Ops.DEFINE_VAR), UPat(Ops.CONST))),
     lambda x: x.dtype is x.src[0].dtype and x.src[0].arg[1] <= x.src[1].arg <= x.src[0].arg[2]),
    (UPat((Ops.CAST, Ops.BITCAST), name="x", src=(UPat.var("y"),)),
     lambda x, y: x.op is Ops.CAST or x.dtype.itemsize == y.dtype.itemsize or x._shape is not None),
    (UPat(Ops.AFTER, name="x", src=UPat()), lambda x: len(x.src) >= 1 and x.dtype is x.src[0].dtype),
])  # fmt: skip

tensor_spec = shared_spec + PatternMatcher([
    (UPat(Ops.BUFFER, name="x", src=(UPat(Ops.UNIQUE), UPat(Ops.DEVICE))),
     lambda x: isinstance(x.arg, int) and x.arg >= 0 and not isinstance(x.dtype, PtrDType)),
    (UPat(Ops.BUFFER_VIEW, name="x", src=(UPat((Ops.BUFFER, Ops.BUFFER_VIEW)),)),
     lambda x: isinstance(x.arg, tuple) and len(x.arg) == 2),
    (UPat((Ops.CONST, Ops.VCONST), name="x", src=(UPat(Ops.DEVICE),)), _const_ok),
    (UPat((Ops.CONST, Ops.VCONST), name="x", src=()), _const_ok),
    (UPat(GroupOp.Movement, name="x", src=(UPat.var("y"),)),
     lambda x, y: x.dtype is y.dtype and _mop_arg_ok(x) and _shape_ok(x)),
    (UPat(GroupOp.ALU, name="x"), lambda x: _alu_ok(x) and (_shape_ok(x) or all(s._shape is None for s in x.src))),
    (UPat(Ops.REDUCE_AXIS, name="x", src=(UPat.var("y"),)),
     lambda x, y: isinstance(x.arg, tuple) and len(x.arg) == 2 and x.arg[0] in GroupOp.Reduce
     and all(isinstance(a, int) for a in x.arg[1]) and _shape_ok(x)),
    (UPat((Ops.CONTIGUOUS, Ops.CONTIGUOUS_BACKWARD, Ops.DETACH), name="x", src=(UPat.var("y"),), allow_any_len=True),
     lambda x, y: x.dtype is y.dtype),
    (UPat(Ops.COPY, name="x", src=(UPat.var("y"), UPat(Ops.DEVICE))), lambda x, y: x.dtype is y.dtype),
    (UPat(Ops.ASSIGN, name="x", src=(UPat.var("t"), UPat.var("v")), allow_any_len=True),
     lambda x, t, v: x.dtype is t.dtype is v.dtype and t._shape == v._shape),
    (UPat((Ops.MSELECT, Ops.MSTACK), name="x"), lambda x: len(x.src) >= 1),
    (UPat(Ops.MULTI, name="x"), lambda x: len(x.src) >= 1 and all(s.dtype is x.dtype for s in x.src)),
    (UPat((Ops.KERNEL, Ops.CALL)), lambda: True),
    # function calls: a body TUPLE and its arguments (one per parameter); GETTUPLE picks an output of the right dtype
    (UPat(Ops.FUNCTION, dtypes.void, name="x", src=(UPat(Ops.TUPLE),), allow_any_len=True),
     lambda x: isinstance(x.arg, tuple) and len(x.arg) == 2 and len(x.arg[1]) == len(x.src) - 1),
    (UPat(Ops.TUPLE, dtypes.void), lambda: True),
    (UPat(Ops.GETTUPLE, name="x", src=(UPat(Ops.FUNCTION),)),
     lambda x: isinstance(x.arg, int) and 0 <= x.arg < len(x.src[0].src[0].src)
     and x.dtype is x.src[0].src[0].src[x.arg].dtype),
])  # fmt: skip


def _index_ok(x: UOp) -> bool:
    buf, *rest = x.src
    if not isinstance(buf.dtype, PtrDType):
        return False
    if len(rest) not in (1, 2) or not ((dtypes.is_int(rest[0].dtype) and rest[0].dtype.count == 1) or
                                       rest[0].dtype.scalar() in dtypes.ints):  # fmt: skip
        return False
    if len(rest) == 2 and rest[1].dtype.scalar() is not dtypes.bool:
        return False
    return True


def _store_ok(idx: UOp, val: UOp) -> bool:
    base = idx.dtype.base if isinstance(idx.dtype, PtrDType) else idx.dtype
    return val.dtype.scalar() is base.scalar()


def _load_ok(x: UOp, idx: UOp) -> bool:
    base = idx.dtype.base if isinstance(idx.dtype, PtrDType) else idx.dtype
    return x.dtype.scalar() is base.scalar()


def _range_ok(x: UOp) -> bool:
    return isinstance(x.arg, tuple) and len(x.arg) >= 2 and isinstance(x.arg[1], AxisType) and \
        dtypes.is_int(x.dtype) and x.src[0].dtype is x.dtype  # fmt: skip


_BUFS = (Ops.PARAM, Ops.DEFINE_LOCAL, Ops.DEFINE_REG, Ops.AFTER)

kernel_spec = shared_spec + PatternMatcher([
    (UPat(Ops.SINK, dtypes.void, name="x"), lambda x: x.arg is None or isinstance(x.arg, (KernelInfo, str))),
    (UPat(Ops.PARAM, name="x", src=()), lambda x: isinstance(x.dtype, PtrDType) and isinstance(x.arg, int)),
    (UPat((Ops.DEFINE_LOCAL, Ops.DEFINE_REG), name="x", src=()),
     lambda x: isinstance(x.dtype, PtrDType) and
     x.dtype.addrspace == (AddrSpace.LOCAL if x.op is Ops.DEFINE_LOCAL else AddrSpace.REG)),
    (UPat((Ops.CONST, Ops.VCONST), name="x", src=()), _const_ok),
    (UPat(Ops.RANGE, name="x", src=(UPat.var("end"),)), _range_ok),
    (UPat(Ops.SPECIAL, name="x", src=(UPat.var("end"),)), lambda x, end: isinstance(x.arg, str) and
     dtypes.is_int(x.dtype)),
    (UPat(Ops.INDEX, name="x", src=(UPat(_BUFS),), allow_any_len=True), _index_ok),
    (UPat(Ops.LOAD, name="x", src=(UPat(Ops.INDEX, name="idx"),), allow_any_len=True), _load_ok),
    (UPat(Ops.STORE, dtypes.void, src=(UPat(Ops.INDEX, name="idx"), UPat.var("val")), allow_any_len=True), _store_ok),
    (UPat(Ops.END, dtypes.void, name="x", src=(UPat(),), allow_any_len=True),
     lambda x: all(r.op is Ops.RANGE for r in x.src[1:])),
    (UPat(Ops.REDUCE, name="x", src=(UPat.var("v"),), allow_any_len=True),
     lambda x, v: x.arg in GroupOp.Reduce and x.dtype is v.dtype and all(r.op is Ops.RANGE for r in x.src[1:])),
    (UPat(GroupOp.ALU, name="x"), _alu_ok),
    (UPat(Ops.VECTORIZE, name="x"),
     lambda x: len(x.src) > 1 and len(x.src) == x.dtype.count and all(s.dtype is x.dtype.scalar() for s in x.src)),
    (UPat(Ops.GEP, name="x", src=(UPat.var("y"),)),
     lambda x, y: isinstance(x.arg, tuple) and len(x.arg) == x.dtype.count and all(0 <= i < y.dtype.count
                                                                                   for i in x.arg)),
    (UPat(Ops.BARRIER, dtypes.void), lambda: True),
    (UPat(Ops.IF, dtypes.void, src=(UPat(dtype=dtypes.bool),), allow_any_len=True), lambda: True),
    (UPat(Ops.ENDIF, dtypes.void, src=(UPat(Ops.IF),)), lambda: True),
    (UPat((Ops.WMMA, Ops.CUSTOM, Ops.CUSTOMI)), lambda: True),
    (UPat(Ops.COPY, src=(UPat(), UPat(Ops.DEVICE)), allow_any_len=True), lambda: True),
])  # fmt: skip

program_spec = PatternMatcher([(UPat(Ops.REDUCE), lambda: False)]) + kernel_spec + PatternMatcher([
    (UPat((Ops.LINEAR, Ops.PROGRAM, Ops.SOURCE, Ops.BINARY)), lambda: True),
])  # fmt: skip


# ---- hardware command queues (tg.ir.hcq) ---------------------------------------------------------------------------

# roles a WAIT/SIGNAL/TIMESTAMP may address: signal memory (16 bytes: value, timestamp)
_SIGNAL_ROLES = frozenset({"signal", "timeline", "sentinel", "epoch"})
_WORD_DTYPES = (dtypes.uint32, dtypes.uint64)


def _qcmd_ok(x: UOp) -> bool:
    if not isinstance(x.arg, QOp) or x.dtype is not dtypes.void:
        return False
    if x.arg is QOp.BARRIER:
        return not x.src
    want = 1 if x.arg is QOp.TIMESTAMP else 2
    if len(x.src) != want:
        raise SpecError(f"QCMD {x.arg.name} takes {want} sources, got {len(x.src)}")
    sig = x.src[0]
    if sig.op is not Ops.HCQBUF or sig.arg.role not in _SIGNAL_ROLES:
        raise SpecError(f"QCMD {x.arg.name} needs a signal HCQBUF as its first source, got {sig.op} {sig.arg}")
    if want == 2 and x.src[1].dtype not in _WORD_DTYPES:
        raise SpecError(f"QCMD {x.arg.name} value must be uint32 or uint64, got {x.src[1].dtype}")
    return True


def _queue_ok(x: UOp) -> bool:
    if not isinstance(x.arg, QueueKey) or x.dtype is not dtypes.void:
        return False
    for s in x.src:
        if s.op not in (Ops.QCMD, Ops.CALL, Ops.PACKET):
            raise SpecError(f"QUEUE {x.arg} holds a {s.op}; a queue holds QCMDs, CALLs or PACKETs")
    return True


def _qcmd_outside_queue(x: UOp) -> bool | None:
    """Refuses any node but a QUEUE that has a QCMD among its sources (None: no opinion, other rules decide)."""
    for s in x.src:
        if s.op is Ops.QCMD:
            raise SpecError(f"{s.arg.name} outside a QUEUE (a source of {x.op}): queue commands only exist in QUEUEs")
    return None


def _getaddr_ok(x: UOp, b: UOp) -> bool:
    if x.dtype is not dtypes.uint64 or not isinstance(x.arg, str):
        return False
    if b.op is Ops.PARAM:  # a slot: tensor-level PARAM(DEVICE) of the slotted schedule
        return len(b.src) == 1 and b.src[0].op is Ops.DEVICE
    return b.op is Ops.HCQBUF


hcq_spec = PatternMatcher([
    (UPat(GroupOp.All - {Ops.QUEUE}, name="x"), _qcmd_outside_queue),
    (UPat(Ops.LINEAR, dtypes.void, name="x"),
     lambda x: all(s.op in (Ops.QUEUE, Ops.CALL, Ops.LINEAR) for s in x.src)),
    (UPat(Ops.QUEUE, name="x"), _queue_ok),
    (UPat(Ops.QCMD, name="x"), _qcmd_ok),
    (UPat(Ops.PACKET, dtypes.void, name="x"),
     lambda x: isinstance(x.arg, str) and len(x.src) >= 1 and all(w.dtype in _WORD_DTYPES for w in x.src)),
    (UPat(Ops.GETADDR, name="x", src=(UPat(name="b"),)), _getaddr_ok),
    (UPat(Ops.HCQBUF, name="x", src=(UPat(Ops.DEVICE),)),
     lambda x: isinstance(x.arg, HCQRole) and isinstance(x.dtype, PtrDType) and isinstance(x.src[0].arg, str)),
    # the calls of a queue: kernels (lowered to PROGRAM by stage S0) and copies, over slot buffers
    (UPat(Ops.CALL, dtypes.void, name="x", src=(UPat((Ops.PROGRAM, Ops.COPY)),), allow_any_len=True),
     lambda x: all(a.op in (Ops.PARAM, Ops.BUFFER_VIEW, Ops.BUFFER, Ops.HCQBUF, Ops.BIND, Ops.DEFINE_VAR)
                   for a in x.src[1:])),
    (UPat(Ops.PROGRAM, src=()), lambda: True),
    (UPat(Ops.PARAM, name="x", src=(UPat(Ops.DEVICE),)), lambda x: isinstance(x.arg, tuple) and len(x.arg) == 2),
    (UPat(Ops.BUFFER_VIEW, name="x", src=(UPat((Ops.PARAM, Ops.BUFFER, Ops.BUFFER_VIEW, Ops.HCQBUF)),)),
     lambda x: isinstance(x.arg, tuple) and len(x.arg) == 2),
    (UPat(Ops.BUFFER, src=(UPat(Ops.UNIQUE), UPat(Ops.DEVICE))), lambda: True),
    (UPat(Ops.COPY, src=(UPat(Ops.DEVICE),)), lambda: True),
    # word and value expressions: constants, variables, the epoch (a load of the timeline value), ALU and casts
    (UPat(Ops.INDEX, name="x", src=(UPat(Ops.HCQBUF), UPat())), lambda x: dtypes.is_int(x.src[1].dtype)),
    (UPat(Ops.LOAD, src=(UPat(Ops.INDEX),)), lambda: True),
    (UPat((Ops.CONST,), name="x", src=()), _const_ok),
    (UPat(GroupOp.ALU, name="x"), _alu_ok),
]) + shared_spec  # fmt: skip


def verify(graph: UOp | Sequence[UOp], spec: PatternMatcher) -> bool:
    """Check every node of `graph` (a UOp DAG, or a linear program as a list) against `spec`.

    Raises SpecError naming the first bad node (printed with its sources). For a list, sources must also appear
    before their users. Returns True when everything passes.
    """
    if not isinstance(spec, PatternMatcher):
        raise TypeError(f"verify: spec must be a PatternMatcher (tensor_spec, kernel_spec, ...), got {spec!r}")
    if isinstance(graph, UOp):
        nodes = list(graph.toposort())
    else:
        if not isinstance(graph, Sequence) or not all(isinstance(u, UOp) for u in graph):
            raise TypeError(f"verify: graph must be a UOp or a list of UOps, got {graph!r}")
        nodes = list(graph)
        seen: set[UOp] = set()
        for i, u in enumerate(nodes):
            for s in u.src:
                if s not in seen:
                    raise SpecError(f"linear program: node {i} ({u.op}) uses {s.op} before it is defined\n"
                                    f"{pretty_print(u)}")  # fmt: skip
            seen.add(u)
    for u in nodes:
        try:
            ok: Any = spec.rewrite(u)
        except SpecError as e:
            raise SpecError(f"{e}\n{pretty_print(u)}") from None
        except Exception as e:  # a spec rule crashing on a malformed node means the node is malformed
            raise SpecError(f"{u.op} ({u.dtype}) failed spec check with {type(e).__name__}: {e}\n{pretty_print(u)}") \
                from None  # fmt: skip
        if ok is not True:
            why = "no spec rule accepts it" if ok is None else "spec rule rejected it"
            raise SpecError(f"{u.op} with dtype {u.dtype}, arg {u.arg!r}: {why}\n{pretty_print(u)}")
    return True


def type_verify(graph: UOp | Sequence[UOp], spec: PatternMatcher | None = None) -> bool:
    """verify() with kernel_spec as the default (tinygrad's name)."""
    return verify(graph, kernel_spec if spec is None else spec)
