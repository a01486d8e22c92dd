"""Renderers: the C is clean, self-contained and compiles warning-free; the PYTHON source round-trips."""

from __future__ import annotations

import math
import shutil
import subprocess
from pathlib import Path

import pytest

from tg.codegen.linearize import linearize
from tg.codegen.lower import lower_kernel
from tg.codegen.opt import Opt, OptOps
from tg.codegen.program import get_program
from tg.codegen.render.cstyle import LIBM_DECLARATIONS, ClangRenderer
from tg.codegen.render.python import PythonRenderer, decode_program
from tg.codegen.render.renderer import Renderer
from tg.ir.dtype import DType, dtypes
from tg.ir.ops import AxisType, Ops
from tg.ir.uop import UOp

f32, i32 = dtypes.float32, dtypes.int32
CC = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")


def unary_kernel(dt_in: DType, dt_out: DType, fn) -> UOp:
    r = UOp.range(8, 0)
    return UOp.sink(UOp.param(0, dt_out, 8).index(r).store(fn(UOp.param(1, dt_in, 8).index(r).load())).end(r))


KERNELS = {
    "add": unary_kernel(f32, f32, lambda x: x + x),
    "exp2": unary_kernel(f32, f32, lambda x: x.exp2()),
    "half": unary_kernel(dtypes.float16, dtypes.float16, lambda x: x * x),
    "bf16": unary_kernel(dtypes.bfloat16, f32, lambda x: x.cast(f32)),
    "fp8": unary_kernel(dtypes.fp8e4m3, dtypes.fp8e5m2fnuz, lambda x: (x * x).cast(dtypes.fp8e5m2fnuz)),
    "int64": unary_kernel(dtypes.int64, dtypes.int64, lambda x: (x * UOp.const(dtypes.int64, -(2**63))) // x),
    "uint8": unary_kernel(dtypes.uint8, dtypes.uint8, lambda x: x + UOp.const(dtypes.uint8, 250)),
    "bool": unary_kernel(dtypes.bool, dtypes.bool, lambda x: x.ne(True) | x),
    "bitcast": unary_kernel(f32, dtypes.uint32, lambda x: x.bitcast(dtypes.uint32) >> UOp.const(dtypes.uint32, 3)),
    "fmod": unary_kernel(dtypes.float64, dtypes.float64, lambda x: x % UOp.const(dtypes.float64, 0.5)),
    # every libm function the C renderer calls, in both precisions: -Werror below fails on one left undeclared
    **{
        f"libm_{dt.name}": unary_kernel(
            dt,
            dt,
            lambda x: x.alu(Ops.SIN).alu(Ops.SQRT).alu(Ops.TRUNC).alu(Ops.LOG2).alu(Ops.EXP2).alu(Ops.POW, x) % x,
        )
        for dt in (f32, dtypes.float64)
    },
    "special": unary_kernel(f32, f32, lambda x: x.maximum(UOp.const(f32, -math.inf)) + UOp.const(f32, math.nan)),
    "threefry": unary_kernel(dtypes.uint64, dtypes.uint64, lambda x: x.alu(Ops.THREEFRY, x)),
    "int_min": unary_kernel(i32, i32, lambda x: x.maximum(UOp.const(i32, -(2**31)))),
}


def c_source(ast: UOp) -> str:
    return get_program(ast, ClangRenderer()).src


@pytest.mark.skipif(CC is None, reason="no C compiler on PATH")
@pytest.mark.parametrize("name", list(KERNELS))
def test_c_compiles_without_warnings(name: str, tmp_path: Path) -> None:
    src = tmp_path / "k.c"
    src.write_text(c_source(KERNELS[name]))
    assert CC is not None
    res = subprocess.run([CC, "-std=gnu11", "-Wall", "-Wextra", "-Werror", "-fsyntax-only", str(src)],
                         capture_output=True, text=True, check=False)  # fmt: skip
    assert res.returncode == 0, res.stderr + src.read_text()


def test_signature_and_calling_convention() -> None:
    n = UOp.variable("n", 1, 8)
    r = UOp.range(n, 0)
    val = UOp.param(2, f32, 8).index(r).load() * UOp.param(1, dtypes.int32, 8).index(r).load().cast(f32)
    src = c_source(UOp.sink(UOp.param(0, f32, 8).index(r).store(val).end(r)))
    assert "void E_n(float* restrict data0, int* restrict data1, float* restrict data2, const int n) {" in src
    assert "for (int ridx0 = 0; ridx0 < n; ridx0++) {" in src


def test_includes_only_what_is_needed() -> None:
    assert "#include" not in c_source(KERNELS["add"]) and "tg_h2f" not in c_source(KERNELS["add"])
    # libm's functions are declared, not included: a compiler would parse all of <math.h> for every kernel
    assert LIBM_DECLARATIONS in c_source(KERNELS["exp2"]) and "exp2f(" in c_source(KERNELS["exp2"])
    assert "#include" not in c_source(KERNELS["exp2"])
    half = c_source(KERNELS["half"])
    assert "tg_h2f" in half and "tg_f2h" in half and "tg_bf2f" not in half and "#include" not in half
    assert "unsigned short* restrict data0" in half
    assert "tg_bf2f" in c_source(KERNELS["bf16"])


def test_constants() -> None:
    ren = ClangRenderer()
    assert ren.render_const(math.inf, f32) == "__builtin_inff()"
    assert ren.render_const(-math.inf, dtypes.float64) == "(-__builtin_inf())"
    assert ren.render_const(math.nan, f32) == '__builtin_nanf("")'
    assert ren.render_const(0.1, f32) == "0.1f"
    assert ren.render_const(-2.5, dtypes.float64) == "(-2.5)"
    assert ren.render_const(-(2**31), i32) == "(-2147483647-1)"
    assert ren.render_const(2**64 - 1, dtypes.uint64) == "18446744073709551615ull"
    assert ren.render_const(-1, dtypes.uint32) == "4294967295u"
    assert ren.render_const(True, dtypes.bool) == "1"
    assert ren.render_const(1.0, dtypes.float16) == "((unsigned short)0x3c00)"
    assert ren.render_const(1.0, dtypes.bfloat16) == "((unsigned short)0x3f80)"


def test_reduce_renders_an_accumulator() -> None:
    ro, rr = UOp.range(4, 0), UOp.range(8, 1, AxisType.REDUCE)
    red = UOp.param(1, f32, 32).index(ro * 8 + rr).load().reduce(rr, arg=Ops.ADD)
    src = c_source(UOp.sink(UOp.param(0, f32, 4).index(ro).store(red).end(ro)))
    assert "float acc0;" in src and "acc0 = 0.0f;" in src and "acc0 = acc0+val0;" in src
    assert "data0[ridx0] = acc0;" in src


def test_gated_load_is_a_conditional() -> None:
    r = UOp.range(6, 0)
    val = UOp.param(1, f32, 4).index(r, valid=r < 4).load()
    src = c_source(UOp.sink(UOp.param(0, f32, 6).index(r).store(val).end(r)))
    assert "((ridx0<4)?data1[ridx0]:0.0f)" in src


def test_unrenderable_inputs_raise() -> None:
    with pytest.raises(ValueError, match="ending in SINK"):
        ClangRenderer().render([])
    with pytest.raises(NotImplementedError, match="no C type"):
        ClangRenderer().render_dtype(dtypes.void)
    with pytest.raises(NotImplementedError, match="does not implement render"):
        Renderer().render([])


def test_python_renderer_round_trips() -> None:
    uops = linearize(lower_kernel(KERNELS["add"], PythonRenderer()).replace(arg="E_8"))
    prog = decode_program(PythonRenderer().render(uops))
    assert [ins[0] for ins in prog] == [u.op for u in uops]
    assert prog[-1][3] == "E_8"
    for ins, u in zip(prog, uops, strict=True):
        assert ins[1] == u.dtype and ins[2] == tuple(uops.index(s) for s in u.src)


def test_python_decode_rejects_garbage() -> None:
    with pytest.raises(ValueError, match="not a PythonRenderer program"):
        decode_program("bm90IGEgcGlja2xl")


def test_renderer_capabilities() -> None:
    ren = ClangRenderer()
    assert ren.device == "CPU" and ren.global_max is None and not ren.has_local
    assert {Ops.ADD, Ops.EXP2, Ops.MAX, Ops.WHERE} <= ren.supported_ops and Ops.THREEFRY not in ren.supported_ops
    assert PythonRenderer().device == "PYTHON"


def test_subtraction_and_redundant_where_read_naturally() -> None:
    r = UOp.range(6, 0)
    a, b = UOp.param(1, f32, 6).index(r).load(), UOp.param(2, i32, 6)
    valid = UOp.const(i32, 0) < r
    padded = valid.where(b.index(r - 1, valid=valid).load(), UOp.const(i32, 0)).cast(f32)
    src = c_source(UOp.sink(UOp.param(0, f32, 6).index(r).store((a - padded) * UOp.const(f32, -1.0)).end(r)))
    assert "data2[ridx0-1]" in src and "-1.0f" not in src and "(-1)" not in src
    assert "?val" not in src  # the WHERE that repeated the load's gate is gone


# *** the rule table: a dialect changes hooks or prepends rules, the base rules stay ***


def test_dialect_subclass_overrides_hooks_only() -> None:
    from tg.codegen.render.cstyle import CStyleLanguage

    class Dialect(CStyleLanguage):
        kernel_prefix = "__kernel void"
        buffer_prefix = "__global "

    src = Dialect().render(linearize(lower_kernel(KERNELS["add"], ClangRenderer()).replace(arg="k")))
    assert src.startswith("__kernel void k(__global float* restrict data0, __global float* restrict data1)")
    assert "data0[ridx0] = val0+val0;" in src


def test_dialect_can_prepend_a_rule() -> None:
    from tg.codegen.render.cstyle import CStyleLanguage
    from tg.ir.pattern import PatternMatcher, UPat

    def commented_range(ctx, u):
        ctx.line("/* loop */")
        return CStyleLanguage.string_rules.rewrite(u, ctx)

    class Traced(ClangRenderer):
        string_rules = PatternMatcher([(UPat(Ops.RANGE, name="u"), commented_range)]) + CStyleLanguage.string_rules

    src = Traced().render(linearize(lower_kernel(KERNELS["add"], ClangRenderer()).replace(arg="k")))
    assert "/* loop */\n  for (int ridx0 = 0; ridx0 < 8; ridx0++) {" in src


def test_unrenderable_op_names_it() -> None:
    from tg.codegen.render.cstyle import CStyleLanguage

    class NoMul(ClangRenderer):
        code_for_op = {k: v for k, v in CStyleLanguage.code_for_op.items() if k is not Ops.MUL}

    prog = linearize(lower_kernel(unary_kernel(f32, f32, lambda x: x * x), ClangRenderer()).replace(arg="k"))
    with pytest.raises(NotImplementedError, match=r"can't render Ops\.MUL"):
        NoMul().render(prog)


@pytest.mark.skipif(CC is None, reason="no C compiler on PATH")
@pytest.mark.parametrize("dt", [dtypes.float32, dtypes.int32])
def test_vector_max_is_one_helper_call_that_compiles(dt: DType, tmp_path: Path) -> None:
    # a vectorised max (relu, maximum, max-reduce lanes) stays a vector op: a compare mask and a bitwise blend
    r = UOp.range(64, 0)
    val = UOp.param(1, dt, 64).index(r).load().alu(Ops.MAX, UOp.param(2, dt, 64).index(r).load())
    ast = UOp.sink(UOp.param(0, dt, 64).index(r).store(val).end(r))
    src = get_program(ast, ClangRenderer(vector_bytes=16), [Opt(OptOps.SPLIT, 0, (4, AxisType.UPCAST))]).src
    name = "f32" if dt == dtypes.float32 else "i32"
    assert f"tg_max_tg_{name}x4(" in src and "?" not in src.split("void E_")[1]  # no lane-by-lane select
    (tmp_path / "k.c").write_text(src)
    assert CC is not None
    res = subprocess.run([CC, "-std=gnu11", "-Wall", "-Werror", "-fsyntax-only", str(tmp_path / "k.c")],
                         capture_output=True, text=True, check=False)  # fmt: skip
    assert res.returncode == 0, res.stderr + src
