"""nn.optim: each update rule against a numpy transcription of its formula (5 steps) and against torch.optim where
installed; lr changes, state dicts, frozen tensors, OptimizerGroup, and a tiny model whose loss falls."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from pathlib import Path
from unittest.mock import patch

import numpy as np
import pytest

from tg.tensor import GlobalCounters, Tensor, nn
from tg.tensor.nn import optim
from tg.tensor.nn.state import get_parameters, safe_load, safe_save

STEPS = 5
W0 = np.random.default_rng(1).standard_normal((4, 3)).astype(np.float32)
TARGET = np.random.default_rng(2).standard_normal((4, 3)).astype(np.float32)


def grad_of(w: np.ndarray) -> np.ndarray:
    """The gradient of the test loss sum((w - target)^3 / 3 + w^2) (nonlinear, so steps differ)."""
    return (w - TARGET) ** 2 + 2 * w


def run_tg(make: Callable[[list[Tensor]], optim.Optimizer]) -> np.ndarray:
    w = Tensor(W0.copy(), requires_grad=True)
    opt = make([w])
    target = Tensor(TARGET)
    for _ in range(STEPS):
        opt.zero_grad()
        (((w - target) ** 3) / 3 + w.square()).sum().backward()
        opt.step()
    return w.numpy()


def sgd_ref(lr: float, momentum: float = 0, dampening: float = 0, wd: float = 0, nesterov: bool = False) -> np.ndarray:
    w, b = W0.astype(np.float64), None
    for _ in range(STEPS):
        g = grad_of(w) + wd * w
        if momentum:
            b = g if b is None else momentum * b + (1 - dampening) * g
            g = g + momentum * b if nesterov else b
        w = w - lr * g
    return w


def adam_ref(lr: float, b1: float, b2: float, eps: float, wd: float, mode: str) -> np.ndarray:
    w, m, v = W0.astype(np.float64), 0.0, 0.0
    for t in range(1, STEPS + 1):
        g = grad_of(w) + (wd * w if mode == "adam" else 0)
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        u = (m / (1 - b1**t)) / (np.sqrt(v / (1 - b2**t)) + eps)
        if mode in ("adamw", "lamb"):
            u = u + wd * w
        if mode == "lamb":
            wn, un = np.linalg.norm(w), np.linalg.norm(u)
            u = u * (wn / un if wn > 0 and un > 0 else 1.0)
        w = w - lr * u
    return w


def lars_ref(lr: float, momentum: float, wd: float, tcoef: float) -> np.ndarray:
    w, b = W0.astype(np.float64), 0.0
    for _ in range(STEPS):
        g = grad_of(w)
        wn, gn = np.linalg.norm(w), np.linalg.norm(g)
        r = tcoef * wn / (gn + wd * wn) if wn > 0 and gn > 0 else 1.0
        g = (g + wd * w) * r * lr
        b = momentum * b + g
        w = w - b
    return w


def newton_schulz_ref(g: np.ndarray, clamp: bool, steps: int = 5, eps: float = 1e-7) -> np.ndarray:
    a, b, c = 3.4445, -4.775, 2.0315
    tall = g.shape[0] > g.shape[1]
    x = g.T if tall else g
    norm = np.linalg.norm(x)
    x = x / (max(norm, eps) if clamp else norm + eps)
    for _ in range(steps):
        gram = x @ x.T
        x = a * x + (b * gram + c * gram @ gram) @ x
    return x.T if tall else x


def muon_ref(lr: float, momentum: float, wd: float, torch_compatible: bool) -> np.ndarray:
    w, b = W0.astype(np.float64), np.zeros(W0.shape)
    for _ in range(STEPS):
        g = grad_of(w)
        if torch_compatible:
            b = b + (g - b) * (1 - momentum)
            update = g + (b - g) * momentum
            w = w * (1 - lr * wd) - lr * np.sqrt(max(1, w.shape[0] / w.shape[1])) * newton_schulz_ref(update, True)
        else:
            b = momentum * b + g
            w = w - lr * newton_schulz_ref(g + momentum * b, False) - lr * wd * w
    return w


CASES = {
    "sgd": (lambda p: optim.SGD(p, lr=0.05), sgd_ref(0.05)),
    "sgd_momentum_wd": (lambda p: optim.SGD(p, lr=0.05, momentum=0.9, weight_decay=0.1), sgd_ref(0.05, 0.9, wd=0.1)),
    "sgd_dampening": (lambda p: optim.SGD(p, lr=0.05, momentum=0.8, dampening=0.3), sgd_ref(0.05, 0.8, 0.3)),
    "sgd_nesterov": (lambda p: optim.SGD(p, lr=0.05, momentum=0.9, nesterov=True), sgd_ref(0.05, 0.9, nesterov=True)),
    "sgd_classic": (lambda p: optim.SGD(p, lr=0.05, momentum=0.9, classic=True), sgd_ref(0.05, 0.9)),
    "adam": (lambda p: optim.Adam(p, lr=0.01, weight_decay=0.1), adam_ref(0.01, 0.9, 0.999, 1e-8, 0.1, "adam")),
    "adamw": (lambda p: optim.AdamW(p, lr=0.01, betas=(0.8, 0.99)), adam_ref(0.01, 0.8, 0.99, 1e-8, 0.01, "adamw")),
    "lamb": (lambda p: optim.LAMB(p, lr=0.01, weight_decay=0.05), adam_ref(0.01, 0.9, 0.999, 1e-6, 0.05, "lamb")),
    "lars": (lambda p: optim.LARS(p, lr=0.1), lars_ref(0.1, 0.9, 1e-4, 0.001)),
    "muon": (lambda p: optim.Muon(p, lr=0.05), muon_ref(0.05, 0.95, 0.1, False)),
    "muon_torch": (lambda p: optim.Muon(p, lr=0.05, torch_compatible=True), muon_ref(0.05, 0.95, 0.1, True)),
}


@pytest.mark.parametrize("name", list(CASES))
def test_update_rule_matches_numpy(name: str) -> None:
    make, want = CASES[name]
    np.testing.assert_allclose(run_tg(make), want, rtol=2e-5, atol=1e-6)


@pytest.mark.torch
@pytest.mark.parametrize(
    ("ours", "theirs"),
    [
        (
            lambda p: optim.SGD(p, lr=0.05, momentum=0.9, dampening=0.2, weight_decay=0.1),
            lambda t, p: t.optim.SGD(p, lr=0.05, momentum=0.9, dampening=0.2, weight_decay=0.1),
        ),
        (
            lambda p: optim.SGD(p, lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.1),
            lambda t, p: t.optim.SGD(p, lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.1),
        ),
        (lambda p: optim.Adam(p, lr=0.01, weight_decay=0.1), lambda t, p: t.optim.Adam(p, lr=0.01, weight_decay=0.1)),
        (lambda p: optim.AdamW(p, lr=0.01, weight_decay=0.1), lambda t, p: t.optim.AdamW(p, lr=0.01, weight_decay=0.1)),
    ],
    ids=["sgd", "nesterov", "adam", "adamw"],
)
def test_update_rule_matches_torch(ours: Callable, theirs: Callable) -> None:
    torch = pytest.importorskip("torch")
    w = torch.tensor(W0.copy(), requires_grad=True)
    opt = theirs(torch, [w])
    target = torch.tensor(TARGET)
    for _ in range(STEPS):
        opt.zero_grad()
        (((w - target) ** 3) / 3 + w.square()).sum().backward()
        opt.step()
    np.testing.assert_allclose(run_tg(ours), w.detach().numpy(), rtol=2e-5, atol=1e-6)


@pytest.mark.torch
def test_muon_torch_compatible_matches_torch() -> None:
    torch = pytest.importorskip("torch")
    w = torch.tensor(W0.copy(), requires_grad=True)
    opt = torch.optim.Muon([w], lr=0.05)
    target = torch.tensor(TARGET)
    for _ in range(STEPS):
        opt.zero_grad()
        (((w - target) ** 3) / 3 + w.square()).sum().backward()
        opt.step()
    ours = run_tg(lambda p: optim.Muon(p, lr=0.05, torch_compatible=True))
    # torch runs Newton-Schulz in bfloat16 (3 significant digits): compare the total change to that precision
    np.testing.assert_allclose(ours - W0, w.detach().numpy() - W0, rtol=0.03, atol=3e-3)


@pytest.mark.parametrize("fused", [False, True])
def test_adam_over_several_parameters_matches_numpy_each(fused: bool) -> None:
    """The step's shared state (the powers of b1, b2 and the bias corrections built once per step) serves every
    parameter: three parameters, each with its own loss term, each follow numpy's Adam over 5 steps."""
    scales = (1.0, -0.5, 2.0)
    ws = [Tensor(W0 * c, requires_grad=True) for c in scales]
    opt = optim.Adam(ws, lr=0.01, fused=fused)
    target = Tensor(TARGET)
    for _ in range(STEPS):
        opt.zero_grad()
        sum(((((w - target) ** 3) / 3 + w.square()).sum() for w in ws), Tensor(0.0)).backward()
        opt.step()
    for w, c in zip(ws, scales, strict=True):
        x, m, v = (W0 * c).astype(np.float64), 0.0, 0.0
        for t in range(1, STEPS + 1):
            g = grad_of(x)
            m = 0.9 * m + 0.1 * g
            v = 0.999 * v + 0.001 * g * g
            x = x - 0.01 * (m / (1 - 0.9**t)) / (np.sqrt(v / (1 - 0.999**t)) + 1e-8)
        np.testing.assert_allclose(w.numpy(), x, rtol=2e-5, atol=1e-6)


def test_muon_rejects_vectors_and_orthogonalises() -> None:
    with pytest.raises(ValueError, match="matrices only"):
        optim.Muon([Tensor([1.0, 2.0], requires_grad=True)])
    g = np.random.default_rng(3).standard_normal((6, 4)).astype(np.float32)
    x = optim.newton_schulz(Tensor(g), steps=10).numpy()
    singular = np.linalg.svd(x, compute_uv=False)
    assert np.all((singular > 0.5) & (singular < 1.5)), singular  # roughly orthogonal (Muon's quintic)


def test_lr_change_recompiles_nothing_and_takes_effect() -> None:
    w = Tensor(W0.copy(), requires_grad=True)
    opt = optim.SGD([w], lr=0.1)

    def step() -> None:
        opt.zero_grad()
        (w * Tensor(TARGET)).sum().backward()
        opt.step()

    step()
    step()
    before = w.numpy()
    compiled = GlobalCounters.kernel_count
    opt.lr = 0.01
    assert opt.lr.item() == pytest.approx(0.01)
    from tg.runtime import engine

    cached = len(engine.method_cache)
    step()
    assert len(engine.method_cache) == cached  # the same kernels ran with the new lr
    np.testing.assert_allclose(w.numpy(), before - 0.01 * TARGET, rtol=1e-6, atol=1e-7)
    assert GlobalCounters.kernel_count > compiled


def test_state_dict_round_trip_resumes_bit_identically(tmp_path: Path) -> None:
    def make() -> tuple[Tensor, optim.Optimizer]:
        w = Tensor(W0.copy(), requires_grad=True)
        return w, optim.Adam([w], lr=0.01)

    def step(w: Tensor, opt: optim.Optimizer) -> None:
        opt.zero_grad()
        (((w - Tensor(TARGET)) ** 3) / 3).sum().backward()
        opt.step()

    w1, opt1 = make()
    for _ in range(3):
        step(w1, opt1)
    assert sorted(opt1.state_dict()) == ["b1_t", "b2_t", "lr", "m.0", "step", "v.0"]
    safe_save(opt1.state_dict(), tmp_path / "opt.safetensors")
    safe_save({"w": w1}, tmp_path / "w.safetensors")
    w2, opt2 = make()
    w2.assign(safe_load(tmp_path / "w.safetensors")["w"].to(w2.device)).realize()
    opt2.load_state_dict(safe_load(tmp_path / "opt.safetensors"))
    assert opt2.step_count.item() == 3
    step(w1, opt1)
    step(w2, opt2)
    np.testing.assert_array_equal(w1.numpy(), w2.numpy())
    with pytest.raises(ValueError, match="missing keys"):
        opt2.load_state_dict({"lr": Tensor(0.1)})


def test_frozen_tensors_and_buffers_are_not_updated() -> None:
    frozen = Tensor(W0.copy(), requires_grad=False)
    trained = Tensor(W0.copy())  # requires_grad unset: the optimizer turns it on
    opt = optim.SGD([frozen, trained], lr=0.1)
    assert trained.requires_grad and opt.params == [trained] and opt.buffers == [frozen]
    opt.zero_grad()
    (frozen * trained).sum().backward()
    opt.step()
    np.testing.assert_array_equal(frozen.numpy(), W0)
    np.testing.assert_allclose(trained.numpy(), W0 - 0.1 * W0, rtol=1e-6)
    with pytest.raises(ValueError, match="no trainable"):
        optim.SGD([Tensor([1, 2])])


def test_optimizer_group_steps_all_in_one_schedule() -> None:
    a, b = Tensor(W0.copy(), requires_grad=True), Tensor(TARGET.copy(), requires_grad=True)
    group = optim.OptimizerGroup(optim.SGD([a], lr=0.1), optim.Adam([b], lr=0.01))
    assert group[1].params == [b]
    group.zero_grad()
    (a * b).sum().backward()
    group.step()
    np.testing.assert_allclose(a.numpy(), W0 - 0.1 * TARGET, rtol=1e-6)
    np.testing.assert_allclose(b.numpy(), TARGET - 0.01 * np.sign(W0), rtol=1e-4, atol=1e-6)


def test_tiny_model_loss_falls() -> None:
    Tensor.manual_seed(0)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((32, 1, 6, 6)).astype(np.float32)
    y = (x.mean((1, 2, 3)) > 0).astype(np.int32)

    class Model:
        def __init__(self) -> None:
            self.conv = nn.Conv2d(1, 4, 3, padding=1)
            self.bn = nn.BatchNorm2d(4)
            self.fc = nn.Linear(4 * 3 * 3, 2)

        def __call__(self, t: Tensor) -> Tensor:
            return self.fc(self.bn(self.conv(t)).relu().max_pool2d(2).flatten(1))

    model = Model()
    opt = optim.Adam(get_parameters(model), lr=0.05)
    losses = []
    for _ in range(8):
        opt.zero_grad()
        with Tensor.train():
            loss = model(Tensor(x)).sparse_categorical_crossentropy(Tensor(y))
        loss.backward()
        opt.step(loss)
        losses.append(loss.item())
    assert losses[-1] < 0.6 * losses[0], losses
    assert model.bn.num_batches_tracked.item() == 8  # running stats realized with each step


FUSED_CASES = {
    "sgd": lambda p, f: optim.SGD(p, lr=0.01, fused=f),
    "sgd_momentum_nesterov_wd": lambda p, f: optim.SGD(
        p, lr=0.01, momentum=0.9, weight_decay=0.1, nesterov=True, fused=f
    ),
    "sgd_dampening_classic": lambda p, f: optim.SGD(p, lr=0.01, momentum=0.8, dampening=0.3, classic=True, fused=f),
    "lars": lambda p, f: optim.LARS(p, lr=0.1, fused=f),
    "adam": lambda p, f: optim.Adam(p, lr=0.01, weight_decay=0.05, fused=f),
    "adamw": lambda p, f: optim.AdamW(p, lr=0.01, fused=f),
    "lamb": lambda p, f: optim.LAMB(p, lr=0.01, weight_decay=0.01, fused=f),
}


def _train_three_params(make: Callable[[list[Tensor], bool], optim.Optimizer], fused: bool) -> list[np.ndarray]:
    rng = np.random.default_rng(5)
    shapes = [(4, 3), (7,), (2, 2, 2)]
    params = [Tensor(rng.standard_normal(s).astype(np.float32), requires_grad=True) for s in shapes]
    targets = [Tensor(rng.standard_normal(s).astype(np.float32)) for s in shapes]
    opt = make(params, fused)
    assert opt.fused is fused
    for _ in range(4):
        opt.zero_grad()
        pairs = enumerate(zip(params, targets, strict=True))
        loss = sum(((((p - t) ** 3) / 3 + p.square()) * (i + 1)).sum() for i, (p, t) in pairs)
        assert isinstance(loss, Tensor)
        loss.backward()
        opt.step()
    return [p.numpy() for p in params]


@pytest.mark.parametrize("name", list(FUSED_CASES))
def test_fused_step_matches_unfused(name: str) -> None:
    """fused=True: one flat update for all parameters (one state buffer per kind), same values as per parameter;
    LARS/LAMB trust ratios stay per parameter."""
    fused = _train_three_params(FUSED_CASES[name], True)
    plain = _train_three_params(FUSED_CASES[name], False)
    for a, b in zip(fused, plain, strict=True):
        np.testing.assert_allclose(a, b, rtol=2e-6, atol=1e-7)


def test_fused_state_is_one_flat_buffer_and_context_default() -> None:
    from tg.tensor import Context

    params = [Tensor.ones(3, 2, requires_grad=True), Tensor.ones(5, requires_grad=True)]
    with Context(FUSE_OPTIM=1):
        opt = optim.Adam(params)
    assert opt.fused and [t.shape for t in opt.state["m"]] == [(11,)]
    assert not optim.Adam(params).fused


def test_fused_errors() -> None:
    mixed = [Tensor.ones(2, requires_grad=True), Tensor.ones(2, dtype="half", requires_grad=True)]
    # the message names each dtype with its device (the default device: CPU, or CL/CUDA with DEV=...)
    with pytest.raises(ValueError, match=rf"one dtype and device, got .*half on {re.escape(mixed[1].device)}"):
        optim.SGD(mixed, fused=True)
    with pytest.raises(ValueError, match=r"Muon .* fused=True is not supported"):
        optim.Muon([Tensor.ones(2, 2, requires_grad=True)], fused=True)
    a, b = Tensor.ones(2, requires_grad=True), Tensor.ones(2, requires_grad=True)
    opt = optim.SGD([a, b], fused=True)
    (a * 2).sum().backward()
    with pytest.raises(RuntimeError, match=r"parameters \[1\] have no gradient"):
        opt.step()


def test_fused_step_runs_fewer_kernels() -> None:
    counts = {}
    for fused in (False, True):
        # 3 parameters of different shapes show the fusion (8 compiled 68 kernels in a fresh cache, 3 compile 33)
        params = [Tensor.ones(3 + i, 2, requires_grad=True) for i in range(3)]
        opt = optim.Adam(params, fused=fused)
        for _ in range(2):  # the second step is the steady state
            opt.zero_grad()
            loss = sum((p * p).sum() for p in params)
            assert isinstance(loss, Tensor)
            loss.backward()
            before = GlobalCounters.kernel_count
            opt.step()
        counts[fused] = GlobalCounters.kernel_count - before
    assert counts[True] < counts[False], counts


def _train_replayed(make: Callable[[list[Tensor]], optim.Optimizer], steps: int, replay: int) -> list[np.ndarray]:
    from tg.tensor import Context

    with Context(OPTIM_REPLAY=replay):
        rng = np.random.default_rng(7)
        params = [Tensor(rng.standard_normal(s).astype(np.float32), requires_grad=True) for s in [(5, 3), (3,)]]
        opt = make(params)
        target = Tensor(rng.standard_normal((2, 3)).astype(np.float32))
        x = Tensor(rng.standard_normal((2, 5)).astype(np.float32))
        for _ in range(steps):
            opt.zero_grad()
            (((x @ params[0] + params[1]) - target) ** 2).mean().backward()
            opt.step()
        return [p.numpy() for p in params]


@pytest.mark.parametrize("name", ["sgd_momentum_nesterov_wd", "adam", "lamb"])
def test_eager_step_replays_its_update_bit_identically(name: str) -> None:
    """An eager step realizes forward and gradients, then runs the update as a captured program (built on the first
    two steps of a structure): the parameters equal those of the step that builds the update graph every time."""
    make = functools.partial(FUSED_CASES[name], f=False)
    replayed, rebuilt = _train_replayed(make, 6, 1), _train_replayed(make, 6, 0)
    for a, b in zip(replayed, rebuilt, strict=True):
        np.testing.assert_array_equal(a, b)


def _adam_stepper() -> tuple[Tensor, optim.Adam, Callable[[], Tensor]]:
    """A weight, its Adam optimizer and one training step of run_tg's loss (the loss realized with the update)."""
    w = Tensor(W0.copy(), requires_grad=True)
    opt = optim.Adam([w], lr=0.01)
    target = Tensor(TARGET)

    def step() -> Tensor:
        opt.zero_grad()
        loss = (((w - target) ** 3) / 3 + w.square()).sum()
        loss.backward()
        opt.step(loss)
        return loss

    return w, opt, step


def test_eager_step_builds_no_update_graph_once_captured() -> None:
    w, opt, step = _adam_stepper()
    ref = run_tg(lambda p: optim.Adam(p, lr=0.01))
    for _ in range(2):
        step()
    with patch.object(opt, "schedule_step", side_effect=AssertionError("graph rebuilt")):
        for _ in range(STEPS - 2):
            step()
    np.testing.assert_array_equal(w.numpy(), ref)
    assert opt.step_count.item() == STEPS


def test_eager_step_keeps_lazy_readers_and_recaptures_on_new_structure() -> None:
    """A lazy tensor that reads a parameter keeps the value from before the step; a step where a parameter has no
    gradient is another structure (that parameter stays unchanged), and the earlier one replays again after it."""
    a, b = Tensor([1.0, 2.0], requires_grad=True), Tensor([3.0, 4.0], requires_grad=True)
    opt = optim.SGD([a, b], lr=0.5)
    for i in range(4):
        opt.zero_grad()
        (a * b).sum().backward()
        before = a * 10  # lazy: reads a's buffer, which the update overwrites
        a_then = a.numpy()
        opt.step()
        np.testing.assert_array_equal(before.numpy(), a_then * 10, err_msg=f"step {i}")
    a_now, b_now = a.numpy(), b.numpy()
    opt.zero_grad()
    (a * 2).sum().backward()  # b gets no gradient
    opt.step()
    np.testing.assert_array_equal(b.numpy(), b_now)
    np.testing.assert_allclose(a.numpy(), a_now - 0.5 * 2)
    a_now = a.numpy()
    opt.zero_grad()
    (a * b).sum().backward()
    opt.step()
    np.testing.assert_allclose(a.numpy(), a_now - 0.5 * b_now)
    np.testing.assert_allclose(b.numpy(), b_now - 0.5 * a_now)


def test_eager_step_after_load_state_dict_and_inside_jit() -> None:
    """Loading state writes the optimizer's buffers in place (a replay sees it); inside a TinyJit the step is one
    schedule with the forward pass, and the two ways of stepping give the same parameters."""
    from tg.tensor import TinyJit

    def train(jit: bool) -> np.ndarray:
        w, opt, step = _adam_stepper()
        fn = TinyJit(step) if jit else step
        for _ in range(4):
            fn()
        saved = {k: Tensor(v.numpy()) for k, v in opt.state_dict().items()}
        fn()
        opt.load_state_dict(saved)  # back to the state after 4 steps
        w.assign(Tensor(W0.copy())).realize()
        for _ in range(3):
            fn()
        assert opt.step_count.item() == 7
        return w.numpy()

    np.testing.assert_array_equal(train(False), train(True))


def test_optimizer_group_eager_step_replays_each_update() -> None:
    """OptimizerGroup.step: forward and gradients in one schedule, then each optimizer's captured update; the same
    parameters as building every update graph (OPTIM_REPLAY=0)."""
    from tg.tensor import Context

    def train(replay: int) -> list[np.ndarray]:
        with Context(OPTIM_REPLAY=replay):
            a, b = Tensor(W0.copy(), requires_grad=True), Tensor(TARGET.copy(), requires_grad=True)
            group = optim.OptimizerGroup(optim.SGD([a], lr=0.1, momentum=0.9), optim.Adam([b], lr=0.01))
            for _ in range(5):
                group.zero_grad()
                loss = ((a * b).sum() - 1) ** 2
                loss.backward()
                group.step(loss)
            return [a.numpy(), b.numpy()]

    for x, y in zip(train(1), train(0), strict=True):
        np.testing.assert_array_equal(x, y)
