"""Weibull(scale, concentration), as torch.distributions.Weibull: Exponential(1) draws raised to
1 / concentration and scaled."""

from __future__ import annotations

from flame.distributions import _frontend as ops
from flame.distributions import constraints
from flame.distributions.exponential import Exponential
from flame.distributions.transformed_distribution import TransformedDistribution
from flame.distributions.transforms import AffineTransform, PowerTransform
from flame.distributions.utils import EULER, broadcast_all

__all__ = ["Weibull"]


class Weibull(TransformedDistribution):
    """The Weibull distribution: P(X > x) = exp(-(x / scale) ** concentration)."""

    arg_constraints = {"scale": constraints.positive, "concentration": constraints.positive}
    support = constraints.positive

    def __init__(self, scale, concentration, validate_args: bool | None = None) -> None:
        self.scale, self.concentration = broadcast_all(scale, concentration)
        self.concentration_reciprocal = self.concentration.reciprocal()
        base_dist = Exponential(ops.full_like(self.scale, 1.0), validate_args=validate_args)
        transforms = [PowerTransform(exponent=self.concentration_reciprocal), AffineTransform(loc=0, scale=self.scale)]
        super().__init__(base_dist, transforms, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        """This distribution with its parameters expanded to batch_shape."""
        new = self._get_checked_instance(Weibull, _instance)
        batch_shape = tuple(batch_shape)
        new.scale = self.scale.expand(*batch_shape)
        new.concentration = self.concentration.expand(*batch_shape)
        new.concentration_reciprocal = new.concentration.reciprocal()
        base_dist = self.base_dist.expand(batch_shape)
        transforms = [PowerTransform(exponent=new.concentration_reciprocal), AffineTransform(loc=0, scale=new.scale)]
        super(Weibull, new).__init__(base_dist, transforms, validate_args=False)
        new._validate_args = self._validate_args
        return new

    @property
    def mean(self):
        """scale Gamma(1 + 1 / concentration)."""
        return self.scale * (1 + self.concentration_reciprocal).lgamma().exp()

    @property
    def mode(self):
        """scale ((k - 1) / k) ** (1 / k) for concentration k (NaN below k = 1, as torch's)."""
        k = self.concentration
        return self.scale * ((k - 1) / k) ** k.reciprocal()

    @property
    def variance(self):
        """scale^2 (Gamma(1 + 2 / k) - Gamma(1 + 1 / k)^2)."""
        r = self.concentration_reciprocal
        return self.scale.pow(2) * ((1 + 2 * r).lgamma().exp() - (2 * (1 + r).lgamma()).exp())

    def entropy(self):
        """euler (1 - 1 / k) + log(scale / k) + 1."""
        r = self.concentration_reciprocal
        return EULER * (1 - r) + (self.scale * r).log() + 1
