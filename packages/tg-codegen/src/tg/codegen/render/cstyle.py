"""C-family renderers: `CStyleLanguage` (shared by every C dialect) and `ClangRenderer` (plain C for the CPU).

The kernel is one function, `void name(T* restrict data0, ..., const int var0)`: buffers in PARAM slot order, then
the DEFINE_VAR values sorted by name. Each value that is used once is inlined into its user; values used more than
once, loads and stores become statements. float16 and bfloat16 are stored as `unsigned short` bit patterns and
converted to and from float with small inline functions (using the compiler's `_Float16` where it has one).

How each op becomes text is data: `string_rules`, a PatternMatcher whose rules take `(ctx, u)` (ctx is the
`RenderContext` of the kernel) and return the text naming u's value. A dialect (OpenCL, CUDA) subclasses
`CStyleLanguage` and overrides hooks: `kernel_prefix`, `buffer_prefix`, `local_prefix`, `barrier`, `workitem`,
`vector_type`, `vector_prelude`, `render_vectorize`, `render_gep`, `render_vector_load`,
`render_vector_store`, `render_signature`, `code_for_op`, `type_map`; a
dialect with an op of its own prepends rules: `string_rules = PatternMatcher([...]) + CStyleLanguage.string_rules`.
"""

from __future__ import annotations

import functools
import math
import struct
from collections import Counter
from collections.abc import Callable
from typing import Any

from tg.codegen.render import cvector
from tg.codegen.render.renderer import BLOCK_LOOP, CPU_MAX_BUFFERS, Renderer
from tg.ir.dtype import AddrSpace, DType, PtrDType, dtypes
from tg.ir.floats import f32_to_bf16_bits, float_to_fp8, truncate
from tg.ir.ops import GroupOp, Ops
from tg.ir.pattern import PatternMatcher, UPat
from tg.ir.uop import UOp

_HALF_FUNCS = r"""#ifdef __FLT16_MANT_DIG__
static inline float tg_h2f(unsigned short h) {
  _Float16 v; __builtin_memcpy(&v, &h, 2); return (float)v;
}
static inline unsigned short tg_f2h(float f) {
  _Float16 v = (_Float16)f; unsigned short h; __builtin_memcpy(&h, &v, 2); return h;
}
#else
static inline float tg_h2f(unsigned short h) {
  unsigned int s = (unsigned int)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu, u;
  if (e == 0x1fu) u = s | 0x7f800000u | (m << 13);
  else if (e != 0) u = s | ((e + 112u) << 23) | (m << 13);
  else if (m == 0) u = s;
  else { e = 113u; while (!(m & 0x400u)) { m <<= 1; e--; } u = s | (e << 23) | ((m & 0x3ffu) << 13); }
  float f; __builtin_memcpy(&f, &u, 4); return f;
}
static inline unsigned short tg_f2h(float f) {
  unsigned int u; __builtin_memcpy(&u, &f, 4);
  unsigned int s = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
  if (a >= 0x7f800000u) return (unsigned short)(s | 0x7c00u | (a > 0x7f800000u ? 0x200u : 0u));
  if (a >= 0x477ff000u) return (unsigned short)(s | 0x7c00u);
  if (a < 0x38800000u) {
    if (a <= 0x33000000u) return (unsigned short)s;
    unsigned int e = a >> 23, m = (a & 0x7fffffu) | 0x800000u, shift = 126u - e;
    unsigned int q = m >> shift, rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (q & 1u))) q++;
    return (unsigned short)(s | q);
  }
  unsigned int r = a - 0x38000000u;
  r += 0xfffu + ((r >> 13) & 1u);
  return (unsigned short)(s | (r >> 13));
}
#endif"""

_BF16_FUNCS = r"""static inline float tg_bf2f(unsigned short b) {
  unsigned int u = (unsigned int)b << 16; float f; __builtin_memcpy(&f, &u, 4); return f;
}
static inline unsigned short tg_f2bf(float f) {
  unsigned int u; __builtin_memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)(((u >> 16) & 0x8000u) | 0x7fc0u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (unsigned short)(u >> 16);
}"""

# fp8 <-> float for the four formats (mantissa bits, exponent bits, bias, IEEE inf/nan, fnuz); rounding to nearest
# even and saturating like tg.ir.floats.float_to_fp8
_FP8_FUNCS = r"""static inline float tg_pow2f(int k) { unsigned int u = (unsigned int)(k + 127) << 23; float f;
  __builtin_memcpy(&f, &u, 4); return f; }
static inline float tg_fp82f(unsigned char c, int mb, int eb, int bias, int ieee, int fnuz) {
  float sign = (c & 0x80) ? -1.0f : 1.0f;
  int ex = (c >> mb) & ((1 << eb) - 1), mant = c & ((1 << mb) - 1);
  if (fnuz && c == 0x80) return __builtin_nanf("");
  float nan = __builtin_copysignf(__builtin_nanf(""), sign);
  if (ieee && ex == (1 << eb) - 1) return mant == 0 ? sign * __builtin_inff() : nan;
  if (!ieee && !fnuz && ex == (1 << eb) - 1 && mant == (1 << mb) - 1) return nan;
  if (ex == 0) return sign * (float)mant * tg_pow2f(1 - bias - mb);
  return sign * (float)((1 << mb) | mant) * tg_pow2f(ex - bias - mb);
}
static inline unsigned char tg_f2fp8(float x, int mb, int bias, int ieee, int fnuz) {
  unsigned int u; __builtin_memcpy(&u, &x, 4);
  unsigned int sign = (u >> 24) & 0x80u, a = u & 0x7fffffffu, maxc = fnuz ? 0x7fu : (ieee ? 0x7bu : 0x7eu);
  if (a > 0x7f800000u) return (unsigned char)(fnuz ? 0x80u : (sign | 0x7fu));
  if (a == 0x7f800000u) return (unsigned char)(fnuz ? 0x80u : (sign | (ieee ? 0x7cu : 0x7fu)));
  if ((a >> 23) == 0) return (unsigned char)(fnuz ? 0u : sign);
  int ae = (int)(a >> 23) - 127, e = ae < 1 - bias ? 1 - bias : ae;
  unsigned int m = (a & 0x7fffffu) | 0x800000u, n = 0;
  int shift = 23 - mb + e - ae;
  if (shift < 32) {
    unsigned int rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1);
    n = m >> shift;
    if (rem > half || (rem == half && (n & 1u))) n++;
  }
  if (n >= (2u << mb)) { n >>= 1; e += 1; }
  if (n == 0) return (unsigned char)(fnuz ? 0u : sign);
  unsigned int code = n < (1u << mb) ? n : (((unsigned int)(e + bias) << mb) | (n - (1u << mb)));
  return (unsigned char)(sign | (code > maxc ? maxc : code));
}"""
# (mantissa bits, exponent bits, bias, ieee, fnuz) of each fp8 format
_FP8_ARGS = {dtypes.fp8e4m3: (3, 4, 7, 0, 0), dtypes.fp8e5m2: (2, 5, 15, 1, 0), dtypes.fp8e4m3fnuz: (3, 4, 8, 0, 1),
             dtypes.fp8e5m2fnuz: (2, 5, 16, 0, 1)}  # fmt: skip

# results of these dtypes are cast back after every ALU op: C promotes them to int, the IR wraps per op
_NARROW = frozenset({dtypes.bool, dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16})
_KEEPS_RANGE = frozenset({Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ, Ops.WHERE, Ops.MAX})  # result is one of the operands or 0/1
_BOOL_SAFE = frozenset({Ops.AND, Ops.OR, Ops.XOR, Ops.MUL})  # 0/1 operands give 0/1


def _float_literal(v: float, dt: DType) -> str:
    """The shortest decimal that reads back as exactly `v` in `dt` (float32 gets an `f` suffix)."""
    if dt is dtypes.float64:
        return repr(v) if ("." in repr(v) or "e" in repr(v)) else repr(v) + ".0"
    for digits in range(1, 10):
        s = f"{v:.{digits}g}"
        if truncate[dtypes.float32](float(s)) == v:
            break
    if "." not in s and "e" not in s:
        s += ".0"
    return s + "f"


# The libm functions a C kernel may call (`CStyleLanguage.math_funcs`, and fmod/fmodf for a float MOD), declared
# instead of `#include <math.h>`: a compiler parses the header (thousands of lines) for every kernel, ~13 ms of a
# ~90 ms clang compile; a declaration with the library's signature is recognised as the same builtin, so the machine
# code is the same (sqrtf one instruction under -fno-math-errno, exp2f a libm call, truncf vectorised).
LIBM_DECLARATIONS = (
    "float exp2f(float); double exp2(double); float log2f(float); double log2(double);\n"
    "float sinf(float); double sin(double); float sqrtf(float); double sqrt(double);\n"
    "float truncf(float); double trunc(double); float powf(float, float); double pow(double, double);\n"
    "float fmodf(float, float); double fmod(double, double);"
)


class CStyleLanguage(Renderer):
    """The base of C-like renderers: statement building, naming, constants, casts and the ALU op table."""

    kernel_prefix: str = "void"
    buffer_prefix: str = ""
    buffer_suffix: str = " restrict"
    var_prefix: str = "const "
    infinity: dict[DType, str] = {dtypes.float32: "__builtin_inff()", dtypes.float64: "__builtin_inf()"}
    nan: dict[DType, str] = {dtypes.float32: '__builtin_nanf("")', dtypes.float64: '__builtin_nan("")'}
    type_map: dict[DType, str] = {
        dtypes.bool: "_Bool", dtypes.int8: "signed char", dtypes.uint8: "unsigned char", dtypes.int16: "short",
        dtypes.uint16: "unsigned short", dtypes.int32: "int", dtypes.uint32: "unsigned int",
        dtypes.int64: "long long", dtypes.uint64: "unsigned long long", dtypes.float32: "float",
        dtypes.float64: "double", dtypes.float16: "unsigned short", dtypes.bfloat16: "unsigned short",
        **{fp8: "unsigned char" for fp8 in dtypes.fp8s},
    }  # fmt: skip
    # what a kernel calling a libm function needs before it (empty: the dialect has the math functions built in)
    math_prelude: str = LIBM_DECLARATIONS
    # C spelling of math functions by dtype (float32, float64)
    math_funcs: dict[Ops, tuple[str, str]] = {
        Ops.EXP2: ("exp2f", "exp2"), Ops.LOG2: ("log2f", "log2"), Ops.SIN: ("sinf", "sin"),
        Ops.SQRT: ("sqrtf", "sqrt"), Ops.TRUNC: ("truncf", "trunc"), Ops.POW: ("powf", "pow"),
    }  # fmt: skip
    code_for_op: dict[Ops, Callable[..., str]] = {
        Ops.NEG: lambda x, dt: f"(!{x})" if dt == dtypes.bool else f"(-{x})",
        Ops.RECIPROCAL: lambda x, dt: f"({'1.0f' if dt == dtypes.float32 else '1.0'}/{x})",
        Ops.ADD: lambda a, b, dt: f"({a}+{b})", Ops.SUB: lambda a, b, dt: f"({a}-{b})",
        Ops.MUL: lambda a, b, dt: f"({a}*{b})", Ops.FDIV: lambda a, b, dt: f"({a}/{b})",
        Ops.IDIV: lambda a, b, dt: f"({a}/{b})",
        Ops.MOD: lambda a, b, dt: f"fmod{'f' if dt == dtypes.float32 else ''}({a}, {b})" if dtypes.is_float(dt)
        else f"({a}%{b})",
        Ops.MAX: lambda a, b, dt: f"((({a}>={b})||({a}!={a}))?{a}:{b})" if dtypes.is_float(dt)
        else f"(({a}>{b})?{a}:{b})",
        Ops.CMPLT: lambda a, b, dt: f"({a}<{b})", Ops.CMPNE: lambda a, b, dt: f"({a}!={b})",
        Ops.CMPEQ: lambda a, b, dt: f"({a}=={b})", Ops.AND: lambda a, b, dt: f"({a}&{b})",
        Ops.OR: lambda a, b, dt: f"({a}|{b})", Ops.XOR: lambda a, b, dt: f"({a}^{b})",
        Ops.SHL: lambda a, b, dt: f"({a}<<{b})", Ops.SHR: lambda a, b, dt: f"({a}>>{b})",
        Ops.WHERE: lambda c, a, b, dt: f"({c}?{a}:{b})",
        Ops.MULACC: lambda a, b, c, dt: f"(({a}*{b})+{c})",
    }  # fmt: skip

    @property
    def supported_ops(self) -> frozenset[Ops]:  # type: ignore[override]
        """Ops with a direct C spelling."""
        return frozenset(self.code_for_op) | frozenset(self.math_funcs)

    # ---- pieces -----------------------------------------------------------------------------------------------

    def render_dtype(self, dt: DType) -> str:
        """The C type of a scalar dtype (pointer dtypes render their element type)."""
        base = dt.base if isinstance(dt, PtrDType) else dt
        if base.count > 1:
            return self.vector_type(base)
        if (t := self.type_map.get(base)) is None:
            raise NotImplementedError(f"{type(self).__name__} has no C type for {base}")
        return t

    def render_const(self, v: object, dt: DType) -> str:
        """A C literal for constant `v` of dtype `dt`."""
        if dt in (dtypes.float16, dtypes.bfloat16):
            bits = (f32_to_bf16_bits(float(v)) if dt is dtypes.bfloat16  # type: ignore[arg-type]
                    else struct.unpack("<H", struct.pack("<e", truncate[dt](v)))[0])  # fmt: skip
            return f"((unsigned short){bits:#06x})"
        if dt in dtypes.fp8s:
            return f"((unsigned char){float_to_fp8(float(v), dt):#04x})"  # type: ignore[arg-type]
        if dtypes.is_float(dt):
            f = float(truncate[dt](v))
            if math.isnan(f):
                return self.nan[dt]
            if math.isinf(f):
                return self.infinity[dt] if f > 0 else f"(-{self.infinity[dt]})"
            lit = _float_literal(f, dt)
            return f"({lit})" if lit.startswith("-") else lit
        if dt == dtypes.bool:
            return "1" if v else "0"
        iv = int(truncate[dt](v))
        suffix = {dtypes.int64: "ll", dtypes.uint64: "ull", dtypes.uint32: "u"}.get(dt, "")
        if iv == dt.min and dt in (dtypes.int32, dtypes.int64):
            return f"({iv + 1}{suffix}-1{suffix})"
        lit = f"{iv}{suffix}"
        if dt in (dtypes.int8, dtypes.int16, dtypes.uint8, dtypes.uint16):
            return f"(({self.render_dtype(dt)}){lit})"
        return f"({lit})" if iv < 0 else lit

    def render_cast(self, x: str, src: DType, dst: DType) -> str:
        """C for converting `x` from `src` to `dst` (float16/bfloat16 only to or from float32)."""
        conv = {(dtypes.float16, dtypes.float32): "tg_h2f", (dtypes.float32, dtypes.float16): "tg_f2h",
                (dtypes.bfloat16, dtypes.float32): "tg_bf2f", (dtypes.float32, dtypes.bfloat16): "tg_f2bf"}  # fmt: skip
        if (fn := conv.get((src, dst))) is not None:
            return f"{fn}({x})"
        if src in _FP8_ARGS and dst is dtypes.float32:
            return f"tg_fp82f({x}, {', '.join(map(str, _FP8_ARGS[src]))})"
        if dst in _FP8_ARGS and src is dtypes.float32:
            mb, _, bias, ieee, fnuz = _FP8_ARGS[dst]
            return f"tg_f2fp8({x}, {mb}, {bias}, {ieee}, {fnuz})"
        if src in (dtypes.float16, dtypes.bfloat16, *_FP8_ARGS) or dst in (dtypes.float16, dtypes.bfloat16, *_FP8_ARGS):
            raise NotImplementedError(f"cast {src} -> {dst} must go through float32 (run lowering first)")
        if dtypes.is_float(src) and dtypes.is_int(dst) and dst is not dtypes.int64:
            # C leaves float -> int undefined outside the target's range; going through long long makes it wrap
            # like the IR does (exact for |x| < 2**63)
            if dst is dtypes.uint64:
                return f"(({x})<0?(unsigned long long)(long long)({x}):(unsigned long long)({x}))"
            return f"(({self.render_dtype(dst)})(long long)({x}))"
        return f"(({self.render_dtype(dst)})({x}))"

    def render_bitcast(self, x: str, src: DType, dst: DType) -> str:
        """C for reinterpreting the bits of `x` (a union compound literal: defined behaviour in C)."""
        if src.itemsize != dst.itemsize:
            raise ValueError(f"bitcast {src} -> {dst} changes the size ({src.itemsize} vs {dst.itemsize} bytes)")
        return f"((union {{ {self.render_dtype(src)} i; {self.render_dtype(dst)} o; }}){{ .i = {x} }}).o"

    def render_math(self, op: Ops, srcs: list[str], dt: DType) -> str:
        """C for libm functions (float32 and float64 only)."""
        names = self.math_funcs[op]
        if dt not in (dtypes.float32, dtypes.float64):
            raise NotImplementedError(f"{op} on {dt} must be computed in float32 (run lowering first)")
        return f"{names[0] if dt == dtypes.float32 else names[1]}({', '.join(srcs)})"

    # ---- hooks a dialect overrides (OpenCL, CUDA, ...) ---------------------------------------------------------

    def workitem(self, kind: str, dim: int) -> str:
        """The expression of a work-item id: `kind` is "g" (group), "l" (local) or "i" (global), `dim` 0..2."""
        raise NotImplementedError(f"{type(self).__name__} has no work-item ids (SPECIAL {kind}idx{dim})")

    rolled_loop_pragma: str = ""  # the line before a loop the compiler must not unroll (empty: none)
    barrier: str = ""  # the statement that synchronises a workgroup (empty: the dialect has none)
    local_prefix: str = ""  # the qualifier of workgroup-shared arrays (DEFINE_LOCAL)

    def vector_type(self, dt: DType) -> str:
        """The name of vector dtype `dt` (scalar `count` lanes)."""
        raise NotImplementedError(f"{type(self).__name__} does not render vector dtype {dt}")

    def vector_prelude(self, used: list[DType]) -> list[str]:
        """Definitions (typedefs, helpers) the vector dtypes `used` need before the kernel."""
        return []

    def render_vectorize(self, parts: list[str], dt: DType) -> str:
        """A vector of dtype `dt` built from one expression per lane."""
        return f"(({self.render_dtype(dt)}){{{','.join(parts)}}})"

    def render_gep(self, x: str, lane: int, dt: DType) -> str:
        """Lane `lane` of vector expression `x` (of dtype `dt`)."""
        return f"{x}[{lane}]"

    def render_vector_load(self, addr: str, dt: DType) -> str:
        """A load of vector dtype `dt` from address `addr` (of its first element): a vector pointer cast."""
        return f"(*(({self.render_dtype(dt)}*)({addr})))"

    def render_vector_store(self, addr: str, value: str, dt: DType) -> str:
        """The statement (without `;`) storing vector `value` of dtype `dt` at address `addr`."""
        return f"{self.render_vector_load(addr, dt)} = {value}"

    def render_signature(self, params: list[UOp], variables: list[UOp]) -> list[str]:
        """The kernel's parameter declarations: buffers in PARAM slot order, then the variables sorted by name."""
        sig = [f"{self.buffer_prefix}{self.render_dtype(p.dtype)}*{self.buffer_suffix} data{p.arg}" for p in params]
        # the thread id of a THREAD axis comes last, after the variables
        variables = sorted(variables, key=lambda v: (v.arg[0] == "core_id", v.arg[0]))
        return sig + [f"{self.var_prefix}{self.render_dtype(v.dtype)} {v.arg[0]}" for v in variables]

    def render_prelude(self, needs: set[str]) -> list[str]:
        """Helper definitions placed before the kernel for the features it uses (math, half, bf16, fp8)."""
        prefix = []
        if "math" in needs and self.math_prelude:
            prefix.append(self.math_prelude)
        if "half" in needs:
            prefix.append(_HALF_FUNCS)
        if "bf16" in needs:
            prefix.append(_BF16_FUNCS)
        if "fp8" in needs:
            prefix.append(_FP8_FUNCS)
        return prefix

    # ---- the whole kernel -------------------------------------------------------------------------------------

    def render_kernel(self, name: str, params: list[str], body: list[str], prefix: list[str]) -> str:
        """Assemble the function: prefix lines, signature, body."""
        head = "\n".join(prefix) + ("\n" if prefix else "")
        return f"{head}{self.kernel_prefix} {name}({', '.join(params)}) {{\n" + "\n".join(body) + "\n}\n"

    def render(self, uops: list[UOp]) -> str:
        """Render a linear program to one C function: each uop is turned into text by `string_rules`."""
        if not uops or uops[-1].op is not Ops.SINK:
            raise ValueError("render needs a linear program ending in SINK (the output of linearize)")
        sink = uops[-1]
        name = sink.arg if isinstance(sink.arg, str) else getattr(sink.arg, "function_name", "kernel")
        ctx = RenderContext(self, uops)
        for u in uops:
            text: Any = self.string_rules.rewrite(u, ctx)  # the rules return text, not UOps
            if not isinstance(text, str):
                raise NotImplementedError(f"{type(self).__name__} can't render {u.op} (dtype {u.dtype}, arg {u.arg!r})")
            ctx.r[u] = text
        params = sorted((u for u in uops if u.op is Ops.PARAM), key=lambda u: u.arg)
        variables = sorted((u for u in uops if u.op is Ops.DEFINE_VAR), key=lambda u: u.arg[0])
        prefix = self.render_prelude(ctx.needs)
        if ctx.vector_types:
            prefix += self.vector_prelude(sorted(ctx.vector_types, key=lambda d: (d.scalar().name, d.count)))
        src = self.render_kernel(name, self.render_signature(params, variables), ctx.body, prefix)
        return src + self.render_entry(name, params, variables)

    def render_entry(self, name: str, params: list[UOp], variables: list[UOp]) -> str:
        """Extra functions after the kernel (ClangRenderer: the thread pool's entry wrapper); none by default."""
        return ""

    # filled in below the class (the rules are functions of the render context)
    string_rules: PatternMatcher


# Single-use values are inlined into their user up to this depth; deeper chains get a variable, so a long
# elementwise chain never exceeds the compiler's bracket-nesting limit (clang stops at 256).
MAX_INLINE_NESTING = 24


class RenderContext:
    """The state of one kernel being rendered: the text of each value, the body lines, the loop depth."""

    def __init__(self, renderer: CStyleLanguage, uops: list[UOp]) -> None:
        self.ren = renderer
        self.uses = Counter(s for u in uops for s in u.src)
        for u in uops:  # spellings that repeat an operand: give it a variable, or nested ones grow exponentially
            if (u.op is Ops.MAX and dtypes.is_float(u.dtype)) or (u.op is Ops.CAST and u.dtype is dtypes.uint64):
                self.uses.update({s: 2 for s in u.src})
        self.r: dict[UOp, str] = {}
        self.nesting: dict[UOp, int] = {}  # how deep an inlined expression nests (named values are 0)
        self.body: list[str] = []
        self.needs: set[str] = set()
        self.vector_types: set[DType] = set()
        self.counters: Counter[str] = Counter()
        self.depth = 1

    def __getitem__(self, u: UOp) -> str:
        return self.r[u]

    def fresh(self, prefix: str) -> str:
        """A new variable name `prefix<n>`."""
        self.counters[prefix] += 1
        return f"{prefix}{self.counters[prefix] - 1}"

    def line(self, s: str) -> None:
        """Append a statement at the current loop depth."""
        self.body.append("  " * self.depth + s)

    def dtype(self, dt: DType) -> str:
        """The C type of `dt` (vector types are remembered for the prelude)."""
        base = dt.base if isinstance(dt, PtrDType) else dt
        if base.count > 1:
            self.vector_types.add(base)
        return self.ren.render_dtype(dt)

    def declare(self, u: UOp, expr: str, prefix: str, strip: bool = True) -> str:
        """Give `u` a variable initialised with `expr`; returns the variable's name."""
        name = self.fresh(prefix)
        self.line(f"{self.dtype(u.dtype)} {name} = {_strip(expr) if strip else expr};")
        return name

    def value(self, u: UOp, expr: str, prefix: str = "alu") -> str:
        """Inline `expr` into the single user of `u` while shallow enough, else give it a variable."""
        self.nesting[u] = 1 + max((self.nesting.get(s, 0) for s in u.src), default=0)
        if self.uses[u] == 1 and self.nesting[u] <= MAX_INLINE_NESTING:
            return expr
        self.nesting[u] = 0
        return self.declare(u, expr, prefix)


def _buffer(u: UOp) -> UOp:
    while u.op is Ops.AFTER:
        u = u.src[0]
    return u


# *** the rule table: every rule takes (ctx, u) and returns the text that names u's value ("" for statements) ***


def _const(ctx: RenderContext, u: UOp) -> str:
    if u.dtype.count == 1:
        return ctx.ren.render_const(u.arg, u.dtype)
    lanes = u.arg if isinstance(u.arg, tuple) else (u.arg,) * u.dtype.count
    ctx.dtype(u.dtype)
    return ctx.ren.render_vectorize([ctx.ren.render_const(v, u.dtype.scalar()) for v in lanes], u.dtype)


def _vector_address(ctx: RenderContext, u: UOp, index: UOp) -> str | None:
    """`&buf[i]` for a vector access to memory (None for scalars: registers hold vectors as plain variables)."""
    if u.dtype.count == 1 or _buffer(index.src[0]).op is Ops.DEFINE_REG:
        return None
    ctx.dtype(u.dtype)  # the vector type goes into the prelude
    return f"&{ctx[index]}"


def _define_reg(ctx: RenderContext, u: UOp) -> str:
    assert isinstance(u.dtype, PtrDType)
    name, size = ctx.fresh("acc"), max(u.dtype.size, 1)
    ctx.line(f"{ctx.dtype(u.dtype)} {name}{'' if size == 1 else f'[{size}]'};")
    return name


def _define_local(ctx: RenderContext, u: UOp) -> str:
    assert isinstance(u.dtype, PtrDType)
    name = ctx.fresh("temp")
    ctx.line(f"{ctx.ren.local_prefix}{ctx.dtype(u.dtype)} {name}[{max(u.dtype.size, 1)}];")
    return name


def _special(ctx: RenderContext, u: UOp) -> str:
    name = str(u.arg)
    ctx.line(f"{ctx.dtype(u.dtype)} {name} = {ctx.ren.workitem(name[0], int(name[-1]))}; /* {ctx[u.src[0]]} */")
    return name


def _range(ctx: RenderContext, u: UOp) -> str:
    name = f"ridx{u.arg[0] if isinstance(u.arg, tuple) else u.arg}"
    if ctx.ren.rolled_loop_pragma and isinstance(u.arg, tuple) and BLOCK_LOOP in u.arg[2:]:
        ctx.body.append(ctx.ren.rolled_loop_pragma)  # a loop over sum blocks stays rolled (lower/blocked.py)
    ctx.line(f"for ({ctx.dtype(u.dtype)} {name} = 0; {name} < {ctx[u.src[0]]}; {name}++) {{")
    ctx.depth += 1
    return name


def _close(ctx: RenderContext, u: UOp) -> str:
    ctx.depth -= 1
    ctx.line("}")
    return ""


def _if(ctx: RenderContext, u: UOp) -> str:
    ctx.line(f"if ({_strip(ctx[u.src[0]])}) {{")
    ctx.depth += 1
    return ""


def _barrier(ctx: RenderContext, u: UOp) -> str:
    if not ctx.ren.barrier:
        raise NotImplementedError(f"{type(ctx.ren).__name__} has no barrier")
    ctx.line(ctx.ren.barrier)
    return ""


def _index(ctx: RenderContext, u: UOp) -> str:
    buf = _buffer(u.src[0])
    if len(u.src) != 2:
        raise ValueError("INDEX with a gate must be lowered first (pm_gates)")
    regs = isinstance(buf.dtype, PtrDType) and buf.dtype.addrspace == AddrSpace.REG
    if regs and max(buf.dtype.size, 1) == 1:  # type: ignore[attr-defined]
        return ctx[buf]
    return f"{ctx[buf]}[{_strip(ctx[u.src[1]])}]"


def _load(ctx: RenderContext, u: UOp) -> str:
    ptr = u.src[0]
    if _buffer(ptr.src[0]).op is Ops.DEFINE_REG and len(u.src) == 1:
        return ctx[ptr]  # a register read: just the variable
    addr = _vector_address(ctx, u, ptr)
    access = ctx[ptr] if addr is None else ctx.ren.render_vector_load(addr, u.dtype)
    expr = access if len(u.src) == 1 else f"({ctx[u.src[2]]}?{access}:{ctx[u.src[1]]})"
    return ctx.declare(u, expr, "val", strip=False)


def _store(ctx: RenderContext, u: UOp) -> str:
    value, addr = _strip(ctx[u.src[1]]), _vector_address(ctx, u.src[1], u.src[0])
    stmt = f"{ctx[u.src[0]]} = {value}" if addr is None else ctx.ren.render_vector_store(addr, value, u.src[1].dtype)
    ctx.line(f"if ({_strip(ctx[u.src[2]])}) {stmt};" if len(u.src) == 3 else f"{stmt};")
    return ""


def _cast(ctx: RenderContext, u: UOp) -> str:
    src_dt = u.src[0].dtype
    for dt, need in ((dtypes.float16, "half"), (dtypes.bfloat16, "bf16")):
        if dt in (src_dt.scalar(), u.dtype.scalar()):  # vector casts too: their helpers fall back to the scalar ones
            ctx.needs.add(need)
    if {src_dt, u.dtype} & set(_FP8_ARGS):
        ctx.needs.add("fp8")
    return ctx.value(u, ctx.ren.render_cast(_strip(ctx[u.src[0]]), src_dt, u.dtype), "cast")


def _bitcast(ctx: RenderContext, u: UOp) -> str:
    return ctx.value(u, ctx.ren.render_bitcast(ctx[u.src[0]], u.src[0].dtype, u.dtype), "cast")


def _math(ctx: RenderContext, u: UOp) -> str | None:
    if u.op not in ctx.ren.math_funcs:
        return None
    ctx.needs.add("math")
    return ctx.value(u, ctx.ren.render_math(u.op, [_strip(ctx[s]) for s in u.src], u.dtype))


def _alu(ctx: RenderContext, u: UOp) -> str | None:
    if (fn := ctx.ren.code_for_op.get(u.op)) is None:
        return None
    if u.dtype in (dtypes.float16, dtypes.bfloat16, *_FP8_ARGS) and u.op is not Ops.WHERE:
        raise NotImplementedError(f"{u.op} on {u.dtype} must be computed in float32 (run lowering first)")
    if u.op is Ops.MOD and dtypes.is_float(u.dtype):
        ctx.needs.add("math")
    expr = fn(*[ctx[s] for s in u.src], u.dtype)
    bool_safe = u.dtype == dtypes.bool and u.op in _BOOL_SAFE
    if u.dtype in _NARROW and u.op not in _KEEPS_RANGE and not bool_safe:
        expr = f"(({ctx.dtype(u.dtype)}){expr})"
    return ctx.value(u, expr)


def _vectorize(ctx: RenderContext, u: UOp) -> str:
    ctx.dtype(u.dtype)
    return ctx.value(u, ctx.ren.render_vectorize([_strip(ctx[s]) for s in u.src], u.dtype))


def _gep(ctx: RenderContext, u: UOp) -> str:
    lanes = u.arg if isinstance(u.arg, tuple) else (u.arg,)
    x = ctx[u.src[0]]
    if not (x.isidentifier() or (x.startswith("(") and x.endswith(")"))):
        x = f"({x})"
    parts = [ctx.ren.render_gep(x, lane, u.src[0].dtype) for lane in lanes]
    return ctx.value(u, parts[0] if len(parts) == 1 else ctx.ren.render_vectorize(parts, u.dtype))


string_rules = PatternMatcher([
    # names that need no code: buffers, variables, constants, ordering-only nodes
    (UPat(Ops.PARAM, name="u"), lambda ctx, u: f"data{u.arg}"),
    (UPat(Ops.DEFINE_VAR, name="u"), lambda ctx, u: str(u.arg[0])),
    (UPat((Ops.CONST, Ops.VCONST), name="u"), _const),
    (UPat((Ops.SINK, Ops.GROUP, Ops.NOOP)), lambda ctx: ""),
    (UPat(Ops.AFTER, name="u"), lambda ctx, u: ctx[u.src[0]]),
    # definitions: registers, workgroup memory, work-item ids
    (UPat(Ops.DEFINE_REG, name="u"), _define_reg),
    (UPat(Ops.DEFINE_LOCAL, name="u"), _define_local),
    (UPat(Ops.SPECIAL, name="u"), _special),
    # control flow
    (UPat(Ops.RANGE, name="u"), _range),
    (UPat((Ops.END, Ops.ENDIF), name="u"), _close),
    (UPat(Ops.IF, name="u"), _if),
    (UPat(Ops.BARRIER, name="u"), _barrier),
    # memory: addresses, loads (always a variable), stores (gated with an if)
    (UPat(Ops.INDEX, name="u"), _index),
    (UPat(Ops.LOAD, name="u"), _load),
    (UPat(Ops.STORE, name="u"), _store),
    # values: conversions, vectors
    (UPat(Ops.CAST, name="u"), _cast),
    (UPat(Ops.BITCAST, name="u"), _bitcast),
    (UPat(Ops.VECTORIZE, name="u"), _vectorize),
    (UPat(Ops.GEP, name="u"), _gep),
    # arithmetic: libm functions, then the operator table `code_for_op`
    (UPat(GroupOp.ALU, name="u"), _math),
    (UPat(GroupOp.ALU, name="u"), _alu),
])  # fmt: skip
CStyleLanguage.string_rules = string_rules


def _strip(s: str) -> str:
    """Drop one pair of outer parentheses when they wrap the whole expression."""
    if not (s.startswith("(") and s.endswith(")")):
        return s
    depth = 0
    for i, ch in enumerate(s):
        depth += ch == "("
        depth -= ch == ")"
        if depth == 0 and i != len(s) - 1:
            return s
    return s[1:-1]


# vector MAX with the scalar rule (floats: a NaN in a wins, then b's NaN through the compare): a compare mask and a
# bitwise blend (vector ?: is not C for gcc); both compilers turn it into compare + blend instructions
_VECTOR_MAX = (
    "static inline {t} tg_max_{t}({t} a, {t} b) {{ __typeof__(a > b) m = {mask}; "
    "return ({t})(((__typeof__(m))a & m) | ((__typeof__(m))b & ~m)); }}"
)


def _vector_or_scalar(op: Ops, vector: Callable[..., str]) -> Callable[..., str]:
    """`op`'s spelling: `vector(*args, dt)` for vector dtypes, the scalar table's otherwise."""
    scalar = CStyleLanguage.code_for_op[op]
    return lambda *args: vector(*args) if args[-1].count > 1 else scalar(*args)


def _render_max(a: str, b: str, dt: DType) -> str:
    if dt.count > 1:
        return f"tg_max_{cvector.vector_name(dt)}({a},{b})"
    return CStyleLanguage.code_for_op[Ops.MAX](a, b, dt)


class ClangRenderer(CStyleLanguage):
    """Plain C for the CPU backend: the kernel loops over everything itself (no launch grid).

    `vector_bytes` (0, 16, 32 or 64: what the host compiler's target has, probed by the CPU device) enables
    gcc/clang vector extensions (`__attribute__((vector_size(n)))` typedefs, element-aligned so views never fault);
    `threads` > 1 allows a THREAD axis (the kernel gets a `core_id` argument and runs once per thread).
    """

    device = "CPU"
    # the scheduler splits wider kernels (store rule L1): ctypes' argument limit (renderer.CPU_MAX_BUFFERS); a cat
    # of 1,500 inputs as one kernel also took clang over 3 minutes to compile
    max_buffers = CPU_MAX_BUFFERS
    suffix = "c"
    rolled_loop_pragma = "#pragma GCC unroll 1"  # gcc and clang both read it
    has_local = False
    has_shared = False
    global_max = None
    local_max = None

    # MULACC is a fused multiply-add (one rounding), as the PYTHON device computes it; on vectors, comparisons give
    # lane masks and WHERE blends with one (render/cvector.py)
    code_for_op = {**CStyleLanguage.code_for_op, Ops.MULACC: lambda a, b, c, dt: _render_fma(a, b, c, dt),
                   Ops.MAX: _render_max,
                   **{op: _vector_or_scalar(op, functools.partial(cvector.render_compare, op))
                      for op in (Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ)},
                   Ops.WHERE: _vector_or_scalar(Ops.WHERE, cvector.render_where)}  # fmt: skip

    def __init__(
        self, vector_bytes: int = 0, threads: int = 1, fma: bool = False, entry_wrappers: bool = False
    ) -> None:
        if vector_bytes not in (0, 16, 32, 64):
            raise ValueError(f"vector_bytes must be 0, 16, 32 or 64, got {vector_bytes!r}")
        if not isinstance(threads, int) or threads < 1:
            raise ValueError(f"threads must be a positive int, got {threads!r}")
        self.vector_bytes, self.thread_max, self.has_threads = vector_bytes, threads, threads > 1
        self.has_fma = bool(fma)
        # every kernel gets `<name>_entry(args, core_id)`, not only threaded ones (the HCQ+CPU worker calls all
        # kernels through it; optimizer.md 5.5)
        self.entry_wrappers = bool(entry_wrappers)
        self.vector_registers = 32 if vector_bytes == 64 else 16 if vector_bytes else 0
        ops = cvector.NUMERIC_VECTOR_OPS | ({Ops.MULACC} if fma else set())
        self.vector_ops = frozenset(ops) if vector_bytes else frozenset()
        self.vector_bool_ops = cvector.MASK_VECTOR_OPS if vector_bytes else frozenset()
        self.vector_conversions = (
            (cvector.VECTOR_CONVERSIONS | cvector.HALF_CONVERSIONS) if vector_bytes else frozenset()
        )
        # float16 loads that only feed float32 casts become vector loads and one conversion (cvector.half_helper)
        self.half_vector_loads = bool(vector_bytes)

    def vector_type(self, dt: DType) -> str:
        return cvector.vector_name(dt)

    def vector_prelude(self, used: list[DType]) -> list[str]:
        # a*b+c is contracted to one fused instruction only inside the FMA helper
        return cvector.prelude(used, _VECTOR_FMA, _VECTOR_MAX)

    def render_vectorize(self, parts: list[str], dt: DType) -> str:
        if dt.scalar() is dtypes.bool:  # scalar bools (0/1) into a lane mask (0/-1)
            parts = [f"-({p})" for p in parts]
        return super().render_vectorize(parts, dt)

    def render_gep(self, x: str, lane: int, dt: DType) -> str:
        return f"((_Bool){x}[{lane}])" if dt.scalar() is dtypes.bool else f"{x}[{lane}]"

    def render_vector_load(self, addr: str, dt: DType) -> str:
        if dt.scalar() is dtypes.bool:
            raise NotImplementedError(f"bool vectors are lane masks in registers, not memory ({dt} load or store)")
        return super().render_vector_load(addr, dt)

    def render_cast(self, x: str, src: DType, dst: DType) -> str:
        return cvector.render_cast(x, src, dst) if dst.count > 1 else super().render_cast(x, src, dst)

    def render_bitcast(self, x: str, src: DType, dst: DType) -> str:
        return f"(({self.vector_type(dst)})({x}))" if dst.count > 1 else super().render_bitcast(x, src, dst)

    def render_math(self, op: Ops, srcs: list[str], dt: DType) -> str:
        if dt.count > 1 and op is Ops.TRUNC:
            return f"tg_trunc_{self.vector_type(dt)}({srcs[0]})"
        return super().render_math(op, srcs, dt)

    def render_entry(self, name: str, params: list[UOp], variables: list[UOp]) -> str:
        """For a kernel with a THREAD axis, `<name>_entry(args, core_id)`: the one signature the CPU thread pool
        calls, taking the buffers then the other variables (sorted by name) from one array of 64-bit values."""
        threaded = any(v.arg[0] == "core_id" for v in variables)
        if not threaded and not self.entry_wrappers:
            return ""
        args = [f"({self.render_dtype(p.dtype)}*)args[{i}]" for i, p in enumerate(params)]
        others = sorted((v for v in variables if v.arg[0] != "core_id"), key=lambda v: v.arg[0])
        args += [f"({self.render_dtype(v.dtype)})args[{len(params) + i}]" for i, v in enumerate(others)]
        call_args = [*args, "core_id"] if threaded else args
        return (f"void {name}_entry(const long long* args, int core_id) {{\n"
                f"  {name}({', '.join(call_args)});\n}}\n")  # fmt: skip

    def __reduce__(self) -> tuple[type, tuple[int, int, bool, bool]]:  # type: ignore[override]
        return type(self), (self.vector_bytes, self.thread_max, self.has_fma, self.entry_wrappers)

    def __repr__(self) -> str:
        wrappers = ", entry_wrappers=True" if self.entry_wrappers else ""
        return (f"{type(self).__name__}(vector_bytes={self.vector_bytes}, threads={self.thread_max}, "
                f"fma={self.has_fma}{wrappers})")  # fmt: skip


# the kernels compile with -ffp-contract=off (every a*b+c rounds twice, like the PYTHON device); a fused
# multiply-add on vectors is this helper, where contraction is switched on (clang: pragma, gcc: optimize attribute)
_VECTOR_FMA = """#ifdef __clang__
static inline {t} tg_fma_{t}({t} a, {t} b, {t} c) {{
#pragma STDC FP_CONTRACT ON
  return a*b+c;
}}
#else
__attribute__((optimize("fp-contract=fast"))) static inline {t} tg_fma_{t}({t} a, {t} b, {t} c) {{ return a*b+c; }}
#endif"""


def _render_fma(a: str, b: str, c: str, dt: DType) -> str:
    if dt.count > 1:
        return f"tg_fma_{cvector.vector_name(dt)}({_strip(a)}, {_strip(b)}, {_strip(c)})"
    if dt in (dtypes.float32, dtypes.float64):
        return f"__builtin_fma{'f' if dt is dtypes.float32 else ''}({_strip(a)}, {_strip(b)}, {_strip(c)})"
    return f"(({a}*{b})+{c})"  # integers: exact either way
