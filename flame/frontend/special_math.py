"""torch.special's functions composed from flame's elementwise ops (so they fuse, trace and differentiate
like the rest): ndtr, log_ndtr, erfcx, xlog1py, entr, multigammaln and the modified Bessel functions
i0, i0e, i1, i1e, with torch's values at the edges (0, +-inf, NaN) and torch's gradient formulas: where
torch has a backward formula the value is handed it (`opmath.with_derivative`), so the gradient is that
formula, not the derivative of the series; ndtr and multigammaln are torch's own composites and
differentiate as such. Those with a formula compute f16 / bf16 in f32, rounded once, as PyTorch's CUDA
kernels; integer inputs give the default floating dtype."""

from __future__ import annotations

import math

from flame.errors import ArgumentError, ArgumentTypeError
from flame.frontend import pointwise_formulas, torch_formulas
from flame.frontend.context import user_location
from flame.frontend.creation import arange, as_tensor
from flame.frontend.default_dtype import as_floating, get_default_dtype
from flame.frontend.dispatch import apply
from flame.frontend.opmath import wants_gradient, wide, with_derivative
from flame.frontend.promotion import result_type
from flame.frontend.tensor import Tensor
from flame.frontend.tensor_core import where
from flame.frontend.torch_saves import saves
from flame.ir.dtypes import f64

__all__ = ["entr", "erfcx", "i0", "i0e", "i1", "i1e", "log_ndtr", "multigammaln", "ndtr", "ndtri", "xlog1py"]

_SQRT1_2 = math.sqrt(0.5)
_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)


def _floating(x) -> Tensor:
    return as_floating(x if isinstance(x, Tensor) else as_tensor(x))


def _rounded(x: Tensor, compute) -> Tensor:
    """compute(x) in x's opmath dtype (f32 for f16 / bf16), rounded once to x's dtype."""
    w = wide(x)
    out = compute(w)
    return out if w is x else out.to(x.dtype)


def _with_derivative(x: Tensor, value: Tensor, derivative) -> Tensor:
    """value, whose gradient is the cotangent times derivative(x in opmath, value in opmath)."""
    if not wants_gradient(x):
        return value
    w = wide(x).detach()
    return with_derivative(x, value, derivative(w, wide(value).detach()))


# ---- the normal distribution and the scaled complementary error function -----------------------------

def _erfcx(x: Tensor) -> Tensor:
    """exp(x^2) erfc(x) of an f32 / f64 x. Below `big`: the product, exp(x^2) as exp(hi^2) exp(lo (x + hi))
    with hi = x rounded to few bits (hi^2 exact), so x^2's rounding does not scale the result; from `big`
    on: the asymptotic series 1 / (x sqrt(pi)) sum_k (-1)^k (2k - 1)!! / (2 x^2)^k, whose smallest kept
    term there is below the dtype's rounding. Far below zero the result overflows to inf, as torch's."""
    double = x.dtype == f64
    big, terms, scale, low = (10.0, 20, 4096.0, -30.0) if double else (5.0, 12, 64.0, -10.0)
    near = x < big
    xd = where(near, x, 0.0).clamp(min=low)
    hi = (xd * scale).round() / scale
    direct = (hi * hi).exp() * ((xd - hi) * (xd + hi)).exp() * xd.erfc()
    xa = where(near, big, x)  # NaN takes this branch, and stays NaN
    u = 1.0 / (xa * xa)
    series = 0.0
    for k in range(terms, 0, -1):
        c = (-1.0) ** k * math.prod(range(1, 2 * k, 2)) / 2.0**k
        series = (series + c) * u
    asymptotic = (series + 1.0) / (xa * math.sqrt(math.pi))
    return where(near, direct, asymptotic)


@saves("input", "result", vjp=pointwise_formulas.erfcx)
def erfcx(input: Tensor) -> Tensor:  # noqa: A002
    """exp(x^2) erfc(x), accurate for large x (where erfc underflows), as torch.special.erfcx. The gradient
    is PyTorch's, 2 x erfcx(x) - 2 / sqrt(pi)."""
    x = _floating(input)
    value = _rounded(x, _erfcx)
    return _with_derivative(x, value, lambda w, y: 2.0 * w * y - _TWO_OVER_SQRT_PI)


def ndtr(input: Tensor) -> Tensor:  # noqa: A002
    """The standard normal distribution function, (1 + erf(x / sqrt 2)) / 2, as torch.special.ndtr computes
    it (its composite: so far below zero 0, where erfc's form would keep a tiny value; log_ndtr keeps it)."""
    x = _floating(input)
    return (1.0 + (x * _SQRT1_2).erf()) * 0.5


def _log_ndtr(x: Tensor) -> Tensor:
    t = x * _SQRT1_2
    lower = (_erfcx(-t) * 0.5).log() - t * t  # stable far below zero
    return where(x < -1.0, lower, (-0.5 * t.erfc()).log1p())


@saves("input", "result", vjp=pointwise_formulas.log_ndtr)
def log_ndtr(input: Tensor) -> Tensor:  # noqa: A002
    """log(ndtr(x)), finite and accurate far below zero (log(erfcx(-x / sqrt 2) / 2) - x^2 / 2 below -1), as
    torch.special.log_ndtr. Gradient: PyTorch's exp(-(log_ndtr(x) + x^2 / 2)) / sqrt(2 pi)."""
    x = _floating(input)
    value = _rounded(x, _log_ndtr)
    return _with_derivative(x, value, lambda w, y: (-(y + 0.5 * w * w)).exp() * _INV_SQRT_2PI)


_SQRT_2PI = math.sqrt(2.0 * math.pi)
_NEWTON_STEPS = 4  # from the starting guess's 4.5e-4: quadratic convergence, past f64's rounding in 3


def _ndtri(p: Tensor) -> Tensor:
    """ndtr's inverse of an f32 / f64 p. From 0.25 on: sqrt(2) erfinv(2p - 1), with 2p - 1 exact there
    (Sterbenz), so relatively accurate near 0.5. Below: Abramowitz and Stegun's 26.2.23 (within 4.5e-4)
    refined by Newton steps on log_ndtr(x) = log(p), which keep full precision as p tends to 0."""
    upper = p >= 0.25
    centre = (2.0 * where(upper, p, 0.5) - 1.0).erfinv() * math.sqrt(2.0)
    logp = where(upper, 0.01, p).log()  # p < 0: NaN
    t = (-2.0 * logp).sqrt()
    x = (2.515517 + t * (0.802853 + t * 0.010328)) / (1.0 + t * (1.432788 + t * (0.189269 + t * 0.001308))) - t
    for _ in range(_NEWTON_STEPS):
        ln = _log_ndtr(x)
        x = x - (ln - logp) * (ln + 0.5 * x * x).exp() * _SQRT_2PI
    tail = where(p == 0, -math.inf, x)
    return where(upper, centre, tail)


@saves("result", vjp=pointwise_formulas.ndtri)
def ndtri(input: Tensor) -> Tensor:  # noqa: A002
    """The inverse of ndtr: x with ndtr(x) = p (-inf at 0, inf at 1, NaN outside [0, 1]), as
    torch.special.ndtri. Gradient: PyTorch's, sqrt(2 pi) exp(ndtri(p)^2 / 2)."""
    x = _floating(input)
    value = _rounded(x, _ndtri)
    return _with_derivative(x, value, lambda w, y: (0.5 * y * y).exp() * _SQRT_2PI)


# ---- x log terms -------------------------------------------------------------------------------------

@saves("input", vjp=pointwise_formulas.entr)
def entr(input: Tensor) -> Tensor:  # noqa: A002
    """-x log(x) where x > 0, 0 at 0, -inf below 0, NaN at NaN, as torch.special.entr. Gradient: PyTorch's
    -(1 + log x) (inf at 0, NaN below 0)."""
    x = _floating(input)

    def compute(w):
        pos = w > 0
        safe = where(pos, w, 1.0)
        value = where(pos, -safe * safe.log(), where(w == 0, 0.0, -math.inf))
        return where(w.isnan(), w, value)

    value = _rounded(x, compute)
    return _with_derivative(x, value, lambda w, y: -(1.0 + w.log()))


@saves("input", "other", vjp=pointwise_formulas.xlog1py)
def xlog1py(input, other) -> Tensor:  # noqa: A002
    """input * log1p(other), 0 where input is 0 (unless other is NaN: NaN), as torch.special.xlog1py (either
    argument may be a Python number). Gradients: PyTorch's, log1p(other) to input (0 where input is 0 and
    other <= -1), input / (1 + other) to other."""
    dt = result_type(input, other)
    dt = dt if dt.is_float else get_default_dtype()
    x, y = (v.to(dt) if isinstance(v, Tensor) else as_tensor(v, dtype=dt) for v in (input, other))
    wx, wy = wide(x), wide(y)
    log = wy.log1p()
    value = where(wy.isnan(), math.nan, where(wx == 0, 0.0, wx * log)).to(dt)
    if not (wants_gradient(x) or wants_gradient(y)):
        return value
    ax, ay = wx.detach(), wy.detach()
    dx = where((ax == 0) & (ay <= -1.0), 0.0, log.detach())
    dy = ax / (ay + 1.0)
    form = wx * dx + wy * dy
    return apply("straight_through", form.to(dt), value)


# ---- the multivariate log-gamma function -------------------------------------------------------------

def multigammaln(input: Tensor, p: int) -> Tensor:  # noqa: A002
    """log of the multivariate gamma function of dimension p: sum_{j<p} lgamma(a - j / 2) + p (p - 1) / 4
    log(pi), as torch.special.multigammaln / torch.mvlgamma (which, as torch 2.13's, no longer checks that
    the elements exceed (p - 1) / 2: below that the value is lgamma's, of a negative argument)."""
    if not isinstance(p, int) or isinstance(p, bool):
        raise ArgumentTypeError(f"multigammaln: p must be an int, got {type(p).__name__}\n  at {user_location()}")
    if p < 1:
        raise ArgumentError(f"multigammaln: p has to be greater than or equal to 1\n  at {user_location()}")
    x = _floating(input)
    shifts = arange(-p * 0.5 + 0.5, 0.5, 0.5, dtype=x.dtype)
    return (x.unsqueeze(-1) + shifts).lgamma().sum(-1) + p * (p - 1) * math.log(math.pi) / 4


# ---- the modified Bessel functions of the first kind, orders 0 and 1 -----------------------------------

_BESSEL_SPLIT = 20.0  # the power series below, the asymptotic series from here on
_SERIES_TERMS, _ASYMPTOTIC_TERMS = 36, 30  # each accurate to about 1e-15 relative on its side of the split


def _asymptotic_coefficients(nu: int) -> list[float]:
    """(-1)^k a_k of I_nu(x) ~ e^x / sqrt(2 pi x) sum_k (-1)^k a_k / x^k, with
    a_k = prod_{j<=k} (4 nu^2 - (2j - 1)^2) / (k! 8^k)."""
    c = [1.0]
    for k in range(1, _ASYMPTOTIC_TERMS + 1):
        c.append(c[-1] * ((2 * k - 1) ** 2 - 4 * nu * nu) / (8 * k))
    return c


_ASYMPTOTIC = {nu: _asymptotic_coefficients(nu) for nu in (0, 1)}


def _bessel(x: Tensor, nu: int, scaled: bool) -> Tensor:
    """I_nu(x) (nu = 0, 1) of an f32 / f64 x, times exp(-|x|) when scaled. Below the split the power series
    sum_k (x^2 / 4)^k / (k! (k + nu)!) (times x / 2 for nu = 1; positive terms, so no cancellation); from it
    on the asymptotic series (times e^|x| unless scaled). I_1 is odd. NaN stays NaN; at +-inf the unscaled
    value is NaN (inf / inf), as torch's."""
    a = x.abs()
    near = a < _BESSEL_SPLIT
    xs = where(near, x, 0.0)
    q = xs * xs * 0.25
    series = 1.0
    for k in range(_SERIES_TERMS, 0, -1):
        series = 1.0 + series * q * (1.0 / (k * (k + nu)))
    if nu == 1:
        series = series * xs * 0.5
    if scaled:
        series = series * (-xs.abs()).exp()
    xa = where(near, _BESSEL_SPLIT, a)  # NaN takes this branch, and stays NaN
    u = 1.0 / xa
    tail = 0.0
    for c in reversed(_ASYMPTOTIC[nu][1:]):
        tail = (tail + c) * u
    far = (tail + 1.0) / (2.0 * math.pi * xa).sqrt()
    if not scaled:
        far = far * xa.exp()
    if nu == 1:
        far = where(x < 0, -far, far)
    return where(near, series, far)


def _tiny(w: Tensor) -> Tensor:
    """|w| at most the dtype's epsilon: where PyTorch's i1 / i1e gradients take their limit 0.5."""
    return w.abs() <= (2.220446049250313e-16 if w.dtype == f64 else 1.1920928955078125e-07)


@saves("input", vjp=torch_formulas.not_in_flame)
def i0(input: Tensor) -> Tensor:  # noqa: A002
    """The modified Bessel function of the first kind, order 0, as torch.i0 / torch.special.i0. Gradient:
    PyTorch's, i1(x)."""
    x = _floating(input)
    value = _rounded(x, lambda w: _bessel(w, 0, False))
    return _with_derivative(x, value, lambda w, y: _bessel(w, 1, False))


@saves("input", "result", vjp=torch_formulas.not_in_flame)
def i0e(input: Tensor) -> Tensor:  # noqa: A002
    """exp(-|x|) i0(x), as torch.special.i0e (finite for every finite x). Gradient: PyTorch's,
    i1e(x) - sgn(x) i0e(x)."""
    x = _floating(input)
    value = _rounded(x, lambda w: _bessel(w, 0, True))
    return _with_derivative(x, value, lambda w, y: _bessel(w, 1, True) - w.sign() * y)


@saves("input", "result", vjp=torch_formulas.not_in_flame)
def i1(input: Tensor) -> Tensor:  # noqa: A002
    """The modified Bessel function of the first kind, order 1, as torch.special.i1. Gradient: PyTorch's,
    i0(x) - i1(x) / x (0.5 at 0)."""
    x = _floating(input)
    value = _rounded(x, lambda w: _bessel(w, 1, False))

    def derivative(w, y):
        tiny = _tiny(w)
        safe = where(tiny, 1.0, w)
        return where(tiny, 0.5, _bessel(safe, 0, False) - y / safe)

    return _with_derivative(x, value, derivative)


@saves("input", "result", vjp=torch_formulas.not_in_flame)
def i1e(input: Tensor) -> Tensor:  # noqa: A002
    """exp(-|x|) i1(x), as torch.special.i1e. Gradient: PyTorch's, i0e(x) - i1e(x) (sgn(x) + 1 / x) (0.5 at 0)."""
    x = _floating(input)
    value = _rounded(x, lambda w: _bessel(w, 1, True))

    def derivative(w, y):
        tiny = _tiny(w)
        safe = where(tiny, 1.0, w)
        return where(tiny, 0.5, _bessel(safe, 0, True) - y * (safe.sign() + 1.0 / safe))

    return _with_derivative(x, value, derivative)
