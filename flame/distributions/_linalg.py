"""The small dense linear algebra MultivariateNormal needs, written with flame ops so that it runs eagerly and
inside @flame.compile, on every executor, with gradients from autodiff: the lower Cholesky factor
(torch.linalg.cholesky), forward substitution (torch.linalg.solve_triangular(upper=False)), and torch's
precision-to-scale_tril conversion. Each walks the matrix one row or column at a time (n small steps for an
n x n matrix), so it suits the event sizes of a distribution (tens), not large matrices."""

from __future__ import annotations

import numpy as np

from flame.distributions import _frontend as ops
from flame.distributions._known import known_value
from flame.errors import LinAlgError
from flame.frontend.context import user_location
from flame.frontend.dispatch import apply

__all__ = ["cholesky", "cholesky_solve", "precision_to_scale_tril", "solve_lower", "tril_inverse"]


def solve_lower(L, b):
    """x with L x = b for lower-triangular L [..., n, n] and b [..., n] (batch dims broadcast); only L's
    lower triangle is read, so the gradient with respect to L is zero above the diagonal (as torch's)."""
    n = L.shape[-1]
    x = None
    for i in range(n):
        s = b[..., i]
        if i:
            s = s - (L[..., i, :i] * x).sum(-1)
        xi = (s / L[..., i, i]).unsqueeze(-1)
        x = xi if x is None else ops.cat([x, xi], -1)
    return x


def tril_inverse(L):
    """The inverse of lower-triangular L [..., n, n] (lower-triangular too), by forward substitution
    against the identity."""
    eye = ops.eye(L.shape[-1], dtype=L.dtype)
    return solve_lower(L.unsqueeze(-3), eye).transpose(-1, -2)  # row k solves L x = e_k


def cholesky_solve(B, L):
    """X with (L L^T) X = B, as torch.cholesky_solve(B, L) (B = I: torch.cholesky_inverse(L)): the value
    from L's lower triangle (L^-T L^-1 B), the gradient torch's, whose formula, -(G X^T + X G^T) L, takes
    the whole of L: above the diagonal too, where a forward substitution's is zero. That gradient is the
    one of (L L^T)^-1 B as a function of every element of L, computed here through the Cholesky factor of
    L L^T (L itself, up to the signs of its columns)."""
    L_inv = tril_inverse(L)
    value = L_inv.transpose(-1, -2) @ (L_inv @ B)
    if not (L.requires_grad or B.requires_grad):
        return value
    full = tril_inverse(cholesky(L @ L.transpose(-1, -2), check=False))
    return apply("straight_through", full.transpose(-1, -2) @ (full @ B), value.detach())


def _lower_read(A):
    """A as torch.linalg.cholesky reads it: values from the lower triangle mirrored (the upper one is
    never read), gradients as of (A + A^T) / 2 (torch's gradient of cholesky is symmetric)."""
    sym = (A + A.transpose(-1, -2)) * 0.5
    lower = A.tril() + A.tril(-1).transpose(-1, -2)
    return sym + (lower - sym).detach()


def cholesky(A, check: bool = True):
    """The lower Cholesky factor L of a symmetric positive-definite A [..., n, n] (L @ L.mT == A), column
    by column. For a matrix that is not positive definite the factor holds NaN (or a non-positive
    diagonal) from the first failing column on; with check, a factor whose values are known (eagerly, or
    while tracing: flame/distributions/_known.py) then raises torch's LinAlgError instead."""
    A = _lower_read(A)
    n = A.shape[-1]
    L = None  # the columns so far, [..., n, j]
    for j in range(n):
        c = A[..., j:, j]
        if j:
            c = c - (L[..., j:, :] * L[..., j : j + 1, :]).sum(-1)
        d = c[..., :1].sqrt()
        col = d if j == n - 1 else ops.cat([d, c[..., 1:] / d], -1)
        if j:
            col = ops.pad(col, [(0, 0)] * (col.ndim - 1) + [(j, 0)])
        L = col.unsqueeze(-1) if L is None else ops.cat([L, col.unsqueeze(-1)], -1)
    if check:
        _check_factorised(L)
    return L


def _check_factorised(L) -> None:
    """torch.linalg.cholesky's LinAlgError for the first matrix (in row-major batch order) whose factor
    has a diagonal entry that is not positive, naming the order of its first failing leading minor; a
    traced factor is checked where its value is known while tracing (flame/distributions/_known.py)."""
    n = L.shape[-1]
    diag = known_value(L.diagonal(dim1=-2, dim2=-1))
    if diag is None:
        return
    diag = diag.reshape(-1, n)
    bad = ~(diag > 0)
    if not bad.any():
        return
    element = int(np.argmax(bad.any(-1)))
    order = int(np.argmax(bad[element])) + 1
    where = f"(Batch element {element}): " if L.ndim > 2 else ""
    raise LinAlgError(
        f"linalg.cholesky: {where}The factorization could not be completed because the input is not "
        f"positive-definite (the leading minor of order {order} is not positive-definite).\n  at {user_location()}"
    )


def precision_to_scale_tril(P):
    """The lower Cholesky factor of P^-1, as torch.distributions.multivariate_normal's: the Cholesky
    factor of P flipped on both axes, flipped back and transposed, is the inverse of the wanted factor."""
    Lf = cholesky(P.flip(-2, -1))
    L_inv = Lf.flip(-2, -1).transpose(-1, -2)
    return tril_inverse(L_inv)
