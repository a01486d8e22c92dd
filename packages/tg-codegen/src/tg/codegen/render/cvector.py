"""Vector C for ClangRenderer: gcc/clang vector-extension types, lane masks for bool vectors, and the helpers.

Vectors are `tg_<name>x<lanes>` typedefs (`tg_f32x16`: 16 floats, element-aligned so views never fault). A bool
vector is a lane mask, `tg_bx<lanes>`: 32-bit ints that are -1 (all bits set) for true and 0 for false, which is
what a vector comparison gives and what a bitwise blend needs. Masks live only in registers: they are never loaded
from or stored to memory (a bool buffer holds one byte per element), a lane read as a scalar is converted to
`_Bool`, and scalar bools gathered into a mask are negated (1 -> -1).

What each vector op becomes (the devectorizer does every other vector op lane by lane):

| op | C |
|---|---|
| compare (`<`, `!=`, `==`) | `__builtin_convertvector((a<b), tg_bxN)` (a 64-bit compare gives 64-bit lanes) |
| WHERE | `tg_where_T(mask, a, b)`: a bitwise blend (vector `?:` is not C for gcc) |
| AND, OR, XOR, SHL, SHR | the C operators (on masks: logical and/or/xor) |
| TRUNC | `tg_trunc_T(x)`: an integer conversion where \\|x\\| < 2^mantissa, else x (integral, inf or NaN) |
| CAST float -> 32-bit int | through a 64-bit conversion, as the scalar C does (values wrap alike) |
| other numeric CAST | `__builtin_convertvector` (C's scalar conversion, lane by lane) |
| BITCAST | a vector cast between types of one size (reinterprets the bits) |
| CAST float16 -> float32 | `tg_h2f_tg_f32xN(h)` (`half_helper`): F16C's `vcvtph2ps`, 8 lanes per instruction |

float16 vectors (`tg_f16xN`, the bits as `unsigned short` lanes) exist only to be loaded and widened: the expander
makes them for a float16 load whose every use is a cast to float32 (`HALF_CONVERSIONS`, the renderer's
`half_vector_loads`), so a float16 matrix streams 8 values per vector load into float32 arithmetic.
"""

from __future__ import annotations

from tg.ir.dtype import DType, dtypes
from tg.ir.ops import Ops

# C names of vector element types: vector typedefs are tg_<name>x<lanes> (never float16, a half type in tg)
VECTOR_NAMES = {dtypes.float32: "f32", dtypes.float64: "f64", dtypes.int32: "i32", dtypes.uint32: "u32",
                dtypes.int64: "i64", dtypes.uint64: "u64"}  # fmt: skip
_SIGNED = {4: "int", 8: "long long"}  # the lane type of a mask of each element size

# ops ClangRenderer computes on numeric vectors, and on (or into) bool lane masks
NUMERIC_VECTOR_OPS = frozenset({Ops.ADD, Ops.SUB, Ops.MUL, Ops.FDIV, Ops.NEG, Ops.MAX, Ops.AND, Ops.OR, Ops.XOR,
                                Ops.SHL, Ops.SHR, Ops.TRUNC})  # fmt: skip
MASK_VECTOR_OPS = frozenset({Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ, Ops.WHERE, Ops.AND, Ops.OR, Ops.XOR})
# (op, from, to) conversions done on whole vectors: numeric casts (not to uint64, whose scalar C needs a branch)
# and same-size bitcasts
VECTOR_CONVERSIONS = frozenset(
    {(Ops.CAST, s, d) for s in VECTOR_NAMES for d in VECTOR_NAMES if s is not d and d is not dtypes.uint64}
    | {(Ops.BITCAST, s, d) for s in VECTOR_NAMES for d in VECTOR_NAMES if s is not d and s.itemsize == d.itemsize}
)


# float16 -> float32 conversions done on whole vectors (ClangRenderer: with `half_vector_loads`)
HALF_CONVERSIONS = frozenset({(Ops.CAST, dtypes.float16, dtypes.float32)})


def vector_name(dt: DType) -> str:
    """`tg_f32x16` for float32.vec(16), `tg_bx16` for bool.vec(16), `tg_f16x8` for float16.vec(8)."""
    if dt.scalar() is dtypes.bool:
        return f"tg_bx{dt.count}"
    if dt.scalar() is dtypes.float16:
        return f"tg_f16x{dt.count}"
    if (name := VECTOR_NAMES.get(dt.scalar())) is None:
        raise NotImplementedError(f"the C renderer has no vector type for {dt}")
    return f"tg_{name}x{dt.count}"


def _mask_lane(dt: DType) -> str:
    """The C type of a mask lane as wide as one of dt's elements (bool masks are 32-bit)."""
    return "int" if dt.scalar() is dtypes.bool else _SIGNED[dt.scalar().itemsize]


def typedefs(lanes: int) -> list[str]:
    """Every vector type of `lanes` lanes (helpers and conversions may name any of them)."""
    defs = [f"typedef int tg_bx{lanes} __attribute__((vector_size({4 * lanes}), aligned(4)));"]
    for dt, name in VECTOR_NAMES.items():
        c = {"f32": "float", "f64": "double", "i32": "int", "u32": "unsigned int", "i64": "long long",
             "u64": "unsigned long long"}[name]  # fmt: skip
        defs.append(f"typedef {c} tg_{name}x{lanes} __attribute__((vector_size({dt.itemsize * lanes})"
                    f", aligned({dt.itemsize})));")  # fmt: skip
    defs.append(f"typedef unsigned short tg_f16x{lanes} __attribute__((vector_size({2 * lanes}), aligned(2)));")
    return defs


def half_helper(lanes: int) -> str:
    """`tg_h2f_tg_f32xN(h)`: float16 bits (N lanes) -> float32, exactly (subnormals, infinities, NaN payloads kept).

    x86 with F16C: `vcvtph2ps` per 8 lanes (4 with a zero-padded register); a compiler with `_Float16`: a vector
    conversion; else `tg_h2f` (the scalar helper, in the "half" prelude) lane by lane. The instructions set a
    signalling NaN's quiet bit; it is put back from the input, as the scalar conversion keeps it. The NaN lanes
    are found from the input's bits with 32-bit integer operations: a float compare `r != r` of the converted
    value is folded by clang into a float16 compare (`fcmp (fpext x), (fpext x)` -> `fcmp x, x`), which x86 has no
    vector instruction for, so clang 14 converted and compared every lane as a scalar (5x slower than the words)."""
    t, h = f"tg_f32x{lanes}", f"tg_f16x{lanes}"
    each = ",".join(f"tg_h2f(x[{i}])" for i in range(lanes))
    if lanes % 8 == 0:
        f16c = ("  typedef short tg_h8 __attribute__((vector_size(16)));\n"
                "  typedef float tg_s8 __attribute__((vector_size(32)));\n"
                + "".join(f"  {{ tg_h8 p; __builtin_memcpy(&p, (const char*)&x + {16 * i}, 16); "
                          "tg_s8 q = __builtin_ia32_vcvtph2ps256(p); "
                          f"__builtin_memcpy((char*)&r + {32 * i}, &q, 32); }}\n"
                          for i in range(lanes // 8)))  # fmt: skip
    elif lanes == 4:
        f16c = ("  typedef short tg_h8 __attribute__((vector_size(16)));\n"
                "  typedef float tg_s4 __attribute__((vector_size(16)));\n"
                "  tg_h8 p = {0}; __builtin_memcpy(&p, &x, 8); tg_s4 q = __builtin_ia32_vcvtph2ps(p); "
                "__builtin_memcpy(&r, &q, 16);\n")  # fmt: skip
    else:
        f16c = ""
    native = (
        f"  typedef _Float16 tg_n{lanes} __attribute__((vector_size({2 * lanes})));\n"
        f"  tg_n{lanes} n; __builtin_memcpy(&n, &x, {2 * lanes}); r = __builtin_convertvector(n, {t});\n"
    )
    fix = (
        f"  tg_u32x{lanes} w = __builtin_convertvector(x, tg_u32x{lanes});\n"
        f"  tg_u32x{lanes} nan = (tg_u32x{lanes})((tg_i32x{lanes})(w & 0x7fffu) > 0x7c00);\n"
        f"  return ({t})((tg_u32x{lanes})r ^ (nan & ~(w << 13) & 0x400000u));\n"
    )
    native_if = "#if defined(__FLT16_MANT_DIG__)\n"
    body = f"#if defined(__F16C__)\n{f16c}#el{native_if[1:]}" if f16c else native_if
    return (
        f"static inline {t} tg_h2f_{t}({h} x) {{\n  {t} r;\n(void)r;\n{body}{native}#else\n"
        f"  return ({t}){{{each}}};\n#endif\n{fix}}}"
    )


def where_helper(dt: DType) -> str:
    """`tg_where_T(mask, a, b)`: lanes of a where the mask is set, else of b (a bitwise blend)."""
    t, n, lane = vector_name(dt), dt.count, _mask_lane(dt)
    return (f"static inline {t} tg_where_{t}(tg_bx{n} c, {t} a, {t} b) {{ "
            f"typedef {lane} m_t __attribute__((vector_size({n * (4 if lane == 'int' else 8)}))); "
            f"m_t m = __builtin_convertvector(c, m_t); return ({t})(((m_t)a & m) | ((m_t)b & ~m)); }}")  # fmt: skip


def trunc_helper(dt: DType) -> str:
    """`tg_trunc_T(x)`: x rounded toward zero, exactly as truncf/trunc per lane (-0.0, inf and NaN included)."""
    t, n, size = vector_name(dt), dt.count, dt.scalar().itemsize
    lane, big, sign = _SIGNED[size], ("8388608.0f" if size == 4 else "4503599627370496.0"), (
        "(int)0x80000000" if size == 4 else "(long long)0x8000000000000000ull")  # fmt: skip
    ints = f"tg_{'i32' if size == 4 else 'i64'}x{n}"
    return (f"static inline {t} tg_trunc_{t}({t} x) {{ "
            f"typedef {lane} m_t __attribute__((vector_size({n * size}))); "
            f"m_t small = (x < {big}) & (x > -{big}); "  # NaN: false, keeps x
            f"{t} r = __builtin_convertvector(__builtin_convertvector(({t})((m_t)x & small), {ints}), {t}); "
            f"r = ({t})((m_t)r | ((m_t)x & {sign})); "  # the sign of x: trunc(-0.5) is -0.0
            f"return ({t})(((m_t)r & small) | ((m_t)x & ~small)); }}")  # fmt: skip


def prelude(used: list[DType], fma: str, max_helper: str) -> list[str]:
    """Typedefs for every lane count in `used`, then the helpers of each used type (`fma`/`max_helper` are the
    FMA and MAX helper templates, formatted with t=type name and mask=the compare that picks a)."""
    ret: list[str] = []
    for lanes in sorted({dt.count for dt in used}):
        ret += typedefs(lanes)
        ret.append(where_helper(dtypes.bool.vec(lanes)))
    for dt in used:
        if dt.scalar() is dtypes.float16:
            ret.append(half_helper(dt.count))
            continue
        if dt.scalar() is dtypes.bool:
            continue
        t = vector_name(dt)
        if dtypes.is_float(dt):
            ret.append(fma.format(t=t))
            ret.append(trunc_helper(dt))
        ret.append(max_helper.format(t=t, mask="(a >= b) | (a != a)" if dtypes.is_float(dt) else "a > b"))
        ret.append(where_helper(dt))
    return ret


def render_compare(op: Ops, a: str, b: str, dt: DType) -> str:
    """A vector comparison as a bool lane mask."""
    sym = {Ops.CMPLT: "<", Ops.CMPNE: "!=", Ops.CMPEQ: "=="}[op]
    return f"__builtin_convertvector(({a}{sym}{b}), {vector_name(dt)})"


def render_where(c: str, a: str, b: str, dt: DType) -> str:
    return f"tg_where_{vector_name(dt)}({c}, {a}, {b})"


def render_cast(x: str, src: DType, dst: DType) -> str:
    """A numeric vector conversion; float -> 32-bit int goes through 64-bit ints like the scalar C; float16 ->
    float32 through `half_helper`."""
    if src.scalar() is dtypes.float16:
        return f"tg_h2f_{vector_name(dst)}({x})"
    if dtypes.is_float(src) and dtypes.is_int(dst) and dst.scalar().itemsize < 8:
        x = f"__builtin_convertvector({x}, tg_i64x{src.count})"
    return f"__builtin_convertvector({x}, {vector_name(dst)})"
