"""Kumaraswamy(concentration1, concentration0), as torch.distributions.Kumaraswamy: a Beta-like law on
[0, 1] with a closed-form cdf, (1 - U ** (1 / concentration0)) ** (1 / concentration1) of a uniform U."""

from __future__ import annotations

import math

from flame.distributions import _frontend as ops
from flame.distributions import constraints
from flame.distributions.transformed_distribution import TransformedDistribution
from flame.distributions.transforms import AffineTransform, PowerTransform
from flame.distributions.uniform import Uniform
from flame.distributions.utils import EULER, broadcast_all

__all__ = ["Kumaraswamy"]


def _moments(a, b, n):
    """The n-th moment: b B(1 + n / a, b)."""
    arg1 = 1 + n / a
    return b * (arg1.lgamma() + b.lgamma() - (arg1 + b).lgamma()).exp()


class Kumaraswamy(TransformedDistribution):
    """The Kumaraswamy distribution: density a b x^(a-1) (1 - x^a)^(b-1) for a = concentration1,
    b = concentration0."""

    arg_constraints = {"concentration1": constraints.positive, "concentration0": constraints.positive}
    support = constraints.unit_interval
    has_rsample = True

    def __init__(self, concentration1, concentration0, validate_args: bool | None = None) -> None:
        self.concentration1, self.concentration0 = broadcast_all(concentration1, concentration0)
        base_dist = Uniform(
            ops.full_like(self.concentration0, 0.0),
            ops.full_like(self.concentration0, 1.0),
            validate_args=validate_args,
        )
        transforms = [
            PowerTransform(exponent=self.concentration0.reciprocal()),
            AffineTransform(loc=1.0, scale=-1.0),
            PowerTransform(exponent=self.concentration1.reciprocal()),
        ]
        super().__init__(base_dist, transforms, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        """This distribution with its parameters expanded to batch_shape."""
        new = self._get_checked_instance(Kumaraswamy, _instance)
        new.concentration1 = self.concentration1.expand(*batch_shape)
        new.concentration0 = self.concentration0.expand(*batch_shape)
        return super().expand(batch_shape, _instance=new)

    @property
    def mean(self):
        """b B(1 + 1 / a, b)."""
        return _moments(self.concentration1, self.concentration0, 1)

    @property
    def mode(self):
        """torch's expression: exp(log1p(-b) / b - log1p(-a b)), NaN where either concentration is below 1."""
        a, b = self.concentration1, self.concentration0
        log_mode = b.reciprocal() * (-b).log1p() - (-b * a).log1p()
        return ops.where((b < 1) | (a < 1), math.nan, log_mode).exp()

    @property
    def variance(self):
        """The second moment less the squared mean."""
        return _moments(self.concentration1, self.concentration0, 2) - self.mean.pow(2)

    def entropy(self):
        """(1 - 1 / b) + (1 - 1 / a) H_b - log(a b), with H_b = digamma(b + 1) + euler."""
        t1 = 1 - self.concentration1.reciprocal()
        t0 = 1 - self.concentration0.reciprocal()
        h0 = (self.concentration0 + 1).digamma() + EULER
        return t0 + t1 * h0 - self.concentration1.log() - self.concentration0.log()
