"""Comparisons against PyTorch (run with `hatch run torch:test`; skipped where torch is not installed)."""

import numpy as np
import pytest

from tg.tensor import Tensor

pytestmark = pytest.mark.torch


@pytest.fixture
def torch():
    return pytest.importorskip("torch")


def test_ops_match_torch(torch, device, rng):
    a = rng.standard_normal((4, 6)).astype(np.float32)
    b = rng.standard_normal((6, 3)).astype(np.float32)
    ta, tb = Tensor(a, device=device), Tensor(b, device=device)
    pa, pb = torch.from_numpy(a), torch.from_numpy(b)
    pairs = [
        ((ta @ tb), pa @ pb),
        (ta.softmax(1), pa.softmax(1)),
        (ta.log_softmax(0), pa.log_softmax(0)),
        (ta.sigmoid(), pa.sigmoid()),
        (ta.tanh(), pa.tanh()),
        (ta.relu().sum(0), pa.relu().sum(0)),
        (ta.max(1), pa.max(1).values),
        (ta.mean((0, 1)), pa.mean((0, 1))),
        (ta[1:, ::-2], pa[1:].flip(1)[:, ::2]),
        (ta.pad(((1, 0), (0, 2))), torch.nn.functional.pad(pa, (0, 2, 1, 0))),
    ]
    for ours, theirs in pairs:
        np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-5, atol=1e-6)


def test_integer_division_matches_torch(torch, device):
    a = np.array([-7, -6, -1, 0, 1, 6, 7], dtype=np.int32)
    b = np.array([2, -4, 3, 5, -3, 4, -2], dtype=np.int32)
    ta, tb = Tensor(a, device=device), Tensor(b, device=device)
    pa, pb = torch.from_numpy(a), torch.from_numpy(b)
    np.testing.assert_array_equal((ta // tb).numpy(), (pa // pb).numpy())
    np.testing.assert_array_equal((ta % tb).numpy(), (pa % pb).numpy())
