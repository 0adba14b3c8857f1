"""The regularized lower incomplete gamma function P(a, x), torch.special.gammainc, which Gamma.cdf (and so
Chi2.cdf) is: written with flame ops (so it runs eagerly and inside @flame.compile), in f64, rounded once.

P(a, x) = sum over n >= 0 of exp((a + n) log x - x - lgamma(a + n + 1)). As a function of n the terms are a
bell of width about sqrt(x) peaking at n = x - a, so _TERMS of them around the peak (from n = 0 when the
peak is nearer than _TERMS / 2) hold the whole sum; where x - a exceeds _FAR the bell is past what the
terms reach, and 1 - Q(a, x) is taken from Legendre's continued fraction for Q (modified Lentz,
_FRACTION_STEPS steps), which converges fast there. Against SciPy's gammainc the result is within about
1e-12 for a below 1000; for a in the thousands, x within a few sqrt(x) of a, about 1e-6.

The gradient is torch's: to x, the Gamma(a, 1) density exp((a - 1) log x - x - lgamma(a)); to a, none:
a backward that needs one raises torch's NotImplementedError."""

from __future__ import annotations

from flame.distributions import _frontend as ops
from flame.frontend.custom_function import Function
from flame.ir.dtypes import f64

_TERMS = 512
_FAR = 128.0
_FRACTION_STEPS = 32
_TINY = 1e-300  # keeps Lentz's ratios finite


def _series(a, x):
    """P(a, x) as the sum of the _TERMS terms around the peak of the bell (module doc)."""
    start = ((x - a).floor() - _TERMS // 2).clamp(min=0)
    n = start.unsqueeze(-1) + ops.arange(_TERMS, dtype=f64)
    a_n = a.unsqueeze(-1) + n
    log_terms = a_n * x.log().unsqueeze(-1) - x.unsqueeze(-1) - (a_n + 1).lgamma()
    return log_terms.exp().sum(-1)


def _continued_fraction(a, x):
    """Q(a, x) = exp(a log x - x - lgamma(a)) / (x + 1 - a - 1 (1 - a) / (x + 3 - a - ...)), for x well above a."""
    b = x + 1 - a
    c = ops.full_like(b, 1 / _TINY)
    d = 1 / b
    h = d
    for i in range(1, _FRACTION_STEPS + 1):
        an = (a - i) * i
        b = b + 2
        d = an * d + b
        d = 1 / ops.where(d.abs() < _TINY, _TINY, d)
        c = b + an / c
        c = ops.where(c.abs() < _TINY, _TINY, c)
        h = h * d * c
    return (a * x.log() - x - a.lgamma()).exp() * h


def _lower(a, x):
    """P(a, x) of f64 tensors of one shape: 1 at x = inf, NaN for x < 0 or a NaN, as torch's."""
    far = x - a > _FAR
    near = ops.where(far, a, x)  # each branch reads values it is defined at; the other's are discarded
    beyond = ops.where(far, x, a + _FAR + 1)
    p = ops.where(far, 1 - _continued_fraction(a, beyond), _series(a, near))
    return ops.where(x == float("inf"), 1.0, ops.where(x.isnan() | (x < 0), float("nan"), p))


class _Gammainc(Function):
    @staticmethod
    def forward(ctx, a, x):
        ctx.save_for_backward(a, x)
        return _lower(a.to(f64), x.to(f64)).to(x.dtype)

    @staticmethod
    def backward(ctx, g):
        if ctx.needs_input_grad[0]:
            raise NotImplementedError("the derivative for 'igamma: input' is not implemented (the gradient of "
                                      "gammainc(a, x), of Gamma.cdf, with respect to a / the concentration)")
        a, x = ctx.saved_tensors
        return None, g * ((a - 1) * x.log() - x - a.lgamma()).exp()


def gammainc(a, x):
    """P(a, x) of float tensors a and x, broadcast together, as torch.special.gammainc (module doc)."""
    a, x = ops.broadcast_tensors(a, x)
    return _Gammainc.apply(a, x)
