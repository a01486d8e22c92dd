"""`CUDARenderer`: CUDA C++ kernels (`extern "C" __global__`, blockIdx/threadIdx, `__shared__`, `__syncthreads`).

A small subclass of the C renderer. CUDA device code is C++: `bool`, `__restrict__`, bit casts through the
`__int_as_float` family or a union helper, and no C99 compound literals. The source includes no header, so NVRTC
compiles it without a CUDA toolkit: float16 <-> float32 conversions are single PTX `cvt` instructions, bfloat16 and
fp8 use the C helpers (computed in float32, as on the CPU). Compiled by NVRTC with `-default-device` (helpers are
device functions) and `--fmad=false` (results match the CPU device bit for bit).
"""

from __future__ import annotations

from tg.codegen.render.cstyle import CStyleLanguage, RenderContext
from tg.codegen.render.renderer import NVIDIA_SM80, TENSOR_CORES
from tg.ir.dtype import DType, dtypes
from tg.ir.ops import Ops
from tg.ir.pattern import PatternMatcher, UPat
from tg.ir.uop import UOp

_CUDA_HALF = r"""static inline float tg_h2f(unsigned short h) {
  float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h)); return f;
}
static inline unsigned short tg_f2h(float f) {
  unsigned short h; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f)); return h;
}"""
_CUDA_BITCAST = r"""template <class T, class F> static inline T tg_bitcast(F x) {
  union { F f; T t; } u; u.f = x; return u.t;
}"""
# the C helper text's compiler built-ins, spelled with CUDA intrinsics
_CUDA_SPELLING = (
    ("__builtin_memcpy(&f, &u, 4)", "f = __uint_as_float(u)"),
    ("__builtin_memcpy(&u, &f, 4)", "u = __float_as_uint(f)"),
    ("__builtin_memcpy(&u, &x, 4)", "u = __float_as_uint(x)"),
    ('__builtin_nanf("")', "__int_as_float(0x7fc00000)"),
    ("__builtin_inff()", "__int_as_float(0x7f800000)"),
    ("__builtin_copysignf", "copysignf"),
)


# CUDA's built-in 16-byte vector types by element dtype, and their lane names
_VECTOR_NAMES = {dtypes.float32: "float", dtypes.float64: "double", dtypes.int32: "int", dtypes.uint32: "uint",
                 dtypes.int64: "longlong", dtypes.uint64: "ulonglong"}  # fmt: skip
_LANES = "xyzw"
# a vector load/store: one 16-byte instruction (ld.global.v4) when the address is aligned, else lane by lane (a buffer
# view may start at any element); the alignment test is uniform over the kernel's threads. The unaligned store is a
# separate function: inlined, the compiler merges the two paths' stores and loses the 16-byte one
_VECTOR_ACCESS = r"""static inline {v} tg_vload_{v}(const {t}* p) {{
  if (((unsigned long long)p & {mask}ull) == 0) return *(const {v}*)p;
  return make_{v}({lanes});
}}
static __noinline__ void tg_vstore_lanes_{v}({t}* p, {v} x) {{ {stores} }}
static inline void tg_vstore_{v}({t}* p, {v} x) {{
  if (((unsigned long long)p & {mask}ull) == 0) *({v}*)p = x;
  else tg_vstore_lanes_{v}(p, x);
}}"""


# tensor cores: one warp-wide mma.sync per WMMA; A and B fragments are 16-bit pairs packed into 32-bit registers
_MMA = r"""static inline float4 tg_{name}(uint4 a, uint2 b) {{
  float4 d; float z = 0.0f;
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.{t}.{t}.f32 {{%0,%1,%2,%3}}, {{%4,%5,%6,%7}}, {{%8,%9}}, "
               "{{%10,%11,%12,%13}};" : "=f"(d.x), "=f"(d.y), "=f"(d.z), "=f"(d.w)
               : "r"(a.x), "r"(a.y), "r"(a.z), "r"(a.w), "r"(b.x), "r"(b.y), "f"(z), "f"(z), "f"(z), "f"(z));
  return d;
}}"""
_PACKED = {8: "uint4", 4: "uint2", 2: "uint"}  # 16-bit vectors as packed 32-bit registers


def _wmma(ctx: RenderContext, u: UOp) -> str:
    ctx.needs.add(f"wmma:{u.arg}")
    return ctx.value(u, f"tg_{u.arg}({ctx[u.src[0]]}, {ctx[u.src[1]]})")


class CUDARenderer(CStyleLanguage):
    """CUDA C++ for one GPU architecture (`sm_90`); launch limits are CUDA's (1024 threads per block)."""

    device = "CUDA"
    suffix = "cu"
    has_local = True
    has_shared = True
    kernel_prefix = 'extern "C" __global__ void'
    buffer_suffix = " __restrict__"
    local_prefix = "__shared__ "
    barrier = "__syncthreads();"
    math_prelude = ""  # the math functions are built into CUDA
    global_max = (2**31 - 1, 65535, 65535)
    infinity = {
        dtypes.float32: "__int_as_float(0x7f800000)",
        dtypes.float64: "__longlong_as_double(0x7ff0000000000000ll)",
    }
    nan = {dtypes.float32: "__int_as_float(0x7fc00000)", dtypes.float64: "__longlong_as_double(0x7ff8000000000000ll)"}
    type_map = {**CStyleLanguage.type_map, dtypes.bool: "bool"}
    _workitems = {"g": "blockIdx", "l": "threadIdx"}
    # float4-style vectors for 16-byte loads/stores; CUDA's vector types have no arithmetic (lanes are scalar ops)
    vector_bytes = 16

    def __init__(self, arch: str = "sm_90", max_local_threads: int = 256, shared_max: int = 49152) -> None:
        if not (arch.startswith("sm_") and arch[3:].rstrip("af").isdigit()):
            raise ValueError(f"CUDA architecture must look like sm_90, got {arch!r}")
        self.arch = arch
        # mma.sync m16n8k16 with f16/bf16 inputs and f32 accumulation: sm_80 (Ampere) and newer
        self.tensor_cores = NVIDIA_SM80 if int(arch[3:].rstrip("af")) >= 80 else ()
        self.local_max = (1024, 1024, 64)
        self.max_local_threads, self.shared_max = max_local_threads, shared_max

    def __reduce__(self) -> tuple[type, tuple[object, ...]]:  # type: ignore[override]
        return type(self), (self.arch, self.max_local_threads, self.shared_max)

    def vector_type(self, dt: DType) -> str:
        """CUDA's built-in vector types: `float4`, `int4`, `double2`, `longlong2`, ...; float16/bfloat16 vectors
        (tensor core fragments) are pairs packed into `uint4`/`uint2`."""
        if dt.scalar() in (dtypes.float16, dtypes.bfloat16) and dt.count in _PACKED:
            return _PACKED[dt.count]
        if (name := _VECTOR_NAMES.get(dt.scalar())) is None or dt.count not in (2, 4) or dt.itemsize > 16:
            raise NotImplementedError(f"CUDA has no vector type for {dt}")
        return f"{name}{dt.count}"

    def vector_prelude(self, used: list[DType]) -> list[str]:
        """Aligned-or-lane-by-lane load/store helpers for each vector type used."""
        ret = []
        for dt in (d for d in used if d.scalar() in _VECTOR_NAMES):
            v, t = self.vector_type(dt), self.render_dtype(dt.scalar())
            lanes = ", ".join(f"p[{i}]" for i in range(dt.count))
            stores = " ".join(f"p[{i}] = x.{_LANES[i]};" for i in range(dt.count))
            ret.append(_VECTOR_ACCESS.format(v=v, t=t, mask=dt.itemsize - 1, lanes=lanes, stores=stores))
        return ret

    def render_vectorize(self, parts: list[str], dt: DType) -> str:
        """`make_float4(a, b, c, d)`; 16-bit lanes are packed in pairs (low half first), as mma.sync reads them."""
        if dt.scalar() in (dtypes.float16, dtypes.bfloat16):
            pairs = [
                f"((unsigned)({lo})|((unsigned)({hi})<<16))" for lo, hi in zip(parts[::2], parts[1::2], strict=True)
            ]
            return pairs[0] if len(pairs) == 1 else f"make_{self.vector_type(dt)}({','.join(pairs)})"
        return f"make_{self.vector_type(dt)}({','.join(parts)})"

    def render_gep(self, x: str, lane: int, dt: DType) -> str:
        """`x.x`, `x.y`, `x.z`, `x.w`."""
        return f"{x}.{_LANES[lane]}"

    def render_vector_load(self, addr: str, dt: DType) -> str:
        """A 16-byte load when `addr` is aligned (see `_VECTOR_ACCESS`)."""
        return f"tg_vload_{self.vector_type(dt)}({addr})"

    def render_vector_store(self, addr: str, value: str, dt: DType) -> str:
        """A 16-byte store when `addr` is aligned (see `_VECTOR_ACCESS`)."""
        return f"tg_vstore_{self.vector_type(dt)}({addr}, {value})"

    def workitem(self, kind: str, dim: int) -> str:
        """`blockIdx.x`, `threadIdx.y`, or the global id `(blockIdx.z*blockDim.z+threadIdx.z)` (as int)."""
        axis = "xyz"[dim]
        if kind == "i":
            return f"((int)(blockIdx.{axis}*blockDim.{axis}+threadIdx.{axis}))"
        return f"((int){self._workitems[kind]}.{axis})"

    def render_bitcast(self, x: str, src: DType, dst: DType) -> str:
        """`tg_bitcast<T>(x)`: a union helper (C compound literals are not C++)."""
        if src.itemsize != dst.itemsize:
            raise ValueError(f"bitcast {src} -> {dst} changes the size ({src.itemsize} vs {dst.itemsize} bytes)")
        return f"tg_bitcast<{self.render_dtype(dst)}>(({self.render_dtype(src)})({x}))"

    def render_prelude(self, needs: set[str]) -> list[str]:
        """The C helpers with CUDA intrinsics; float16 conversions as PTX cvt instructions; no headers."""
        helpers = []
        for need in sorted(n for n in needs if n.startswith("wmma:")):
            tc = TENSOR_CORES[need[5:]]
            helpers.append(_MMA.format(name=tc.name, t="bf16" if tc.dtype_in is dtypes.bfloat16 else "f16"))
        for text in super().render_prelude(needs):
            if "tg_h2f" in text:
                text = _CUDA_HALF
            for old, new in _CUDA_SPELLING:
                text = text.replace(old, new)
            helpers.append(text)
        return helpers

    def render_kernel(self, name: str, params: list[str], body: list[str], prefix: list[str]) -> str:
        """The kernel, with the bit-cast helper when the body uses it."""
        if any("tg_bitcast<" in line for line in body):
            prefix = [_CUDA_BITCAST, *prefix]
        return super().render_kernel(name, params, body, prefix)


# the WMMA op (tensor cores) before the C rules
CUDARenderer.string_rules = PatternMatcher([(UPat(Ops.WMMA, name="u"), _wmma)]) + CStyleLanguage.string_rules
