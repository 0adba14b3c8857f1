"""Exponential(rate), as torch.distributions.Exponential."""

from __future__ import annotations

from numbers import Number

from flame.distributions import _frontend as ops
from flame.distributions import constraints
from flame.distributions.exp_family import ExponentialFamily
from flame.distributions.utils import broadcast_all

__all__ = ["Exponential"]


class Exponential(ExponentialFamily):
    """The exponential distribution of rate rate (mean 1 / rate)."""

    arg_constraints = {"rate": constraints.positive}
    support = constraints.nonnegative
    has_rsample = True

    def __init__(self, rate, validate_args: bool | None = None) -> None:
        (self.rate,) = broadcast_all(rate)
        batch_shape = () if isinstance(rate, Number) else self.rate.shape
        super().__init__(batch_shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        """This distribution with its rate expanded to batch_shape."""
        new = self._get_checked_instance(Exponential, _instance)
        batch_shape = tuple(batch_shape)
        new.rate = self.rate.expand(*batch_shape)
        super(Exponential, new).__init__(batch_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    @property
    def mean(self):
        """The mean."""
        return self.rate.reciprocal()

    @property
    def mode(self):
        """The mode (the most likely value)."""
        return ops.zeros_like(self.rate)

    @property
    def stddev(self):
        """The standard deviation."""
        return self.rate.reciprocal()

    @property
    def variance(self):
        """The variance."""
        return self.rate.pow(-2)

    def rsample(self, sample_shape=()):
        """-log1p(-u) / rate with u uniform in [0, 1): gradients reach rate."""
        shape = self._extended_shape(sample_shape)
        u = ops.rand(shape, dtype=self.rate.dtype)
        return -(-u).log1p() / self.rate

    def log_prob(self, value):
        """log(rate) - rate value."""
        if self._validate_args:
            self._validate_sample(value)
        return self.rate.log() - self.rate * value

    def cdf(self, value):
        """1 - exp(-rate value)."""
        if self._validate_args:
            self._validate_sample(value)
        return 1 - (-self.rate * value).exp()

    def icdf(self, value):
        """-log1p(-value) / rate."""
        return -(-value).log1p() / self.rate

    def entropy(self):
        """1 - log(rate)."""
        return 1.0 - self.rate.log()

    _mean_carrier_measure = 0

    @property
    def _natural_params(self):
        return (-self.rate,)

    def _log_normalizer(self, x):
        return -(-x).log()
