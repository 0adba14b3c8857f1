"""HalfNormal(scale) and HalfCauchy(scale), as torch.distributions': |X| for X ~ Normal(0, scale) or
Cauchy(0, scale), as TransformedDistributions through AbsTransform."""

from __future__ import annotations

import math

from flame.distributions import _frontend as ops
from flame.distributions import constraints
from flame.distributions.cauchy import Cauchy
from flame.distributions.normal import Normal
from flame.distributions.transformed_distribution import TransformedDistribution
from flame.distributions.transforms import AbsTransform

__all__ = ["HalfCauchy", "HalfNormal"]


class _Half(TransformedDistribution):
    """|X| for X of a zero-centred symmetric base of scale `scale`: density twice the base's on [0, inf)."""

    arg_constraints = {"scale": constraints.positive}
    support = constraints.nonnegative
    has_rsample = True
    _base = Normal

    def __init__(self, scale, validate_args: bool | None = None) -> None:
        base_dist = self._base(0, scale, validate_args=False)
        super().__init__(base_dist, AbsTransform(), validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        """This distribution with its scale expanded to batch_shape."""
        new = self._get_checked_instance(type(self), _instance)
        return super().expand(batch_shape, _instance=new)

    @property
    def scale(self):
        """The base's scale."""
        return self.base_dist.scale

    @property
    def mode(self):
        """0."""
        return ops.zeros_like(self.scale)

    def log_prob(self, value):
        """The base's log density + log 2 on [0, inf), -inf below."""
        if self._validate_args:
            self._validate_sample(value)
        log_prob = self.base_dist.log_prob(value) + math.log(2)
        return ops.where(value >= 0, log_prob, float("-inf"))

    def cdf(self, value):
        """2 F(value) - 1 of the base's F."""
        if self._validate_args:
            self._validate_sample(value)
        return 2 * self.base_dist.cdf(value) - 1

    def icdf(self, prob):
        """The base's icdf at (prob + 1) / 2."""
        return self.base_dist.icdf((prob + 1) / 2)

    def entropy(self):
        """The base's entropy - log 2."""
        return self.base_dist.entropy() - math.log(2)


class HalfNormal(_Half):
    """|X| for X ~ Normal(0, scale)."""

    _base = Normal

    @property
    def mean(self):
        """scale sqrt(2 / pi)."""
        return self.scale * math.sqrt(2 / math.pi)

    @property
    def variance(self):
        """scale^2 (1 - 2 / pi)."""
        return self.scale.pow(2) * (1 - 2 / math.pi)


class HalfCauchy(_Half):
    """|X| for X ~ Cauchy(0, scale): infinite mean and variance."""

    _base = Cauchy

    @property
    def mean(self):
        """inf."""
        return ops.full_like(self.scale, float("inf"))

    @property
    def variance(self):
        """inf."""
        return ops.full_like(self.scale, float("inf"))
