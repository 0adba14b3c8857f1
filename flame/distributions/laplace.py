"""Laplace(loc, scale), as torch.distributions.Laplace."""

from __future__ import annotations

import math
from numbers import Number

from flame.distributions import _frontend as ops
from flame.distributions import constraints
from flame.distributions.distribution import Distribution
from flame.distributions.utils import broadcast_all, finfo_eps

__all__ = ["Laplace"]


class Laplace(Distribution):
    """The Laplace distribution of location loc and scale scale."""

    arg_constraints = {"loc": constraints.real, "scale": constraints.positive}
    support = constraints.real
    has_rsample = True

    def __init__(self, loc, scale, validate_args: bool | None = None) -> None:
        self.loc, self.scale = broadcast_all(loc, scale)
        batch_shape = () if isinstance(loc, Number) and isinstance(scale, Number) else self.loc.shape
        super().__init__(batch_shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        """This distribution with its parameters expanded to batch_shape."""
        new = self._get_checked_instance(Laplace, _instance)
        batch_shape = tuple(batch_shape)
        new.loc, new.scale = self.loc.expand(*batch_shape), self.scale.expand(*batch_shape)
        super(Laplace, new).__init__(batch_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

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
        return 2 * self.scale.pow(2)

    @property
    def stddev(self):
        """The standard deviation."""
        return math.sqrt(2) * self.scale

    def rsample(self, sample_shape=()):
        """loc - scale sign(u) log1p(-|u|) with u uniform in [eps - 1, 1): gradients reach loc and scale."""
        shape = self._extended_shape(sample_shape)
        eps = finfo_eps(self.loc.dtype)
        u = ops.rand(shape, dtype=self.loc.dtype) * (2 - eps) + (eps - 1)
        return self.loc - self.scale * u.sign() * (-u.abs()).log1p()

    def log_prob(self, value):
        """-log(2 scale) - |value - loc| / scale."""
        if self._validate_args:
            self._validate_sample(value)
        return -(2 * self.scale).log() - (value - self.loc).abs() / self.scale

    def cdf(self, value):
        """0.5 - 0.5 sign(value - loc) expm1(-|value - loc| / scale)."""
        if self._validate_args:
            self._validate_sample(value)
        return 0.5 - 0.5 * (value - self.loc).sign() * (-(value - self.loc).abs() / self.scale).expm1()

    def icdf(self, value):
        """loc - scale sign(value - 0.5) log1p(-2 |value - 0.5|)."""
        term = value - 0.5
        return self.loc - self.scale * term.sign() * (-2 * term.abs()).log1p()

    def entropy(self):
        """1 + log(2 scale)."""
        return 1 + (2 * self.scale).log()
