"""Laplace(loc, scale), as torch.distributions.Laplace."""

from __future__ import annotations

import math

from flame.distributions import _frontend as ops
from flame.distributions.distribution import LocScale
from flame.distributions.utils import finfo_eps

__all__ = ["Laplace"]


class Laplace(LocScale):
    """The Laplace distribution of location loc and scale scale."""

    def expand(self, batch_shape, _instance=None):
        """This distribution with its parameters expanded to batch_shape."""
        return self._expand_as(Laplace, batch_shape, _instance)

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
