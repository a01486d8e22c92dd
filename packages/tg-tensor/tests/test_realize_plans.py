"""Realize plans (tg.tensor.plans): a repeated structure skips the scheduler and lowering, and gives exactly the
results of the full path (checked against numpy and against SCACHE=0, which turns plans off)."""

import gc
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from tg.codegen.schedule import clear_schedule_cache, stats
from tg.ir import Context
from tg.ir.helpers import GlobalCounters
from tg.runtime import engine
from tg.tensor import Tensor, Variable, dtypes, plans


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Counts scheduler runs (create_schedule) and CALL lowerings (lower_schedule_item) while a test runs."""
    counts = {"lowered": 0}
    lower = engine.lower_schedule_item

    def counting_lower(item):  # type: ignore[no-untyped-def]
        counts["lowered"] += 1
        return lower(item)

    monkeypatch.setattr(engine, "lower_schedule_item", counting_lower)
    return counts


def test_a_repeated_eager_op_skips_scheduling_and_lowering(device, counted):
    x = Tensor([1.0, 2.0, 3.0, 4.0], device=device).realize()
    x = (x + 1).realize()  # the first run of this structure may schedule (and stores the plan)
    calls, hits, lowered = stats.calls, plans.stats["hits"], counted["lowered"]
    for _ in range(20):
        x = (x + 1).realize()
    assert stats.calls == calls, "a repeated structure must not schedule"
    assert counted["lowered"] == lowered, "a repeated structure must not lower CALLs"
    assert plans.stats["hits"] - hits == 20
    np.testing.assert_array_equal(x.numpy(), [22.0, 23.0, 24.0, 25.0])


def test_plans_keep_results_apart_and_allocate_fresh_outputs(device, rng):
    a = rng.standard_normal((8, 16)).astype(np.float32)
    w = rng.standard_normal((16, 16)).astype(np.float32)
    x, wt = Tensor(a, device=device), Tensor(w, device=device)

    def f(t: Tensor) -> Tensor:  # several kernels: intermediates share a memory-planned arena
        h = (t @ wt).relu()
        h = h / (h.sum(-1, keepdim=True) + 1)
        return (h @ wt).exp().max(-1)

    outs = [f(x * s).realize() for s in (1.0, 0.5, 0.25)]
    for s, out in zip((1.0, 0.5, 0.25), outs, strict=True):  # all alive at once: no shared storage
        h = np.maximum((a * s) @ w, 0)
        h = h / (h.sum(-1, keepdims=True) + 1)
        np.testing.assert_allclose(out.numpy(), np.exp(h @ w).max(-1), rtol=1e-5, atol=1e-6)
    assert len({id(engine.buffer_for(o.uop).base) for o in outs}) == 3


def _same_with_and_without_plans(build: Callable[[], Tensor]) -> None:
    """`build().numpy()` three times with plans (miss, hit, hit) equals the full path with plans off."""
    with Context(SCACHE=0):
        want = build().numpy()
    for _ in range(3):
        got = build().numpy()
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(
    "make",
    [
        lambda a, b: a + a,  # one input read twice ...
        lambda a, b: a + b,  # ... is another structure than two inputs
        lambda a, b: (a * b).sum(0) + a.max(),
        lambda a, b: a.reshape(2, 8).permute(1, 0).contiguous() * 3,
        lambda a, b: (a + 0.0) * (b + -0.0),
        lambda a, b: (a > b).where(a, b.cast(dtypes.int32).cast(dtypes.float32)),
        lambda a, b: a.cast(dtypes.float16) * 2,
        lambda a, b: Tensor.stack(a, b).sum(0),
    ],
    ids=[
        "same-input-twice",
        "two-inputs",
        "reduces",
        "permute-contiguous",
        "signed-zeros",
        "where-casts",
        "half",
        "stack",
    ],
)
def test_plan_results_equal_the_full_path(device, rng, make):
    a = Tensor(rng.standard_normal(16).astype(np.float32), device=device)
    b = Tensor(rng.standard_normal(16).astype(np.float32), device=device)
    _same_with_and_without_plans(lambda: make(a, b))


def test_negative_zero_constants_get_their_own_plan(device):
    x = Tensor([-0.0, 1.0], device=device).realize()
    for _ in range(2):
        plus_zero, plus_negative_zero = (x + 0.0).numpy(), (x + -0.0).numpy()
        assert np.signbit(plus_negative_zero[0]) and not np.signbit(plus_zero[0])


def test_assign_with_plans_keeps_pending_readers(device):
    t = Tensor([1.0, 2.0, 3.0], device=device).contiguous().realize()
    for step in range(4):
        before = t * 2  # lazy: reads t's value before the assign below
        t.assign(t + 1).realize()
        np.testing.assert_array_equal(before.numpy(), 2 * (np.array([1.0, 2.0, 3.0]) + step))
        np.testing.assert_array_equal(t.numpy(), np.array([1.0, 2.0, 3.0]) + step + 1)


def test_random_numbers_differ_between_repeated_realizes_and_reseed(device):
    Tensor.manual_seed(7)
    draws = [Tensor.rand(64, device=device).numpy() for _ in range(3)]
    assert not np.array_equal(draws[0], draws[1]) and not np.array_equal(draws[1], draws[2])
    Tensor.manual_seed(7)
    np.testing.assert_array_equal(Tensor.rand(64, device=device).numpy(), draws[0])


def test_a_new_shape_or_dtype_is_a_new_plan(device):
    calls = stats.calls
    for n in (3, 5):
        for dt in (dtypes.float32, dtypes.int32):
            x = Tensor.ones(n, dtype=dt, device=device).contiguous().realize()
            assert ((x * 7 + 1) * 1).tolist() == [8] * n
    assert stats.calls - calls >= 4  # every (shape, dtype) was scheduled at least once


def test_clearing_the_schedule_cache_drops_plans_and_scache_0_bypasses_them(device):
    x = Tensor([1.0, 2.0], device=device).realize()
    for _ in range(2):
        x = (x * 3).realize()
    calls = stats.calls
    clear_schedule_cache()
    x = (x * 3).realize()
    assert stats.calls == calls + 1
    with Context(SCACHE=0):
        x = (x * 3).realize()
        x = (x * 3).realize()
    assert stats.calls == calls + 3
    np.testing.assert_array_equal(x.numpy(), [3.0**5, 2 * 3.0**5])


def test_a_plan_takes_its_runners_from_the_kernel_cache(device, monkeypatch):
    x = Tensor([1.0, 2.0, 3.0], device=device).realize()
    for _ in range(2):
        x = (x * 2 + 1).realize()
    monkeypatch.setattr(engine, "method_cache", {})  # as after clearing it: the plan must compile again, not crash
    hits = plans.stats["hits"]
    x = (x * 2 + 1).realize()
    assert plans.stats["hits"] == hits + 1 and len(engine.method_cache) == 1
    np.testing.assert_array_equal(x.numpy(), [15.0, 23.0, 31.0])


def test_a_plan_does_not_keep_the_buffers_of_the_realize_it_was_made_from() -> None:
    # the storage of a reshaped or expanded node is a view chain over its buffer; the plan keeps the chain's
    # ops, not the buffer: once the tensors are gone, so is their memory
    clear_schedule_cache()
    Tensor([0.0]).realize()  # drops the old plans
    gc.collect()
    before = GlobalCounters.mem_used
    for _ in range(3):
        x = Tensor.full((1 << 14,), 2.0).contiguous().realize()
        y = (x + 1).reshape(128, 128).realize()
        z = x.reshape(1, 1 << 14).expand(2, 1 << 14).realize()
        assert y.numpy()[3, 5] == 3.0 and z.shape == (2, 1 << 14)
    assert plans.stats["hits"] > 0
    del x, y, z
    gc.collect()
    # at most the start: a buffer another test left to the garbage collector may be freed meanwhile (64 bytes in a
    # random-order CI run); what this checks would keep >= 4 KB more
    assert GlobalCounters.mem_used <= before


def test_a_loop_over_the_values_of_one_variable_runs_one_plan(device, rng):
    # plans key on the Variable, not its value: every value after the first runs the same plan, the values are
    # kernel arguments, and a realized result's symbolic shape reads at this realize's value
    a_np = rng.standard_normal((3, 10)).astype(np.float32)
    a = Tensor(a_np, device=device).realize()
    var = Variable("n", 1, 10)

    def step(v: Any) -> tuple[Tensor, Tensor]:
        kept = (a[:, :v] * 2 + v).contiguous().realize()  # the slice is a movement argument, `+ v` a BIND node
        return kept, kept.sum(1)

    step(var.bind(2))[1].numpy()  # the first value makes the plans (the realize of `kept`, the sum's)
    plans_before, calls, hits = len(plans._plans), stats.calls, plans.stats["hits"]
    for n in (3, 5, 7, 10, 1):
        kept, total = step(var.bind(n))
        assert kept.shape[1].unbind() == (var, n)
        np.testing.assert_allclose(kept.numpy(), a_np[:, :n] * 2 + n, rtol=1e-6)
        np.testing.assert_allclose(total.numpy(), (a_np[:, :n] * 2 + n).sum(1), rtol=1e-5)
    assert len(plans._plans) == plans_before, "one plan for every value of the Variable"
    assert stats.calls == calls, "no value after the first schedules"
    assert plans.stats["hits"] - hits == 10


def test_a_variable_bound_to_two_values_in_one_realize_still_raises(device):
    a = Tensor(np.ones((3, 10), np.float32), device=device).realize()
    var = Variable("m", 1, 10)
    for _ in range(2):  # no plan is stored for it
        with pytest.raises(ValueError, match="'m' is bound to two values in one schedule: 3 and 5"):
            (a[:, : var.bind(3)].sum() + a[:, : var.bind(5)].sum()).realize()


def test_plans_unbind_variables_where_the_schedule_normaliser_does() -> None:
    from tg.codegen.schedule import callify

    assert plans._SYMBOLIC_ARGS == callify.SYMBOLIC_ARGS


def test_a_constant_that_equals_the_bound_value_still_counts(device):
    # `v + n` bound to n holds the CONST n twice (the BIND's value and the addend): the addend stays in the key
    a = Tensor([1.0, 2.0], device=device).contiguous().realize()
    var = Variable("k", 1, 10)
    for n in (3, 5, 7, 3, 5):
        np.testing.assert_array_equal((a * (var.bind(n) + n)).numpy(), [2.0 * n, 4.0 * n])
        np.testing.assert_array_equal((a * (var.bind(n) + 4)).numpy(), [n + 4.0, 2.0 * (n + 4)])


def test_a_plan_made_under_one_dev_is_not_replayed_under_another() -> None:
    """`CPU` opens plain CPU or HCQ+CPU depending on DEV: a plan recorded under one (its launcher bound to that device)
    must not run the other's buffers (it did: HCQ+CPU's launcher got plain CPU host memory, an AttributeError; a
    mock AMD plan ran on another mock's memory)."""
    for dev in ["HCQ+CPU", "", "HCQ+CPU", "CPU:CLANG:x86-64-v2", ""]:
        with Context(DEV=dev):
            x = Tensor(np.arange(4, dtype=np.float32))
            for _ in range(3):
                x = (x + 1).realize()
            np.testing.assert_array_equal(x.numpy(), np.arange(4, dtype=np.float32) + 3)


def test_an_extended_structure_equals_a_fresh_walk(rng) -> None:
    """Structure(sink, extends=st) continues st's walk for a SINK with more roots after st's (deferred index checks,
    pending readers): the same key, order, inputs and assigns as walking the new SINK from scratch."""
    from tg.ir import Ops, UOp

    a, b = Tensor(rng.standard_normal(6).astype(np.float32)).realize(), Tensor([1, 4, 2]).realize()
    i = Variable("i", 1, 6).bind(3)
    x = a * 2 + 1
    w = Tensor.zeros(6).contiguous().realize()
    roots = [x.uop, w.assign(a + 1).uop, a[:i].sum().uop]
    more = [(a[b] * x[b]).uop, (x - 1).uop, a.uop]  # shares nodes with roots, a BUFFER, a gather
    first = plans.Structure(UOp(Ops.SINK, src=tuple(roots)))
    sink = UOp(Ops.SINK, src=tuple(dict.fromkeys([*roots, *more])))
    extended, fresh = plans.Structure(sink, first), plans.Structure(sink)
    assert extended.key == fresh.key and extended.order == fresh.order
    assert extended.inputs == fresh.inputs and extended.assigns == fresh.assigns
    assert extended.var_vals == fresh.var_vals == {"i": 3} and extended.sharded is fresh.sharded is False
    other = plans.Structure(UOp(Ops.SINK, src=(more[0],)), plans.Structure(UOp(Ops.SINK, src=tuple(roots))))
    assert other.key == plans.Structure(UOp(Ops.SINK, src=(more[0],))).key  # not a continuation: walked afresh
