"""LogNormal(loc, scale), as torch.distributions.LogNormal: exp of a Normal(loc, scale)."""

from __future__ import annotations

from flame.distributions import constraints
from flame.distributions.normal import Normal
from flame.distributions.transformed_distribution import TransformedDistribution
from flame.distributions.transforms import ExpTransform

__all__ = ["LogNormal"]


class LogNormal(TransformedDistribution):
    """exp(X) for X ~ Normal(loc, scale)."""

    arg_constraints = {"loc": constraints.real, "scale": constraints.positive}
    support = constraints.positive
    has_rsample = True

    def __init__(self, loc, scale, validate_args: bool | None = None) -> None:
        base_dist = Normal(loc, scale, validate_args=validate_args)
        super().__init__(base_dist, ExpTransform(), validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        """This distribution with its parameters expanded to batch_shape."""
        new = self._get_checked_instance(LogNormal, _instance)
        return super().expand(batch_shape, _instance=new)

    @property
    def loc(self):
        """The base Normal's loc."""
        return self.base_dist.loc

    @property
    def scale(self):
        """The base Normal's scale."""
        return self.base_dist.scale

    @property
    def mean(self):
        """The mean."""
        return (self.loc + self.scale.pow(2) / 2).exp()

    @property
    def mode(self):
        """The mode (the most likely value)."""
        return (self.loc - self.scale.square()).exp()

    @property
    def variance(self):
        """The variance."""
        scale2 = self.scale.pow(2)
        return scale2.expm1() * (2 * self.loc + scale2).exp()

    def entropy(self):
        """The base Normal's entropy + loc."""
        return self.base_dist.entropy() + self.loc
