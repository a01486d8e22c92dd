"""Pickle scenarios of specs/jit-multi.md 7.5 (K1-K5) and sharded tensors: loads own their data."""

from __future__ import annotations

import pickle

import pytest

from tg.ir import Ops
from tg.tensor import JitError, Tensor, TinyJit


def test_k1_two_loads_never_share_storage() -> None:
    t = Tensor([1, 2, 3]).realize()
    s = pickle.dumps(t)
    a, b = pickle.loads(s), pickle.loads(s)
    a.assign(Tensor([9, 9, 9])).realize()
    assert a.tolist() == [9, 9, 9] and b.tolist() == [1, 2, 3] and t.tolist() == [1, 2, 3]


def test_k2_load_does_not_alias_the_live_original() -> None:
    t = Tensor([1, 2]).realize()
    s = pickle.dumps(t)
    t.assign(Tensor([5, 5])).realize()
    assert pickle.loads(s).tolist() == [1, 2]


def test_k3_a_view_pickles_only_its_own_elements() -> None:
    big = Tensor.ones(100_000).contiguous().realize()
    s = pickle.dumps(big[10:12])
    assert len(s) < 1000, len(s)  # tinygrad 0.14: 400,598 bytes (the whole buffer)
    assert pickle.loads(s).tolist() == [1.0, 1.0]


def test_k4_lazy_tensor() -> None:
    t = Tensor([1, 2, 3]).realize()
    assert pickle.loads(pickle.dumps(t * 2)).tolist() == [2, 4, 6]


def test_k5_value_read_before_an_assign() -> None:
    t = Tensor([1, 2]).realize()
    a = t + 1
    t.assign(Tensor([5, 5]))
    assert pickle.loads(pickle.dumps(a)).tolist() == [2, 3]


def test_sharded_tensor_pickles_with_its_layout() -> None:
    t = Tensor([[1.0, 2.0], [3.0, 4.0]]).shard(("CPU", "CPU:1"), axis=0)
    loaded = pickle.loads(pickle.dumps(t))
    assert loaded.devices == ("CPU", "CPU:1") and loaded.uop.op is Ops.MULTI and loaded.uop.arg == 0
    assert loaded.tolist() == [[1.0, 2.0], [3.0, 4.0]]


def _captured_affine() -> tuple[TinyJit, Tensor]:
    w = Tensor([2.0, 3.0]).realize()
    f = TinyJit(lambda x: ((x * w + 1).realize(), x))
    for _ in range(3):
        f(Tensor.ones(2).contiguous().realize())
    return f, w


def test_k6_a_loaded_jit_owns_its_weights() -> None:
    f, w = _captured_affine()
    s = pickle.dumps(f)
    w.assign(Tensor([10.0, 10.0])).realize()
    loaded = pickle.loads(s)
    out, passed = loaded(Tensor.ones(2).contiguous().realize())
    assert out.tolist() == [3.0, 4.0] and passed.tolist() == [1.0, 1.0]  # tinygrad 0.14: [11, 11] (aliases w)
    assert f(Tensor.ones(2).contiguous().realize())[0].tolist() == [11.0, 11.0]
    (own,) = loaded.weights()
    own.assign(Tensor([1.0, 1.0])).realize()
    assert loaded(Tensor([5.0, 6.0]).realize())[0].tolist() == [6.0, 7.0]


def test_k7_loaded_jit_replays_new_inputs_and_still_validates() -> None:
    f, _ = _captured_affine()
    loaded = pickle.loads(pickle.dumps(f))
    for v in range(3):
        x = Tensor([float(v), 1.0]).realize()
        assert loaded(x)[0].tolist() == f(x)[0].tolist()
    with pytest.raises(JitError, match=r"input args\[0\] has shape \(3,\), captured with \(2,\)"):
        loaded(Tensor([1.0, 2.0, 3.0]).realize())
    with pytest.raises(JitError, match="was loaded from a pickle and has no function to re-capture"):
        loaded.reset()


def test_uncaptured_jit_pickles_but_cannot_run() -> None:
    loaded = pickle.loads(pickle.dumps(TinyJit(lambda x: (x * 2).realize())))
    with pytest.raises(JitError, match=r"has not captured yet \(2 calls needed\)"):
        loaded(Tensor([1.0]))
