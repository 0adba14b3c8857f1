"""The matrix functions nn.utils.parametrizations.orthogonal maps through, written with flame ops so they
run eagerly and inside @flame.compile with gradients from autodiff (torch.matrix_exp,
torch.linalg.solve and torch.linalg.householder_product in torch), and the NumPy QR steps of its
right_inverse, which runs eagerly without gradient (torch.geqrf and the orthogonalisation of a start value).

The matrix exponential scales A by 2^-s so its Frobenius norm is at most 1/2, sums 16 Taylor terms
(a remainder below 1e-19) and squares s times. s is computed in the graph from A's norm, so a compiled
step stays right as the weight moves: all `_SQUARINGS` squarings are traced and those past s keep their
input (norms up to 2^15 are exact; beyond, the series is less accurate). The solve is Gauss-Jordan
elimination without pivoting, which is stable for I - A/2 with A skew-symmetric (its symmetric part is
the identity); it takes one traced step per row, so it suits the matrix sizes of a layer's weight."""

from __future__ import annotations

import numpy as np

from flame.frontend.creation import eye
from flame.frontend.more_math import exp2
from flame.frontend.tensor import Tensor
from flame.frontend.tensor_core import cat, where

_TAYLOR_DEGREE = 16
_SQUARINGS = 16


def matrix_exp(a: Tensor) -> Tensor:
    """exp(a) for square a [..., n, n] (torch.matrix_exp): scaling and squaring of a Taylor series."""
    n = a.shape[-1]
    norm = a.square().sum((-2, -1), keepdim=True).sqrt().detach()
    s = (norm * 2.0).log2().ceil().clamp(0.0, float(_SQUARINGS))  # halvings: |a| / 2^s <= 1/2
    x = a * exp2(-s)
    ident = eye(n, dtype=a.dtype)
    p = ident
    for j in range(_TAYLOR_DEGREE, 0, -1):  # Horner: I + x (I + x/2 (I + x/3 (...)))
        p = ident + (x @ p) / float(j)
    for i in range(_SQUARINGS):
        p = where(s > i, p @ p, p)
    return p


def solve(m: Tensor, b: Tensor) -> Tensor:
    """x with m x = b, for m [..., n, n] and b [..., n, r] (torch.linalg.solve), by Gauss-Jordan
    elimination without pivoting (for matrices that need none, such as I - A/2 with A skew-symmetric)."""
    n = m.shape[-1]
    aug = cat([m, b.expand(*m.shape[:-2], *b.shape[-2:])], -1)
    for j in range(n):
        row = aug[..., j:j + 1, :] / aug[..., j:j + 1, j:j + 1]
        is_j = Tensor(np.arange(n).reshape(n, 1) == j)
        aug = where(is_j, row, aug - aug[..., :, j:j + 1] * row)
    return aug[..., :, n:]


def householder_product(a: Tensor, tau: Tensor) -> Tensor:
    """The first k columns of H_1 ... H_k, H_i = I - tau_i v_i v_i^T, v_i the i-th column of a's strict
    lower triangle with 1 on the diagonal, for a [..., n, k] (n >= k) and tau [..., k]
    (torch.linalg.householder_product)."""
    n, k = a.shape[-2:]
    v = a.tril(-1) + eye(n, k, dtype=a.dtype)
    q = eye(n, k, dtype=a.dtype).expand(*a.shape)
    for i in range(k - 1, -1, -1):
        vi = v[..., :, i:i + 1]
        q = q - (tau[..., i:i + 1].unsqueeze(-1) * vi) @ (vi.mT @ q)
    return q


def geqrf(q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """LAPACK's QR as torch.geqrf returns it: R above the diagonal and the Householder vectors below, and
    the reflections' tau (batch dims looped)."""
    flat = q.reshape(-1, *q.shape[-2:])
    out = [np.linalg.qr(m, mode="raw") for m in flat]
    a = np.stack([h.T for h, _ in out]).reshape(q.shape)
    tau = np.stack([t for _, t in out]).reshape(*q.shape[:-2], -1)
    return a, tau


def make_orthogonal(a: np.ndarray) -> np.ndarray:
    """The Q factor of tall a = QR with diag(R) >= 0 (torch's _make_orthogonal)."""
    flat = a.reshape(-1, *a.shape[-2:])
    out = []
    for m in flat:
        q, r = np.linalg.qr(m)
        out.append(q * np.sign(np.diagonal(r))[None, :])
    return np.stack(out).reshape(*a.shape[:-2], *out[0].shape)


def is_orthogonal(q: np.ndarray) -> bool:
    """q^T q is the identity within 10 n eps (torch's _is_orthogonal)."""
    n, k = q.shape[-2:]
    eps = 10.0 * n * np.finfo(q.dtype).eps
    return bool(np.allclose(np.swapaxes(q, -1, -2) @ q, np.eye(k, dtype=q.dtype), atol=eps))
