"""Store rules L1 (a kernel over the buffer limit is split by storing intermediates) and D1 (a stored value that is
constant along an axis is stored without it), end to end: kernel counts, buffer sizes and numerics against numpy
on CPU and PYTHON."""

import numpy as np
import pytest

from tg.codegen.schedule import create_schedule
from tg.ir import Context, GlobalCounters, Ops, UOp
from tg.ir.pattern import PatternMatcher
from tg.tensor import Tensor

RNG = np.random.default_rng(3)


@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
@pytest.mark.parametrize("limit", [0, 4, 6])
def test_l1_split_kernels_give_the_same_values(device: str, limit: int) -> None:
    xs = [RNG.standard_normal((3, 5)).astype(np.float32) for _ in range(9)]
    with Context(MAX_KERNEL_BUFFERS=limit):
        ts = [Tensor(x, device=device) for x in xs]
        out = ts[0]
        for t in ts[1:]:
            out = out * 0.5 + t.exp()
        linear = create_schedule(UOp(Ops.SINK, src=(out.uop,))).linear
        args = [len(c.src) - 1 for c in linear.src]
        GlobalCounters.reset()
        got = out.numpy()
        ran = GlobalCounters.kernel_count
    ref = xs[0]
    for x in xs[1:]:
        ref = ref * 0.5 + np.exp(x)
    np.testing.assert_allclose(got, ref, rtol=1e-5)
    if limit:
        assert max(args) <= limit and ran == len(args) > 1
    else:
        assert args == [10] and ran == 1


@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
def test_d1_stores_the_smaller_buffer_and_reads_it_expanded(device: str) -> None:
    cols = [RNG.standard_normal((4, 1)).astype(np.float32) for _ in range(4)]
    ts = [Tensor(c, device=device).realize() for c in cols]
    y = ts[0].expand(4, 8) * ts[1].expand(4, 8) + ts[2].expand(4, 8) * ts[3].expand(4, 8)
    out = y + y.flip(1) * 2
    linear = create_schedule(UOp(Ops.SINK, src=(out.uop,))).linear
    assert len(linear.src) == 2
    inter = linear.src[0].src[1]  # the first kernel's output (a BUFFER, or a view of the memory planner's arena)
    assert (inter.arg if inter.op is Ops.BUFFER else inter.arg[0]) == 4  # 4 values, not 4x8
    ref = np.broadcast_to(cols[0] * cols[1] + cols[2] * cols[3], (4, 8))
    np.testing.assert_allclose(out.numpy(), ref + ref[:, ::-1] * 2, rtol=1e-6)


def _kernel_buffers(out: Tensor) -> list[int]:
    return [len(c.src) - 1 for c in create_schedule(UOp(Ops.SINK, src=(out.uop,))).linear.src]


@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
def test_a_kernel_of_more_buffers_than_ctypes_passes_is_split_on_cpu(device: str) -> None:
    # 1,030 inputs: one kernel would take 1,031 pointer arguments and ctypes passes at most 1,024 ("too many
    # arguments"); the CPU renderers' max_buffers makes the scheduler split it (L1). PYTHON has no such limit
    from tg.codegen.render.renderer import CPU_MAX_BUFFERS

    xs = [np.full(4, i * 0.25, np.float32) for i in range(1030)]
    ts = [Tensor(x, device=device) for x in xs]
    Tensor.realize(*ts)
    out = ts[0]
    for t in ts[1:]:
        out = out + t
    args = _kernel_buffers(out)
    if device == "CPU":
        assert len(args) > 1 and max(args) <= CPU_MAX_BUFFERS
    else:
        assert args == [1031]
    ref = xs[0]
    for x in xs[1:]:
        ref = ref + x
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-6)


@pytest.mark.slow
def test_cat_of_1500_tensors_matches_numpy_on_cpu() -> None:
    # the bug report's case (ctypes "too many arguments (1501)" before the CPU renderers had max_buffers), with the
    # optimiser's 8-wide upcast (every lane of every input a masked load): ~19 s of CPU on a loaded 2-core box
    xs = [RNG.standard_normal(2).astype(np.float32) for _ in range(1500)]
    ts = [Tensor(x, device="CPU") for x in xs]
    Tensor.realize(*ts)
    out = Tensor.cat(*ts)
    assert max(_kernel_buffers(out)) <= 512
    np.testing.assert_array_equal(out.numpy(), np.concatenate(xs))


def _cat_rewrites(n: int, monkeypatch: pytest.MonkeyPatch) -> int:
    xs = [RNG.standard_normal(2).astype(np.float32) for _ in range(n)]
    ts = [Tensor(x, device="CPU") for x in xs]
    Tensor.realize(*ts)
    calls = [0]
    rewrite = PatternMatcher.rewrite

    def counted(self: PatternMatcher, uop: UOp, ctx: object = None) -> UOp | None:
        calls[0] += 1
        return rewrite(self, uop, ctx)

    with monkeypatch.context() as m:
        m.setattr(PatternMatcher, "rewrite", counted)
        got = Tensor.cat(*ts).numpy()
    np.testing.assert_array_equal(got, np.concatenate(xs))
    return calls[0]


def test_cat_of_many_masked_inputs_costs_rewrites_linear_in_the_inputs(monkeypatch: pytest.MonkeyPatch) -> None:
    # a cat of n inputs of 2 floats is one kernel of n masked loads, 8 lanes each once the optimiser upcasts: its
    # scheduling and lowering must cost rewrites in proportion to n (a pass re-simplifying every mask per load would
    # be quadratic: the issue-20 report of 147 s for 300 inputs). Counts, not times: 32 -> 64 inputs at most ~2.3x
    small, large = _cat_rewrites(32, monkeypatch), _cat_rewrites(64, monkeypatch)
    assert large < 2.3 * small, (small, large)
