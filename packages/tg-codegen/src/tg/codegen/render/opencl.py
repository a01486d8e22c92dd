"""`OpenCLRenderer`: OpenCL C kernels (`__kernel`, `__global` buffers, work-item ids, `__local` memory).

A small subclass of the C renderer: OpenCL C is C99 with address-space qualifiers, its own integer type names
(`long` is 64-bit, `long long` does not exist), overloaded math built-ins (`sqrt` for float and double), `as_T()`
for bit casts and no `<math.h>`. bool buffers are stored as `uchar` (OpenCL leaves the size of `bool` open).
float16/bfloat16/fp8 are stored as bit patterns and computed in float32, as on the CPU; float16 conversions are
hardware ones (`convert_half_rte` with cl_khr_fp16, `vload_half`/`vstore_half_rte` without it).
"""

from __future__ import annotations

import re
from collections.abc import Callable

from tg.codegen.render.cstyle import CStyleLanguage
from tg.ir.dtype import DType, PtrDType, dtypes
from tg.ir.ops import Ops

# the C helper text's compiler built-ins, spelled the OpenCL way
_CL_SPELLING = (
    ("#ifdef __FLT16_MANT_DIG__", "#if 0"),
    ("static inline ", "inline "),
    ("__builtin_memcpy(&f, &u, 4)", "f = as_float(u)"),
    ("__builtin_memcpy(&u, &f, 4)", "u = as_uint(f)"),
    ("__builtin_memcpy(&u, &x, 4)", "u = as_uint(x)"),
    ('__builtin_nanf("")', "NAN"),
    ("__builtin_inff()", "INFINITY"),
    ("__builtin_copysignf", "copysign"),
)


# element dtypes of OpenCL vectors the renderer uses (what the expander vectorises)
_VECTOR_SCALARS = frozenset({dtypes.float32, dtypes.float64, dtypes.int32, dtypes.uint32, dtypes.int64, dtypes.uint64})


# float16 <-> float32 by the hardware: with cl_khr_fp16 through the `half` type, without it through vload_half /
# vstore_half_rte (core OpenCL: `half` may only be pointed to), on the ushort bit patterns tg stores
_HALF_NATIVE = r"""#pragma OPENCL EXTENSION cl_khr_fp16 : enable
inline float tg_h2f(ushort h) { return convert_float(as_half(h)); }
inline ushort tg_f2h(float f) { return as_ushort(convert_half_rte(f)); }"""
_HALF_STORAGE = r"""inline float tg_h2f(ushort h) { return vload_half(0, (const half*)&h); }
inline ushort tg_f2h(float f) { ushort h; vstore_half_rte(f, 0, (half*)&h); return h; }"""


class OpenCLRenderer(CStyleLanguage):
    """OpenCL C for the CL device. Launch limits come from the device (defaults fit any OpenCL 1.2 GPU)."""

    device = "CL"
    suffix = "cl"
    has_local = True
    has_shared = True
    kernel_prefix = "__kernel void"
    buffer_prefix = "__global "
    local_prefix = "__local "
    barrier = "barrier(CLK_LOCAL_MEM_FENCE);"
    math_prelude = ""  # the math functions are built into OpenCL C
    infinity = {dtypes.float32: "INFINITY", dtypes.float64: "((double)INFINITY)"}
    nan = {dtypes.float32: "NAN", dtypes.float64: "((double)NAN)"}
    type_map = {
        **CStyleLanguage.type_map, dtypes.bool: "bool", dtypes.int8: "char", dtypes.uint8: "uchar",
        dtypes.uint16: "ushort", dtypes.uint32: "uint", dtypes.int64: "long", dtypes.uint64: "ulong",
        dtypes.float16: "ushort", dtypes.bfloat16: "ushort", **{fp8: "uchar" for fp8 in dtypes.fp8s},
    }  # fmt: skip
    code_for_op: dict[Ops, Callable[..., str]] = {
        **CStyleLanguage.code_for_op,
        Ops.MOD: lambda a, b, dt: f"fmod({a}, {b})" if dtypes.is_float(dt) else f"({a}%{b})",
    }
    _workitems = {"g": "get_group_id", "l": "get_local_id", "i": "get_global_id"}
    # float4-style vectors: 16-byte loads/stores (vload4/vstore4) and element-wise vector arithmetic
    vector_bytes = 16
    vector_ops = frozenset({Ops.ADD, Ops.SUB, Ops.MUL, Ops.FDIV, Ops.NEG})

    def __init__(
        self,
        local_max: tuple[int, ...] = (256, 256, 64),
        max_local_threads: int = 256,
        shared_max: int = 32768,
        has_half: bool = False,
        has_double: bool = True,
    ) -> None:
        self.global_max = (2**31 - 1, 2**31 - 1, 2**31 - 1)
        self.local_max, self.max_local_threads, self.shared_max = local_max, max_local_threads, shared_max
        self.has_half, self.has_double = has_half, has_double
        self.native_float_dtypes = frozenset({dtypes.float32, *([dtypes.float64] if has_double else [])})

    def __reduce__(self) -> tuple[type, tuple[object, ...]]:  # type: ignore[override]
        return type(self), (self.local_max, self.max_local_threads, self.shared_max, self.has_half, self.has_double)

    def render_dtype(self, dt: DType) -> str:
        """OpenCL C type names; a pointer to bool is a pointer to uchar."""
        if isinstance(dt, PtrDType) and dt.base == dtypes.bool:
            return "uchar"
        return super().render_dtype(dt)

    def vector_type(self, dt: DType) -> str:
        """OpenCL's built-in vector types: `float4`, `int4`, `double2`, `long2`, ..."""
        if dt.scalar() not in _VECTOR_SCALARS or dt.count not in (2, 3, 4, 8, 16):
            raise NotImplementedError(f"OpenCL has no vector type for {dt}")
        return f"{self.type_map[dt.scalar()]}{dt.count}"

    def render_vectorize(self, parts: list[str], dt: DType) -> str:
        """`(float4)(a, b, c, d)`: an OpenCL vector literal."""
        return f"(({self.render_dtype(dt)})({','.join(parts)}))"

    def render_gep(self, x: str, lane: int, dt: DType) -> str:
        """`x.s0` ... `x.sf`: OpenCL's lane selectors."""
        return f"{x}.s{lane:x}"

    def render_vector_load(self, addr: str, dt: DType) -> str:
        """`vloadN(0, p)`: needs only the element's alignment (any offset into any address space)."""
        return f"vload{dt.count}(0, {addr})"

    def render_vector_store(self, addr: str, value: str, dt: DType) -> str:
        """`vstoreN(v, 0, p)`: needs only the element's alignment."""
        return f"vstore{dt.count}({value}, 0, {addr})"

    def workitem(self, kind: str, dim: int) -> str:
        """`get_group_id(d)`, `get_local_id(d)` or `get_global_id(d)` (as int)."""
        return f"((int){self._workitems[kind]}({dim}))"

    def render_const(self, v: object, dt: DType) -> str:
        """C literals with OpenCL's 64-bit suffixes (`l`, `ul`)."""
        return super().render_const(v, dt).replace("ull", "ul").replace("ll", "l")

    def render_cast(self, x: str, src: DType, dst: DType) -> str:
        """C casts with OpenCL's 64-bit type names; casts to bool compare with zero."""
        if dst == dtypes.bool:
            return f"(({x})!=0)"
        return super().render_cast(x, src, dst).replace("unsigned long long", "ulong").replace("long long", "long")

    def render_bitcast(self, x: str, src: DType, dst: DType) -> str:
        """`as_T(x)`: OpenCL's bit reinterpretation between types of one size."""
        if src.itemsize != dst.itemsize:
            raise ValueError(f"bitcast {src} -> {dst} changes the size ({src.itemsize} vs {dst.itemsize} bytes)")
        return f"as_{self.render_dtype(dst)}({x})"

    def render_math(self, op: Ops, srcs: list[str], dt: DType) -> str:
        """OpenCL's math built-ins are overloaded: one name for float and double."""
        if dt not in (dtypes.float32, dtypes.float64):
            raise NotImplementedError(f"{op} on {dt} must be computed in float32 (run lowering first)")
        return f"{self.math_funcs[op][1]}({', '.join(srcs)})"

    def render_prelude(self, needs: set[str]) -> list[str]:
        """The C helpers respelled for OpenCL (no <math.h>: the math built-ins are part of the language)."""
        helpers = []
        for text in super().render_prelude(needs):
            if "tg_h2f" in text:
                helpers.append(_HALF_NATIVE if self.has_half else _HALF_STORAGE)
                continue
            for old, new in _CL_SPELLING:
                text = text.replace(old, new)
            helpers.append(re.sub(r"\bhalf\b", "hlf", text))  # `half` is a type name in OpenCL C
        return helpers

    def render_kernel(self, name: str, params: list[str], body: list[str], prefix: list[str]) -> str:
        """The kernel, with FP contraction off and the fp64 extension enabled when doubles are used."""
        # OpenCL C contracts a*b+c into fma by default; off, results match the CPU and PYTHON devices bit for bit
        pragmas = ["#pragma OPENCL FP_CONTRACT OFF"]
        if any("double" in text for text in (*prefix, *params, *body)):
            pragmas.append("#pragma OPENCL EXTENSION cl_khr_fp64 : enable")
        return super().render_kernel(name, params, body, [*pragmas, *prefix])
