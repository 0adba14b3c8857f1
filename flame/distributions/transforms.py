"""Shape-preserving transforms of flame.distributions, as torch.distributions.transforms': each maps x
to y = t(x), with t.inv and log|dy/dx| (log_abs_det_jacobian) for TransformedDistribution."""

from __future__ import annotations

import math
from numbers import Number

from flame.distributions import _frontend as ops
from flame.distributions import constraints
from flame.distributions._known import known_value
from flame.distributions.utils import clamp_probs, sum_rightmost
from flame.errors import TraceError
from flame.frontend.activations import softplus
from flame.frontend.context import user_location
from flame.frontend.tensor import Tensor

__all__ = [
    "AbsTransform",
    "AffineTransform",
    "ComposeTransform",
    "ExpTransform",
    "SigmoidTransform",
    "TanhTransform",
    "Transform",
]


class Transform:
    """An invertible map with a computable log |Jacobian determinant|; subclasses define _call,
    _inverse and log_abs_det_jacobian."""

    bijective = False
    domain = constraints.real
    codomain = constraints.real
    sign = 1

    def __init__(self, cache_size: int = 0) -> None:
        if cache_size not in (0, 1):
            raise ValueError("cache_size must be 0 or 1")
        self._cache_size = cache_size
        self._inv = None

    @property
    def event_dim(self) -> int:
        """How many rightmost dims make up one event."""
        if self.domain.event_dim == self.codomain.event_dim:
            return self.domain.event_dim
        raise ValueError("Please use either .domain.event_dim or .codomain.event_dim")

    @property
    def inv(self) -> Transform:
        """The inverse transform."""
        return _InverseTransform(self)

    def __call__(self, x):
        return self._call(x)

    def __eq__(self, other) -> bool:
        return self is other

    def __ne__(self, other) -> bool:
        return not self.__eq__(other)

    __hash__ = object.__hash__

    def _inv_call(self, y):
        return self._inverse(y)

    def _call(self, x):
        raise NotImplementedError

    def _inverse(self, y):
        raise NotImplementedError(f"{self.__class__.__name__} has no inverse")

    def log_abs_det_jacobian(self, x, y):
        """log |dy/dx| at the pair x, y = t(x)."""
        raise NotImplementedError

    def forward_shape(self, shape):
        """The shape of t(x) for x of shape."""
        return shape

    def inverse_shape(self, shape):
        """The shape of t.inv(y) for y of shape."""
        return shape

    def __repr__(self) -> str:
        return self.__class__.__name__ + "()"


class _InverseTransform(Transform):
    def __init__(self, transform: Transform) -> None:
        super().__init__()
        self._inv = transform

    def __eq__(self, other) -> bool:
        return isinstance(other, _InverseTransform) and self._inv == other._inv

    __hash__ = object.__hash__

    @property
    def domain(self):
        """The constraint the inputs satisfy."""
        return self._inv.codomain

    @property
    def codomain(self):
        """The constraint the outputs satisfy."""
        return self._inv.domain

    @property
    def bijective(self):
        """Whether the transform is a bijection."""
        return self._inv.bijective

    @property
    def sign(self):
        """The sign of the derivative (+1 or -1) of a monotone transform."""
        return self._inv.sign

    @property
    def inv(self):
        """The inverse transform."""
        return self._inv

    def __call__(self, x):
        return self._inv._inv_call(x)

    def log_abs_det_jacobian(self, x, y):
        """Minus the forward transform's, at the swapped pair."""
        return -self._inv.log_abs_det_jacobian(y, x)


class ComposeTransform(Transform):
    """parts applied in order: parts[-1](...parts[0](x))."""

    def __init__(self, parts: list, cache_size: int = 0) -> None:
        super().__init__(cache_size=cache_size)
        self.parts = list(parts)

    def __eq__(self, other) -> bool:
        return isinstance(other, ComposeTransform) and self.parts == other.parts

    __hash__ = object.__hash__

    @property
    def _dim(self) -> int:
        """The largest event_dim of the parts."""
        return max([p.domain.event_dim for p in self.parts] + [0])

    def _widened(self, c):
        return c if c.event_dim >= self._dim else constraints.independent(c, self._dim - c.event_dim)

    @property
    def domain(self):
        """The constraint the inputs satisfy."""
        return self._widened(self.parts[0].domain) if self.parts else constraints.real

    @property
    def codomain(self):
        """The constraint the outputs satisfy."""
        return self._widened(self.parts[-1].codomain) if self.parts else constraints.real

    @property
    def bijective(self):
        """Whether the transform is a bijection."""
        return all(p.bijective for p in self.parts)

    @property
    def sign(self):
        """The sign of the derivative (+1 or -1) of a monotone transform."""
        sign = 1
        for p in self.parts:
            sign = sign * p.sign
        return sign

    @property
    def inv(self):
        """The inverse transform."""
        return ComposeTransform([p.inv for p in reversed(self.parts)])

    def __call__(self, x):
        for part in self.parts:
            x = part(x)
        return x

    def log_abs_det_jacobian(self, x, y):
        """The parts' log |dy/dx| added along the chain, each summed over the event dims it leaves."""
        if not self.parts:
            return ops.zeros_like(x)
        total = 0.0
        for part in self.parts:
            y_part = part(x)
            total = total + sum_rightmost(part.log_abs_det_jacobian(x, y_part), self._dim - part.domain.event_dim)
            x = y_part
        return total

    def __repr__(self) -> str:
        return "ComposeTransform(" + ", ".join(repr(p) for p in self.parts) + ")"


class _Parameterless(Transform):
    """A transform with no parameters: every instance of its class is equal, as torch's."""

    def __eq__(self, other) -> bool:
        return isinstance(other, type(self))

    __hash__ = object.__hash__


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
        return clamp_probs(x.sigmoid())

    def _inverse(self, y):
        y = clamp_probs(y)
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
