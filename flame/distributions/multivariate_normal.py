"""MultivariateNormal(loc, covariance_matrix= | precision_matrix= | scale_tril=), as
torch.distributions.MultivariateNormal. The Cholesky factorisation and the triangular solves are written
with flame ops (flame/distributions/_linalg.py: differentiable, and traced by @flame.compile as one small
step per dimension of the event)."""

from __future__ import annotations

import math

from flame.distributions import _frontend as ops
from flame.distributions import constraints
from flame.distributions._linalg import cholesky, cholesky_solve, precision_to_scale_tril, solve_lower
from flame.distributions.distribution import Distribution
from flame.distributions.utils import lazy_property

__all__ = ["MultivariateNormal"]

_GIVEN = ("scale_tril", "covariance_matrix", "precision_matrix")  # torch's order of the checks


def batch_mahalanobis(L, x):
    """The squared Mahalanobis distance |L^-1 x|^2 over the last dim, batch dims broadcast."""
    return solve_lower(L, x).pow(2).sum(-1)


def half_log_det(L):
    """log|det L| of a lower-triangular L with a positive diagonal: the sum of the log diagonal."""
    return L.diagonal(dim1=-2, dim2=-1).log().sum(-1)


class MultivariateNormal(Distribution):
    """The multivariate normal of mean loc and a covariance given by exactly one of covariance_matrix,
    precision_matrix (its inverse) or scale_tril (its lower Cholesky factor, L @ L.mT the covariance);
    batch dims of loc and of the matrix broadcast. The other two are computed on first use."""

    arg_constraints = {
        "loc": constraints.real_vector,
        "covariance_matrix": constraints.positive_definite,
        "precision_matrix": constraints.positive_definite,
        "scale_tril": constraints.lower_cholesky,
    }
    support = constraints.real_vector
    has_rsample = True

    def __init__(
        self, loc, covariance_matrix=None, precision_matrix=None, scale_tril=None, validate_args: bool | None = None
    ) -> None:
        if loc.dim() < 1:
            raise ValueError("loc must be at least one-dimensional.")
        given = {"scale_tril": scale_tril, "covariance_matrix": covariance_matrix, "precision_matrix": precision_matrix}
        if sum(m is not None for m in given.values()) != 1:
            raise ValueError("Exactly one of covariance_matrix or precision_matrix or scale_tril may be specified.")
        name = next(k for k in _GIVEN if given[k] is not None)
        matrix = given[name]
        if matrix.dim() < 2:
            what = "scale_tril matrix" if name == "scale_tril" else name
            raise ValueError(f"{what} must be at least two-dimensional, with optional leading batch dimensions")
        batch_shape = ops.broadcast_shapes(tuple(matrix.shape[:-2]), tuple(loc.shape[:-1]))
        setattr(self, name, matrix.expand(*batch_shape, -1, -1))
        self.loc = loc.expand(*batch_shape, -1)
        super().__init__(batch_shape, self.loc.shape[-1:], validate_args=validate_args)
        if name == "scale_tril":
            self._unbroadcasted_scale_tril = matrix
        elif name == "covariance_matrix":
            self._unbroadcasted_scale_tril = cholesky(matrix)
        else:
            self._unbroadcasted_scale_tril = precision_to_scale_tril(matrix)

    def expand(self, batch_shape, _instance=None):
        """This distribution with its parameters expanded to batch_shape."""
        new = self._get_checked_instance(MultivariateNormal, _instance)
        batch_shape = tuple(batch_shape)
        new.loc = self.loc.expand(*batch_shape, *self.event_shape)
        new._unbroadcasted_scale_tril = self._unbroadcasted_scale_tril
        for name in _GIVEN:
            if name in self.__dict__:
                setattr(new, name, getattr(self, name).expand(*batch_shape, *self.event_shape * 2))
        super(MultivariateNormal, new).__init__(batch_shape, self.event_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    def _matrix_shape(self) -> tuple[int, ...]:
        return (*self._batch_shape, *self._event_shape * 2)

    @lazy_property
    def scale_tril(self):
        """The lower Cholesky factor of the covariance."""
        return self._unbroadcasted_scale_tril.expand(*self._matrix_shape())

    @lazy_property
    def covariance_matrix(self):
        """scale_tril @ scale_tril.mT."""
        L = self._unbroadcasted_scale_tril
        return (L @ L.transpose(-1, -2)).expand(*self._matrix_shape())

    @lazy_property
    def precision_matrix(self):
        """The inverse covariance, L^-T L^-1 (torch's cholesky_inverse, gradient too)."""
        L = self._unbroadcasted_scale_tril
        return cholesky_solve(ops.eye(L.shape[-1], dtype=L.dtype), L).expand(*self._matrix_shape())

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
