"""The operation set of the IR (`Ops`), its groups (`GroupOp`) and loop axis kinds (`AxisType`)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum, IntEnum, auto
from typing import Any


class NamedEnum:
    """Enum mixin: `repr`, `str` and f-strings of a member are `Class.NAME` (IntEnum's would be the number)."""

    name: str

    def __repr__(self) -> str:
        return f"{type(self).__name__}.{self.name}"

    __str__ = __repr__

    def __format__(self, spec: str) -> str:
        return format(repr(self), spec)


class Ops(NamedEnum, IntEnum):
    """Every UOp has one of these ops. The order of definition is also the tie-break order of toposorts."""

    # sources and definitions
    SPECIAL = auto()  # a GPU thread/group id, src = (extent,), arg = name like "gidx0"
    PARAM = auto()  # a kernel buffer argument, arg = slot index, dtype = pointer dtype
    DEFINE_LOCAL = auto()
    DEFINE_REG = auto()
    DEFINE_VAR = auto()  # a symbolic integer, arg = (name, lo, hi)
    BIND = auto()  # DEFINE_VAR bound to a CONST value
    BUFFER = auto()  # tensor-level storage, src = (UNIQUE, DEVICE), arg = size in elements
    BUFFER_VIEW = auto()
    UNIQUE = auto()  # makes otherwise equal nodes distinct, arg = a number
    DEVICE = auto()  # arg = device name (str or tuple of str)
    NOOP = auto()

    # kernels and programs
    KERNEL = auto()
    CALL = auto()
    PROGRAM = auto()
    LINEAR = auto()
    # tensor-level function calls: FUNCTION(TUPLE(body outputs), *args), arg = (name, parameters); GETTUPLE(fn, i)
    FUNCTION = auto()
    TUPLE = auto()
    GETTUPLE = auto()
    SOURCE = auto()
    BINARY = auto()

    # ordering and grouping
    SINK = auto()
    AFTER = auto()  # src[0] passed through, ordered after src[1:]
    GROUP = auto()

    # vectors
    VECTORIZE = auto()
    GEP = auto()
    VCONST = auto()

    # memory
    INDEX = auto()
    LOAD = auto()
    STORE = auto()

    # math
    WMMA = auto()
    CAST = auto()
    BITCAST = auto()
    EXP2 = auto()
    LOG2 = auto()
    SIN = auto()
    SQRT = auto()
    RECIPROCAL = auto()
    NEG = auto()
    TRUNC = auto()
    ADD = auto()
    MUL = auto()
    SHL = auto()
    SHR = auto()
    IDIV = auto()  # C-style: truncates toward zero
    MAX = auto()
    MOD = auto()  # C-style: the sign follows the dividend
    CMPLT = auto()
    CMPNE = auto()
    CMPEQ = auto()
    XOR = auto()
    OR = auto()
    AND = auto()
    THREEFRY = auto()
    SUB = auto()
    FDIV = auto()
    POW = auto()
    WHERE = auto()
    MULACC = auto()

    # reductions and control flow
    REDUCE_AXIS = auto()  # tensor level, arg = (op, axes)
    REDUCE = auto()  # kernel level, src = (value, *ranges), arg = op
    BARRIER = auto()
    RANGE = auto()  # src = (end,), arg = (axis_id, AxisType)
    IF = auto()
    END = auto()  # src = (value, *ranges): closes ranges
    ENDIF = auto()
    CONST = auto()
    CUSTOM = auto()
    CUSTOMI = auto()

    # tensor-level only
    CONTIGUOUS = auto()
    CONTIGUOUS_BACKWARD = auto()
    DETACH = auto()
    COPY = auto()
    ASSIGN = auto()
    MSELECT = auto()
    MSTACK = auto()
    MULTI = auto()  # a tensor sharded over devices: src = one graph per device, arg = sharded axis (None: replicated)
    RESHAPE = auto()
    PERMUTE = auto()
    EXPAND = auto()
    PAD = auto()
    SHRINK = auto()
    FLIP = auto()

    # hardware command queues (tg.runtime.hcq; arg types in tg.ir.hcq)
    QUEUE = auto()  # one submit to one queue: src = commands in order, arg = QueueKey(devices, name)
    QCMD = auto()  # an abstract queue command, arg = QOp: WAIT/SIGNAL (signal, value), TIMESTAMP (signal,), BARRIER ()
    PACKET = auto()  # an encoded command: src = its words (uint32/uint64 CONSTs or expressions), arg = packet name
    GETADDR = auto()  # uint64: the address device `arg` uses for src[0] (a slot PARAM or an HCQBUF)
    HCQBUF = auto()  # a placeholder resolved at link: src = (DEVICE,), arg = HCQRole(role, key)


class GroupOp:
    """Named sets of Ops used by rules and checks."""

    Unary = frozenset({Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT, Ops.RECIPROCAL, Ops.NEG, Ops.TRUNC})
    Binary = frozenset({Ops.ADD, Ops.MUL, Ops.IDIV, Ops.MAX, Ops.MOD, Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ, Ops.XOR,
                        Ops.SHL, Ops.SHR, Ops.OR, Ops.AND, Ops.THREEFRY, Ops.SUB, Ops.FDIV, Ops.POW})  # fmt: skip
    Ternary = frozenset({Ops.WHERE, Ops.MULACC})
    ALU = Unary | Binary | Ternary
    Elementwise = ALU | {Ops.CAST, Ops.BITCAST}
    Movement = frozenset({Ops.RESHAPE, Ops.EXPAND, Ops.PERMUTE, Ops.PAD, Ops.SHRINK, Ops.FLIP})
    Defines = frozenset({Ops.PARAM, Ops.DEFINE_LOCAL, Ops.DEFINE_REG})
    Buffer = frozenset({Ops.LOAD, Ops.STORE, Ops.CONST, Ops.DEFINE_VAR})
    Irreducible = frozenset({Ops.CONST, Ops.DEFINE_VAR, Ops.SPECIAL, Ops.RANGE})
    Commutative = frozenset({Ops.ADD, Ops.MUL, Ops.MAX, Ops.CMPNE, Ops.CMPEQ, Ops.XOR, Ops.AND, Ops.OR})
    Associative = frozenset({Ops.ADD, Ops.MUL, Ops.AND, Ops.OR, Ops.MAX})
    Idempotent = frozenset({Ops.OR, Ops.AND, Ops.MAX})
    Comparison = frozenset({Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ})
    Reduce = frozenset({Ops.ADD, Ops.MUL, Ops.MAX})
    # ops whose result is unsafe to compute on values that are masked off (division by zero, ...)
    UnsafePad = frozenset({Ops.RECIPROCAL, Ops.LOG2, Ops.EXP2, Ops.IDIV, Ops.POW})
    # the roles of DESIGN.md
    Sources = frozenset({Ops.CONST, Ops.VCONST, Ops.BUFFER, Ops.BUFFER_VIEW, Ops.PARAM, Ops.DEFINE_VAR, Ops.BIND,
                         Ops.DEFINE_LOCAL, Ops.DEFINE_REG, Ops.UNIQUE, Ops.DEVICE})  # fmt: skip
    Ordering = frozenset({Ops.STORE, Ops.AFTER, Ops.SINK, Ops.GROUP, Ops.RANGE, Ops.END, Ops.LINEAR, Ops.CALL,
                          Ops.KERNEL})  # fmt: skip
    Markers = frozenset({Ops.CONTIGUOUS, Ops.CONTIGUOUS_BACKWARD, Ops.DETACH, Ops.COPY})
    HCQ = frozenset({Ops.QUEUE, Ops.QCMD, Ops.PACKET, Ops.GETADDR, Ops.HCQBUF})
    CodegenOnly = frozenset({Ops.INDEX, Ops.LOAD, Ops.SPECIAL, Ops.BARRIER, Ops.IF, Ops.ENDIF, Ops.WMMA, Ops.VECTORIZE,
                             Ops.GEP, Ops.PROGRAM, Ops.SOURCE, Ops.BINARY, Ops.CUSTOM, Ops.CUSTOMI})  # fmt: skip
    All = frozenset(Ops)


class AxisType(NamedEnum, Enum):
    """The role of a loop (RANGE) in a kernel; decides how codegen maps it to hardware."""

    GLOBAL = auto()
    WARP = auto()
    LOCAL = auto()
    LOOP = auto()
    GROUP_REDUCE = auto()
    REDUCE = auto()
    UPCAST = auto()
    UNROLL = auto()
    THREAD = auto()
    DEVICE = auto()


axis_letters = {AxisType.GLOBAL: "g", AxisType.THREAD: "t", AxisType.LOCAL: "l", AxisType.WARP: "w",
                AxisType.LOOP: "L", AxisType.UPCAST: "u", AxisType.GROUP_REDUCE: "G", AxisType.REDUCE: "R",
                AxisType.UNROLL: "r", AxisType.DEVICE: "d"}  # fmt: skip
axis_colors = {AxisType.GLOBAL: "blue", AxisType.THREAD: "BLUE", AxisType.LOCAL: "cyan", AxisType.WARP: "CYAN",
               AxisType.LOOP: "WHITE", AxisType.UPCAST: "yellow", AxisType.GROUP_REDUCE: "RED",
               AxisType.REDUCE: "red", AxisType.UNROLL: "magenta", AxisType.DEVICE: "green"}  # fmt: skip


@dataclass(frozen=True)
class KernelInfo:
    """The arg of a kernel AST's SINK: the kernel's name and the optimisations applied or requested."""

    name: str = ""  # "": unnamed, the program gets a name from its AST (tg.codegen.program.kernel_name)
    axis_types: tuple[AxisType, ...] = ()
    dont_use_locals: bool = False
    applied_opts: tuple[Any, ...] = ()
    opts_to_apply: tuple[Any, ...] | None = None

    @property
    def function_name(self) -> str:
        """The name as a C identifier ("kernel" when unnamed; tg.codegen.program names kernels from their AST)."""
        from tg.ir.helpers import to_function_name

        return to_function_name(self.name or "kernel")
