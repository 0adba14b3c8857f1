"""The regularized incomplete gamma functions P(a, x) and Q(a, x) = 1 - P(a, x), torch.special.gammainc and
gammaincc (torch.igamma / igammac, Tensor.igamma / igammac): written with flame ops (so they run eagerly and
inside @flame.compile), in f64, rounded once to the promoted dtype. Gamma.cdf (and so Chi2.cdf) is P.

Three ways, each where it is accurate, the others' values discarded:
- the series P(a, x) = sum over n >= 0 of exp((a + n) log x - x - lgamma(a + n + 1)). As a function of n the
  terms are a bell of width about sqrt(x) peaking at n = x - a, so _TERMS of them around the peak (from
  n = 0 when the peak is nearer than _TERMS / 2) hold the whole sum; Q is 1 - P there (x below a + 1, or
  within 2 sqrt(a) of it, where Q is not small);
- Legendre's continued fraction for Q (modified Lentz, _FRACTION_STEPS steps) where x > 1.1 and x > a + 1,
  for a above _FRACTION_ANY_A only 2 sqrt(a) or more beyond a (within that it would need more steps); it
  converges fast there, and P is 1 - Q;
- for x <= 1.1 and a < 1, where Q is of order a, the series Q(a, x) = 1 - x^a / Gamma(a + 1)
  - x^a / Gamma(a) sum over n >= 1 of (-x)^n / (n! (a + n)) (Cephes' igamc_series, as torch's), with
  log Gamma(1 + a) from its Taylor series at small a.
Against SciPy both are within about 1e-12 relative (Q down to 1e-300) for a below 100, and about 1e-10 for
a up to 3000, where the factor exp(a log x - x - lgamma(a)) loses digits. Beyond that, with x near a, the
bell is wider than the _TERMS terms and the fraction too slow: there the result is NaN, not a sum that
missed part of the bell (torch's Temme expansion for large a is not here).

At the edges they are torch's: P(a, 0) = 0, P(a, inf) = 1, P(0, x) = 1 for x > 0, P(inf, x) = 0 for finite x;
NaN for a negative a or x, a NaN, a = x = 0 and a = x = inf. Both operands are tensors (a Python number is
torch's TypeError); they broadcast and promote as torch's, two integer tensors being refused as torch's
kernel refuses them. The gradient is torch's: to x, +- the Gamma(a, 1) density
exp((a - 1) log x - x - lgamma(a)); to a, none: a backward that needs one raises torch's NotImplementedError."""

from __future__ import annotations

from flame.errors import ArgumentTypeError
from flame.frontend.broadcasting import broadcast_tensors
from flame.frontend.context import user_location
from flame.frontend.creation import arange, full_like
from flame.frontend.custom_function import Function
from flame.frontend.dispatch import apply
from flame.frontend.opmath import wants_gradient
from flame.frontend.promotion import result_type
from flame.frontend.tensor import Tensor
from flame.frontend.tensor_core import where
from flame.ir.dtypes import f64

__all__ = ["gammainc", "gammaincc"]

_TERMS = 512
_WINDOW_EDGE = -37.0  # log(1e-16): a term this far below the largest adds nothing to the sum
_FRACTION_STEPS = 64
_FRACTION_ANY_A = 30.0  # up to this a the fraction converges in _FRACTION_STEPS steps from x = a + 1 on
_SMALL_X = 1.1
_SMALL_X_TERMS = 30  # 1.1^30 / 30! is far below an ulp
_TINY = 1e-300  # keeps Lentz's ratios finite
_EULER = 0.5772156649015329


def _zeta(k: int, n: int = 40) -> float:
    """Riemann's zeta(k), k >= 2: the first n - 1 terms, then Euler-Maclaurin's tail."""
    head = sum(m ** -k for m in range(n - 1, 0, -1))
    tail = n ** (1 - k) / (k - 1) + n ** -k / 2 + k * n ** (-k - 1) / 12
    tail -= k * (k + 1) * (k + 2) * n ** (-k - 3) / 720
    return head + tail + k * (k + 1) * (k + 2) * (k + 3) * (k + 4) * n ** (-k - 5) / 30240


# log Gamma(1 + a) = -euler a + sum over k >= 2 of (-1)^k zeta(k) a^k / k, for |a| < 1; used below _LGAMMA1P_BELOW
_LGAMMA1P = [-_EULER] + [(-1) ** k * _zeta(k) / k for k in range(2, 31)]
_LGAMMA1P_BELOW = 0.25


def _lgamma1p(a):
    """log Gamma(1 + a), accurate (relative) as a goes to 0, where lgamma(1 + a) loses a's low digits."""
    small = a.clamp(max=_LGAMMA1P_BELOW)
    taylor = small * 0 + _LGAMMA1P[-1]
    for c in reversed(_LGAMMA1P[:-1]):
        taylor = taylor * small + c
    return where(a < _LGAMMA1P_BELOW, taylor * small, (a + 1).lgamma())


def _series(a, x):
    """(P(a, x) as the sum of the _TERMS terms around the peak of the bell (module doc), whether those terms
    hold it): the terms are log-concave in n, so the window holds the sum to an ulp exactly when its end terms
    (its first only where it starts past n = 0) are below _WINDOW_EDGE times the largest."""
    start = ((x - a).floor() - _TERMS // 2).clamp(min=0)
    n = start.unsqueeze(-1) + arange(_TERMS, dtype=f64)
    a_n = a.unsqueeze(-1) + n
    log_terms = a_n * x.log().unsqueeze(-1) - x.unsqueeze(-1) - (a_n + 1).lgamma()
    top = log_terms.amax(-1)
    held = (log_terms[..., -1] - top < _WINDOW_EDGE) & ((start == 0) | (log_terms[..., 0] - top < _WINDOW_EDGE))
    return log_terms.exp().sum(-1), held


def _continued_fraction(a, x):
    """Q(a, x) = exp(a log x - x - lgamma(a)) / (x + 1 - a - 1 (1 - a) / (x + 3 - a - ...)), for x above a + 1."""
    b = x + 1 - a
    c = full_like(b, 1 / _TINY)
    d = 1 / b
    h = d
    for i in range(1, _FRACTION_STEPS + 1):
        an = (a - i) * i
        b = b + 2
        d = an * d + b
        d = 1 / where(d.abs() < _TINY, _TINY, d)
        c = b + an / c
        c = where(c.abs() < _TINY, _TINY, c)
        h = h * d * c
    return (a * x.log() - x - a.lgamma()).exp() * h


def _upper_small_x(a, x):
    """Q(a, x) for x <= 1.1 and 0 < a < 1 by Cephes' igamc_series (module doc)."""
    term = full_like(x, 1.0)
    total = full_like(x, 0.0)
    for n in range(1, _SMALL_X_TERMS + 1):
        term = term * -x / n
        total = total + term / (a + n)
    log_x = x.log()
    return -(a * log_x - _lgamma1p(a)).expm1() - (a * log_x - a.lgamma()).exp() * total


def _edges(a, x, p, lower: bool):
    """p (P or Q of f64 tensors of one shape) with torch's values at the edges (module doc)."""
    one, zero = (1.0, 0.0) if lower else (0.0, 1.0)
    p = where(a.isinf(), zero, p)
    p = where(x.isinf() | (a == 0), one, p)
    p = where(x == 0, zero, p)
    bad = a.isnan() | x.isnan() | (a < 0) | (x < 0) | ((a == 0) & (x == 0)) | (a.isinf() & x.isinf())
    return where(bad, float("nan"), p)


def _incomplete(a, x, lower: bool):
    """P(a, x) (lower) or Q(a, x) of f64 tensors of one shape; each branch reads values it is defined at."""
    fraction = (x > _SMALL_X) & (x > a + 1) & ((a <= _FRACTION_ANY_A) | ((x - a) ** 2 > 4 * a))
    small_x = (x <= _SMALL_X) & (a < 1) & (a > 0)
    q_far = _continued_fraction(where(fraction, a, 1.0), where(fraction, x, 3.0))
    p_near, held = _series(where(fraction, 1.0, a), where(fraction, 1.0, x))
    p_near = where(held, p_near, float("nan"))  # a bell wider than the window: no digits to give (module doc)
    if lower:
        p = where(fraction, 1 - q_far, p_near)
    else:
        q_small = _upper_small_x(where(small_x, a, 0.5), where(small_x, x, 0.5))
        p = where(fraction, q_far, where(small_x, q_small, 1 - p_near))
    return _edges(a, x, p, lower)


class _NoGradientToA(Function):
    """Zeros of a's shape whose backward raises torch's NotImplementedError: added to the gradient form, so a
    backward raises only where it needs the gradient to a."""

    @staticmethod
    def forward(ctx, a, name):
        ctx.name = name
        return a.detach() * 0

    @staticmethod
    def backward(ctx, g):
        raise NotImplementedError(f"the derivative for '{ctx.name}: input' is not implemented (the gradient of the "
                                  "incomplete gamma function with respect to a)")


def _apply(name: str, a, x, lower: bool):
    for what, t in (("input", a), ("other", x)):
        if not isinstance(t, Tensor):
            raise ArgumentTypeError(f"{name}(): argument '{what}' must be Tensor, not {type(t).__name__}\n"
                                    f"  at {user_location()}")
    if not result_type(a, x).is_float:
        raise ArgumentTypeError(f"{name}(): takes floating tensors, got {a.dtype} and {x.dtype}\n"
                                f"  at {user_location()}")
    a, x = broadcast_tensors(a, x)
    dtype = result_type(a, x)
    a64, x64 = a.detach().to(f64), x.detach().to(f64)
    value = _incomplete(a64, x64, lower).to(dtype)
    if not (wants_gradient(a) or wants_gradient(x)):
        return value
    # the gradient form, read only by a backward: d/dx = +- the Gamma(a, 1) density, in the result dtype
    ad, xd = a.detach().to(dtype), x.detach().to(dtype)
    density = ((ad - 1) * xd.log() - xd - ad.lgamma()).exp()
    form = x.to(dtype) * (density if lower else -density) if x.dtype.is_float else value * 0
    if a.dtype.is_float and wants_gradient(a):
        form = form + _NoGradientToA.apply(a.to(dtype), "igamma" if lower else "igammac")
    return apply("straight_through", form, value)


def gammainc(input: Tensor, other: Tensor) -> Tensor:  # noqa: A002
    """P(a, x) = the regularized lower incomplete gamma function of a = input, x = other, broadcast together,
    as torch.special.gammainc / torch.igamma (module doc)."""
    return _apply("gammainc", input, other, True)


def gammaincc(input: Tensor, other: Tensor) -> Tensor:  # noqa: A002
    """Q(a, x) = 1 - P(a, x), the regularized upper incomplete gamma function, accurate where it is small, as
    torch.special.gammaincc / torch.igammac (module doc)."""
    return _apply("gammaincc", input, other, False)
