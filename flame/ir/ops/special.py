"""Special functions, elementwise: lgamma, digamma, polygamma (n >= 1) and erfinv, with PyTorch's values
at the poles (lgamma(0) = inf, digamma(+-0) = -+inf, digamma of a negative integer NaN, erfinv(+-1) = +-inf,
erfinv beyond [-1, 1] NaN) and PyTorch's gradients (d lgamma = digamma, d digamma = polygamma(1, .),
d polygamma(n, .) = polygamma(n + 1, .), d erfinv = sqrt(pi) / 2 exp(erfinv^2)).

The references compute in f64 (SciPy's special functions, imported where they run: importing
scipy.special is a sixth of `import flame`) and round once to the input's dtype. polygamma(1, .) is
a trigamma series (PyTorch's reflection below 0.5, the recurrence up to 10, then the asymptotic series),
which the CUDA kernels also evaluate, so the two executors agree at the poles too."""

from __future__ import annotations

import math

import numpy as np

from flame.ir.ops.elementwise import _F32, _LIBM, _opmath, unary
from flame.ir.registry import REQUIRED, Attr

SQRT_PI_OVER_2 = math.sqrt(math.pi) / 2.0


def _f64(x):
    return np.asarray(x).astype(np.float64, copy=False)


def _lgamma_ref(x):
    from scipy import special  # here: see the module's docstring

    w = _f64(x)
    with np.errstate(all="ignore"):
        out = np.where(np.isinf(w), np.inf, special.gammaln(w))  # lgamma(-inf) = inf, as C's and torch's
    return out.astype(x.dtype, copy=False)


def _digamma_ref(x):
    from scipy import special

    with np.errstate(all="ignore"):  # SciPy's psi has torch's poles: -+inf at +-0, NaN at negative integers
        return special.psi(_f64(x)).astype(x.dtype, copy=False)


def _trigamma(w):
    """polygamma(1, w) of f64 w: PyTorch's reflection below 0.5 (so its poles: inf at 0, huge at the
    negative integers, where sin(pi w) rounds to a tiny non-zero), the recurrence up to 10 and the
    asymptotic series to 1/x^15 (accurate to about 1e-16, where PyTorch's shorter series is 5e-10)."""
    with np.errstate(all="ignore"):
        small = w < 0.5
        s = np.sin(math.pi * w)
        result = np.where(small, -(math.pi**2) / (s * s), 0.0)
        x = np.where(small, 1.0 - w, w)
        for _ in range(10):
            low = x < 10.0
            result = np.where(low, result + 1.0 / (x * x), result)
            x = np.where(low, x + 1.0, x)
        result = result + _trigamma_tail(x)
        return np.where(small, -result, result)


def _trigamma_tail(x):
    """1/x + 1/2x^2 + sum B_2k / x^(2k+1), k = 1..7: polygamma(1, x) for x >= 10."""
    ixx = 1.0 / (x * x)
    series = 1.0 / 42 - ixx * (1.0 / 30 - ixx * (5.0 / 66 - ixx * (691.0 / 2730 - ixx * (7.0 / 6))))
    return (1.0 + 1.0 / (2.0 * x) + ixx * (1.0 / 6 - ixx * (1.0 / 30 - ixx * series))) / x


def _polygamma_ref(x, n):
    if n == 1:
        return _trigamma(_f64(x)).astype(x.dtype, copy=False)
    from scipy import special

    w = _f64(x)
    with np.errstate(all="ignore"):  # NaN at +inf, as torch's zeta series
        return np.where(w == np.inf, np.nan, special.polygamma(n, w)).astype(x.dtype, copy=False)


def _erfinv_ref(x):
    from scipy import special

    with np.errstate(all="ignore"):
        return special.erfinv(_f64(x)).astype(x.dtype, copy=False)


unary(
    "lgamma",
    _lgamma_ref,
    lambda b, g, x, y: (b.mul(g, b.digamma(x)),),
    cost=_LIBM,
    doc="log |Gamma(x)|, as torch.lgamma (inf at 0 and the negative integers)",
)
unary(
    "digamma",
    _digamma_ref,
    lambda b, g, x, y: (b.mul(g, b.polygamma(x, n=1)),),
    cost=_LIBM,
    doc="Gamma'(x) / Gamma(x), as torch.digamma (-+inf at +-0, NaN at the negative integers)",
)
POLYGAMMA = unary(
    "polygamma",
    _polygamma_ref,
    lambda b, g, x, y, n: (b.mul(g, b.polygamma(x, n=n + 1)),),
    attrs={"n": Attr("int", REQUIRED)},
    cost=_LIBM,
    doc="the n-th derivative of digamma (n >= 1), as torch.polygamma",
)
def _erfinv_vjp(b, g, x, y):
    """torch's ErfinvBackward0: it saves self, not the result, and computes erfinv(self) again."""
    e = b.erfinv(x)
    return (b.mul(g, b.mul(b.exp(b.mul(e, e)), SQRT_PI_OVER_2)),)


unary(
    "erfinv",
    _erfinv_ref,
    _opmath(_erfinv_vjp),
    **_F32,
    cost=_LIBM,
    doc="the inverse of erf on [-1, 1] (+-inf at +-1, NaN beyond), as torch.erfinv",
)
