"""Gamma(concentration, rate) and Chi2(df), as torch.distributions.Gamma and Chi2."""

from __future__ import annotations

from numbers import Number

from flame.distributions import constraints
from flame.distributions.distribution import Distribution
from flame.distributions.utils import broadcast_all

__all__ = ["Chi2", "Gamma"]


def gamma_rsample_missing(name: str):
    """The error of a sample that needs Gamma draws: flame's generator has no Gamma sampler."""
    return NotImplementedError(
        f"{name}.rsample/sample: flame has no Gamma sampler (torch._standard_gamma). log_prob, entropy and "
        f"the moments work; to sample, draw on the host (e.g. numpy.random.Generator.gamma) and wrap the "
        f"result in flame.tensor, or use a reparameterisable family such as Normal or LogNormal."
    )


class Gamma(Distribution):
    """The Gamma distribution of shape concentration and rate rate (mean concentration / rate)."""

    arg_constraints = {"concentration": constraints.positive, "rate": constraints.positive}
    support = constraints.nonnegative
    has_rsample = True

    def __init__(self, concentration, rate, validate_args: bool | None = None) -> None:
        self.concentration, self.rate = broadcast_all(concentration, rate)
        scalar = isinstance(concentration, Number) and isinstance(rate, Number)
        batch_shape = () if scalar else self.concentration.shape
        super().__init__(batch_shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        """This distribution with its parameters expanded to batch_shape."""
        new = self._get_checked_instance(Gamma, _instance)
        batch_shape = tuple(batch_shape)
        new.concentration = self.concentration.expand(*batch_shape)
        new.rate = self.rate.expand(*batch_shape)
        Distribution.__init__(new, batch_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    @property
    def mean(self):
        """concentration / rate."""
        return self.concentration / self.rate

    @property
    def mode(self):
        """(concentration - 1) / rate, at least 0."""
        return ((self.concentration - 1) / self.rate).clamp(min=0)

    @property
    def variance(self):
        """concentration / rate^2."""
        return self.concentration / self.rate.pow(2)

    def rsample(self, sample_shape=()):
        """Not available: flame draws no Gamma variates (the error names what to use instead)."""
        raise gamma_rsample_missing(type(self).__name__)

    def log_prob(self, value):
        """c log(rate) + (c - 1) log(value) - rate value - lgamma(c), with xlogy's 0 log 0 = 0."""
        if self._validate_args:
            self._validate_sample(value)
        c, rate = self.concentration, self.rate
        return c.xlogy(rate) + (c - 1).xlogy(value) - rate * value - c.lgamma()

    def entropy(self):
        """c - log(rate) + lgamma(c) + (1 - c) digamma(c)."""
        c = self.concentration
        return c - self.rate.log() + c.lgamma() + (1.0 - c) * c.digamma()


class Chi2(Gamma):
    """The chi-squared distribution of df degrees of freedom: Gamma(df / 2, 1 / 2)."""

    arg_constraints = {"df": constraints.positive}

    def __init__(self, df, validate_args: bool | None = None) -> None:
        super().__init__(0.5 * df, 0.5, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        """This distribution with df expanded to batch_shape."""
        return super().expand(batch_shape, self._get_checked_instance(Chi2, _instance))

    @property
    def df(self):
        """The degrees of freedom, 2 concentration."""
        return self.concentration * 2
