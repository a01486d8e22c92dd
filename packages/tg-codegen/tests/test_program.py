"""get_program: the ProgramSpec fields the runtime relies on, estimates, names and input checking."""

from __future__ import annotations

import pytest

from tg.codegen.program import ProgramSpec, estimate, get_program
from tg.codegen.render.cstyle import ClangRenderer
from tg.codegen.render.python import PythonRenderer
from tg.ir.dtype import dtypes
from tg.ir.helpers import SPEC, Context
from tg.ir.ops import AxisType, KernelInfo, Ops
from tg.ir.spec import SpecError, program_spec, verify
from tg.ir.uop import UOp

f32, i32 = dtypes.float32, dtypes.int32


def matvec(name: str | None = None) -> UOp:
    # out[i] = sum_j w[i*8+j] * x[j] * scale, out in slot 0, x in slot 2, w in slot 1; scale is a variable
    ro, rr = UOp.range(4, 0), UOp.range(8, 1, AxisType.REDUCE)
    scale = UOp.variable("scale", 1, 10).cast(f32)
    dot = (UOp.param(1, f32, 32).index(ro * 8 + rr).load() * UOp.param(2, f32, 8).index(rr).load()).reduce(rr)
    st = UOp.param(0, f32, 4).index(ro).store(dot * scale).end(ro)
    return UOp.sink(st, arg=KernelInfo(name=name) if name else None)


@pytest.mark.parametrize("renderer", [ClangRenderer(), PythonRenderer()], ids=["clang", "python"])
def test_program_spec_fields(renderer) -> None:
    p = get_program(matvec(), renderer)
    assert isinstance(p, ProgramSpec)
    assert p.name == "r_4_8" and p.device == renderer.device and p.ast is matvec()
    assert p.globals == (0, 1, 2) and p.outs == (0,) and p.ins == (1, 2)
    assert [v.arg[0] for v in p.vars] == ["scale"]
    assert p.global_size is None and p.local_size is None and p.applied_opts == ()
    assert p.uops[-1].op is Ops.SINK
    assert verify(p.uops, program_spec)


def test_estimates() -> None:
    p = get_program(matvec(), ClangRenderer())
    assert p.ops == 4 * (8 * 2 + 1)  # per output: 8 multiplies and adds, then the scale multiply
    # w is read once (128 B), x is re-read per row but capped at its size (32 B), out written once (16 B)
    assert p.mem == 128 + 32 + 16
    assert estimate(p.uops) == (p.ops, p.mem)


def test_symbolic_estimates() -> None:
    n = UOp.variable("n", 1, 100)
    r = UOp.range(n, 0)
    p = get_program(
        UOp.sink(
            UOp.param(0, f32, 100).index(r).store(UOp.param(1, f32, 100).index(r).load() + UOp.const(f32, 1.0)).end(r)
        ),
        ClangRenderer(),
    )
    assert isinstance(p.ops, UOp) and p.ops.sym_infer({"n": 7}) == 7
    assert isinstance(p.mem, UOp) and p.mem.sym_infer({"n": 7}) == 56


def test_kernel_info_name_is_used() -> None:
    assert get_program(matvec("matvec 4x8"), ClangRenderer()).name == "matvec_4x8"
    assert "void matvec_4x8(" in get_program(matvec("matvec 4x8"), ClangRenderer()).src
    assert get_program(matvec(), ClangRenderer()).name == "r_4_8"
    unnamed = UOp.sink(*matvec().src, arg=KernelInfo(opts_to_apply=()))  # a KernelInfo without a name
    assert get_program(unnamed, ClangRenderer()).name == "r_4_8"
    assert get_program(matvec("test"), ClangRenderer()).name == "test"  # no magic name


def test_bad_inputs() -> None:
    with pytest.raises(TypeError, match="needs a Renderer"):
        get_program(matvec(), "CPU")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="must be a SINK"):
        get_program(UOp.const(f32, 1.0), ClangRenderer())
    with pytest.raises(TypeError, match="opts must be Opt instances"):
        get_program(matvec(), ClangRenderer(), opts=["UPCAST"])


def test_bound_variables_become_kernel_arguments() -> None:
    n = UOp.variable("n", 1, 8)
    r = UOp.range(n.bind(3), 0)
    p = get_program(UOp.sink(UOp.param(0, f32, 8).index(r).store(UOp.const(f32, 1.0)).end(r)), ClangRenderer())
    assert [v.arg[0] for v in p.vars] == ["n"] and "const int n" in p.src
    assert all(u.op is not Ops.BIND for u in p.uops)


def test_spec_checks_run_in_get_program_when_spec_is_on() -> None:
    assert SPEC >= 1, "the repository conftest turns SPEC on for every test run"
    out, inp = UOp.param(0, dtypes.float32, 8), UOp.param(1, dtypes.float32, 8)
    i = UOp.range(8, 0, AxisType.LOOP)
    x = inp.index(i).load()
    bad = UOp.sink(out.index(i).store(UOp(Ops.IDIV, dtypes.float32, (x, x.const_like(2.0)))).end(i),
                   arg=KernelInfo(name="bad"))  # fmt: skip
    with pytest.raises(SpecError, match=r"Ops\.IDIV"):
        get_program(bad, ClangRenderer())
    with Context(SPEC=0), pytest.raises(Exception) as e:  # without the check the failure comes later, if at all
        get_program(bad, ClangRenderer())
        raise RuntimeError("rendered")
    assert not isinstance(e.value, SpecError)
