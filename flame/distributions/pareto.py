"""Pareto(scale, alpha) and GeneralizedPareto(loc, scale, concentration), as torch.distributions'."""

from __future__ import annotations

import math
from numbers import Number

from flame.distributions import _frontend as ops
from flame.distributions import constraints
from flame.distributions.distribution import Distribution
from flame.distributions.exponential import Exponential
from flame.distributions.transformed_distribution import TransformedDistribution
from flame.distributions.transforms import AffineTransform, ExpTransform
from flame.distributions.utils import broadcast_all

__all__ = ["GeneralizedPareto", "Pareto"]


class Pareto(TransformedDistribution):
    """The Pareto (type I) distribution: scale exp(Exponential(alpha)), on [scale, inf)."""

    arg_constraints = {"alpha": constraints.positive, "scale": constraints.positive}

    def __init__(self, scale, alpha, validate_args: bool | None = None) -> None:
        self.scale, self.alpha = broadcast_all(scale, alpha)
        base_dist = Exponential(self.alpha, validate_args=validate_args)
        transforms = [ExpTransform(), AffineTransform(loc=0, scale=self.scale)]
        super().__init__(base_dist, transforms, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        """This distribution with its parameters expanded to batch_shape."""
        new = self._get_checked_instance(Pareto, _instance)
        new.scale = self.scale.expand(*batch_shape)
        new.alpha = self.alpha.expand(*batch_shape)
        return super().expand(batch_shape, _instance=new)

    @property
    def mean(self):
        """alpha scale / (alpha - 1), alpha clamped to at least 1 (infinite at and below 1)."""
        a = self.alpha.clamp(min=1)
        return a * self.scale / (a - 1)

    @property
    def mode(self):
        """scale."""
        return self.scale

    @property
    def variance(self):
        """scale^2 alpha / ((alpha - 1)^2 (alpha - 2)), alpha clamped to at least 2."""
        a = self.alpha.clamp(min=2)
        return self.scale.pow(2) * a / ((a - 1).pow(2) * (a - 2))

    @constraints.dependent_property(is_discrete=False, event_dim=0)
    def support(self):
        """[scale, inf)."""
        return constraints.greater_than_eq(self.scale)

    def entropy(self):
        """log(scale / alpha) + 1 + 1 / alpha."""
        return (self.scale / self.alpha).log() + (1 + self.alpha.reciprocal())


class GeneralizedPareto(Distribution):
    """The generalised Pareto distribution of location loc, scale scale and shape concentration: for
    concentration c != 0, P(X > x) = (1 + c z) ** (-1 / c) with z = (x - loc) / scale; exp(-z) at c = 0."""

    arg_constraints = {"loc": constraints.real, "scale": constraints.positive, "concentration": constraints.real}
    has_rsample = True

    def __init__(self, loc, scale, concentration, validate_args: bool | None = None) -> None:
        self.loc, self.scale, self.concentration = broadcast_all(loc, scale, concentration)
        scalar = all(isinstance(v, Number) for v in (loc, scale, concentration))
        super().__init__(() if scalar else self.loc.shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        """This distribution with its parameters expanded to batch_shape."""
        new = self._get_checked_instance(GeneralizedPareto, _instance)
        batch_shape = tuple(batch_shape)
        new.loc = self.loc.expand(*batch_shape)
        new.scale = self.scale.expand(*batch_shape)
        new.concentration = self.concentration.expand(*batch_shape)
        super(GeneralizedPareto, new).__init__(batch_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    def _safe_concentration(self):
        """(whether concentration is close to 0, concentration with 1 there), as torch's."""
        c = self.concentration
        eq_zero = ops.isclose(c, ops.zeros_like(c))
        return eq_zero, ops.where(eq_zero, 1.0, c)

    def rsample(self, sample_shape=()):
        """icdf of uniform draws."""
        shape = self._extended_shape(sample_shape)
        return self.icdf(ops.rand(shape, dtype=self.loc.dtype))

    def log_prob(self, value):
        """-log(scale) - (1 / c + 1) log1p(c z), or -log(scale) - z at c = 0."""
        if self._validate_args:
            self._validate_sample(value)
        z = (value - self.loc) / self.scale
        eq_zero, safe_conc = self._safe_concentration()
        y = 1 / safe_conc + ops.full_like(z, 1.0)
        where_nonzero = ops.where(y == 0, y, y * (safe_conc * z).log1p())
        return -self.scale.log() - ops.where(eq_zero, z, where_nonzero)

    def log_survival_function(self, value):
        """log P(X > value)."""
        if self._validate_args:
            self._validate_sample(value)
        z = (value - self.loc) / self.scale
        eq_zero, safe_conc = self._safe_concentration()
        return ops.where(eq_zero, -z, -(safe_conc * z).log1p() / safe_conc)

    def log_cdf(self, value):
        """log P(X <= value)."""
        return (-self.log_survival_function(value).exp()).log1p()

    def cdf(self, value):
        """P(X <= value)."""
        return self.log_cdf(value).exp()

    def icdf(self, value):
        """loc + scale / c expm1(-c log1p(-value)), or loc - scale log1p(-value) at c = 0."""
        eq_zero, safe_conc = self._safe_concentration()
        logu = (-value).log1p()
        where_nonzero = self.loc + self.scale / safe_conc * (-safe_conc * logu).expm1()
        return ops.where(eq_zero, self.loc - self.scale * logu, where_nonzero)

    @property
    def mean(self):
        """loc + scale / (1 - c) for c < 1, else NaN."""
        valid = self.concentration < 1
        safe_conc = ops.where(valid, self.concentration, 0.5)
        return ops.where(valid, self.loc + self.scale / (1 - safe_conc), math.nan)

    @property
    def variance(self):
        """scale^2 / ((1 - c)^2 (1 - 2 c)) for c < 1/2, else NaN."""
        valid = self.concentration < 0.5
        safe_conc = ops.where(valid, self.concentration, 0.25)
        return ops.where(valid, self.scale**2 / ((1 - safe_conc) ** 2 * (1 - 2 * safe_conc)), math.nan)

    def entropy(self):
        """log(scale) + c + 1."""
        return (self.scale.log() + self.concentration + 1).expand(*self._batch_shape)

    @property
    def mode(self):
        """loc."""
        return self.loc

    @constraints.dependent_property(is_discrete=False, event_dim=0)
    def support(self):
        """[loc, loc - scale / c] for c < 0, else [loc, inf)."""
        lower = self.loc
        upper = ops.where(self.concentration < 0, lower - self.scale / self.concentration, math.inf)
        return constraints.interval(lower, upper)
