"""LowRankMultivariateNormal(loc, cov_factor, cov_diag), as torch.distributions': a multivariate normal of
covariance W W^T + diag(D) for an n x m factor W, computed through the m x m capacitance matrix
I + W^T D^-1 W (Woodbury's identity and the matrix determinant lemma) so that its cost grows with m."""

from __future__ import annotations

import math

from flame.distributions import _frontend as ops
from flame.distributions import constraints
from flame.distributions._linalg import cholesky, solve_lower
from flame.distributions.distribution import Distribution
from flame.distributions.multivariate_normal import batch_mahalanobis
from flame.distributions.utils import lazy_property

__all__ = ["LowRankMultivariateNormal"]


def solve_lower_matrix(L, B):
    """X with L X = B for lower-triangular L [..., n, n] and B [..., n, k] (torch.linalg.solve_triangular
    with upper=False): every column of B at once."""
    return solve_lower(L.unsqueeze(-3), B.mT).mT


def trace_xxt(x):
    """trace(x x^T) of each matrix of a batch: the sum of its squared entries."""
    return x.pow(2).sum(-1).sum(-1)


def capacitance_tril(W, D):
    """The lower Cholesky factor of I + W^T D^-1 W."""
    m = W.shape[-1]
    K = (W.mT / D.unsqueeze(-2)) @ W + ops.eye(m, dtype=W.dtype)
    return cholesky(K, check=False)  # I + W^T D^-1 W is positive definite for every positive D


def lowrank_logdet(W, D, cap_tril):
    """log det(W W^T + D) = 2 log det(capacitance factor) + sum log D (the matrix determinant lemma)."""
    return 2 * cap_tril.diagonal(dim1=-2, dim2=-1).log().sum(-1) + D.log().sum(-1)


def lowrank_mahalanobis(W, D, x, cap_tril):
    """x^T (W W^T + D)^-1 x by Woodbury's identity."""
    wt_dinv_x = ((W.mT / D.unsqueeze(-2)) @ x.unsqueeze(-1)).squeeze(-1)
    return (x.pow(2) / D).sum(-1) - batch_mahalanobis(cap_tril, wt_dinv_x)


class LowRankMultivariateNormal(Distribution):
    """The multivariate normal of mean loc and covariance cov_factor @ cov_factor.mT + diag(cov_diag)."""

    arg_constraints = {
        "loc": constraints.real_vector,
        "cov_factor": constraints.independent(constraints.real, 2),
        "cov_diag": constraints.independent(constraints.positive, 1),
    }
    support = constraints.real_vector
    has_rsample = True

    def __init__(self, loc, cov_factor, cov_diag, validate_args: bool | None = None) -> None:
        if loc.dim() < 1:
            raise ValueError("loc must be at least one-dimensional.")
        event_shape = tuple(loc.shape[-1:])
        if cov_factor.dim() < 2:
            raise ValueError("cov_factor must be at least two-dimensional, with optional leading batch dimensions")
        if tuple(cov_factor.shape[-2:-1]) != event_shape:
            raise ValueError(f"cov_factor must be a batch of matrices with shape {event_shape[0]} x m")
        if tuple(cov_diag.shape[-1:]) != event_shape:
            raise ValueError(f"cov_diag must be a batch of vectors with shape {event_shape}")
        try:
            ops.broadcast_shapes(tuple(loc.shape) + (1,), tuple(cov_factor.shape), tuple(cov_diag.shape) + (1,))
        except Exception as e:
            raise ValueError(
                f"Incompatible batch shapes: loc {tuple(loc.shape)}, cov_factor {tuple(cov_factor.shape)}, "
                f"cov_diag {tuple(cov_diag.shape)}"
            ) from e
        loc_, self.cov_factor, cov_diag_ = ops.broadcast_tensors(loc.unsqueeze(-1), cov_factor, cov_diag.unsqueeze(-1))
        self.loc, self.cov_diag = loc_[..., 0], cov_diag_[..., 0]
        self._unbroadcasted_cov_factor, self._unbroadcasted_cov_diag = cov_factor, cov_diag
        self._capacitance_tril = capacitance_tril(cov_factor, cov_diag)
        super().__init__(tuple(self.loc.shape[:-1]), event_shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        """This distribution with its parameters expanded to batch_shape."""
        new = self._get_checked_instance(LowRankMultivariateNormal, _instance)
        batch_shape = tuple(batch_shape)
        loc_shape = batch_shape + self.event_shape
        new.loc = self.loc.expand(*loc_shape)
        new.cov_diag = self.cov_diag.expand(*loc_shape)
        new.cov_factor = self.cov_factor.expand(*loc_shape, self.cov_factor.shape[-1])
        new._unbroadcasted_cov_factor = self._unbroadcasted_cov_factor
        new._unbroadcasted_cov_diag = self._unbroadcasted_cov_diag
        new._capacitance_tril = self._capacitance_tril
        super(LowRankMultivariateNormal, new).__init__(batch_shape, self.event_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    @property
    def mean(self):
        """loc."""
        return self.loc

    @property
    def mode(self):
        """loc."""
        return self.loc

    def _matrix(self, m):
        return m.expand(*self._batch_shape, *self._event_shape, *self._event_shape)

    @lazy_property
    def variance(self):
        """The covariance's diagonal: the factor's squared row norms plus cov_diag."""
        var = self._unbroadcasted_cov_factor.pow(2).sum(-1) + self._unbroadcasted_cov_diag
        return var.expand(*self._batch_shape, *self._event_shape)

    @lazy_property
    def scale_tril(self):
        """The covariance's lower Cholesky factor, D^1/2 chol(I + D^-1/2 W W^T D^-1/2) as torch computes it."""
        n = self._event_shape[0]
        d_sqrt = self._unbroadcasted_cov_diag.sqrt().unsqueeze(-1)
        dinvsqrt_w = self._unbroadcasted_cov_factor / d_sqrt
        K = dinvsqrt_w @ dinvsqrt_w.mT + ops.eye(n, dtype=d_sqrt.dtype)
        return self._matrix(d_sqrt * cholesky(K, check=False))

    @lazy_property
    def covariance_matrix(self):
        """W W^T + diag(D)."""
        W = self._unbroadcasted_cov_factor
        return self._matrix(W @ W.mT + self._unbroadcasted_cov_diag.diag_embed())

    @lazy_property
    def precision_matrix(self):
        """D^-1 - A^T A with A = C^-1 W^T D^-1 (Woodbury's identity; C the capacitance factor)."""
        wt_dinv = self._unbroadcasted_cov_factor.mT / self._unbroadcasted_cov_diag.unsqueeze(-2)
        A = solve_lower_matrix(self._capacitance_tril, wt_dinv)
        return self._matrix(self._unbroadcasted_cov_diag.reciprocal().diag_embed() - A.mT @ A)

    def rsample(self, sample_shape=()):
        """loc + W eps_W + D^1/2 eps_D of standard normal draws: gradients reach every parameter."""
        shape = self._extended_shape(sample_shape)
        eps_w = ops.randn((*shape[:-1], self.cov_factor.shape[-1]), dtype=self.loc.dtype)
        eps_d = ops.randn(shape, dtype=self.loc.dtype)
        w_eps = (self._unbroadcasted_cov_factor @ eps_w.unsqueeze(-1)).squeeze(-1)
        return self.loc + w_eps + self._unbroadcasted_cov_diag.sqrt() * eps_d

    def _logdet(self):
        return lowrank_logdet(self._unbroadcasted_cov_factor, self._unbroadcasted_cov_diag, self._capacitance_tril)

    def log_prob(self, value):
        """-(n log(2 pi) + log det(cov) + Mahalanobis distance) / 2."""
        if self._validate_args:
            self._validate_sample(value)
        M = lowrank_mahalanobis(
            self._unbroadcasted_cov_factor, self._unbroadcasted_cov_diag, value - self.loc, self._capacitance_tril
        )
        return -0.5 * (self._event_shape[0] * math.log(2 * math.pi) + self._logdet() + M)

    def entropy(self):
        """(n (1 + log(2 pi)) + log det(cov)) / 2."""
        H = 0.5 * (self._event_shape[0] * (1.0 + math.log(2 * math.pi)) + self._logdet())
        return H if not self._batch_shape else H.expand(*self._batch_shape)
