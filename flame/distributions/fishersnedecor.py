"""FisherSnedecor(df1, df2), as torch.distributions.FisherSnedecor: the F distribution, the ratio of two
scaled chi-squared variables."""

from __future__ import annotations

import math
from numbers import Number

from flame.distributions import _frontend as ops
from flame.distributions import constraints
from flame.distributions.distribution import Distribution
from flame.distributions.gamma import Gamma
from flame.distributions.utils import broadcast_all, finfo_tiny

__all__ = ["FisherSnedecor"]


class FisherSnedecor(Distribution):
    """The F distribution of df1 and df2 degrees of freedom."""

    arg_constraints = {"df1": constraints.positive, "df2": constraints.positive}
    support = constraints.positive
    has_rsample = True

    def __init__(self, df1, df2, validate_args: bool | None = None) -> None:
        self.df1, self.df2 = broadcast_all(df1, df2)
        self._gamma1 = Gamma(self.df1 * 0.5, self.df1)
        self._gamma2 = Gamma(self.df2 * 0.5, self.df2)
        scalar = isinstance(df1, Number) and isinstance(df2, Number)
        super().__init__(() if scalar else self.df1.shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        """This distribution with its parameters expanded to batch_shape."""
        new = self._get_checked_instance(FisherSnedecor, _instance)
        batch_shape = tuple(batch_shape)
        new.df1 = self.df1.expand(*batch_shape)
        new.df2 = self.df2.expand(*batch_shape)
        new._gamma1 = self._gamma1.expand(batch_shape)
        new._gamma2 = self._gamma2.expand(batch_shape)
        super(FisherSnedecor, new).__init__(batch_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    @property
    def mean(self):
        """df2 / (df2 - 2), NaN for df2 <= 2."""
        df2 = ops.where(self.df2 <= 2, math.nan, self.df2)
        return df2 / (df2 - 2)

    @property
    def mode(self):
        """(df1 - 2) / df1 df2 / (df2 + 2), NaN for df1 <= 2."""
        mode = (self.df1 - 2) / self.df1 * self.df2 / (self.df2 + 2)
        return ops.where(self.df1 <= 2, math.nan, mode)

    @property
    def variance(self):
        """2 df2^2 (df1 + df2 - 2) / (df1 (df2 - 2)^2 (df2 - 4)), NaN for df2 <= 4."""
        df2 = ops.where(self.df2 <= 4, math.nan, self.df2)
        return 2 * df2.pow(2) * (self.df1 + df2 - 2) / (self.df1 * (df2 - 2).pow(2) * (df2 - 4))

    def rsample(self, sample_shape=()):
        """X1 / X2 of X1 ~ Gamma(df1 / 2, df1) and X2 ~ Gamma(df2 / 2, df2), both clamped to tiny."""
        shape = self._extended_shape(sample_shape)
        x1 = self._gamma1.rsample(sample_shape).reshape(*shape)
        x2 = self._gamma2.rsample(sample_shape).reshape(*shape)
        tiny = finfo_tiny(x2.dtype)
        return (x1 / x2.clamp(min=tiny)).clamp(min=tiny)

    def log_prob(self, value):
        """The F density's log, as torch writes it."""
        if self._validate_args:
            self._validate_sample(value)
        ct1, ct2, ct3 = self.df1 * 0.5, self.df2 * 0.5, self.df1 / self.df2
        t1 = (ct1 + ct2).lgamma() - ct1.lgamma() - ct2.lgamma()
        t2 = ct1 * ct3.log() + (ct1 - 1) * value.log()
        t3 = (ct1 + ct2) * (ct3 * value).log1p()
        return t1 + t2 - t3
