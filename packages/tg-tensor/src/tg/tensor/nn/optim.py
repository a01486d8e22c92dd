"""Optimizers: SGD (momentum, dampening, nesterov, weight decay), LARS, Adam, AdamW, LAMB, and OptimizerGroup.

An optimizer never computes anything by itself: `schedule_step()` builds lazy `assign`s of every parameter and
state tensor (momenta, moments, step counters) and `step()` realizes them together with the forward pass, the
gradients and BatchNorm's running statistics in one schedule, so the scheduler can fuse gradients into the update
kernels. The learning rate is a tensor: changing `opt.lr` changes no kernel. Update rules are torch's (formulas in
specs/tensor-api.md 4.2); `state_dict()`/`load_state_dict()` save and restore everything needed to resume exactly.

Inside a jit capture that one schedule is what the jit records. An eager `step()` (no capture) instead realizes the
forward pass, the gradients, the buffers and the live lazy tensors that read a parameter in one schedule, then runs
the update as a TinyJit per structure (which parameters have gradients, their dtypes and shapes, the graph
settings): its first two steps build the update graph, later ones replay the captured kernels with this step's
gradient buffers and build no graph (the update's tensors were a third of an eager CNN step). Results are bit-for-bit
those of building the graph every step; `OPTIM_REPLAY=0` (a context variable) turns the replay off.

`fused=True` (tinygrad's flag; default from the `FUSE_OPTIM` context variable) runs the update on one flat tensor:
parameters and gradients are concatenated, every state (momenta, moments) is one flat buffer, the update is one set
of kernels over all of it, and each parameter takes its slice back. Results equal the unfused path (the trust-ratio
norms of LARS/LAMB stay per parameter). It needs one dtype and device for all parameters and a gradient for each.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from typing import Any

from tg.ir import DType, Ops, dtypes
from tg.ir.helpers import FUSE_OPTIM, JIT, OPTIM_REPLAY
from tg.tensor.autograd import no_grad
from tg.tensor.callargs import graph_settings
from tg.tensor.matrix import newton_schulz  # re-exported: Muon's iteration, also `Tensor.newton_schulz`
from tg.tensor.tensor import Tensor

__all__ = [
    "FUSE_OPTIM", "LAMB", "LARS", "SGD", "Adam", "AdamW", "Muon", "Optimizer", "OptimizerGroup", "newton_schulz",
]  # fmt: skip

# default of every optimizer's `fused=` (tinygrad's FUSE_OPTIM): `Context(FUSE_OPTIM=1)` or the environment


def _state(shape: tuple[int, ...], like: DType, device: str) -> Tensor:
    """A zero-filled state tensor with storage of its own (moments of half parameters in float32)."""
    dt = dtypes.float32 if like in (dtypes.float16, dtypes.bfloat16) else like
    return Tensor.zeros(*shape, dtype=dt, device=device).contiguous().realize()


def _scalar(value: float, device: str, dtype: DType = dtypes.float32) -> Tensor:
    return Tensor(value, dtype=dtype, device=device).contiguous().realize()


def _can_replay(optimizers: list[Optimizer]) -> bool:
    """Whether a step may run its update as a captured program: not inside a jit's capture (the enclosing jit
    schedules forward, backward and update together), not with JIT=0 or inside @function, and only for parameters
    and gradients on one device each (sharded tensors take the one-schedule path)."""
    from tg.runtime import engine
    from tg.tensor.live import tracing_functions

    if not OPTIM_REPLAY.value or not JIT.value or engine.capturing or tracing_functions:
        return False
    for o in optimizers:
        for t in o.params:
            if not isinstance(t.device, str) or (t.grad is not None and not isinstance(t.grad.device, str)):
                return False
    return True


def _realize_before_update(optimizers: list[Optimizer], extra: tuple[Tensor, ...]) -> None:
    """One schedule of what the update reads or overwrites: `extra`, parameters, buffers, gradients, and the live
    lazy tensors that read a parameter (e.g. the logits): they keep the values from before the update, computed
    with the forward pass instead of by the captured update."""
    from tg.tensor import realize as _realize
    from tg.tensor.movement import view_base

    params = [t for o in optimizers for t in o.params]
    grads = [t.grad for t in params if t.grad is not None]
    buffers = [t for o in optimizers for t in o.buffers]
    bases = {view_base(t.uop) for t in params}
    readers: list[Tensor] = []
    if all(b.op is Ops.BUFFER for b in bases):  # else the realize makes them buffers and the jit settles readers
        computed = [t.uop for t in (*extra, *grads)]  # realized here anyway: no need to ask whether they read one
        readers = [t for r in _realize.pending_readers(bases, computed) for t in _realize.index.tensors(r)]
    Tensor.realize(*extra, *params, *buffers, *grads, *readers)


class Optimizer:
    """Base class: splits `params` into trainable parameters (float tensors whose `requires_grad` is True, or unset
    and then turned on) and buffers (everything else: realized with each step, never updated)."""

    def __init__(
        self, params: Iterable[Tensor], lr: float, device: str | None = None, fused: bool | None = None
    ) -> None:
        unique: dict[int, Tensor] = {}
        for t in params:
            if not isinstance(t, Tensor):
                raise TypeError(f"optimizer params must be Tensors, got {type(t).__name__}")
            unique.setdefault(id(t), t)
        for t in unique.values():
            if t.requires_grad is None and dtypes.is_float(t.dtype):
                t.requires_grad_(True)
        self.params = [t for t in unique.values() if t.requires_grad]
        self.buffers = [t for t in unique.values() if not t.requires_grad]
        if not self.params:
            raise ValueError("optimizer got no trainable parameters (all are requires_grad=False or not float)")
        self.device = device or self.params[0].device
        self._lr = _scalar(float(lr), self.device)
        self.step_count = _scalar(0, self.device, dtypes.int32)
        self.state: dict[str, list[Tensor]] = {}  # per-parameter state, by name, in `params` order (fused: one)
        self.fused = bool(FUSE_OPTIM.value) if fused is None else bool(fused)
        if self.fused:
            kinds = {(t.dtype, t.device) for t in self.params}
            if len(kinds) > 1:
                found = ", ".join(f"{dt.name} on {dev}" for dt, dev in sorted(kinds, key=str))
                raise ValueError(f"fused=True needs all parameters of one dtype and device, got {found}")
            # where each parameter's elements start and end in the flat tensor
            self._offsets = list(itertools.accumulate((t.numel() for t in self.params), initial=0))
        self._updates: dict[tuple, Any] = {}  # captured updates by `_update_key` (TinyJit)

    def _new_state(self) -> list[Tensor]:
        """Zeroed state beside every parameter, or one flat state for all when fused."""
        if self.fused:
            p = self.params[0]
            return [_state((self._offsets[-1],), p.dtype, p.device)]
        return [_state(t.shape, t.dtype, t.device) for t in self.params]

    def _norm(self, x: Tensor) -> Tensor:
        """The L2 norm of a parameter-shaped `x` (trust ratios); fused: each parameter's own norm, repeated over
        its slice of the flat tensor."""
        if not self.fused:
            return x.square().sum().sqrt()
        spans = itertools.pairwise(self._offsets)
        return Tensor.cat(*[x[a:b].square().sum().sqrt().reshape(1).expand(b - a) for a, b in spans])

    @property
    def lr(self) -> Tensor:
        """The learning rate, a 0-d float32 tensor; assign a number to change it (no kernel changes)."""
        return self._lr

    @lr.setter
    def lr(self, value: float | Tensor) -> None:
        new = value if isinstance(value, Tensor) else Tensor(float(value), device=self.device)
        self._lr.assign(new.cast(self._lr.dtype).to(self.device).reshape(())).realize()

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Forget the gradients: `.grad = None` (torch 2.x default) or zero-filled gradients."""
        for t in self.params:
            if set_to_none or t.grad is None:
                t.grad = None
            else:
                t.grad = Tensor.zeros(t.shape, dtype=t.dtype, device=t.device)

    def schedule_step(self) -> list[Tensor]:
        """Lazy updates of every parameter with a gradient and of the optimizer state; returns the tensors to
        realize (state, parameters, buffers, gradients). Parameters without a gradient are left unchanged."""
        # State is assigned first and read back through the assigned tensors: every later read sees the new value
        # and the scheduler orders it after the write (re-deriving a new value from a state buffer that has
        # already been overwritten in the same schedule would be wrong).
        with no_grad():
            self.step_count.assign(self.step_count + 1)
            extra = self._step_shared()
            if self.fused:
                self._fused_update()
            for i, t in enumerate(self.params):
                if t.grad is not None and not self.fused:
                    new = self._update(i, t, t.grad.detach().cast(t.dtype), self.step_count)
                    t.assign(new.cast(t.dtype))
        grads = [t.grad for t in self.params if t.grad is not None]
        state = [s for values in self.state.values() for s in values]
        return [self.step_count, *extra, *state, *self.params, *self.buffers, *grads]

    def _fused_update(self) -> None:
        """One update over the concatenation of all parameters and gradients, split back into the parameters."""
        if missing := [i for i, t in enumerate(self.params) if t.grad is None]:
            raise RuntimeError(f"fused optimizer step: parameters {missing} have no gradient (use fused=False)")
        dt = self.params[0].dtype
        flat_w = Tensor.cat(*[t.detach().flatten() for t in self.params])
        flat_g = Tensor.cat(*[t.grad.detach().cast(dt).flatten() for t in self.params if t.grad is not None])
        new = self._update(0, flat_w, flat_g.contiguous(), self.step_count).cast(dt).contiguous()
        for t, (a, b) in zip(self.params, itertools.pairwise(self._offsets), strict=True):
            t.assign(new[a:b].reshape(t.shape))

    def step(self, *extra: Tensor) -> None:
        """Apply one update: realizes the forward pass, gradients, updates and `extra` tensors (e.g. the loss); in
        one schedule inside a jit capture, else the update is a captured program (`_replay_update`)."""
        if not _can_replay([self]):
            Tensor.realize(*extra, *self.schedule_step())
            return
        _realize_before_update([self], extra)
        self._replay_update()

    def _update_key(self) -> tuple:
        """What the captured update depends on besides buffer contents: which parameters have a gradient, the
        gradients' dtypes, devices and shapes, and the settings that change a graph."""
        grads = tuple(None if t.grad is None else (t.grad.dtype, t.grad.device, t.grad.shape) for t in self.params)
        return (grads, graph_settings())

    def _replay_update(self) -> None:
        """The update of realized gradients as a TinyJit per `_update_key`: the first two steps of a key build the
        graph (the 2nd captures its kernels), later ones replay the kernels with this step's gradient buffers and
        build no graph. Parameters, state, lr and the step counter are written in place, as in a jitted step."""
        from tg.tensor.jit import TinyJit

        key = self._update_key()
        jit = self._updates.get(key)
        if jit is None or jit._stale is not None:  # new structure, or a buffer it wrote was replaced (reloaded)
            if len(self._updates) >= 8:
                self._updates.clear()
            jit = self._updates[key] = TinyJit(self._realize_update)
        jit([t.grad for t in self.params])

    def _realize_update(self, grads: list[Tensor | None]) -> None:
        """The captured function: `grads` (each parameter's `.grad`, realized) are its inputs, so a replay reads
        this step's gradient buffers; everything else it touches is optimizer or parameter storage."""
        del grads  # read through each parameter's `.grad` (the same tensors)
        Tensor.realize(*self.schedule_step())

    def _update(self, i: int, w: Tensor, g: Tensor, step: Tensor) -> Tensor:
        raise NotImplementedError

    def _step_shared(self) -> list[Tensor]:
        """State shared by all parameters that advances once per step (Adam's running powers of b1, b2)."""
        return []

    # ---- state dicts ------------------------------------------------------------------------------------------

    def _named_state(self) -> dict[str, Tensor]:
        return {"lr": self._lr, "step": self.step_count}

    def state_dict(self) -> dict[str, Tensor]:
        """`{"lr", "step", shared state, per-parameter state as "<name>.<index>"}`; savable with `safe_save`."""
        out = self._named_state()
        for name, values in self.state.items():
            out.update({f"{name}.{i}": v for i, v in enumerate(values)})
        return out

    def load_state_dict(self, state_dict: dict[str, Tensor]) -> None:
        """Restore a `state_dict()` (names and shapes must match: ValueError listing the differences)."""
        from tg.tensor.nn.state import load_state_dict

        load_state_dict(self.state_dict(), state_dict, verbose=False)


class SGD(Optimizer):
    """Stochastic gradient descent (torch's rule): `g += wd*w`; with momentum `b = g` on the first step, then
    `b = momentum*b + (1-dampening)*g`; `g = g + momentum*b` if nesterov else `b`; `w -= lr*g`.
    `classic=False` (tinygrad's default) vs `True`: whether lr multiplies `g` before the momentum buffer."""

    def __init__(
        self,
        params: Iterable[Tensor],
        lr: float = 0.001,
        momentum: float = 0.0,
        dampening: float = 0.0,
        weight_decay: float = 0.0,
        nesterov: bool = False,
        classic: bool = False,
        device: str | None = None,
        fused: bool | None = None,
    ) -> None:
        super().__init__(params, lr, device, fused)
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("nesterov momentum needs momentum > 0 and dampening 0")
        self.momentum, self.dampening, self.weight_decay = momentum, dampening, weight_decay
        self.nesterov, self.classic = nesterov, classic
        if momentum:
            self.state["momentum"] = self._new_state()

    def _direction(self, w: Tensor, g: Tensor) -> Tensor:
        return g + self.weight_decay * w if self.weight_decay else g

    def _update(self, i: int, w: Tensor, g: Tensor, step: Tensor) -> Tensor:
        g = self._direction(w, g)
        if self.classic:
            g = g * self.lr
        if self.momentum:
            buf = self.state["momentum"][i]
            moved = buf * self.momentum + g * (1 - self.dampening)
            new_buf = (step == 1).where(g, moved) if self.dampening else moved
            buf.assign(new_buf.cast(buf.dtype))
            g = g + self.momentum * buf if self.nesterov else buf
        return w - g if self.classic else w - g * self.lr


class LARS(SGD):
    """SGD with layer-wise adaptive rate scaling: `r = tcoef*|w|/(|g| + wd*|w|)` (1 where a norm is 0),
    `g = (g + wd*w)*r`, then momentum as SGD (tinygrad's defaults: classic=True)."""

    def __init__(
        self,
        params: Iterable[Tensor],
        lr: float = 0.001,
        momentum: float = 0.9,
        weight_decay: float = 1e-4,
        nesterov: bool = False,
        classic: bool = True,
        tcoef: float = 0.001,
        device: str | None = None,
        fused: bool | None = None,
    ) -> None:
        super().__init__(params, lr, momentum, 0.0, weight_decay, nesterov, classic, device, fused)
        self.tcoef = tcoef

    def _direction(self, w: Tensor, g: Tensor) -> Tensor:
        w_norm, g_norm = self._norm(w), self._norm(g)
        ratio = ((w_norm > 0) & (g_norm > 0)).where(self.tcoef * w_norm / (g_norm + self.weight_decay * w_norm), 1.0)
        return (g + self.weight_decay * w) * ratio


class LAMB(Optimizer):
    """LAMB: Adam moments with bias correction, `u = m̂/(sqrt(v̂) + eps) + wd*w`, trust ratio `r = |w|/|u|`
    (1 where a norm is 0), `w -= lr*r*u`. With `adam=True` the ratio is 1 (AdamW); `decoupled=False` adds the
    weight decay to the gradient instead (Adam's L2)."""

    def __init__(
        self,
        params: Iterable[Tensor],
        lr: float = 0.001,
        b1: float = 0.9,
        b2: float = 0.999,
        eps: float = 1e-6,
        weight_decay: float = 0.0,
        adam: bool = False,
        decoupled: bool = True,
        betas: tuple[float, float] | None = None,
        device: str | None = None,
        fused: bool | None = None,
    ) -> None:
        super().__init__(params, lr, device, fused)
        self.b1, self.b2 = betas if betas is not None else (b1, b2)
        self.eps, self.weight_decay, self.adam, self.decoupled = eps, weight_decay, adam, decoupled
        self.b1_t, self.b2_t = _scalar(1.0, self.device), _scalar(1.0, self.device)
        self.state["m"] = self._new_state()
        self.state["v"] = self._new_state()

    def _named_state(self) -> dict[str, Tensor]:
        return {**super()._named_state(), "b1_t": self.b1_t, "b2_t": self.b2_t}

    def schedule_step(self) -> list[Tensor]:
        try:
            return super().schedule_step()
        finally:  # the corrections read b1_t/b2_t: kept, they would be lazy readers computed before each later write
            del self._corrections

    def _step_shared(self) -> list[Tensor]:
        self.b1_t.assign(self.b1_t * self.b1)
        self.b2_t.assign(self.b2_t * self.b2)
        # this step's bias corrections, built once for all parameters (the same graph each `_update` built for itself)
        self._corrections = (1 - self.b1_t, 1 - self.b2_t)
        return [self.b1_t, self.b2_t]

    def _update(self, i: int, w: Tensor, g: Tensor, step: Tensor) -> Tensor:
        m, v = self.state["m"][i], self.state["v"][i]
        g = g.cast(m.dtype)
        wf = w.cast(m.dtype)
        if self.weight_decay and not self.decoupled:
            g = g + self.weight_decay * wf
        m.assign(m * self.b1 + g * (1 - self.b1))
        v.assign(v * self.b2 + g.square() * (1 - self.b2))
        c1, c2 = self._corrections  # 1 - b1_t, 1 - b2_t with this step's powers (set by `_step_shared`)
        update = (m / c1) / ((v / c2).sqrt() + self.eps)
        if self.weight_decay and self.decoupled:
            update = update + self.weight_decay * wf
        if not self.adam:
            w_norm, u_norm = self._norm(wf), self._norm(update)
            update = update * ((w_norm > 0) & (u_norm > 0)).where(w_norm / u_norm, 1.0)
        return wf - self.lr * update


def Adam(
    params: Iterable[Tensor],
    lr: float = 0.001,
    b1: float = 0.9,
    b2: float = 0.999,
    eps: float = 1e-8,
    weight_decay: float = 0.0,
    betas: tuple[float, float] | None = None,
    device: str | None = None,
    fused: bool | None = None,
) -> LAMB:
    """Adam (torch): moments `m, v` with bias correction, `w -= lr*m̂/(sqrt(v̂) + eps)`; `weight_decay` is L2
    added to the gradient."""
    return LAMB(params, lr, b1, b2, eps, weight_decay, True, False, betas, device, fused)


def AdamW(
    params: Iterable[Tensor],
    lr: float = 0.001,
    b1: float = 0.9,
    b2: float = 0.999,
    eps: float = 1e-8,
    weight_decay: float = 0.01,
    betas: tuple[float, float] | None = None,
    device: str | None = None,
    fused: bool | None = None,
) -> LAMB:
    """AdamW (torch): Adam with decoupled weight decay, `w -= lr*(m̂/(sqrt(v̂) + eps) + wd*w)`."""
    return LAMB(params, lr, b1, b2, eps, weight_decay, True, True, betas, device, fused)


class Muon(Optimizer):
    """Muon for matrix parameters (a conv weight counts as (out, rest)): momentum as SGD (nesterov by default), the
    update orthogonalised by `newton_schulz`, `w -= lr*G + lr*wd*w`. `torch_compatible=True` follows torch 2.13's
    `optim.Muon` instead: EMA momentum, decay applied first, lr scaled by `sqrt(max(1, rows/cols))`, norm clamped
    at eps (torch runs the iteration in bfloat16; tg in the parameter's dtype). Use an OptimizerGroup with AdamW
    for vectors."""

    def __init__(
        self,
        params: Iterable[Tensor],
        lr: float = 0.001,
        momentum: float = 0.95,
        weight_decay: float = 0.1,
        ns_steps: int = 5,
        ns_coefficients: tuple[float, float, float] = (3.4445, -4.775, 2.0315),
        nesterov: bool = True,
        eps: float = 1e-7,
        torch_compatible: bool = False,
        device: str | None = None,
        fused: bool | None = None,
    ) -> None:
        if fused:
            raise ValueError("Muon orthogonalises each matrix on its own: fused=True is not supported")
        super().__init__(params, lr, device, False)
        flat = [t.shape for t in self.params if t.ndim < 2]
        if flat:
            raise ValueError(f"Muon updates matrices only, got parameters of shapes {flat}; use AdamW for those")
        self.momentum, self.weight_decay, self.ns_steps = momentum, weight_decay, ns_steps
        self.ns_coefficients, self.nesterov, self.eps = ns_coefficients, nesterov, eps
        self.torch_compatible = torch_compatible
        self.state["momentum"] = self._new_state()

    def _update(self, i: int, w: Tensor, g: Tensor, step: Tensor) -> Tensor:
        buf = self.state["momentum"][i]
        g = g.cast(buf.dtype)
        if self.torch_compatible:
            buf.assign(buf + (g - buf) * (1 - self.momentum))
            direction = g + (buf - g) * self.momentum if self.nesterov else buf
        else:
            buf.assign(buf * self.momentum + g)
            direction = g + self.momentum * buf if self.nesterov else buf
        matrix = direction.reshape(w.shape[0], -1)
        ortho = newton_schulz(matrix, self.ns_steps, self.ns_coefficients, self.eps, self.torch_compatible)
        ortho = ortho.reshape(w.shape)
        wf = w.cast(buf.dtype)
        if self.torch_compatible:
            rows, cols = matrix.shape
            scale = max(1.0, rows / cols) ** 0.5
            return wf * (1 - self.lr * self.weight_decay) - self.lr * scale * ortho
        return wf - self.lr * ortho - self.lr * self.weight_decay * wf


class OptimizerGroup:
    """Several optimizers stepped as one (e.g. different rules for different parameters): one schedule."""

    def __init__(self, *optimizers: Optimizer) -> None:
        if not optimizers:
            raise ValueError("OptimizerGroup needs at least one optimizer")
        self.optimizers = list(optimizers)
        self.params = [t for o in self.optimizers for t in o.params]
        self.buffers = [t for o in self.optimizers for t in o.buffers]

    def __getitem__(self, index: int) -> Optimizer:
        return self.optimizers[index]

    def zero_grad(self, set_to_none: bool = True) -> None:
        """zero_grad of every optimizer."""
        for o in self.optimizers:
            o.zero_grad(set_to_none)

    def schedule_step(self) -> list[Tensor]:
        """The lazy updates of all optimizers."""
        return [t for o in self.optimizers for t in o.schedule_step()]

    def step(self, *extra: Tensor) -> None:
        """One step of every optimizer with `extra`: one schedule inside a jit capture, else the forward pass and
        gradients in one schedule and each optimizer's captured update after it."""
        if not _can_replay(self.optimizers):
            Tensor.realize(*extra, *self.schedule_step())
            return
        _realize_before_update(self.optimizers, extra)
        for o in self.optimizers:
            o._replay_update()
