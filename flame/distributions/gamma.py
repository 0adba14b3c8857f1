"""Gamma(concentration, rate) and Chi2(df), as torch.distributions.Gamma and Chi2."""

from __future__ import annotations

from numbers import Number

from flame.distributions import _frontend as ops
from flame.distributions import constraints
from flame.distributions.distribution import Distribution
from flame.distributions.exp_family import ExponentialFamily
from flame.distributions.utils import broadcast_all, finfo_tiny
from flame.frontend.incomplete_gamma import gammainc

__all__ = ["Chi2", "Gamma"]


_ROUNDS = 12  # candidates per draw: each is accepted with probability above 0.95, so none is below 3e-16


def standard_gamma(concentration, shape):
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


# torch's bivariate rational approximation of d x / d alpha for 0.8 <= x, alpha <= 8 (Distributions.h)
_RATIONAL = (
    (0.16009398, -0.094634809, 0.025146376, -0.0030648343, 1, 0.32668115, 0.10406089, 0.0014179084),
    (0.53487893, 0.1298071, 0.065735949, -0.0015649758, 0.16639465, 0.020070113, -0.0035938915, -0.00058392623),
    (
        0.040121004,
        -0.0065914022,
        -0.0026286047,
        -0.0013441777,
        0.017050642,
        -0.0021309326,
        0.00085092367,
        -1.5247877e-07,
    ),
)


def _grad_small_x(alpha, x):
    """-(d/d alpha of the Gamma CDF) / pdf at x, from the CDF's series in x (x < 0.8); 0 where NaN."""
    numer, denom = ops.full_like(x, 1.0), alpha
    series1, series2 = numer / denom, numer / (denom * denom)
    for i in range(1, 6):
        numer = numer * (-x / i)
        denom = denom + 1
        series1, series2 = series1 + numer / denom, series2 + numer / (denom * denom)
    log_x = x.log()
    pow_x_alpha = (alpha * log_x).exp()
    pdf = ((alpha - 1) * log_x - x).exp()
    cdf_alpha = (log_x - alpha.digamma()) * pow_x_alpha * series1 - pow_x_alpha * series2
    result = -cdf_alpha / pdf
    return ops.where(result.isnan(), 0.0, result)


def _grad_large_alpha(alpha, x):
    """Rice's saddle-point expansion of d x / d alpha (alpha > 8)."""
    numer_1 = 1 + 24 * alpha * (1 + 12 * alpha)
    numer_2 = 1440 * alpha**2 + 6 * x * (53 - 120 * x) - 65 * x * x / alpha + alpha * (107 + 3600 * x)
    near = numer_1 * numer_2 / (1244160 * alpha**4)
    denom = (8 * alpha).sqrt()
    term2 = denom / (alpha - x)
    term3 = (x - alpha - alpha * (x / alpha).log()) ** -1.5
    term23 = ops.where(x < alpha, term2 - term3, term2 + term3)
    term1 = (x / alpha).log() * term23 - (2 / alpha).sqrt() * (alpha + x) / ((alpha - x) ** 2)
    stirling = 1 + 1 / (12 * alpha) * (1 + 1 / (24 * alpha))
    far = -stirling * x * term1 / denom
    return ops.where((0.9 * alpha <= x) & (x <= 1.1 * alpha), near, far)


def _grad_rational(alpha, x):
    """The rational approximation of d x / d alpha in log(x / alpha) and log(alpha)."""
    u, v = (x / alpha).log(), alpha.log()
    c = [a + u * (b + u * d) for a, b, d in zip(*_RATIONAL)]
    p = c[0] + v * (c[1] + v * (c[2] + v * c[3]))
    q = c[4] + v * (c[5] + v * (c[6] + v * c[7]))
    return (p / q).exp()


def standard_gamma_grad(alpha, x):
    """d x / d alpha of a Gamma(alpha, 1) draw x at fixed CDF value (the implicit reparameterisation
    gradient), by torch's approximations (torch._standard_gamma_grad): a series below x = 0.8, Rice's
    expansion above alpha = 8, a rational fit between."""
    with ops.no_grad():
        return ops.where(
            x < 0.8,
            _grad_small_x(alpha, x),
            ops.where(alpha > 8, _grad_large_alpha(alpha, x), _grad_rational(alpha, x)),
        )


def gamma_rsample(concentration, shape):
    """Gamma(concentration, 1) draws of shape `shape` whose gradient with respect to concentration is
    standard_gamma_grad's (the draw plus that gradient times a zero that carries concentration's)."""
    x = standard_gamma(concentration, shape)
    if not concentration.requires_grad:
        return x
    alpha = concentration.expand(*shape)
    return x + standard_gamma_grad(alpha.detach(), x) * (alpha - alpha.detach())


class Gamma(ExponentialFamily):
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
        """gamma_rsample(concentration) / rate: gradients reach both (concentration's by torch's implicit
        reparameterisation)."""
        shape = self._extended_shape(sample_shape)
        return gamma_rsample(self.concentration, shape) / self.rate.expand(*shape)

    def log_prob(self, value):
        """c log(rate) + (c - 1) log(value) - rate value - lgamma(c), with xlogy's 0 log 0 = 0."""
        if self._validate_args:
            self._validate_sample(value)
        c, rate = self.concentration, self.rate
        return c.xlogy(rate) + (c - 1).xlogy(value) - rate * value - c.lgamma()

    def cdf(self, value):
        """gammainc(concentration, rate value), as torch's (its gradient to the concentration raises torch's
        NotImplementedError; frontend/incomplete_gamma.py)."""
        if self._validate_args:
            self._validate_sample(value)
        return gammainc(self.concentration, self.rate * value)

    def entropy(self):
        """c - log(rate) + lgamma(c) + (1 - c) digamma(c)."""
        c = self.concentration
        return c - self.rate.log() + c.lgamma() + (1.0 - c) * c.digamma()

    _mean_carrier_measure = 0

    @property
    def _natural_params(self):
        return (self.concentration - 1, -self.rate)

    def _log_normalizer(self, x, y):
        return (x + 1).lgamma() + (x + 1) * (-y.reciprocal()).log()


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
