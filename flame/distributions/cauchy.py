"""Cauchy(loc, scale) and StudentT(df, loc, scale), as torch.distributions.Cauchy and StudentT."""

from __future__ import annotations

import math
from numbers import Number

from flame.distributions import _frontend as ops
from flame.distributions import constraints
from flame.distributions.distribution import Distribution, LocScale
from flame.distributions.gamma import gamma_rsample
from flame.distributions.utils import broadcast_all

__all__ = ["Cauchy", "StudentT"]


class Cauchy(LocScale):
    """The Cauchy (Lorentz) distribution of median loc and half-width scale: no mean, infinite variance."""

    def expand(self, batch_shape, _instance=None):
        """This distribution with its parameters expanded to batch_shape."""
        return self._expand_as(Cauchy, batch_shape, _instance)

    @property
    def mean(self):
        """NaN (the mean does not exist)."""
        return ops.full_like(self.loc, float("nan"))

    @property
    def variance(self):
        """inf."""
        return ops.full_like(self.loc, float("inf"))

    def rsample(self, sample_shape=()):
        """loc + scale tan(pi (u - 1/2)) with u uniform: gradients reach loc and scale."""
        u = ops.rand(self._extended_shape(sample_shape), dtype=self.loc.dtype)
        return self.loc + self.scale * (math.pi * (u - 0.5)).tan()

    def log_prob(self, value):
        """-log(pi) - log(scale) - log1p(((value - loc) / scale)^2)."""
        if self._validate_args:
            self._validate_sample(value)
        return -math.log(math.pi) - self.scale.log() - (((value - self.loc) / self.scale) ** 2).log1p()

    def cdf(self, value):
        """atan((value - loc) / scale) / pi + 1/2."""
        if self._validate_args:
            self._validate_sample(value)
        return ((value - self.loc) / self.scale).atan() / math.pi + 0.5

    def icdf(self, value):
        """loc + scale tan(pi (value - 1/2))."""
        return (math.pi * (value - 0.5)).tan() * self.scale + self.loc

    def entropy(self):
        """log(4 pi) + log(scale)."""
        return math.log(4 * math.pi) + self.scale.log()


class StudentT(Distribution):
    """Student's t distribution of df degrees of freedom, location loc and scale scale."""

    arg_constraints = {"df": constraints.positive, "loc": constraints.real, "scale": constraints.positive}
    support = constraints.real
    has_rsample = True

    def __init__(self, df, loc=0.0, scale=1.0, validate_args: bool | None = None) -> None:
        self.df, self.loc, self.scale = broadcast_all(df, loc, scale)
        scalar = all(isinstance(a, Number) for a in (df, loc, scale))
        super().__init__(() if scalar else self.df.shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        """This distribution with its parameters expanded to batch_shape."""
        new = self._get_checked_instance(StudentT, _instance)
        batch_shape = tuple(batch_shape)
        new.df, new.loc = self.df.expand(*batch_shape), self.loc.expand(*batch_shape)
        new.scale = self.scale.expand(*batch_shape)
        Distribution.__init__(new, batch_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    @property
    def mean(self):
        """loc where df > 1, else NaN."""
        return ops.where(self.df <= 1, float("nan"), self.loc)

    @property
    def mode(self):
        """loc."""
        return self.loc

    @property
    def variance(self):
        """scale^2 df / (df - 2) where df > 2, inf where 1 < df <= 2, NaN where df <= 1."""
        df = self.df
        finite = self.scale.pow(2) * df / ops.where(df > 2, df - 2, 1.0)
        return ops.where(df > 2, finite, ops.where(df > 1, float("inf"), float("nan")))

    def rsample(self, sample_shape=()):
        """loc + scale X / sqrt(Z / df), X ~ N(0, 1) and Z ~ Chi2(df) = 2 Gamma(df / 2) (gamma_rsample):
        gradients reach df, loc and scale."""
        shape = self._extended_shape(sample_shape)
        x = ops.randn(shape, dtype=self.df.dtype)
        z = 2 * gamma_rsample(0.5 * self.df, shape)
        return self.loc + self.scale * x * (z / self.df).rsqrt()

    def log_prob(self, value):
        """-(df + 1)/2 log1p(y^2 / df) - log(scale) - log(df)/2 - log(pi)/2 - lgamma(df/2) + lgamma((df+1)/2)."""
        if self._validate_args:
            self._validate_sample(value)
        y = (value - self.loc) / self.scale
        df = self.df
        z = self.scale.log() + 0.5 * df.log() + 0.5 * math.log(math.pi)
        z = z + (0.5 * df).lgamma() - (0.5 * (df + 1.0)).lgamma()
        return -0.5 * (df + 1.0) * (y**2 / df).log1p() - z

    def entropy(self):
        """log(scale) + (df+1)/2 (digamma((df+1)/2) - digamma(df/2)) + log(df)/2 + log B(df/2, 1/2)."""
        df = self.df
        lbeta = (0.5 * df).lgamma() + math.lgamma(0.5) - (0.5 * (df + 1)).lgamma()
        half = 0.5 * (df + 1)
        return self.scale.log() + half * (half.digamma() - (0.5 * df).digamma()) + 0.5 * df.log() + lbeta
