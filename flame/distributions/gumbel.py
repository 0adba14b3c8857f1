"""Gumbel(loc, scale), as torch.distributions.Gumbel: loc - scale * log(-log(U)) for U uniform on
(tiny, 1 - eps), written as torch's TransformedDistribution of a Uniform, with torch's own log_prob,
mean, mode, variance and entropy."""

from __future__ import annotations

import math
from numbers import Number

import numpy as np

from flame.distributions import _frontend as ops
from flame.distributions import constraints
from flame.distributions.transformed_distribution import TransformedDistribution
from flame.distributions.transforms import AffineTransform, ExpTransform
from flame.distributions.uniform import Uniform
from flame.distributions.utils import broadcast_all, finfo_eps

__all__ = ["Gumbel"]

_EULER = 0.57721566490153286060  # the Euler-Mascheroni constant


class Gumbel(TransformedDistribution):
    """The Gumbel (type-I extreme value) distribution with location loc and scale scale."""

    arg_constraints = {"loc": constraints.real, "scale": constraints.positive}
    support = constraints.real
    has_rsample = True

    def __init__(self, loc, scale, validate_args: bool | None = None) -> None:
        self.loc, self.scale = broadcast_all(loc, scale)
        dtype = self.loc.dtype
        tiny = float(np.finfo(np.float32 if dtype.name == "bf16" else dtype.np_dtype).tiny)
        high = 1 - finfo_eps(dtype)
        if isinstance(loc, Number) and isinstance(scale, Number):
            base_dist = Uniform(tiny, high, validate_args=validate_args)
        else:
            base_dist = Uniform(
                ops.full_like(self.loc, tiny), ops.full_like(self.loc, high), validate_args=validate_args
            )
        transforms = [
            ExpTransform().inv,
            AffineTransform(loc=0, scale=-ops.full_like(self.scale, 1.0)),
            ExpTransform().inv,
            AffineTransform(loc=loc, scale=-self.scale),
        ]
        super().__init__(base_dist, transforms, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        """This distribution with its parameters expanded to batch_shape."""
        new = self._get_checked_instance(Gumbel, _instance)
        new.loc = self.loc.expand(tuple(batch_shape))
        new.scale = self.scale.expand(tuple(batch_shape))
        return super().expand(batch_shape, _instance=new)

    def log_prob(self, value):
        """log density, in torch's closed form (more precise than through the transforms)."""
        if self._validate_args:
            self._validate_sample(value)
        y = (self.loc - value) / self.scale
        return (y - y.exp()) - self.scale.log()

    @property
    def mean(self):
        return self.loc + self.scale * _EULER

    @property
    def mode(self):
        return self.loc

    @property
    def stddev(self):
        return (math.pi / math.sqrt(6)) * self.scale

    @property
    def variance(self):
        return self.stddev.pow(2)

    def entropy(self):
        return self.scale.log() + (1 + _EULER)
