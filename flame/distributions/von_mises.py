"""VonMises(loc, concentration), as torch.distributions.VonMises: the circular normal distribution on
[-pi, pi), with torch's polynomial approximations of log I0 and log I1 (Abramowitz and Stegun 9.8) and
Best and Fisher's rejection sampler, run in f64 for a fixed number of rounds so that it traces."""

from __future__ import annotations

import math

from flame.distributions import _frontend as ops
from flame.distributions import constraints
from flame.distributions.distribution import Distribution
from flame.distributions.utils import broadcast_all, lazy_property
from flame.ir.dtypes import f64

__all__ = ["VonMises"]

_I0_COEF_SMALL = [1.0, 3.5156229, 3.0899424, 1.2067492, 0.2659732, 0.360768e-1, 0.45813e-2]
_I0_COEF_LARGE = [
    0.39894228,
    0.1328592e-1,
    0.225319e-2,
    -0.157565e-2,
    0.916281e-2,
    -0.2057706e-1,
    0.2635537e-1,
    -0.1647633e-1,
    0.392377e-2,
]
_I1_COEF_SMALL = [0.5, 0.87890594, 0.51498869, 0.15084934, 0.2658733e-1, 0.301532e-2, 0.32411e-3]
_I1_COEF_LARGE = [
    0.39894228,
    -0.3988024e-1,
    -0.362018e-2,
    0.163801e-2,
    -0.1031555e-1,
    0.2282967e-1,
    -0.2895312e-1,
    0.1787654e-1,
    -0.420059e-2,
]
_COEF_SMALL = [_I0_COEF_SMALL, _I1_COEF_SMALL]
_COEF_LARGE = [_I0_COEF_LARGE, _I1_COEF_LARGE]

_ROUNDS = 48  # candidates per draw: each is accepted with probability above 0.65, so none is below 1e-21


def _eval_poly(y, coef):
    """coef[0] + y coef[1] + y^2 coef[2] + ... by Horner's rule."""
    result = coef[-1]
    for c in reversed(coef[:-1]):
        result = c + y * result
    return result


def log_modified_bessel_fn(x, order: int = 0):
    """log I_order(x) for x > 0 and order 0 or 1, by torch's polynomial approximations."""
    if order not in (0, 1):
        raise AssertionError(f"order must be 0 or 1, got {order}")
    y = (x / 3.75) ** 2
    small = _eval_poly(y, _COEF_SMALL[order])
    if order == 1:
        small = x.abs() * small
    small = small.log()
    large = x - 0.5 * x.log() + _eval_poly(3.75 / x, _COEF_LARGE[order]).log()
    return ops.where(x < 3.75, small, large)


class VonMises(Distribution):
    """The von Mises distribution of circular mean loc and concentration: density
    exp(concentration cos(x - loc)) / (2 pi I0(concentration))."""

    arg_constraints = {"loc": constraints.real, "concentration": constraints.positive}
    support = constraints.real
    has_rsample = False

    def __init__(self, loc, concentration, validate_args: bool | None = None) -> None:
        self.loc, self.concentration = broadcast_all(loc, concentration)
        super().__init__(self.loc.shape, (), validate_args)

    def log_prob(self, value):
        """concentration cos(value - loc) - log(2 pi) - log I0(concentration)."""
        if self._validate_args:
            self._validate_sample(value)
        log_prob = self.concentration * (value - self.loc).cos()
        return log_prob - math.log(2 * math.pi) - log_modified_bessel_fn(self.concentration, order=0)

    @lazy_property
    def _proposal_r(self):
        """Best and Fisher's r of the wrapped-Cauchy proposal, in f64 (1 / kappa + kappa below 1e-5)."""
        kappa = self.concentration.detach().to(f64)
        tau = 1 + (1 + 4 * kappa**2).sqrt()
        rho = (tau - (2 * tau).sqrt()) / (2 * kappa)
        return ops.where(kappa < 1e-5, 1 / kappa + kappa, (1 + rho**2) / (2 * rho))

    def sample(self, sample_shape=()):
        """Best and Fisher's rejection sampler in f64, _ROUNDS candidates per draw and the first accepted
        one kept, wrapped into [-pi, pi) around loc (no gradients)."""
        shape = self._extended_shape(sample_shape)
        with ops.no_grad():
            loc = self.loc.detach().to(f64)
            kappa = self.concentration.detach().to(f64)
            r = self._proposal_r.detach()
            u = ops.rand((3, _ROUNDS, *shape), dtype=f64)
            x = ops.zeros_like(r.expand(*shape))  # kept when no candidate is accepted (below 1e-21)
            for i in reversed(range(_ROUNDS)):
                u1, u2, u3 = u[0, i], u[1, i], u[2, i]
                z = (math.pi * u1).cos()
                f = (1 + r * z) / (r + z)
                c = kappa * (r - f)
                accept = ((c * (2 - c) - u2) > 0) | ((c / u2).log() + 1 - c >= 0)
                x = ops.where(accept, (u3 - 0.5).sign() * f.acos(), x)
            out = (x + math.pi + loc) % (2 * math.pi) - math.pi
            return out.to(self.loc.dtype)

    def expand(self, batch_shape, _instance=None):
        """A VonMises of loc and concentration expanded to batch_shape."""
        batch_shape = tuple(batch_shape)
        validate_args = self.__dict__.get("_validate_args")
        loc, concentration = self.loc.expand(*batch_shape), self.concentration.expand(*batch_shape)
        return type(self)(loc, concentration, validate_args=validate_args)

    @property
    def mean(self):
        """The circular mean, loc."""
        return self.loc

    @property
    def mode(self):
        """loc."""
        return self.loc

    @lazy_property
    def variance(self):
        """The circular variance, 1 - I1(concentration) / I0(concentration)."""
        c = self.concentration
        return 1 - (log_modified_bessel_fn(c, order=1) - log_modified_bessel_fn(c, order=0)).exp()
