"""Matrix factorisations and iterations as Tensor methods (attached in methods.py): `qr` (Householder, batched,
differentiable) and `newton_schulz` (the odd-polynomial orthogonalisation Muon uses).

Both are built from matmuls and elementwise ops over the last two dims, so they batch over leading dims, run on any
device and have gradients through the ordinary rules.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tg.ir import dtypes

if TYPE_CHECKING:
    from tg.tensor.tensor import Tensor


def qr(self: Tensor, mode: str = "complete") -> tuple[Tensor, Tensor]:
    """QR factorisation of the last two dims: `Q @ R == self`, Q orthogonal, R upper triangular, by Householder
    reflections (R's diagonal has LAPACK's signs: `-sign(x0) * |x|`, so it matches torch/numpy).

    `mode='complete'` (tinygrad's result) gives Q (..., m, m) and R (..., m, n); `'reduced'` (torch.linalg.qr's
    default) Q (..., m, k) and R (..., k, n) with k = min(m, n); `'r'` gives (empty Q, R) like torch.
    """
    from tg.tensor.tensor import Tensor

    if mode not in ("complete", "reduced", "r"):
        raise ValueError(f"qr: mode must be 'complete', 'reduced' or 'r', got {mode!r}")
    if self.ndim < 2:
        raise ValueError(f"qr: needs a matrix (or a batch of them), got shape {self.shape}")
    x = self if dtypes.is_float(self.dtype) else self.cast(dtypes.default_float)
    batch, m, n = x.shape[:-2], x.shape[-2], x.shape[-1]
    r, q = x, Tensor.eye(m, dtype=x.dtype, device=x.device).expand(*batch, m, m)
    rows = Tensor.arange(m, device=x.device)
    for i in range(min(m, n)):
        # the reflector H = I - tau v v^T (v[i] = 1, zero above i) that maps column i below the diagonal to
        # beta e_i with beta = -sign(x0) |x| (no cancellation in x0 - beta)
        col = (rows >= i).where(r[..., :, i], 0.0)  # (..., m)
        norm = col.square().sum(-1, keepdim=True).sqrt()
        x0 = r[..., i : i + 1, i]
        sign = (x0 < 0).where(-1.0, 1.0)
        u0 = x0 + sign * norm  # x0 - beta
        # nothing below the diagonal: no reflection (LAPACK's dlarfg: tau = 0, the diagonal keeps its sign)
        active = ((rows > i).where(r[..., :, i], 0.0) != 0).any(-1, keepdim=True)
        u0_safe = active.where(u0, 1.0)
        v = (rows == i).where(1.0, col / u0_safe)  # (..., m)
        tau = active.where(u0 / (sign * active.where(norm, 1.0)), 0.0)  # = 2 / (v^T v)
        v = v.unsqueeze(-1)  # (..., m, 1)
        r = r - (tau.unsqueeze(-1) * v) @ (v.transpose(-2, -1) @ r)
        q = q - (q @ v) @ (tau.unsqueeze(-1) * v).transpose(-2, -1)
    # below the diagonal R holds rounding noise of size eps*|x|: clear it (torch's R is exactly triangular)
    r = (rows.reshape(m, 1) <= Tensor.arange(n, device=x.device).reshape(1, n)).where(r, 0.0)
    if mode == "complete":
        return q, r
    k = min(m, n)
    reduced_r = r[..., :k, :]
    if mode == "r":
        return Tensor.zeros(0, dtype=x.dtype, device=x.device), reduced_r
    return q[..., :, :k], reduced_r


def newton_schulz(
    self: Tensor,
    steps: int = 5,
    params: tuple[float, ...] = (3.4445, -4.775, 2.0315),
    eps: float = 1e-7,
    clamp_norm: bool = False,
) -> Tensor:
    """Approximate orthogonalisation of the last two dims (tinygrad's `newton_schulz`, Muon's iteration):
    `X = G / (|G|_F + eps)` (`max(|G|_F, eps)` with `clamp_norm`, torch's Muon), then `steps` times
    `X = p0 X + p1 (X Xᵀ) X + p2 (X Xᵀ)² X + ...` for the odd polynomial `params`, on the transpose when rows > cols."""
    if self.ndim < 2:
        raise ValueError(f"newton_schulz: needs a matrix (or a batch of them), got shape {self.shape}")
    if not params:
        raise ValueError("newton_schulz: params must name at least one coefficient")
    tall = self.shape[-2] > self.shape[-1]
    x = self.transpose(-2, -1) if tall else self
    norm = x.square().sum((-2, -1), keepdim=True).sqrt()
    x = x / (norm.maximum(eps) if clamp_norm else norm + eps)
    for _ in range(steps):
        gram = x @ x.transpose(-2, -1)
        power, poly = gram, None  # poly = p1 A + p2 A^2 + ... with A = X Xᵀ
        for p in params[1:]:
            poly = p * power if poly is None else poly + p * power
            power = power @ gram
        x = params[0] * x if poly is None else params[0] * x + poly @ x
    return x.transpose(-2, -1) if tall else x
