"""Pickle scenarios of specs/jit-multi.md 7.5 (K1-K5) and sharded tensors: loads own their data."""

from __future__ import annotations

import pickle

from tg.ir import Ops
from tg.tensor import Tensor


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
