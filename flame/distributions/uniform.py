"""Uniform(low, high), as torch.distributions.Uniform: the half-open interval [low, high)."""

from __future__ import annotations

from numbers import Number

from flame.distributions import _frontend as ops
from flame.distributions import constraints
from flame.distributions.distribution import Distribution
from flame.distributions.utils import broadcast_all

__all__ = ["Uniform"]


class Uniform(Distribution):
    """The uniform distribution on [low, high)."""

    @property
    def arg_constraints(self):
        """low < high, checked on both."""
        return {"low": constraints.less_than(self.high), "high": constraints.greater_than(self.low)}

    has_rsample = True

    def __init__(self, low, high, validate_args: bool | None = None) -> None:
        self.low, self.high = broadcast_all(low, high)
        batch_shape = () if isinstance(low, Number) and isinstance(high, Number) else self.low.shape
        super().__init__(batch_shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        """This distribution with its bounds expanded to batch_shape."""
        new = self._get_checked_instance(Uniform, _instance)
        batch_shape = tuple(batch_shape)
        new.low, new.high = self.low.expand(*batch_shape), self.high.expand(*batch_shape)
        super(Uniform, new).__init__(batch_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    @constraints.dependent_property(is_discrete=False, event_dim=0)
    def support(self):
        """The constraint the values satisfy."""
        return constraints.interval(self.low, self.high)

    @property
    def mean(self):
        """The mean."""
        return (self.high + self.low) / 2

    @property
    def mode(self):
        """The mode (the most likely value)."""
        return self.high * float("nan")

    @property
    def stddev(self):
        """The standard deviation."""
        return (self.high - self.low) / 12**0.5

    @property
    def variance(self):
        """The variance."""
        return (self.high - self.low).pow(2) / 12

    def rsample(self, sample_shape=()):
        """low + u (high - low) with u uniform in [0, 1): gradients reach low and high."""
        shape = self._extended_shape(sample_shape)
        u = ops.rand(shape, dtype=self.low.dtype)
        return self.low + u * (self.high - self.low)

    def log_prob(self, value):
        """-log(high - low) inside [low, high), -inf outside."""
        if self._validate_args:
            self._validate_sample(value)
        lb = (self.low <= value).to(self.low.dtype)
        ub = (self.high > value).to(self.low.dtype)
        return (lb * ub).log() - (self.high - self.low).log()

    def cdf(self, value):
        """(value - low) / (high - low), clamped to [0, 1]."""
        if self._validate_args:
            self._validate_sample(value)
        return ((value - self.low) / (self.high - self.low)).clamp(min=0, max=1)

    def icdf(self, value):
        """low + value (high - low)."""
        return value * (self.high - self.low) + self.low

    def entropy(self):
        """log(high - low)."""
        return (self.high - self.low).log()
