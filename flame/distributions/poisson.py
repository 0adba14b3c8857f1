"""Poisson(rate) and Geometric(probs or logits), as torch.distributions.Poisson and Geometric."""

from __future__ import annotations

from numbers import Number

import numpy as np

from flame.distributions import _frontend as ops
from flame.distributions import constraints
from flame.distributions._known import known_value, shown
from flame.distributions.distribution import Distribution
from flame.distributions.exp_family import ExponentialFamily
from flame.distributions.utils import (
    BinaryProbs,
    broadcast_all,
    finfo_tiny,
)
from flame.frontend.losses import binary_cross_entropy_with_logits

__all__ = ["Geometric", "Poisson"]


class Poisson(ExponentialFamily):
    """The Poisson distribution of rate (mean) rate, on the nonnegative integers."""

    arg_constraints = {"rate": constraints.nonnegative}
    support = constraints.nonnegative_integer

    def __init__(self, rate, validate_args: bool | None = None) -> None:
        (self.rate,) = broadcast_all(rate)
        super().__init__(() if isinstance(rate, Number) else self.rate.shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        """This distribution with its rate expanded to batch_shape."""
        new = self._get_checked_instance(Poisson, _instance)
        batch_shape = tuple(batch_shape)
        new.rate = self.rate.expand(*batch_shape)
        Distribution.__init__(new, batch_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    @property
    def mean(self):
        """rate."""
        return self.rate

    @property
    def mode(self):
        """floor(rate)."""
        return self.rate.floor()

    @property
    def variance(self):
        """rate."""
        return self.rate

    def sample(self, sample_shape=()):
        """Poisson draws of the rate's dtype from flame's generator (no gradients)."""
        shape = self._extended_shape(sample_shape)
        with ops.no_grad():
            return ops.poisson(self.rate.expand(*shape))

    def log_prob(self, value):
        """value log(rate) - rate - lgamma(value + 1), with xlogy's 0 log 0 = 0."""
        if self._validate_args:
            self._validate_sample(value)
        value, rate = broadcast_all(value, self.rate)
        return value.xlogy(rate) - rate - (value + 1).lgamma()

    @property
    def _natural_params(self):
        return (self.rate.log(),)

    def _log_normalizer(self, x):
        return x.exp()


class Geometric(BinaryProbs, Distribution):
    """The number of failures before the first success of Bernoulli(probs) trials."""

    arg_constraints = {"probs": constraints.unit_interval, "logits": constraints.real}
    support = constraints.nonnegative_integer

    def __init__(self, probs=None, logits=None, validate_args: bool | None = None) -> None:
        if (probs is None) == (logits is None):
            raise ValueError("Either `probs` or `logits` must be specified, but not both.")
        if probs is not None:
            (self.probs,) = broadcast_all(probs)
        else:
            (self.logits,) = broadcast_all(logits)
        given = probs if probs is not None else logits
        param = self.probs if probs is not None else self.logits
        super().__init__(() if isinstance(given, Number) else param.shape, validate_args=validate_args)
        if self._validate_args and probs is not None:
            known = known_value(self.probs)  # None inside @flame.compile where not known while tracing
            if known is not None and not bool(np.all(known > 0)):
                value = self.probs
                raise ValueError(
                    f"Expected parameter probs ({type(value).__name__} of shape {tuple(value.shape)}) of "
                    f"distribution {self!r} to be positive but found invalid values:\n{shown(value)}"
                )

    def expand(self, batch_shape, _instance=None):
        """This distribution with its parameter expanded to batch_shape."""
        new = self._get_checked_instance(Geometric, _instance)
        batch_shape = tuple(batch_shape)
        self._expand_probs(new, batch_shape)
        Distribution.__init__(new, batch_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    @property
    def mean(self):
        """1 / probs - 1."""
        return 1.0 / self.probs - 1.0

    @property
    def mode(self):
        """0."""
        return ops.zeros_like(self.probs)

    @property
    def variance(self):
        """(1 / probs - 1) / probs."""
        return (1.0 / self.probs - 1.0) / self.probs

    def sample(self, sample_shape=()):
        """floor(log(u) / log1p(-probs)) with u uniform in (0, 1) (no gradients)."""
        shape = self._extended_shape(sample_shape)
        with ops.no_grad():
            tiny = finfo_tiny(self.probs.dtype)
            u = ops.rand(shape, dtype=self.probs.dtype).clamp(min=tiny)
            return (u.log() / (-self.probs).log1p()).floor()

    def log_prob(self, value):
        """value log1p(-probs) + log(probs), with 0 log1p(-1) = 0 (value 0 at probs 1)."""
        if self._validate_args:
            self._validate_sample(value)
        value, probs = broadcast_all(value, self.probs)
        probs = ops.where((probs == 1) & (value == 0), 0.0, probs)
        return value * (-probs).log1p() + self.probs.log()

    def entropy(self):
        """binary_cross_entropy_with_logits(logits, probs) / probs."""
        return binary_cross_entropy_with_logits(self.logits, self.probs, reduction="none") / self.probs
