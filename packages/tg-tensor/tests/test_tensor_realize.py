"""Laziness, realize, kernel counts, assign semantics and random numbers."""

import os
import subprocess
import sys

import numpy as np
import pytest

from tg.tensor import GlobalCounters, Tensor, dtypes


def kernels_for(*ts: Tensor) -> int:
    before = GlobalCounters.kernel_count
    Tensor.realize(*ts)
    return GlobalCounters.kernel_count - before


def test_import_does_no_work(tmp_path):
    code = """
import sys
import tg.tensor
from tg.tensor import Tensor, GlobalCounters, Device
assert Device.opened == (), Device.opened
assert not any(m.startswith("tg.runtime.backends.") for m in sys.modules), sorted(sys.modules)
assert not any(m.startswith(("tg.codegen.program", "tg.codegen.render")) for m in sys.modules)
assert "numpy" not in sys.modules  # numpy is only imported when numpy data goes in or comes out
assert GlobalCounters.kernel_count == 0
t = Tensor.ones(4, device="CPU") * 3
assert GlobalCounters.kernel_count == 0
assert t.tolist() == [3.0] * 4
assert GlobalCounters.kernel_count == 1
assert "numpy" not in sys.modules
print("ok")
"""
    env = {**os.environ, "TG_CACHE_DIR": str(tmp_path)}
    env.pop("DEV", None)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_kernel_counts(device, size, rng):
    a, b, c = (Tensor(rng.standard_normal((size(8), 8)).astype(np.float32), device=device) for _ in range(3))
    assert kernels_for((a + b) * c) == 1
    assert kernels_for((a * b).sum()) == 1
    assert kernels_for((a * b).sum(1)) == 1
    assert kernels_for(a.sum() + 1) == 1
    assert kernels_for(a @ b.T) == 1
    assert kernels_for(((a + 1).exp() * 2).relu().sum(0, keepdim=True)) == 1
    assert kernels_for(a - a.max(1, keepdim=True)) == 2
    assert kernels_for(a.softmax(1)) == 3
    x = (a + b).contiguous()
    assert kernels_for(x * 2 + x) == 2


def test_realize_many_and_shared_work(device):
    a = Tensor([1.0, 2.0, 3.0], device=device)
    s = a.sum()
    x, y = s + 1, s * 2
    assert kernels_for(x, y) == 3  # the shared reduction is stored once
    assert x.item() == 7.0 and y.item() == 12.0
    assert kernels_for(x) == 0  # already realized


def test_realize_returns_self_and_numpy_is_cached(device):
    t = Tensor([1, 2], device=device) + 1
    assert t.realize() is t
    before = GlobalCounters.kernel_count
    np.testing.assert_array_equal(t.numpy(), [2, 3])
    np.testing.assert_array_equal(t.numpy(), [2, 3])
    assert GlobalCounters.kernel_count == before


def test_assign(device):
    t = Tensor([1.0, 2.0, 3.0], device=device).realize()
    old_read = t * 10
    t.assign(Tensor([4.0, 5.0, 6.0], device=device))
    Tensor.realize(t, old_read)
    np.testing.assert_array_equal(t.numpy(), [4, 5, 6])
    np.testing.assert_array_equal(old_read.numpy(), [10, 20, 30])
    # a pending read taken before the assign sees the old value even when realized later
    pending = t + 1
    t.assign(t * 2).realize()
    np.testing.assert_array_equal(t.numpy(), [8, 10, 12])
    np.testing.assert_array_equal(pending.numpy(), [5, 6, 7])
    # self-referencing assign at other positions
    t.assign(t.flip(0)).realize()
    np.testing.assert_array_equal(t.numpy(), [12, 10, 8])
    t.assign([1, 1, 1])
    np.testing.assert_array_equal(t.numpy(), [1, 1, 1])


def test_assign_keeps_buffer(device):
    t = Tensor.zeros(4, device=device).contiguous().realize()
    base = t.uop
    t.assign(t + 1).realize()
    assert t.uop is base
    np.testing.assert_array_equal(t.numpy(), [1, 1, 1, 1])


def test_assign_errors(device):
    t = Tensor([1.0, 2.0], device=device).realize()
    with pytest.raises(TypeError, match="dtype"):
        t.assign(Tensor([1, 2], device=device))
    with pytest.raises(ValueError, match=r"\(2,\).*\(3,\)"):
        t.assign(Tensor([1.0, 2.0, 3.0], device=device))
    with pytest.raises(NotImplementedError, match="view"):
        t.reshape(2, 1).expand(2, 3).assign(Tensor.ones(2, 3, device=device))
    with pytest.raises(TypeError, match="dtype"):
        t[0:1].assign(Tensor([5], device=device))


def test_assign_into_views_writes_the_buffer(device, rng):
    a = rng.standard_normal((3, 4)).astype(np.float32)
    t = Tensor(a, device=device).realize()
    pending = t * 1  # a read taken before the writes keeps the old values
    want = a.copy()
    t[1:3, ::2].assign(Tensor([[100.0, 101.0], [102.0, 103.0]], device=device))
    want[1:3, ::2] = [[100, 101], [102, 103]]
    np.testing.assert_array_equal(t.numpy(), want)
    t.permute(1, 0)[0].assign(Tensor([-1.0, -2.0, -3.0], device=device))
    want.T[0] = [-1, -2, -3]
    np.testing.assert_array_equal(t.numpy(), want)
    t.flip(1)[0].assign(t[2])  # the value reads the buffer at other positions
    want[0, ::-1] = want[2]
    np.testing.assert_array_equal(t.numpy(), want)
    np.testing.assert_array_equal(pending.numpy(), a)
    before = GlobalCounters.kernel_count
    t[0, 1:3].assign(Tensor([7.0, 8.0], device=device).realize())
    assert GlobalCounters.kernel_count - before == 1
    want[0, 1:3] = [7, 8]
    np.testing.assert_array_equal(t.numpy(), want)


def test_assign_into_a_view_of_a_pending_assign(device):
    w = Tensor([1.0, 2.0, 3.0], device=device).realize()
    w.assign(w * 2)
    w[0:1].assign(Tensor([9.0], device=device))
    assert w.tolist() == [9.0, 4.0, 6.0]
    u = Tensor.zeros(4, device=device).contiguous().realize()
    u.reshape(2, 2)[1].assign(Tensor([5.0, 6.0], device=device))
    assert u.tolist() == [0.0, 0.0, 5.0, 6.0]


def test_random(device, size):
    Tensor.manual_seed(7)
    a = Tensor.rand(size(50), 20, device=device).numpy()
    Tensor.manual_seed(7)
    b = Tensor.rand(size(50), 20, device=device).numpy()
    np.testing.assert_array_equal(a, b)
    assert a.dtype == np.float32 and 0 <= a.min() and a.max() < 1
    assert len(np.unique(a)) > a.size * 0.95
    c = Tensor.rand(size(50), 20, device=device).numpy()
    assert not np.array_equal(a, c)  # the counter moved on
    assert Tensor.rand(3, dtype=dtypes.float16, device=device).dtype is dtypes.float16


def test_random_does_not_depend_on_fusion(device):
    Tensor.manual_seed(3)
    fused = (Tensor.rand(64, device=device) * 2).numpy()
    Tensor.manual_seed(3)
    alone = Tensor.rand(64, device=device).contiguous().realize()
    np.testing.assert_array_equal((alone * 2).numpy(), fused)


def test_randn_statistics(device):
    Tensor.manual_seed(0)
    n = Tensor.randn(4000 if device != "PYTHON" else 400, device=device).numpy()
    assert abs(n.mean()) < 0.15 and abs(n.std() - 1) < 0.15
    r = Tensor.randint(100, low=3, high=6, device=device).numpy()
    assert r.min() >= 3 and r.max() < 6


def test_realize_with_a_reshape_of_another_output(device):
    a = Tensor([[1.0, 2.0], [3.0, 4.0]], device=device)
    s = a.sum(1, keepdim=True)
    flat = s.reshape(2)
    assert kernels_for(s, flat) == 1
    assert kernels_for(flat) == 0
    assert flat.tolist() == [3.0, 7.0]


def test_intermediates_of_a_realize_are_not_observable(device):
    # only outputs, CONTIGUOUS and ASSIGN results replace tensors' graphs: the max stored by the first realize is
    # an intermediate (memory-planned, shared), so realizing e later computes it again (as tinygrad does)
    x = Tensor([[1.0, 2.0, 3.0], [1.0, 1.0, 1.0]], device=device)
    e = (x - x.max(1, keepdim=True)).exp()
    out = e / e.sum(1, keepdim=True)
    assert kernels_for(out) == 3
    assert kernels_for(e) == 2
    np.testing.assert_allclose(e.numpy(), np.exp([[-2.0, -1.0, 0.0], [0.0, 0.0, 0.0]]), rtol=1e-6)
    np.testing.assert_allclose(out.numpy().sum(1), [1.0, 1.0], rtol=1e-6)


def test_setitem_matches_numpy(device, rng):
    a = rng.standard_normal((4, 5)).astype(np.float32)
    t, want = Tensor(a, device=device), a.copy()  # t starts lazy (a realized buffer reshaped)
    t[1, ::2] = 5.0
    want[1, ::2] = 5.0
    t[:, -1] = Tensor([1, 2, 3, 4], device=device)  # int value cast to the tensor's dtype
    want[:, -1] = [1, 2, 3, 4]
    t[2:, 1:3] = Tensor([7.0, 8.0], device=device)  # broadcast over the rows
    want[2:, 1:3] = [7.0, 8.0]
    np.testing.assert_array_equal(t.numpy(), want)
    lazy = Tensor([1.0, 2.0, 3.0], device=device) + 1
    lazy[0] = 7
    assert lazy.tolist() == [7.0, 3.0, 4.0]


def test_setitem_through_a_view_writes_its_base(device):
    b = Tensor([[1, 2], [3, 4]], device=device).realize()
    row, snapshot = b[1], b * 1
    row[0] = 9
    assert b.tolist() == [[1, 2], [9, 4]] and row.tolist() == [9, 4]
    assert snapshot.tolist() == [[1, 2], [3, 4]]  # a computed value taken before the write keeps the old data
    with pytest.raises(ValueError, match=r"\(2, 3\).*\(2,\)"):
        b[0] = Tensor([[1, 2, 3], [4, 5, 6]], device=device)
    with pytest.raises(IndexError, match="out of bounds"):
        b[2] = 1
