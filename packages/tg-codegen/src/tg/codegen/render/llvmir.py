"""LLVM IR renderers: `LLVMRenderer` (the rule table), `CPULLVMRenderer` (`CPU:LLVM`) and `AMDLLVMRenderer` (gfx11).

The linear program becomes one LLVM function in textual IR: one SSA value per UOp (`%v<position>`), opaque pointers,
RANGE a header block with a `phi` and the bound check, END the latch and the exit block, IF/ENDIF and gated
loads/stores branches (a gated load joins its value and the alternative with a `phi`), registers `alloca`s that
LLVM promotes. bool is `i1` in registers and `i8` in memory. How each op becomes text is data: `llvm_rules`, a
PatternMatcher whose rules take `(ctx, u)`, append instructions to the context and return the text naming u's value.

Numerics match the C renderer: no fast-math or contraction flags, plain `fdiv` (correctly rounded), MULACC is
`llvm.fma`, SQRT/TRUNC are the `llvm.sqrt`/`llvm.trunc` intrinsics. No library function is ever called: the CPU
flavour decomposes EXP2/LOG2/SIN/POW into tg's polynomials (tg.codegen.lower.transcendental) and converts
bfloat16/fp8 (and float16 without a conversion instruction) with integer bit operations (lower/float_bits.py); the
AMD flavour keeps float32/float16 EXP2/LOG2 as the hardware instructions and decomposes SIN and float64 ones.
"""

from __future__ import annotations

import functools
import math
import struct
from collections import Counter
from typing import Any

from tg.codegen.lower.float_bits import float_bits_rules
from tg.codegen.lower.transcendental import exp2_poly, log2_poly
from tg.codegen.render import cvector
from tg.codegen.render.renderer import BLOCK_LOOP, CORE_ID, CPU_MAX_BUFFERS, Renderer
from tg.ir.dtype import AddrSpace, DType, PtrDType, dtypes
from tg.ir.floats import truncate
from tg.ir.ops import GroupOp, Ops
from tg.ir.pattern import PatternMatcher, UPat
from tg.ir.uop import UOp

# scalar LLVM types; float16 is `half` only where the renderer computes in it (else its bits, i16)
_INT_TYPES = {1: "i8", 2: "i16", 4: "i32", 8: "i64"}
_FLOAT_TYPES = {dtypes.float32: "float", dtypes.float64: "double"}
_INTRINSIC_SUFFIX = {"half": "f16", "float": "f32", "double": "f64"}


class LLVMContext:
    """The state of one function being rendered: value names, instructions, entry allocas, declarations."""

    def __init__(self, renderer: LLVMRenderer, uops: list[UOp]) -> None:
        self.ren = renderer
        self.pos = {u: i for i, u in enumerate(uops)}
        self.r: dict[UOp, str] = {}
        self.lines: list[str] = []
        self.allocas: list[str] = []
        self.globals: list[str] = []
        self.decls: set[str] = set()
        self.metadata: list[str] = []
        self.block = "entry"  # the block instructions go into now (a phi names its predecessors)
        self.counters: Counter[str] = Counter()

    def __getitem__(self, u: UOp) -> str:
        return self.r[u]

    def name(self, u: UOp, suffix: str = "") -> str:
        """The SSA name of u's value (`%v12`), or of a helper value of it (`%v12_lo`)."""
        return f"%v{self.pos[u]}{suffix}"

    def emit(self, text: str) -> None:
        self.lines.append("  " + text)

    def label(self, name: str) -> None:
        """Start block `name` (the previous block must have ended with a branch)."""
        self.lines.append(f"{name}:")
        self.block = name

    def typed(self, u: UOp) -> str:
        """`T value` of u, as an operand."""
        return f"{self.ren.ltype(u.dtype)} {self[u]}"

    def intrinsic(self, name: str, ret: str, *args: str) -> str:
        """Declare an LLVM intrinsic (once) and return its name; `args` are the argument types."""
        self.decls.add(f"declare {ret} @{name}({', '.join(args)})")
        return f"@{name}"


def _const_text(ren: LLVMRenderer, v: Any, dt: DType) -> str:
    """An LLVM literal of scalar dtype `dt` (floats as exact hex doubles, ints as signed decimals)."""
    if dt is dtypes.bool:
        return "true" if v else "false"
    if dtypes.is_float(dt):
        f = float(truncate[dt](v))
        if dt is dtypes.float16 and ren.ltype(dt) == "half":
            return f"0xH{struct.unpack('<H', struct.pack('<e', f))[0]:04X}"
        if dt in _FLOAT_TYPES:
            if math.isnan(f):
                return "0x7FF8000000000000"
            return f"0x{struct.pack('>d', f).hex().upper()}"
        # storage-only floats live as their bits
        from tg.ir.floats import f32_to_bf16_bits, float_to_fp8

        if dt is dtypes.float16:
            bits = struct.unpack("<H", struct.pack("<e", f))[0]
        elif dt is dtypes.bfloat16:
            bits = f32_to_bf16_bits(f)
        else:
            bits = float_to_fp8(f, dt)
        return str(_signed(bits, dt.itemsize))
    return str(_signed(int(v), dt.itemsize))


def _signed(v: int, size: int) -> int:
    v &= (1 << (8 * size)) - 1
    return v - (1 << (8 * size)) if v >> (8 * size - 1) else v


def _buffer(u: UOp) -> UOp:
    return u.under((Ops.AFTER, Ops.INDEX))


def _addrspace(u: UOp) -> AddrSpace:
    buf = _buffer(u)
    return buf.dtype.addrspace if isinstance(buf.dtype, PtrDType) else AddrSpace.GLOBAL


# *** the rule table: every rule takes (ctx, u), emits instructions and returns the text naming u's value ***


def _const(ctx: LLVMContext, u: UOp) -> str:
    if u.dtype.count == 1:
        return _const_text(ctx.ren, u.arg, u.dtype)
    lanes = u.arg if isinstance(u.arg, tuple) else (u.arg,) * u.dtype.count
    t = ctx.ren.ltype(u.dtype.scalar())
    return "<" + ", ".join(f"{t} {_const_text(ctx.ren, v, u.dtype.scalar())}" for v in lanes) + ">"


def _define_reg(ctx: LLVMContext, u: UOp) -> str:
    assert isinstance(u.dtype, PtrDType)
    name = ctx.name(u)
    addr = f", addrspace({ctx.ren.addrspaces[AddrSpace.REG]})" if ctx.ren.addrspaces[AddrSpace.REG] else ""
    ctx.allocas.append(f"  {name} = alloca [{max(u.dtype.size, 1)} x {ctx.ren.mtype(u.dtype.base)}]{addr}")
    return name


def _define_local(ctx: LLVMContext, u: UOp) -> str:
    assert isinstance(u.dtype, PtrDType)
    if not ctx.ren.has_shared:
        raise NotImplementedError(f"{type(ctx.ren).__name__} has no workgroup-shared memory (DEFINE_LOCAL)")
    name = f"@local{ctx.pos[u]}"
    space = ctx.ren.addrspaces[AddrSpace.LOCAL]
    ctx.globals.append(f"{name} = internal unnamed_addr addrspace({space}) global "
                       f"[{max(u.dtype.size, 1)} x {ctx.ren.mtype(u.dtype.base)}] undef, align 16")  # fmt: skip
    return name


def _special(ctx: LLVMContext, u: UOp) -> str:
    name, ret = str(u.arg), ctx.name(u)
    fn = ctx.intrinsic(ctx.ren.workitem(name[0], int(name[-1])), "i32")
    if ctx.ren.ltype(u.dtype) == "i32":
        ctx.emit(f"{ret} = call i32 {fn}()")
    else:
        ctx.emit(f"{ret}_i32 = call i32 {fn}()")
        ctx.emit(f"{ret} = zext i32 {ret}_i32 to {ctx.ren.ltype(u.dtype)}")
    return ret


def _range(ctx: LLVMContext, u: UOp) -> str:
    i, t, v = ctx.pos[u], ctx.ren.ltype(u.dtype), ctx.name(u)
    pred = ctx.block
    ctx.emit(f"br label %loop{i}")
    ctx.label(f"loop{i}")
    ctx.emit(f"{v} = phi {t} [0, %{pred}], [{v}_next, %loop{i}_latch]")
    ctx.emit(f"{v}_ok = icmp slt {t} {v}, {ctx[u.src[0]]}")
    ctx.emit(f"br i1 {v}_ok, label %loop{i}_body, label %loop{i}_exit")
    ctx.label(f"loop{i}_body")
    return v


def _end(ctx: LLVMContext, u: UOp) -> str:
    ranges = [s for s in u.src[1:] if s.op is Ops.RANGE]
    if len(ranges) != 1:
        raise ValueError(f"END must close one RANGE after split_ends, got {len(ranges)}")
    r = ranges[0]
    i, t, v = ctx.pos[r], ctx.ren.ltype(r.dtype), ctx[r]
    ctx.emit(f"br label %loop{i}_latch")
    ctx.label(f"loop{i}_latch")
    ctx.emit(f"{v}_next = add nsw {t} {v}, 1")
    rolled = ""
    if isinstance(r.arg, tuple) and BLOCK_LOOP in r.arg[2:]:  # a loop over sum blocks stays rolled (lower/blocked.py)
        md = len(ctx.metadata)
        ctx.metadata += [f"!{md} = distinct !{{!{md}, !{md + 1}}}", f'!{md + 1} = !{{!"llvm.loop.unroll.disable"}}']
        rolled = f", !llvm.loop !{md}"
    ctx.emit(f"br label %loop{i}{rolled}")
    ctx.label(f"loop{i}_exit")
    return ""


def _if(ctx: LLVMContext, u: UOp) -> str:
    i = ctx.pos[u]
    ctx.emit(f"br i1 {ctx[u.src[0]]}, label %if{i}, label %endif{i}")
    ctx.label(f"if{i}")
    return ""


def _endif(ctx: LLVMContext, u: UOp) -> str:
    i = ctx.pos[u.src[0]]
    ctx.emit(f"br label %endif{i}")
    ctx.label(f"endif{i}")
    return ""


def _barrier(ctx: LLVMContext, u: UOp) -> str:
    if not ctx.ren.barrier:
        raise NotImplementedError(f"{type(ctx.ren).__name__} has no barrier")
    for line in ctx.ren.barrier:
        ctx.emit(line.format(barrier=ctx.intrinsic("llvm.amdgcn.s.barrier", "void")))
    return ""


def _index(ctx: LLVMContext, u: UOp) -> str:
    if len(u.src) != 2:
        raise ValueError("INDEX with a gate must be lowered first (pm_gates)")
    buf, idx = u.src
    if idx.dtype.count != 1:
        raise NotImplementedError(f"INDEX with a vector of indices ({idx.dtype}) must be devectorized first")
    base = _buffer(buf)
    assert isinstance(base.dtype, PtrDType)
    ptr, elem = ctx.ren.ptype(_addrspace(buf)), ctx.ren.mtype(base.dtype.base)
    ret = ctx.name(u)
    ctx.emit(f"{ret} = getelementptr inbounds {elem}, {ptr} {ctx[buf]}, {ctx.typed(idx)}")
    return ret


def _memory_access(ctx: LLVMContext, index: UOp, dt: DType) -> tuple[str, str, str]:
    """(memory type, pointer type, alignment) of a load or store of dtype `dt` through `index`."""
    if dt.scalar() is dtypes.bool and dt.count > 1:
        raise NotImplementedError(f"bool vectors live in registers only ({dt} load or store)")
    base = _buffer(index)
    assert isinstance(base.dtype, PtrDType)
    # registers may hold whole vectors (their natural alignment); memory is only element-aligned (views)
    align = dt.itemsize if base.dtype.addrspace == AddrSpace.REG else dt.scalar().itemsize
    return ctx.ren.mtype(dt), ctx.ren.ptype(_addrspace(index)), f"align {align}"


def _load(ctx: LLVMContext, u: UOp) -> str:
    mem, ptr, align = _memory_access(ctx, u.src[0], u.dtype)
    ret = ctx.name(u)
    raw = f"{ret}_mem" if u.dtype is dtypes.bool else ret
    if len(u.src) == 1:
        ctx.emit(f"{raw} = load {mem}, {ptr} {ctx[u.src[0]]}, {align}")
        if u.dtype is dtypes.bool:
            ctx.emit(f"{ret} = icmp ne i8 {raw}, 0")
        return ret
    i, pred = ctx.pos[u], ctx.block
    ctx.emit(f"br i1 {ctx[u.src[2]]}, label %gate{i}, label %gate{i}_end")
    ctx.label(f"gate{i}")
    ctx.emit(f"{raw}_l = load {mem}, {ptr} {ctx[u.src[0]]}, {align}")
    if u.dtype is dtypes.bool:
        ctx.emit(f"{ret}_l = icmp ne i8 {raw}_l, 0")
    ctx.emit(f"br label %gate{i}_end")
    ctx.label(f"gate{i}_end")
    ctx.emit(f"{ret} = phi {ctx.ren.ltype(u.dtype)} [{ret}_l, %gate{i}], [{ctx[u.src[1]]}, %{pred}]")
    return ret


def _store(ctx: LLVMContext, u: UOp) -> str:
    index, value = u.src[0], u.src[1]
    mem, ptr, align = _memory_access(ctx, index, value.dtype)
    i = ctx.pos[u]
    if len(u.src) == 3:
        ctx.emit(f"br i1 {ctx[u.src[2]]}, label %gate{i}, label %gate{i}_end")
        ctx.label(f"gate{i}")
    val = ctx[value]
    if value.dtype is dtypes.bool:
        ctx.emit(f"%v{i}_mem = zext i1 {val} to i8")
        val = f"%v{i}_mem"
    ctx.emit(f"store {mem} {val}, {ptr} {ctx[index]}, {align}")
    if len(u.src) == 3:
        ctx.emit(f"br label %gate{i}_end")
        ctx.label(f"gate{i}_end")
    return ""


def _cast(ctx: LLVMContext, u: UOp) -> str:
    src, dst = u.src[0].dtype.scalar(), u.dtype.scalar()
    x, ret = ctx[u.src[0]], ctx.name(u)
    st, dt = ctx.ren.ltype(u.src[0].dtype), ctx.ren.ltype(u.dtype)
    if (
        src in (dtypes.bfloat16, *dtypes.fp8s)
        or dst in (dtypes.bfloat16, *dtypes.fp8s)
        or (dtypes.float16 in (src, dst) and ctx.ren.ltype(dtypes.float16) != "half" and not ctx.ren.half_casts)
    ):
        raise NotImplementedError(f"cast {src} -> {dst} must be lowered to bit operations (float_bits_rules)")
    if dtypes.float16 in (src, dst) and ctx.ren.ltype(dtypes.float16) != "half":  # bits <-> half, then a float cast
        h = ctx.ren.vector_of("half", u.dtype.count)
        if src is dtypes.float16:
            ctx.emit(f"{ret}_h = bitcast {st} {x} to {h}")
            ctx.emit(f"{ret} = fpext {h} {ret}_h to {dt}")
        else:
            ctx.emit(f"{ret}_h = fptrunc {st} {x} to {h}")
            ctx.emit(f"{ret} = bitcast {h} {ret}_h to {dt}")
        return ret
    if st == dt:
        return x  # same bits (int32 <-> uint32, ...)
    if dst is dtypes.bool:
        op = f"fcmp une {st} {x}, zeroinitializer" if dtypes.is_float(src) else f"icmp ne {st} {x}, zeroinitializer"
        ctx.emit(f"{ret} = {op}")
    elif dtypes.is_float(src) and dtypes.is_float(dst):
        ctx.emit(f"{ret} = {'fpext' if dst.itemsize > src.itemsize else 'fptrunc'} {st} {x} to {dt}")
    elif dtypes.is_float(dst):
        ctx.emit(f"{ret} = {'sitofp' if dtypes.is_int(src) and not dtypes.is_unsigned(src) else 'uitofp'} "
                 f"{st} {x} to {dt}")  # fmt: skip
    elif dtypes.is_float(src):
        # through a 64-bit conversion, as the C renderer does (values wrap instead of being undefined)
        wide = ctx.ren.vector_of("i64", u.dtype.count)
        if dst is dtypes.uint64:
            ctx.emit(f"{ret}_s = fptosi {st} {x} to {dt}")
            ctx.emit(f"{ret}_u = fptoui {st} {x} to {dt}")
            ctx.emit(f"{ret}_neg = fcmp olt {st} {x}, zeroinitializer")
            ctx.emit(f"{ret} = select {ctx.ren.vector_of('i1', u.dtype.count)} {ret}_neg, {dt} {ret}_s, {dt} {ret}_u")
        elif dst.itemsize == 8:
            ctx.emit(f"{ret} = fptosi {st} {x} to {dt}")
        else:
            ctx.emit(f"{ret}_w = fptosi {st} {x} to {wide}")
            ctx.emit(f"{ret} = trunc {wide} {ret}_w to {dt}")
    else:  # int -> int (bool sources are zero-extended)
        if dst.itemsize < src.itemsize:
            op = "trunc"
        else:
            op = "sext" if dtypes.is_int(src) and not dtypes.is_unsigned(src) and src is not dtypes.bool else "zext"
        ctx.emit(f"{ret} = {op} {st} {x} to {dt}")
    return ret


def _bitcast(ctx: LLVMContext, u: UOp) -> str:
    st, dt = ctx.ren.ltype(u.src[0].dtype), ctx.ren.ltype(u.dtype)
    if u.src[0].dtype.itemsize != u.dtype.itemsize:
        raise ValueError(f"bitcast {u.src[0].dtype} -> {u.dtype} changes the size")
    if st == dt:
        return ctx[u.src[0]]
    ctx.emit(f"{ctx.name(u)} = bitcast {st} {ctx[u.src[0]]} to {dt}")
    return ctx.name(u)


def _vectorize(ctx: LLVMContext, u: UOp) -> str:
    t, et = ctx.ren.ltype(u.dtype), ctx.ren.ltype(u.dtype.scalar())
    prev = "poison"
    for i, s in enumerate(u.src):
        cur = ctx.name(u) if i == len(u.src) - 1 else ctx.name(u, f"_{i}")
        ctx.emit(f"{cur} = insertelement {t} {prev}, {et} {ctx[s]}, i32 {i}")
        prev = cur
    return prev


def _gep(ctx: LLVMContext, u: UOp) -> str:
    lanes = u.arg if isinstance(u.arg, tuple) else (u.arg,)
    x, ret = ctx.typed(u.src[0]), ctx.name(u)
    if len(lanes) == 1:
        ctx.emit(f"{ret} = extractelement {x}, i32 {lanes[0]}")
    else:
        mask = ", ".join(f"i32 {i}" for i in lanes)
        ctx.emit(f"{ret} = shufflevector {x}, {ctx.ren.ltype(u.src[0].dtype)} poison, <{len(lanes)} x i32> <{mask}>")
    return ret


# ALU ops: (instruction for floats, signed ints, unsigned ints, bools); None: not an instruction for that kind
_BINARY: dict[Ops, tuple[str | None, str | None, str | None, str | None]] = {
    Ops.ADD: ("fadd", "add", "add", "or"), Ops.SUB: ("fsub", "sub", "sub", "xor"),
    Ops.MUL: ("fmul", "mul", "mul", "and"), Ops.FDIV: ("fdiv", None, None, None),
    Ops.IDIV: (None, "sdiv", "udiv", None), Ops.MOD: (None, "srem", "urem", None),
    Ops.AND: (None, "and", "and", "and"), Ops.OR: (None, "or", "or", "or"), Ops.XOR: (None, "xor", "xor", "xor"),
    Ops.SHL: (None, "shl", "shl", None), Ops.SHR: (None, "ashr", "lshr", None),
    Ops.CMPLT: ("fcmp olt", "icmp slt", "icmp ult", "icmp ult"),
    Ops.CMPNE: ("fcmp une", "icmp ne", "icmp ne", "icmp ne"),
    Ops.CMPEQ: ("fcmp oeq", "icmp eq", "icmp eq", "icmp eq"),
}  # fmt: skip
_UNARY_INTRINSICS = {Ops.SQRT: "sqrt", Ops.TRUNC: "trunc", Ops.EXP2: "exp2", Ops.LOG2: "log2"}


def _kind(dt: DType) -> int:
    s = dt.scalar()
    return 0 if dtypes.is_float(s) else 3 if s is dtypes.bool else 2 if dtypes.is_unsigned(s) else 1


def _alu(ctx: LLVMContext, u: UOp) -> str:
    ret, srcs, t = ctx.name(u), u.src, ctx.ren.ltype(u.dtype)
    kind = _kind(srcs[0].dtype if u.op is not Ops.WHERE else u.dtype)
    a = [ctx[s] for s in srcs]
    if u.op in _BINARY:
        if (inst := _BINARY[u.op][kind]) is None:
            raise NotImplementedError(f"{type(ctx.ren).__name__} can't render {u.op} on {u.dtype}")
        st = ctx.ren.ltype(srcs[0].dtype)
        b = a[1]
        if u.op in (Ops.SHL, Ops.SHR):  # shifts past the width wrap the count, as the hardware (and C code) does
            ctx.emit(f"{ret}_n = and {st} {b}, {_splat(ctx, srcs[1].dtype, srcs[0].dtype.scalar().itemsize * 8 - 1)}")
            b = f"{ret}_n"
        ctx.emit(f"{ret} = {inst} {st} {a[0]}, {b}")
    elif u.op is Ops.NEG:
        if kind == 0:
            ctx.emit(f"{ret} = fneg {t} {a[0]}")
        else:  # 0 - x, or true ^ x for bools
            ctx.emit(f"{ret} = {'xor' if kind == 3 else 'sub'} {t} {_splat(ctx, u.dtype, int(kind == 3))}, {a[0]}")
    elif u.op is Ops.RECIPROCAL:
        ctx.emit(f"{ret} = fdiv {t} {_splat(ctx, u.dtype, 1.0)}, {a[0]}")
    elif u.op is Ops.MAX:
        if kind == 0:  # a when a >= b or a is NaN, else b (the C renderer's rule)
            ctx.emit(f"{ret}_ge = fcmp oge {t} {a[0]}, {a[1]}")
            ctx.emit(f"{ret}_nan = fcmp uno {t} {a[0]}, {a[0]}")
            ctx.emit(f"{ret}_c = or {ctx.ren.vector_of('i1', u.dtype.count)} {ret}_ge, {ret}_nan")
        else:
            ctx.emit(f"{ret}_c = icmp {'sgt' if kind == 1 else 'ugt'} {t} {a[0]}, {a[1]}")
        ctx.emit(f"{ret} = select {ctx.ren.vector_of('i1', u.dtype.count)} {ret}_c, {t} {a[0]}, {t} {a[1]}")
    elif u.op is Ops.WHERE:
        ctx.emit(f"{ret} = select {ctx.typed(srcs[0])}, {t} {a[1]}, {t} {a[2]}")
    elif u.op is Ops.MULACC:
        if kind == 0:
            fn = ctx.intrinsic(f"llvm.fma.{_suffix(t)}", t, t, t, t)
            ctx.emit(f"{ret} = call {t} {fn}({t} {a[0]}, {t} {a[1]}, {t} {a[2]})")
        else:
            ctx.emit(f"{ret}_m = mul {t} {a[0]}, {a[1]}")
            ctx.emit(f"{ret} = add {t} {ret}_m, {a[2]}")
    elif u.op in _UNARY_INTRINSICS and kind == 0:
        fn = ctx.intrinsic(f"llvm.{_UNARY_INTRINSICS[u.op]}.{_suffix(t)}", t, t)
        ctx.emit(f"{ret} = call {t} {fn}({t} {a[0]})")
    else:
        raise NotImplementedError(f"{type(ctx.ren).__name__} can't render {u.op} on {u.dtype}")
    return ret


def _suffix(t: str) -> str:
    """The type suffix of an overloaded intrinsic: `f32`, `v8f32`."""
    if t.startswith("<"):
        n, _, et = t[1:-1].partition(" x ")
        return f"v{n}{_INTRINSIC_SUFFIX[et]}"
    return _INTRINSIC_SUFFIX[t]


def _splat(ctx: LLVMContext, dt: DType, v: Any) -> str:
    """Constant `v` of dtype `dt` (a vector constant for vector dtypes), as an operand value."""
    lit = _const_text(ctx.ren, v, dt.scalar())
    if dt.count == 1:
        return lit
    return "<" + ", ".join([f"{ctx.ren.ltype(dt.scalar())} {lit}"] * dt.count) + ">"


llvm_rules = PatternMatcher([
    # names that need no instruction: buffers, variables, constants, ordering-only nodes
    (UPat(Ops.PARAM, name="u"), lambda ctx, u: f"%data{u.arg}"),
    (UPat(Ops.DEFINE_VAR, name="u"), lambda ctx, u: f"%{u.arg[0]}"),
    (UPat((Ops.CONST, Ops.VCONST), name="u"), _const),
    (UPat((Ops.SINK, Ops.GROUP, Ops.NOOP)), lambda ctx: ""),
    (UPat(Ops.AFTER, name="u"), lambda ctx, u: ctx[u.src[0]]),
    # definitions: registers (allocas in the entry block), workgroup memory (module globals), work-item ids
    (UPat(Ops.DEFINE_REG, name="u"), _define_reg),
    (UPat(Ops.DEFINE_LOCAL, name="u"), _define_local),
    (UPat(Ops.SPECIAL, name="u"), _special),
    # control flow: loops, conditionals, workgroup barriers
    (UPat(Ops.RANGE, name="u"), _range),
    (UPat(Ops.END, name="u"), _end),
    (UPat(Ops.IF, name="u"), _if),
    (UPat(Ops.ENDIF, name="u"), _endif),
    (UPat(Ops.BARRIER, name="u"), _barrier),
    # memory: addresses, loads and stores (gated ones branch)
    (UPat(Ops.INDEX, name="u"), _index),
    (UPat(Ops.LOAD, name="u"), _load),
    (UPat(Ops.STORE, name="u"), _store),
    # values: conversions, vectors, arithmetic
    (UPat(Ops.CAST, name="u"), _cast),
    (UPat(Ops.BITCAST, name="u"), _bitcast),
    (UPat(Ops.VECTORIZE, name="u"), _vectorize),
    (UPat(Ops.GEP, name="u"), _gep),
    (UPat(GroupOp.ALU, name="u"), _alu),
])  # fmt: skip


class LLVMRenderer(Renderer):
    """Textual LLVM IR for one target; subclasses set the triple, address spaces, ids and function attributes."""

    suffix = "ll"
    triple: str = ""
    cpu: str = ""
    features: str = ""
    kernel_cc: str = ""  # calling convention keyword of a kernel (`amdgpu_kernel`)
    addrspaces: dict[AddrSpace, int] = {AddrSpace.GLOBAL: 0, AddrSpace.LOCAL: 0, AddrSpace.REG: 0}
    barrier: tuple[str, ...] = ()  # the instructions of a workgroup barrier (`{barrier}`: the intrinsic's name)
    half_native: bool = False  # float16 values are `half` (computed in); else i16 bits
    half_casts: bool = False  # float16 <-> float32 with fpext/fptrunc (a conversion instruction exists)
    native_float_dtypes = frozenset({dtypes.float32, dtypes.float64})
    supported_ops = frozenset({
        Ops.ADD, Ops.SUB, Ops.MUL, Ops.FDIV, Ops.IDIV, Ops.MOD, Ops.MAX, Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ, Ops.AND,
        Ops.OR, Ops.XOR, Ops.SHL, Ops.SHR, Ops.WHERE, Ops.NEG, Ops.RECIPROCAL, Ops.SQRT, Ops.TRUNC, Ops.MULACC,
    })  # fmt: skip
    string_rules = llvm_rules

    # ---- types ------------------------------------------------------------------------------------------------

    def ltype(self, dt: DType) -> str:
        """The LLVM type of a value of dtype `dt` in registers (pointers: their address space's `ptr`)."""
        if isinstance(dt, PtrDType):
            return self.ptype(dt.addrspace)
        return self.vector_of(self._scalar_type(dt.scalar(), register=True), dt.count)

    def mtype(self, dt: DType) -> str:
        """The LLVM type of dtype `dt` in memory (bool is a byte)."""
        return self.vector_of(self._scalar_type(dt.scalar(), register=False), dt.count)

    def ptype(self, space: AddrSpace) -> str:
        """The pointer type of an address space."""
        n = self.addrspaces[space]
        return f"ptr addrspace({n})" if n else "ptr"

    @staticmethod
    def vector_of(t: str, n: int) -> str:
        return t if n == 1 else f"<{n} x {t}>"

    def _scalar_type(self, dt: DType, register: bool) -> str:
        if dt is dtypes.bool:
            return "i1" if register else "i8"
        if dt is dtypes.float16 and self.half_native:
            return "half"
        if dt in _FLOAT_TYPES:
            return _FLOAT_TYPES[dt]
        if dt is dtypes.void:
            return "void"
        return _INT_TYPES[dt.itemsize]  # ints, and the bits of storage-only floats

    # ---- hooks ------------------------------------------------------------------------------------------------

    def workitem(self, kind: str, dim: int) -> str:
        """The intrinsic of a work-item id: `kind` "g" (group) or "l" (local), `dim` 0..2."""
        raise NotImplementedError(f"{type(self).__name__} has no work-item ids (SPECIAL {kind}idx{dim})")

    def function_attributes(self, uops: list[UOp]) -> str:
        """The kernel's attribute group."""
        return 'nounwind "no-builtins"'

    def buffer_param(self, p: UOp) -> str:
        """A buffer parameter: `noalias` (tg's kernels never alias their buffers, as C's `restrict`); only
        element-aligned, since a buffer view may start at any element."""
        return f"{self.ptype(AddrSpace.GLOBAL)} noalias %data{p.arg}"

    def render_entry(self, name: str, params: list[UOp], variables: list[UOp]) -> str:
        """Functions after the kernel (the CPU's thread-pool entry wrapper); none by default."""
        return ""

    # ---- the whole module -------------------------------------------------------------------------------------

    def render(self, uops: list[UOp]) -> str:
        """Render a linear program to an LLVM module with one kernel function (`define void @name(...)`)."""
        if not uops or uops[-1].op is not Ops.SINK:
            raise ValueError("render needs a linear program ending in SINK (the output of linearize)")
        sink = uops[-1]
        name = sink.arg if isinstance(sink.arg, str) else getattr(sink.arg, "function_name", "kernel")
        ctx = LLVMContext(self, uops)
        for u in uops:
            text: Any = self.string_rules.rewrite(u, ctx)
            if not isinstance(text, str):
                raise NotImplementedError(f"{type(self).__name__} can't render {u.op} (dtype {u.dtype}, arg {u.arg!r})")
            ctx.r[u] = text
        params = sorted((u for u in uops if u.op is Ops.PARAM), key=lambda u: u.arg)
        # variables sorted by name, the thread id of a THREAD axis last (the C renderer's order)
        variables = sorted((u for u in uops if u.op is Ops.DEFINE_VAR), key=lambda v: (v.arg[0] == CORE_ID, v.arg[0]))
        sig = [self.buffer_param(p) for p in params] + [f"{self.ltype(v.dtype)} %{v.arg[0]}" for v in variables]
        cc = f"{self.kernel_cc} " if self.kernel_cc else ""
        out = [f'target triple = "{self.triple}"', "", *ctx.globals, *([""] if ctx.globals else [])]
        out += [f"define {cc}void @{name}({', '.join(sig)}) #0 {{", "entry:", *ctx.allocas, *ctx.lines, "  ret void",
                "}", ""]  # fmt: skip
        out += [self.render_entry(name, params, variables), *sorted(ctx.decls), ""]
        out += [f"attributes #0 = {{ {self.function_attributes(uops)} }}", *ctx.metadata]
        return "\n".join(out) + "\n"

    def __repr__(self) -> str:
        return f"{type(self).__name__}(triple={self.triple!r}, cpu={self.cpu!r})"


# *** the CPU flavour ***


def _feature_set(features: str) -> frozenset[str]:
    return frozenset(f[1:] for f in features.split(",") if f.startswith("+"))


@functools.lru_cache(maxsize=8)
def _cpu_extra_rules(half_casts: bool) -> PatternMatcher:
    # storage-only floats convert with integer bit operations (float16 too where there is no conversion instruction)
    return float_bits_rules(half=not half_casts)


class CPULLVMRenderer(LLVMRenderer):
    """LLVM IR for the host CPU (`CPU:LLVM`): vector widths and FMA from the target's features, THREAD axes through
    a `core_id` argument and the `<name>_entry(args, core_id)` wrapper the thread pool calls (as ClangRenderer)."""

    device = "CPU"
    max_buffers = CPU_MAX_BUFFERS  # the same ctypes call as ClangRenderer's kernels (see there)
    supported_ops = LLVMRenderer.supported_ops  # EXP2/LOG2/SIN/POW would be libm calls: tg's polynomials instead

    def __init__(self, triple: str = "x86_64-unknown-linux-gnu", cpu: str = "", features: str = "",
                 threads: int = 1) -> None:  # fmt: skip
        if not isinstance(threads, int) or threads < 1:
            raise ValueError(f"threads must be a positive int, got {threads!r}")
        self.triple, self.cpu, self.features = triple, cpu, features
        have = _feature_set(features)
        arm = triple.startswith(("aarch64", "arm64"))
        self.vector_bytes = 64 if "avx512f" in have else 32 if have & {"avx2", "avx"} else \
            16 if (have & {"sse2", "neon"} or arm) else 0  # fmt: skip
        fma = "fma" in have or arm
        self.thread_max, self.has_threads = threads, threads > 1
        self.has_fma = fma and self.vector_bytes >= 32  # the C renderer's rule, so both devices run one program
        self.vector_registers = 32 if self.vector_bytes == 64 else 16 if self.vector_bytes else 0
        ops = cvector.NUMERIC_VECTOR_OPS | ({Ops.MULACC} if self.has_fma else set())
        self.vector_ops = frozenset(ops) if self.vector_bytes else frozenset()
        self.vector_bool_ops = cvector.MASK_VECTOR_OPS if self.vector_bytes else frozenset()
        self.vector_conversions = cvector.VECTOR_CONVERSIONS if self.vector_bytes else frozenset()
        self.half_casts = "f16c" in have or arm
        self.extra_matcher = _cpu_extra_rules(self.half_casts)

    def render_entry(self, name: str, params: list[UOp], variables: list[UOp]) -> str:
        """For a kernel with a THREAD axis, `<name>_entry(args, core_id)`: buffers, then the other variables sorted
        by name, from one array of 64-bit values (the thread pool's one signature)."""
        if not any(v.arg[0] == CORE_ID for v in variables):
            return ""
        lines, args = ["define void @" + f"{name}_entry(ptr %args, i32 %core_id) #0 {{", "entry:"], []
        others = [v for v in variables if v.arg[0] != CORE_ID]
        for i, p in enumerate([*params, *others]):
            lines.append(f"  %a{i}p = getelementptr inbounds i64, ptr %args, i64 {i}")
            lines.append(f"  %a{i} = load i64, ptr %a{i}p, align 8")
            if p.op is Ops.PARAM:
                lines.append(f"  %x{i} = inttoptr i64 %a{i} to ptr")
                args.append(f"ptr %x{i}")
            else:
                t = self.ltype(p.dtype)
                lines.append(f"  %x{i} = trunc i64 %a{i} to {t}" if t != "i64" else f"  %x{i} = add i64 %a{i}, 0")
                args.append(f"{t} %x{i}")
        args.append(f"{self.ltype(next(v for v in variables if v.arg[0] == CORE_ID).dtype)} %core_id")
        lines += [f"  call void @{name}({', '.join(args)})", "  ret void", "}", ""]
        return "\n".join(lines)

    def __reduce__(self) -> tuple[type, tuple[str, str, str, int]]:  # type: ignore[override]
        return type(self), (self.triple, self.cpu, self.features, self.thread_max)


# *** the AMD flavour (RDNA3, wave32) ***


def _in_float32(x: UOp) -> UOp:
    return UOp(x.op, dtypes.float32, tuple(s.cast(dtypes.float32) for s in x.src), x.arg).cast(x.dtype)


@functools.lru_cache(maxsize=1)
def _amd_extra_rules() -> PatternMatcher:
    return PatternMatcher([
        # float64 EXP2/LOG2 have no instruction: tg's polynomials (float32 and float16 ones are v_exp/v_log)
        (UPat(Ops.EXP2, dtype=dtypes.float64, name="x"), lambda x: exp2_poly(x.src[0])),
        (UPat(Ops.LOG2, dtype=dtypes.float64, name="x"), lambda x: log2_poly(x.src[0])),
        # float16 SIN and POW through float32 (whose rules then apply)
        (UPat((Ops.SIN, Ops.POW), dtype=dtypes.float16, name="x"), _in_float32),
    ]) + float_bits_rules(half=False)  # fmt: skip


AMD_ARCHS = ("gfx1100",)


class AMDLLVMRenderer(LLVMRenderer):
    """LLVM IR for AMD RDNA3 GPUs (gfx1100, wave32): `amdgpu_kernel` functions, work-group/work-item ids, LDS in
    address space 3, registers in 5, barriers with workgroup fences, `amdgpu-flat-work-group-size` from the
    kernel's local size."""

    device = "AMD"
    has_local = True
    has_shared = True
    shared_max = 65536
    local_max = (1024, 1024, 1024)
    max_local_threads = 1024
    global_max = (2**31 - 1, 65535, 65535)
    has_fma = True
    vector_bytes = 16  # loads and stores up to 16 bytes; arithmetic lane by lane
    vector_ops = frozenset({Ops.ADD, Ops.SUB, Ops.MUL, Ops.FDIV, Ops.NEG})
    kernel_cc = "amdgpu_kernel"
    addrspaces = {AddrSpace.GLOBAL: 1, AddrSpace.LOCAL: 3, AddrSpace.REG: 5}
    barrier = ('fence syncscope("workgroup") release', "call void {barrier}()", 'fence syncscope("workgroup") acquire')
    half_native = True
    native_float_dtypes = frozenset({dtypes.float16, dtypes.float32, dtypes.float64})
    supported_ops = LLVMRenderer.supported_ops | {Ops.EXP2, Ops.LOG2}
    _workitems = {"g": "llvm.amdgcn.workgroup.id.", "l": "llvm.amdgcn.workitem.id."}

    def __init__(self, arch: str = "gfx1100") -> None:
        if arch not in AMD_ARCHS:
            raise ValueError(f"AMD arch {arch!r} is not supported; supported: {', '.join(AMD_ARCHS)}")
        self.arch = self.cpu = arch
        self.triple = "amdgcn-amd-amdhsa"
        self.extra_matcher = _amd_extra_rules()

    def workitem(self, kind: str, dim: int) -> str:
        if kind not in self._workitems:
            raise NotImplementedError(f"AMDLLVMRenderer has no {kind}idx ids (only gidx and lidx)")
        return self._workitems[kind] + "xyz"[dim]

    def function_attributes(self, uops: list[UOp]) -> str:
        local = 1
        for u in uops:
            if u.op is Ops.SPECIAL and str(u.arg).startswith("lidx"):
                if u.src[0].op is not Ops.CONST:
                    raise ValueError(f"work-group size must be constant, got {u.src[0]} for {u.arg}")
                local *= int(u.src[0].arg)
        if local > self.max_local_threads:
            raise ValueError(f"work-group of {local} threads exceeds {self.max_local_threads}")
        return f'nounwind "amdgpu-flat-work-group-size"="1,{local}" "no-builtins"'

    def __reduce__(self) -> tuple[type, tuple[str]]:  # type: ignore[override]
        return type(self), (self.arch,)
