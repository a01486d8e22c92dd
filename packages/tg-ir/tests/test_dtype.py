import itertools
import pickle

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tg.ir import (
    AddrSpace,
    Context,
    DType,
    PtrDType,
    can_lossless_cast,
    dtypes,
    least_upper_dtype,
    least_upper_float,
    sum_acc_dtype,
    to_dtype,
    weak_promote,
)

SCALARS = [dtypes.bool, *dtypes.ints, *dtypes.floats]
TORCH_NAMES = {dtypes.bool: "bool", dtypes.int8: "int8", dtypes.uint8: "uint8", dtypes.int16: "int16",
               dtypes.uint16: "uint16", dtypes.int32: "int32", dtypes.uint32: "uint32", dtypes.int64: "int64",
               dtypes.uint64: "uint64", dtypes.float16: "float16", dtypes.bfloat16: "bfloat16",
               dtypes.float32: "float32", dtypes.float64: "float64", dtypes.fp8e4m3: "float8_e4m3fn",
               dtypes.fp8e5m2: "float8_e5m2", dtypes.fp8e4m3fnuz: "float8_e4m3fnuz",
               dtypes.fp8e5m2fnuz: "float8_e5m2fnuz"}  # fmt: skip


def test_itemsize_fmt_minmax() -> None:
    assert [d.itemsize for d in (dtypes.bool, dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64)] == [1, 1, 2, 4, 8]
    assert dtypes.float16.itemsize == 2 and dtypes.bfloat16.itemsize == 2 and dtypes.fp8e4m3.itemsize == 1
    assert dtypes.float32.fmt == "f" and dtypes.uint16.fmt == "H" and dtypes.bfloat16.fmt is None
    assert dtypes.int8.min == -128 and dtypes.int8.max == 127 and dtypes.uint32.max == 2**32 - 1
    assert dtypes.int64.min == -(2**63) and dtypes.float32.max == float("inf") and dtypes.bool.max is True


def test_ptr_checks_size_and_address_space() -> None:
    with pytest.raises(ValueError, match="ptr: size must be an element count or -1"):
        dtypes.float32.ptr(-2)
    with pytest.raises(TypeError, match="ptr: addrspace must be an AddrSpace, got 'LOCAL'"):
        dtypes.float32.ptr(4, "LOCAL")  # type: ignore[arg-type]
    assert dtypes.float32.ptr(0).size == 0 and dtypes.float32.ptr().size == -1


def test_vec_and_ptr() -> None:
    v = dtypes.float32.vec(4)
    assert v.count == 4 and v.itemsize == 16 and v.scalar() is dtypes.float32 and v is dtypes.float32.vec(4)
    assert dtypes.float32.vec(1) is dtypes.float32
    assert repr(v) == "dtypes.float32.vec(4)"
    with pytest.raises(ValueError):
        v.vec(2)
    with pytest.raises(ValueError):
        dtypes.float32.vec(0)
    p = dtypes.float32.ptr(16, AddrSpace.LOCAL)
    assert isinstance(p, PtrDType) and p.base is dtypes.float32 and p.size == 16 and p.addrspace == AddrSpace.LOCAL
    assert p is dtypes.float32.ptr(16, AddrSpace.LOCAL) and p is not dtypes.float32.ptr(16)
    assert p.vec(4).vcount == 4 and p.vec(4).scalar() is p
    assert repr(dtypes.half.ptr()) == "dtypes.float16.ptr(-1)"
    with pytest.raises(TypeError):
        p.ptr()


def test_classification_and_names() -> None:
    assert dtypes.is_float(dtypes.bfloat16) and dtypes.is_float(dtypes.float32.vec(4))
    assert not dtypes.is_float(dtypes.int8)
    assert dtypes.is_int(dtypes.uint8) and not dtypes.is_int(dtypes.bool) and dtypes.is_unsigned(dtypes.uint64)
    assert dtypes.is_bool(dtypes.bool) and not dtypes.is_unsigned(dtypes.int8)
    assert to_dtype("float32") is dtypes.float32 and to_dtype("half") is dtypes.float16 and to_dtype(dtypes.int8)
    with pytest.raises(TypeError, match="unknown dtype"):
        to_dtype("float33")
    assert repr(dtypes.float) == "dtypes.float32" and repr(dtypes.long) == "dtypes.int64"
    assert dtypes.finfo(dtypes.bfloat16) == (8, 7) and dtypes.finfo(dtypes.fp8e5m2) == (5, 2)
    with pytest.raises(ValueError):
        dtypes.finfo(dtypes.int32)
    assert dtypes.from_py(True) is dtypes.bool and dtypes.from_py(1) is dtypes.int32
    assert dtypes.from_py([1, 2.0]) is dtypes.float32
    with pytest.raises(TypeError):
        dtypes.from_py("x")


@pytest.mark.parametrize("dt", [*SCALARS, dtypes.float32.vec(3), dtypes.int8.ptr(4)], ids=repr)
def test_pickle(dt: DType) -> None:
    assert pickle.loads(pickle.dumps(dt)) is dt


PROMOTIONS = [
    ((dtypes.bool, dtypes.int8), dtypes.int8),
    ((dtypes.int8, dtypes.uint8), dtypes.int16),
    ((dtypes.uint8, dtypes.int16), dtypes.int16),
    ((dtypes.int32, dtypes.uint32), dtypes.int64),
    ((dtypes.uint32, dtypes.uint64), dtypes.uint64),
    ((dtypes.float16, dtypes.bfloat16), dtypes.float32),
    ((dtypes.int64, dtypes.float16), dtypes.float16),
    ((dtypes.uint64, dtypes.int64), dtypes.fp8e4m3),  # tinygrad's lattice: no int type holds both
    ((dtypes.fp8e4m3, dtypes.fp8e5m2), dtypes.float16),
    ((dtypes.float32, dtypes.float64), dtypes.float64),
    ((dtypes.bool,), dtypes.bool),
]


@pytest.mark.parametrize("ds,want", PROMOTIONS, ids=lambda v: repr(v))
def test_least_upper_dtype_table(ds: tuple[DType, ...], want: DType) -> None:
    assert least_upper_dtype(*ds) is want


NON_FP8 = [d for d in SCALARS if d not in dtypes.fp8s]


# The promotion order is a lattice on every dtype except mixes of different fp8 formats: like tinygrad, two fp8s
# promote to float16 while fp8 with bfloat16 gives bfloat16, so fp8 mixes are not associative (torch defines none).
@given(st.sampled_from(NON_FP8), st.sampled_from(NON_FP8), st.sampled_from(NON_FP8))
def test_lattice_properties(a: DType, b: DType, c: DType) -> None:
    ab = least_upper_dtype(a, b)
    assert ab is least_upper_dtype(b, a)
    assert least_upper_dtype(a, a) is a
    assert least_upper_dtype(ab, c) is least_upper_dtype(a, least_upper_dtype(b, c)) is least_upper_dtype(a, b, c)
    assert least_upper_dtype(ab, a) is ab


def test_bad_promotion_input() -> None:
    with pytest.raises(ValueError):
        least_upper_dtype()
    with pytest.raises(TypeError):
        least_upper_dtype(dtypes.float32.vec(2), dtypes.float32)


def test_weak_python_scalars() -> None:
    assert weak_promote(dtypes.int8, 3) is dtypes.int8
    assert weak_promote(dtypes.float16, 3.0) is dtypes.float16
    assert weak_promote(dtypes.int8, 3.0) is dtypes.float32
    assert weak_promote(dtypes.bool, 3) is dtypes.int32
    assert weak_promote(dtypes.uint8, True) is dtypes.uint8
    with pytest.raises(TypeError):
        weak_promote(dtypes.int8, "x")  # type: ignore[arg-type]


def test_default_float_and_int_settings() -> None:
    assert dtypes.default_float is dtypes.float32 and dtypes.default_int is dtypes.int32
    with Context(DEFAULT_FLOAT="float16", DEFAULT_INT="int64"):
        assert dtypes.default_float is dtypes.float16 and dtypes.default_int is dtypes.int64
        assert weak_promote(dtypes.int8, 1.0) is dtypes.float16 and least_upper_float(dtypes.int8) is dtypes.float16
    with Context(DEFAULT_FLOAT="int8"), pytest.raises(ValueError, match="not a float"):
        _ = dtypes.default_float


def test_sum_acc_and_lossless() -> None:
    assert sum_acc_dtype(dtypes.int8) is dtypes.int32 and sum_acc_dtype(dtypes.uint8) is dtypes.uint32
    assert sum_acc_dtype(dtypes.float16) is dtypes.float32 and sum_acc_dtype(dtypes.bool) is dtypes.int32
    assert can_lossless_cast(dtypes.int8, dtypes.int16) and not can_lossless_cast(dtypes.int16, dtypes.int8)
    assert can_lossless_cast(dtypes.float16, dtypes.float32) and not can_lossless_cast(dtypes.bfloat16, dtypes.float16)
    assert can_lossless_cast(dtypes.int16, dtypes.float32) and not can_lossless_cast(dtypes.int32, dtypes.float32)
    assert can_lossless_cast(dtypes.bool, dtypes.fp8e4m3)


@pytest.mark.torch
def test_promotion_matches_torch() -> None:
    torch = pytest.importorskip("torch")
    checked = 0
    for a, b in itertools.product(TORCH_NAMES, repeat=2):
        ta, tb = getattr(torch, TORCH_NAMES[a], None), getattr(torch, TORCH_NAMES[b], None)
        if ta is None or tb is None:
            continue
        try:
            want = torch.promote_types(ta, tb)
        except (RuntimeError, TypeError):
            continue  # torch doesn't define this pair
        assert TORCH_NAMES[least_upper_dtype(a, b)] == str(want).removeprefix("torch."), (a, b, want)
        checked += 1
    assert checked > 100
