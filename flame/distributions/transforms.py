"""Shape-preserving transforms of flame.distributions, as torch.distributions.transforms': each maps x
to y = t(x), with t.inv and log|dy/dx| (log_abs_det_jacobian) for TransformedDistribution."""

from __future__ import annotations

import math
from numbers import Number

from flame.distributions import _frontend as ops
from flame.distributions import constraints
from flame.distributions._known import known_value
from flame.distributions._transform_base import ComposeTransform, Transform, _Parameterless
from flame.distributions._transforms_event import (
    CatTransform,
    CorrCholeskyTransform,
    IndependentTransform,
    LowerCholeskyTransform,
    PositiveDefiniteTransform,
    ReshapeTransform,
    SoftmaxTransform,
    StackTransform,
    StickBreakingTransform,
    _clipped_sigmoid,
)
from flame.distributions.utils import broadcast_all, finfo_eps, finfo_tiny
from flame.errors import TraceError
from flame.frontend.activations import softplus
from flame.frontend.context import user_location
from flame.frontend.tensor import Tensor

__all__ = [
    "AbsTransform",
    "AffineTransform",
    "CatTransform",
    "ComposeTransform",
    "CorrCholeskyTransform",
    "CumulativeDistributionTransform",
    "ExpTransform",
    "IndependentTransform",
    "LowerCholeskyTransform",
    "PositiveDefiniteTransform",
    "PowerTransform",
    "ReshapeTransform",
    "SigmoidTransform",
    "SoftmaxTransform",
    "SoftplusTransform",
    "StackTransform",
    "StickBreakingTransform",
    "TanhTransform",
    "Transform",
    "identity_transform",
]


class ExpTransform(_Parameterless):
    """y = exp(x)."""

    domain = constraints.real
    codomain = constraints.positive
    bijective = True
    sign = +1

    def _call(self, x):
        return x.exp()

    def _inverse(self, y):
        return y.log()

    def log_abs_det_jacobian(self, x, y):
        """log exp'(x) = x."""
        return x


class AbsTransform(_Parameterless):
    """y = |x| (not bijective: its inverse gives the nonnegative preimage, as torch's)."""

    domain = constraints.real
    codomain = constraints.positive

    def _call(self, x):
        return x.abs()

    def _inverse(self, y):
        return y


class SigmoidTransform(_Parameterless):
    """y = sigmoid(x)."""

    domain = constraints.real
    codomain = constraints.unit_interval
    bijective = True
    sign = +1

    def _call(self, x):
        return _clipped_sigmoid(x)

    def _inverse(self, y):
        y = y.clamp(min=finfo_tiny(y.dtype), max=1.0 - finfo_eps(y.dtype))
        return y.log() - (-y).log1p()

    def log_abs_det_jacobian(self, x, y):
        """log sigmoid'(x) = -softplus(-x) - softplus(x)."""
        return -softplus(-x) - softplus(x)


def _equal(a, b) -> bool:
    """Whether two numbers or tensors hold equal values everywhere (torch's `(a == b).all().item()`); a
    traced tensor's values must be known while tracing (flame/distributions/_known.py)."""
    if isinstance(a, Number) and isinstance(b, Number):
        return a == b
    if a is b:
        return True
    same = a == b
    known = known_value(same) if isinstance(same, Tensor) else same
    if known is None:
        raise TraceError(
            "comparing two AffineTransforms reads their loc and scale, whose values a step being compiled "
            f"does not have while tracing; use the same tensor objects in both\n  at {user_location()}"
        )
    return bool(known.all()) if hasattr(known, "all") else bool(known)


class TanhTransform(_Parameterless):
    """y = tanh(x)."""

    domain = constraints.real
    codomain = constraints.interval(-1.0, 1.0)
    bijective = True
    sign = +1

    def _call(self, x):
        return x.tanh()

    def _inverse(self, y):
        return y.atanh()

    def log_abs_det_jacobian(self, x, y):
        """log tanh'(x) = 2 (log 2 - x - softplus(-2 x)), as torch's (stable for large |x|)."""
        return 2.0 * (math.log(2.0) - x - softplus(-2.0 * x))


class AffineTransform(Transform):
    """y = loc + scale x, over event_dim rightmost dims taken together."""

    bijective = True

    def __init__(self, loc, scale, event_dim: int = 0, cache_size: int = 0) -> None:
        super().__init__(cache_size=cache_size)
        self.loc, self.scale, self._event_dim = loc, scale, event_dim

    def with_cache(self, cache_size: int = 1):
        """This transform with the given cache_size."""
        if self._cache_size == cache_size:
            return self
        return AffineTransform(self.loc, self.scale, self._event_dim, cache_size=cache_size)

    def __eq__(self, other) -> bool:
        """torch's: the same kind with equal loc and scale (event_dim not compared)."""
        return isinstance(other, AffineTransform) and _equal(self.loc, other.loc) and _equal(self.scale, other.scale)

    __hash__ = object.__hash__

    @property
    def domain(self):
        """The constraint the inputs satisfy."""
        return constraints.real if self._event_dim == 0 else constraints.independent(constraints.real, self._event_dim)

    codomain = domain

    @property
    def sign(self):
        """The sign of the derivative (+1 or -1) of a monotone transform."""
        if isinstance(self.scale, Number):
            return 1 if float(self.scale) > 0 else -1 if float(self.scale) < 0 else 0
        return self.scale.sign()

    def _call(self, x):
        return self.loc + self.scale * x

    def _inverse(self, y):
        return (y - self.loc) / self.scale

    def forward_shape(self, shape):
        """shape broadcast with loc's and scale's."""
        return ops.broadcast_shapes(tuple(shape), _shape(self.loc), _shape(self.scale))

    def inverse_shape(self, shape):
        """shape broadcast with loc's and scale's."""
        return ops.broadcast_shapes(tuple(shape), _shape(self.loc), _shape(self.scale))

    def log_abs_det_jacobian(self, x, y):
        """log |scale|, broadcast to x's shape, summed over the event dims."""
        shape = x.shape
        if isinstance(self.scale, Number):
            result = ops.full_like(x, math.log(abs(self.scale)))
        else:
            result = self.scale.abs().log()
        if self._event_dim:
            result = result.reshape(*result.shape[: result.ndim - self._event_dim], -1).sum(-1)
            shape = shape[: len(shape) - self._event_dim]
        return result.expand(*shape)


def _shape(x) -> tuple[int, ...]:
    """A tensor's shape; () for a Python number."""
    return tuple(x.shape) if isinstance(x, Tensor) else ()


identity_transform = ComposeTransform([])


class SoftplusTransform(_Parameterless):
    """y = softplus(x) = log(1 + exp(x))."""

    domain = constraints.real
    codomain = constraints.positive
    bijective = True
    sign = +1

    def _call(self, x):
        return softplus(x)

    def _inverse(self, y):
        return (-y).expm1().neg().log() + y

    def log_abs_det_jacobian(self, x, y):
        """log softplus'(x) = -softplus(-x)."""
        return -softplus(-x)


class PowerTransform(Transform):
    """y = x ** exponent, on positive x."""

    domain = constraints.positive
    codomain = constraints.positive
    bijective = True

    def __init__(self, exponent, cache_size: int = 0) -> None:
        super().__init__(cache_size=cache_size)
        (self.exponent,) = broadcast_all(exponent)

    def with_cache(self, cache_size: int = 1):
        """This transform with the given cache_size."""
        if self._cache_size == cache_size:
            return self
        return PowerTransform(self.exponent, cache_size=cache_size)

    def __eq__(self, other) -> bool:
        """torch's: a PowerTransform of equal exponent."""
        return isinstance(other, PowerTransform) and _equal(self.exponent, other.exponent)

    __hash__ = object.__hash__

    @property
    def sign(self):
        """The sign of the exponent (the sign of the derivative)."""
        return self.exponent.sign()

    def _call(self, x):
        return x.pow(self.exponent)

    def _inverse(self, y):
        return y.pow(1 / self.exponent)

    def log_abs_det_jacobian(self, x, y):
        """log |exponent y / x|."""
        return (self.exponent * y / x).abs().log()

    def forward_shape(self, shape):
        """shape broadcast with the exponent's."""
        return ops.broadcast_shapes(tuple(shape), tuple(self.exponent.shape))

    def inverse_shape(self, shape):
        """shape broadcast with the exponent's."""
        return ops.broadcast_shapes(tuple(shape), tuple(self.exponent.shape))


class CumulativeDistributionTransform(Transform):
    """y = distribution.cdf(x), onto the unit interval (a copula's marginal map)."""

    bijective = True
    codomain = constraints.unit_interval
    sign = +1

    def __init__(self, distribution, cache_size: int = 0) -> None:
        super().__init__(cache_size=cache_size)
        self.distribution = distribution

    def with_cache(self, cache_size: int = 1):
        """This transform with the given cache_size."""
        if self._cache_size == cache_size:
            return self
        return type(self)(self.distribution, cache_size=cache_size)

    @property
    def domain(self):
        """The distribution's support."""
        return self.distribution.support

    def _call(self, x):
        return self.distribution.cdf(x)

    def _inverse(self, y):
        return self.distribution.icdf(y)

    def log_abs_det_jacobian(self, x, y):
        """log cdf'(x) = the distribution's log_prob at x."""
        return self.distribution.log_prob(x)
