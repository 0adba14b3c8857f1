"""Gamma(concentration, rate) and Chi2(df), as torch.distributions.Gamma and Chi2."""

from __future__ import annotations

from numbers import Number

from flame.distributions import _frontend as ops
from flame.distributions import constraints
from flame.distributions.distribution import Distribution
from flame.distributions.utils import broadcast_all, finfo_tiny

__all__ = ["Chi2", "Gamma"]


_ROUNDS = 12  # candidates per draw: each is accepted with probability above 0.95, so none is below 3e-16


def gamma_rsample_missing(name: str):
    """The error of a reparameterised sample that needs Gamma draws: flame's Gamma draws carry no gradient."""
    return NotImplementedError(
        f"{name}.rsample: flame draws Gamma variates without gradients (torch differentiates them through "
        f"_standard_gamma_grad, which flame lacks), so {name} has has_rsample = False. Use sample() (no "
        f"gradients; a score-function estimator with log_prob for them), or a reparameterisable family such "
        f"as Normal or LogNormal."
    )


def standard_gamma(concentration, shape) -> object:
    """Gamma(concentration, 1) draws of shape `shape` (concentration broadcast to it), without gradients:
    Marsaglia and Tsang's squeeze-free rejection, _ROUNDS candidates per element and the first accepted
    one kept; below concentration 1, Gamma(c + 1) u^(1/c), as torch's sampler. Draws are at least the
    dtype's tiny, as torch's rsample clamps them."""
    with ops.no_grad():
        alpha = concentration.detach().expand(*shape)
        dtype = alpha.dtype
        boost = alpha < 1
        d = ops.where(boost, alpha + 1, alpha) - 1.0 / 3.0
        c = (9 * d).rsqrt()
        x = ops.randn((_ROUNDS, *shape), dtype=dtype)
        u = ops.rand((_ROUNDS + 1, *shape), dtype=dtype)
        out = d  # kept when no candidate is accepted (probability below 3e-16)
        tiny = finfo_tiny(dtype)
        for r in reversed(range(_ROUNDS)):
            v = (1 + c * x[r]) ** 3
            bound = 0.5 * x[r] ** 2 + d - d * v + d * v.clamp(min=tiny).log()
            out = ops.where((v > 0) & (u[r].log() < bound), d * v, out)
        out = ops.where(boost, out * (u[_ROUNDS].log() / alpha).exp(), out)
        return out.clamp(min=tiny)


class Gamma(Distribution):
    """The Gamma distribution of shape concentration and rate rate (mean concentration / rate)."""

    arg_constraints = {"concentration": constraints.positive, "rate": constraints.positive}
    support = constraints.nonnegative
    has_rsample = False  # torch's is True: flame's Gamma draws carry no gradient (gamma_rsample_missing)

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
        """Not available: flame's Gamma draws carry no gradient (the error names what to use instead)."""
        raise gamma_rsample_missing(type(self).__name__)

    def sample(self, sample_shape=()):
        """Gamma draws standard_gamma(concentration) / rate from flame's generator (no gradients)."""
        shape = self._extended_shape(sample_shape)
        with ops.no_grad():
            return standard_gamma(self.concentration, shape) / self.rate.detach().expand(*shape)

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
