"""LogisticNormal(loc, scale), as torch.distributions.LogisticNormal: a normal vector pushed onto the
simplex (of one more entry) by StickBreakingTransform."""

from __future__ import annotations

from flame.distributions import constraints
from flame.distributions.normal import Normal
from flame.distributions.transformed_distribution import TransformedDistribution
from flame.distributions.transforms import StickBreakingTransform

__all__ = ["LogisticNormal"]


class LogisticNormal(TransformedDistribution):
    """StickBreakingTransform of Normal(loc, scale) draws over the last dim."""

    arg_constraints = {"loc": constraints.real, "scale": constraints.positive}
    support = constraints.simplex
    has_rsample = True

    def __init__(self, loc, scale, validate_args: bool | None = None) -> None:
        base_dist = Normal(loc, scale, validate_args=validate_args)
        if not base_dist.batch_shape:
            base_dist = base_dist.expand([1])
        super().__init__(base_dist, StickBreakingTransform(), validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        """This distribution with its parameters expanded to batch_shape."""
        new = self._get_checked_instance(LogisticNormal, _instance)
        return super().expand(batch_shape, _instance=new)

    @property
    def loc(self):
        """The normal's mean."""
        return self.base_dist.base_dist.loc

    @property
    def scale(self):
        """The normal's standard deviation."""
        return self.base_dist.base_dist.scale
