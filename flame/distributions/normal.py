"""Normal(loc, scale), as torch.distributions.Normal."""

from __future__ import annotations

import math

from flame.distributions import _frontend as ops
from flame.distributions.distribution import LocScale
from flame.distributions.exp_family import ExponentialFamily

__all__ = ["Normal"]


class Normal(LocScale, ExponentialFamily):
    """The normal (Gaussian) distribution of mean loc and standard deviation scale."""

    def expand(self, batch_shape, _instance=None):
        """This distribution with its parameters expanded to batch_shape."""
        return self._expand_as(Normal, batch_shape, _instance)

    @property
    def stddev(self):
        """The standard deviation."""
        return self.scale

    @property
    def variance(self):
        """The variance."""
        return self.stddev.pow(2)

    def sample(self, sample_shape=()):
        """A sample without gradients: loc + scale * N(0, 1) noise from flame's generator."""
        with ops.no_grad():
            return self.rsample(sample_shape)

    def rsample(self, sample_shape=()):
        """loc + scale * eps with eps ~ N(0, 1) from flame's generator: gradients reach loc and scale."""
        shape = self._extended_shape(sample_shape)
        eps = ops.randn(shape, dtype=self.loc.dtype)
        return self.loc + eps * self.scale

    def log_prob(self, value):
        """-(value - loc)^2 / (2 scale^2) - log(scale) - log(sqrt(2 pi))."""
        if self._validate_args:
            self._validate_sample(value)
        var = self.scale**2
        return -((value - self.loc) ** 2) / (2 * var) - self.scale.log() - math.log(math.sqrt(2 * math.pi))

    def cdf(self, value):
        """0.5 (1 + erf((value - loc) / (scale sqrt 2)))."""
        if self._validate_args:
            self._validate_sample(value)
        return 0.5 * (1 + ops.erf((value - self.loc) * self.scale.reciprocal() / math.sqrt(2)))

    def icdf(self, value):
        """loc + scale sqrt(2) erfinv(2 value - 1), as torch's."""
        return self.loc + self.scale * ops.erfinv(2 * value - 1) * math.sqrt(2)

    def entropy(self):
        """0.5 + 0.5 log(2 pi) + log(scale)."""
        return 0.5 + 0.5 * math.log(2 * math.pi) + self.scale.log()

    _mean_carrier_measure = 0

    @property
    def _natural_params(self):
        return (self.loc / self.scale.pow(2), -0.5 * self.scale.pow(2).reciprocal())

    def _log_normalizer(self, x, y):
        return -0.25 * x.pow(2) / y + 0.5 * (-math.pi / y).log()
