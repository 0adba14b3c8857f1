"""InverseGamma(concentration, rate), as torch.distributions.InverseGamma: 1 / Gamma(concentration, rate)."""

from __future__ import annotations

import math

from flame.distributions import _frontend as ops
from flame.distributions import constraints
from flame.distributions.gamma import Gamma
from flame.distributions.transformed_distribution import TransformedDistribution
from flame.distributions.transforms import PowerTransform

__all__ = ["InverseGamma"]


class InverseGamma(TransformedDistribution):
    """The reciprocal of a Gamma(concentration, rate) variable."""

    arg_constraints = {"concentration": constraints.positive, "rate": constraints.positive}
    support = constraints.positive
    has_rsample = True

    def __init__(self, concentration, rate, validate_args: bool | None = None) -> None:
        base_dist = Gamma(concentration, rate, validate_args=validate_args)
        neg_one = ops.full((), -1.0, dtype=base_dist.rate.dtype)
        super().__init__(base_dist, PowerTransform(neg_one), validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        """This distribution with its parameters expanded to batch_shape."""
        new = self._get_checked_instance(InverseGamma, _instance)
        return super().expand(batch_shape, _instance=new)

    @property
    def concentration(self):
        """The Gamma's concentration."""
        return self.base_dist.concentration

    @property
    def rate(self):
        """The Gamma's rate (the scale of the inverse)."""
        return self.base_dist.rate

    @property
    def mean(self):
        """rate / (concentration - 1) above concentration 1, else infinite."""
        c = self.concentration
        return ops.where(c > 1, self.rate / (c - 1), math.inf)

    @property
    def mode(self):
        """rate / (concentration + 1)."""
        return self.rate / (self.concentration + 1)

    @property
    def variance(self):
        """rate^2 / ((c - 1)^2 (c - 2)) above concentration c = 2, else infinite."""
        c = self.concentration
        return ops.where(c > 2, self.rate.square() / ((c - 1).square() * (c - 2)), math.inf)

    def entropy(self):
        """c + log(rate) + lgamma(c) - (1 + c) digamma(c)."""
        c = self.concentration
        return c + self.rate.log() + c.lgamma() - (1 + c) * c.digamma()
