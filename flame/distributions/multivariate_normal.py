"""MultivariateNormal(loc, scale_tril=...), as torch.distributions.MultivariateNormal. flame has no
Cholesky factorisation, so the covariance is given by its lower Cholesky factor scale_tril; the
triangular solves are forward substitution written with flame ops (differentiable, and traced by
@flame.compile as event_shape[0] small steps)."""

from __future__ import annotations

import math

from flame.distributions import _frontend as ops
from flame.distributions import constraints
from flame.distributions.distribution import Distribution
from flame.distributions.utils import lazy_property

__all__ = ["MultivariateNormal"]


def solve_lower(L, b):
    """x with L x = b for lower-triangular L [..., n, n] and b [..., n] (batch dims broadcast)."""
    n = L.shape[-1]
    xs = []
    for i in range(n):
        s = b[..., i]
        if i:
            s = s - (L[..., i, :i] * ops.stack(xs, -1)).sum(-1)
        xs.append(s / L[..., i, i])
    return ops.stack(xs, -1)


def batch_mahalanobis(L, x):
    """The squared Mahalanobis distance |L^-1 x|^2 over the last dim, batch dims broadcast."""
    return solve_lower(L, x).pow(2).sum(-1)


def half_log_det(L):
    """log|det L| of a lower-triangular L with a positive diagonal: the sum of the log diagonal."""
    return L.diagonal(dim1=-2, dim2=-1).log().sum(-1)


class MultivariateNormal(Distribution):
    """The multivariate normal of mean loc and covariance scale_tril @ scale_tril.mT."""

    arg_constraints = {"loc": constraints.real_vector, "scale_tril": constraints.lower_cholesky}
    support = constraints.real_vector
    has_rsample = True

    def __init__(
        self, loc, covariance_matrix=None, precision_matrix=None, scale_tril=None, validate_args: bool | None = None
    ) -> None:
        if loc.dim() < 1:
            raise ValueError("loc must be at least one-dimensional.")
        given = (covariance_matrix is not None) + (scale_tril is not None) + (precision_matrix is not None)
        if given != 1:
            raise ValueError("Exactly one of covariance_matrix or precision_matrix or scale_tril may be specified.")
        if scale_tril is None:
            which = "covariance_matrix" if covariance_matrix is not None else "precision_matrix"
            raise NotImplementedError(
                f"MultivariateNormal: {which}= needs a Cholesky factorisation, which flame does "
                f"not have; pass scale_tril=, the lower-triangular factor L with positive "
                f"diagonal whose L @ L.mT is the covariance"
            )
        if scale_tril.dim() < 2:
            raise ValueError(
                "scale_tril matrix must be at least two-dimensional, with optional leading batch dimensions"
            )
        batch_shape = ops.broadcast_shapes(tuple(scale_tril.shape[:-2]), tuple(loc.shape[:-1]))
        self.scale_tril = scale_tril.expand(*batch_shape, -1, -1)
        self.loc = loc.expand(*batch_shape, -1)
        super().__init__(batch_shape, self.loc.shape[-1:], validate_args=validate_args)
        self._unbroadcasted_scale_tril = scale_tril

    def expand(self, batch_shape, _instance=None):
        """This distribution with its parameters expanded to batch_shape."""
        new = self._get_checked_instance(MultivariateNormal, _instance)
        batch_shape = tuple(batch_shape)
        new.loc = self.loc.expand(*batch_shape, *self.event_shape)
        new._unbroadcasted_scale_tril = self._unbroadcasted_scale_tril
        if "covariance_matrix" in self.__dict__:
            new.covariance_matrix = self.covariance_matrix.expand(*batch_shape, *self.event_shape * 2)
        if "scale_tril" in self.__dict__:
            new.scale_tril = self.scale_tril.expand(*batch_shape, *self.event_shape * 2)
        super(MultivariateNormal, new).__init__(batch_shape, self.event_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    @lazy_property
    def covariance_matrix(self):
        """scale_tril @ scale_tril.mT."""
        L = self._unbroadcasted_scale_tril
        return (L @ L.transpose(-1, -2)).expand(*self._batch_shape, *self._event_shape * 2)

    @lazy_property
    def precision_matrix(self):
        """The inverse covariance, L^-T L^-1 (by forward substitution)."""
        L = self._unbroadcasted_scale_tril
        n = self._event_shape[0]
        eye = ops.eye(n, dtype=L.dtype)
        inv = solve_lower(L.unsqueeze(-3), eye).transpose(-1, -2)  # L^-1
        return (inv.transpose(-1, -2) @ inv).expand(*self._batch_shape, n, n)

    @property
    def mean(self):
        """The mean."""
        return self.loc

    @property
    def mode(self):
        """The mode (the most likely value)."""
        return self.loc

    @property
    def variance(self):
        """The variance."""
        return self._unbroadcasted_scale_tril.pow(2).sum(-1).expand(*self._batch_shape, *self._event_shape)

    def rsample(self, sample_shape=()):
        """loc + L eps with eps ~ N(0, I) from flame's generator: gradients reach loc and scale_tril."""
        shape = self._extended_shape(sample_shape)
        eps = ops.randn(shape, dtype=self.loc.dtype)
        return self.loc + (self._unbroadcasted_scale_tril @ eps.unsqueeze(-1)).squeeze(-1)

    def log_prob(self, value):
        """-(n log(2 pi) + |L^-1 (value - loc)|^2) / 2 - log|det L|."""
        if self._validate_args:
            self._validate_sample(value)
        diff = value - self.loc
        M = batch_mahalanobis(self._unbroadcasted_scale_tril, diff)
        n = self._event_shape[0]
        return -0.5 * (n * math.log(2 * math.pi) + M) - half_log_det(self._unbroadcasted_scale_tril)

    def entropy(self):
        """n (1 + log(2 pi)) / 2 + log|det L|."""
        H = 0.5 * self._event_shape[0] * (1.0 + math.log(2 * math.pi)) + half_log_det(self._unbroadcasted_scale_tril)
        return H if not self._batch_shape else H.expand(*self._batch_shape)
