"""Matrix factorisations and iterations as Tensor methods (attached in methods.py): `qr` (Householder, batched,
differentiable) and `newton_schulz` (the odd-polynomial orthogonalisation Muon uses).

Both are built from matmuls and elementwise ops over the last two dims, so they batch over leading dims, run on any
device and have gradients through the ordinary rules.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING

from tg.ir import DType, dtypes
from tg.tensor.errors import ArgumentError

if TYPE_CHECKING:
    from tg.tensor.tensor import Tensor


def qr(self: Tensor, mode: str = "complete") -> tuple[Tensor, Tensor]:
    """QR factorisation of the last two dims: `Q @ R == self`, Q orthogonal, R upper triangular, by Householder
    reflections (R's diagonal has LAPACK's signs: `-sign(x0) * |x|`, so it matches torch/numpy).

    `mode='complete'` (tinygrad's result) gives Q (..., m, m) and R (..., m, n); `'reduced'` (torch.linalg.qr's
    default) Q (..., m, k) and R (..., k, n) with k = min(m, n); `'r'` gives (empty Q, R) like torch.
    """
    cls = self._tensor_class()
    if mode not in ("complete", "reduced", "r"):
        raise ArgumentError(f"qr: mode must be 'complete', 'reduced' or 'r', got {mode!r}")
    if self.ndim < 2:
        raise ArgumentError(f"qr: needs a matrix (or a batch of them), got shape {self.shape}")
    x = self if dtypes.is_float(self.dtype) else self.cast(dtypes.default_float)
    batch, m, n = x.shape[:-2], x.shape[-2], x.shape[-1]
    r, q = x, cls.eye(m, dtype=x.dtype, device=x.device).expand(*batch, m, m)
    rows = cls.arange(m, device=x.device)
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
    r = (rows.reshape(m, 1) <= cls.arange(n, device=x.device).reshape(1, n)).where(r, 0.0)
    if mode == "complete":
        return q, r
    k = min(m, n)
    reduced_r = r[..., :k, :]
    if mode == "r":
        return cls.zeros(0, dtype=x.dtype, device=x.device), reduced_r
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
        raise ArgumentError(f"newton_schulz: needs a matrix (or a batch of them), got shape {self.shape}")
    if not params:
        raise ArgumentError("newton_schulz: params must name at least one coefficient")
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


def _jacobi_sweeps(n: int, dtype: DType) -> int:
    """Sweeps of one-sided Jacobi that converge for n columns: quadratic convergence after a few sweeps, a few more
    for larger n (measured: float32 n=128 settles after 6 on random, ill-conditioned and low-rank inputs)."""
    return max(n - 1, 1).bit_length() + (5 if dtype.itemsize >= 8 else 4)


def _next_pairing(z: Tensor) -> Tensor:
    """The round-robin (circle) schedule over z's columns, seen as a top row (the first half) paired with a bottom
    row: column 0 stays, the others move one seat, so every pair meets once in n - 1 rounds, and after n - 1 rounds
    every column is back in its place."""
    cls = z._tensor_class()
    h = z.shape[-1] // 2
    if h == 1:
        return z
    runs = [(0, 1), (h, h + 1), (1, h - 1), (h + 1, 2 * h), (h - 1, h)]  # new top row, then new bottom row
    return cls.cat(*[z[..., a:b] for a, b in runs if b > a], dim=-1)


def _jacobi_sweep(z: Tensor, n: int) -> Tensor:
    """One sweep over the (X; V) state z (2n rows, an even number of columns): every column pair of X rotated once
    to make the pair orthogonal, the same rotation applied to V; the columns end in their starting places."""
    cls = z._tensor_class()
    h = z.shape[-1] // 2
    for _ in range(2 * h - 1):
        top, bot = z[..., :h], z[..., h:]
        xt, xb = top[..., :n, :], bot[..., :n, :]
        alpha, beta = xt.square().sum(-2, keepdim=True), xb.square().sum(-2, keepdim=True)
        gamma = (xt * xb).sum(-2, keepdim=True)
        # the rotation that zeroes gamma: t = tan(theta), the smaller root of t^2 + 2 zeta t - 1 = 0
        rotate = gamma != 0
        zeta = (beta - alpha) / (2 * rotate.where(gamma, 1.0))
        t = (zeta >= 0).where(1.0, -1.0) / (zeta.abs() + (1 + zeta.square()).sqrt())
        t = rotate.where(t, 0.0)  # zeta^2 overflows to inf for tiny gamma: t = 0 then, as it should be
        c = (1 + t.square()).rsqrt()
        s = c * t
        z = _next_pairing(cls.cat(c * top - s * bot, s * top + c * bot, dim=-1))
        z = z.contiguous()  # a fusion boundary per round keeps every kernel small (the rounds form a chain)
    return z


@functools.cache
def _sweep_function() -> Callable[..., Tensor]:
    from tg.tensor.function import function

    return function(_jacobi_sweep)


def _one_sided_jacobi(x: Tensor) -> tuple[Tensor, Tensor]:
    """(W, V) with x @ V = W, V orthogonal and W's columns mutually orthogonal (Hestenes' one-sided Jacobi with
    the parallel round-robin ordering: each round rotates n/2 disjoint column pairs at once). Square x only.

    X and V are stacked into one (2n, n) state, as both get the same column rotations: one kernel chain per round.
    A sweep is a traced @function (its Python runs once per shape), realized after each sweep outside @function
    bodies, so the schedule of a sweep is made once and reused by the others.
    """
    from tg.tensor import realize as _realize

    cls = x._tensor_class()
    n = x.shape[-1]
    z = cls.cat(x, cls.eye(n, dtype=x.dtype, device=x.device).expand(*x.shape), dim=-2)
    if n % 2:  # odd n: a zero column pairs with the spare one each round (gamma = 0: never rotated)
        z = z.pad(((0, 0),) * (z.ndim - 1) + ((0, 1),))
    sweep = _sweep_function()
    for _ in range(_jacobi_sweeps(n, x.dtype)):
        z = sweep(z, n)
        if not _realize.tracing_functions:
            z = z.realize()
    return z[..., :n, :n], z[..., n:, :n]  # without the zero column of an odd n


def svd(self: Tensor, full_matrices: bool = True) -> tuple[Tensor, Tensor, Tensor]:
    """Singular value decomposition of the last two dims: `(U, S, Vh)` with `U @ diag(S) @ Vh == self`, S
    descending and non-negative, U and Vh orthogonal (numpy/torch's convention and tinygrad's return order).

    `full_matrices=True` (the default, as numpy and tinygrad) gives U (..., m, m) and Vh (..., n, n); False gives
    U (..., m, k) and Vh (..., k, n) with k = min(m, n). Singular vectors of repeated or zero singular values are
    any orthonormal basis of their space, and signs are arbitrary, as in LAPACK.

    Method: `self = Q R` (Householder), then one-sided Jacobi on Rᵀ (which converges in few sweeps, Drmač-Veselić)
    gives `Rᵀ V = W`: S = the column norms of W, the left vectors `Q V`, the right ones W's normalised columns
    (completed to an orthonormal basis where S is zero). A fixed number of sweeps (no data-dependent stopping, so
    batched and JIT-able; each sweep is realized, except inside a @function body where all stays lazy); integers
    compute in the default float, float16/bfloat16 in float32. Differentiable (through the iterations).
    """
    cls = self._tensor_class()
    if self.ndim < 2:
        raise ArgumentError(f"svd: needs a matrix (or a batch of them), got shape {self.shape}")
    if not dtypes.is_float(self.dtype):
        x = self.cast(dtypes.default_float)
    else:
        x = self.cast(dtypes.float32) if self.dtype.itemsize < 4 else self
    m, n = x.shape[-2], x.shape[-1]
    wide = m < n
    a = x.transpose(-2, -1) if wide else x  # (..., p, k) with p >= k
    p, k = a.shape[-2], a.shape[-1]
    if k == 0:
        raise ArgumentError(f"svd: needs a non-empty matrix, got shape {self.shape}")
    q, r = qr(a, mode="complete" if full_matrices else "reduced")
    w, v = _one_sided_jacobi(r[..., :k, :k].transpose(-2, -1))
    s, order = w.square().sum(-2).sqrt().sort(-1, descending=True)
    columns = order.unsqueeze(-2).expand(*order.shape[:-1], k, k)
    w, v = w.gather(-1, columns), v.gather(-1, columns)
    # normalise W's columns; where S = 0 they are zero, and a QR completes them to an orthonormal basis (the
    # columns before keep their direction: R's diagonal is +-1 there)
    right, r_right = qr(w / (s != 0).where(s, 1.0).unsqueeze(-2))
    sign = (r_right.diagonal(0, -2, -1) < 0).where(-1.0, 1.0).unsqueeze(-2)
    right = right * sign
    # left vectors: Q @ V for the first k columns, Q's other columns as they are (full_matrices)
    if full_matrices and p > k:
        tail = (cls.arange(p, device=v.device) >= k).where(cls.eye(p, dtype=v.dtype, device=v.device), 0.0)
        v = v.pad(((0, 0),) * (v.ndim - 2) + ((0, p - k), (0, p - k))) + tail
    left = q @ v
    u, vh = (right, left.transpose(-2, -1)) if wide else (left, right.transpose(-2, -1))
    if dtypes.is_float(self.dtype) and self.dtype != x.dtype:
        return u.cast(self.dtype), s.cast(self.dtype), vh.cast(self.dtype)
    return u, s, vh
