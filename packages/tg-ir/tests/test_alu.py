import math
import pickle

import pytest

from tg.ir import Ops, UOp, dtypes, exec_alu, graph_rewrite_map, python_alu, ssimplify
from tg.ir.pattern import PatternMatcher, UPat


def test_exec_alu_ints_wrap_and_c_division() -> None:
    assert exec_alu(Ops.ADD, dtypes.int8, (127, 1)) == -128
    assert exec_alu(Ops.MUL, dtypes.uint8, (16, 16)) == 0
    assert exec_alu(Ops.IDIV, dtypes.int32, (-7, 2)) == -3 and exec_alu(Ops.MOD, dtypes.int32, (-7, 2)) == -1
    assert exec_alu(Ops.IDIV, dtypes.int32, (7, 0)) == 0
    assert exec_alu(Ops.SHL, dtypes.uint32, (1, 31)) == 2**31 and exec_alu(Ops.SHL, dtypes.int32, (1, 31)) == -(2**31)
    assert exec_alu(Ops.CMPLT, dtypes.bool, (1, 2)) is True and exec_alu(Ops.CMPNE, dtypes.bool, (1, 1)) is False
    assert exec_alu(Ops.WHERE, dtypes.int32, (False, 1, 2)) == 2 and exec_alu(Ops.MAX, dtypes.int32, (3, -4)) == 3
    assert exec_alu(Ops.MULACC, dtypes.int32, (2, 3, 4)) == 10


def test_exec_alu_floats() -> None:
    assert exec_alu(Ops.FDIV, dtypes.float32, (1.0, 0.0)) == math.inf
    assert math.isnan(exec_alu(Ops.FDIV, dtypes.float32, (0.0, 0.0)))  # type: ignore[arg-type]
    assert exec_alu(Ops.RECIPROCAL, dtypes.float32, (-0.0,)) == -math.inf
    assert exec_alu(Ops.LOG2, dtypes.float32, (0.0,)) == -math.inf
    assert math.isnan(exec_alu(Ops.SQRT, dtypes.float32, (-1.0,)))  # type: ignore[arg-type]
    assert exec_alu(Ops.EXP2, dtypes.float16, (100.0,)) == math.inf
    assert exec_alu(Ops.ADD, dtypes.float16, (1.0, 2**-12)) == 1.0
    assert exec_alu(Ops.TRUNC, dtypes.float32, (-2.5,)) == -2.0
    assert math.copysign(1.0, exec_alu(Ops.TRUNC, dtypes.float32, (-0.5,))) == -1.0  # keeps the sign of zero, as C
    assert exec_alu(Ops.ADD, dtypes.float32.vec(2), ((1.0, 2.0), 1.0)) == (2.0, 3.0)
    with pytest.raises(NotImplementedError):
        exec_alu(Ops.LOAD, dtypes.float32, ())


def test_threefry_is_deterministic_and_mixes() -> None:
    a = python_alu[Ops.THREEFRY](0, 0)
    assert a == python_alu[Ops.THREEFRY](0, 0) and 0 <= a < 2**64
    assert len({python_alu[Ops.THREEFRY](i, 7) for i in range(64)}) == 64


def test_graph_rewrite_map_and_ssimplify() -> None:
    x = UOp.variable("x", 0, 10)
    e = (x + 0) * 2
    pm = PatternMatcher([(UPat.var("y") + 0, lambda y: y)])
    m = graph_rewrite_map(e, pm)
    assert m[e] is x * 2 and m[x + 0] is x
    assert ssimplify(UOp.const(dtypes.int32, 3) * 4) == 12 and ssimplify(5) == 5


def test_vector_helpers() -> None:
    a = UOp.const(dtypes.float32, 1.0)
    v = a.vectorize(a + 1.0, a, a)
    assert v.dtype is dtypes.float32.vec(4) and v.gep(1).dtype is dtypes.float32 and v.gep((0, 1)).dtype.count == 2
    with pytest.raises(IndexError):
        v.gep(4)
    assert a.broadcast(3).dtype is dtypes.float32.vec(3) and a.broadcast(1) is a
    assert a.gep(0) is a
    with pytest.raises(TypeError):
        a.vectorize(UOp.const(dtypes.int32, 1))


def test_pickle_unique_gets_fresh_identity() -> None:
    b = UOp.new_buffer("CPU", 4, dtypes.float32)
    data = pickle.dumps((b, b.reshape((2, 2))))
    b1, r1 = pickle.loads(data)
    b2, _ = pickle.loads(data)
    assert b1 is not b and b1 is not b2 and r1.src[0] is b1  # loads never alias, references inside one load do
    assert b1.size == 4 and b1.device == "CPU"


def test_bool_int_conversion_of_uops() -> None:
    x = UOp.variable("x", 0, 10)
    assert bool(x < 11) is True and int(UOp.const(dtypes.int32, 3) + 4) == 7
    assert float(UOp.const(dtypes.float32, 1.5)) == 1.5
    with pytest.raises(TypeError, match="truth value"):
        bool(x < 5)
    with pytest.raises(TypeError):
        int(x)


def test_shifts_and_powers_fold_without_huge_ints() -> None:
    # C leaves out-of-range shift counts undefined; folding must neither raise nor build a gigantic Python int
    assert exec_alu(Ops.SHL, dtypes.int64, (1, 2**40)) == 0 and exec_alu(Ops.SHL, dtypes.int32, (1, 64)) == 0
    assert exec_alu(Ops.SHL, dtypes.int32, (1, -1)) == 0 and exec_alu(Ops.SHR, dtypes.int32, (8, -1)) == 0
    assert exec_alu(Ops.SHL, dtypes.uint8, (1, 63)) == 0 and exec_alu(Ops.SHR, dtypes.int32, (-8, 1)) == -4
    c = lambda v: UOp.const(dtypes.int64, v)
    assert (c(1) << c(2**40)).simplify().arg == 0
    assert (c(1) >> c(-3)).simplify().arg == 0
    # integer powers wrap like the other int ops; a huge exponent folds at once
    assert exec_alu(Ops.POW, dtypes.int64, (3, 2**40)) == pow(3, 2**40, 2**64) - 2**64
    assert exec_alu(Ops.POW, dtypes.int32, (-3, 21)) == ((-3) ** 21 + 2**31) % 2**32 - 2**31
    assert exec_alu(Ops.POW, dtypes.uint8, (2, 9)) == 0 and exec_alu(Ops.POW, dtypes.int32, (7, 0)) == 1
    assert c(3).alu(Ops.POW, c(2**40)).simplify().arg == pow(3, 2**40, 2**64) - 2**64
