"""The base classes of flame.distributions' transforms, as torch.distributions.transforms': Transform (an
invertible map x -> y = t(x) with t.inv, log|dy/dx| and the shapes it maps), its inverse, ComposeTransform,
and transforms without parameters (every instance of a class equal)."""

from __future__ import annotations

from flame.distributions import _frontend as ops
from flame.distributions import constraints
from flame.distributions.utils import sum_rightmost

__all__ = ["ComposeTransform", "Transform"]


class Transform:
    """An invertible map with a computable log |Jacobian determinant|; subclasses define _call,
    _inverse and log_abs_det_jacobian. With cache_size=1 it keeps its last pair (x, y): called again on
    that very x it returns that y, and its inverse called on that very y returns that x (so the
    log_prob of an rsample reads the draw before, say, a tanh that rounded it to 1), as torch's."""

    bijective = False
    domain = constraints.real
    codomain = constraints.real

    def __init__(self, cache_size: int = 0) -> None:
        if cache_size not in (0, 1):
            raise ValueError("cache_size must be 0 or 1")
        self._cache_size = cache_size
        self._inv = None
        self._cached_x_y = None, None

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

    @property
    def sign(self):
        """The sign (+1 or -1) of the derivative of a monotone transform; a transform that is not one (abs,
        softmax, stick-breaking, a reshape...) has none and raises NotImplementedError, as torch's, so the
        cdf and icdf of a distribution through it refuse instead of reading the base's."""
        raise NotImplementedError

    def with_cache(self, cache_size: int = 1) -> Transform:
        """This transform with the given cache_size (itself where it has it already)."""
        if self._cache_size == cache_size:
            return self
        if type(self).__init__ is Transform.__init__:
            return type(self)(cache_size=cache_size)
        raise NotImplementedError(f"{type(self)}.with_cache is not implemented")

    def __call__(self, x):
        if self._cache_size == 0:
            return self._call(x)
        x_old, y_old = self._cached_x_y
        if x is x_old:
            return y_old
        y = self._call(x)
        self._cached_x_y = x, y
        return y

    def __eq__(self, other) -> bool:
        return self is other

    def __ne__(self, other) -> bool:
        return not self.__eq__(other)

    __hash__ = object.__hash__

    def _inv_call(self, y):
        if self._cache_size == 0:
            return self._inverse(y)
        x_old, y_old = self._cached_x_y
        if y is y_old:
            return x_old
        x = self._inverse(y)
        self._cached_x_y = x, y
        return x

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
        super().__init__(cache_size=transform._cache_size)
        self._inv = transform

    def with_cache(self, cache_size: int = 1) -> Transform:
        """The inverse of the forward transform with the given cache_size."""
        return self._inv.with_cache(cache_size).inv

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

    def forward_shape(self, shape):
        """The forward transform's inverse_shape."""
        return self._inv.inverse_shape(shape)

    def inverse_shape(self, shape):
        """The forward transform's forward_shape."""
        return self._inv.forward_shape(shape)

    def __repr__(self) -> str:
        return f"_InverseTransform({self._inv!r})"


class ComposeTransform(Transform):
    """parts applied in order: parts[-1](...parts[0](x))."""

    def __init__(self, parts: list, cache_size: int = 0) -> None:
        if cache_size:
            parts = [part.with_cache(cache_size) for part in parts]
        super().__init__(cache_size=cache_size)
        self.parts = list(parts)

    def with_cache(self, cache_size: int = 1) -> Transform:
        """This composition with the given cache_size (its parts' too)."""
        if self._cache_size == cache_size:
            return self
        return ComposeTransform(self.parts, cache_size=cache_size)

    def __eq__(self, other) -> bool:
        return isinstance(other, ComposeTransform) and self.parts == other.parts

    __hash__ = object.__hash__

    @property
    def domain(self):
        """The first part's domain, widened to the event dims the whole chain reads (torch's rule)."""
        if not self.parts:
            return constraints.real
        domain = self.parts[0].domain
        event_dim = self.parts[-1].codomain.event_dim
        for part in reversed(self.parts):
            event_dim += part.domain.event_dim - part.codomain.event_dim
            event_dim = max(event_dim, part.domain.event_dim)
        if event_dim <= domain.event_dim:
            return domain
        return constraints.independent(domain, event_dim - domain.event_dim)

    @property
    def codomain(self):
        """The last part's codomain, widened to the event dims the whole chain writes (torch's rule)."""
        if not self.parts:
            return constraints.real
        codomain = self.parts[-1].codomain
        event_dim = self.parts[0].domain.event_dim
        for part in self.parts:
            event_dim += part.codomain.event_dim - part.domain.event_dim
            event_dim = max(event_dim, part.codomain.event_dim)
        if event_dim <= codomain.event_dim:
            return codomain
        return constraints.independent(codomain, event_dim - codomain.event_dim)

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
        xs = [x]
        for part in self.parts[:-1]:
            xs.append(part(xs[-1]))
        xs.append(y)
        total, event_dim = 0.0, self.domain.event_dim
        for part, x_part, y_part in zip(self.parts, xs[:-1], xs[1:]):
            jacobian = part.log_abs_det_jacobian(x_part, y_part)
            total = total + sum_rightmost(jacobian, event_dim - part.domain.event_dim)
            event_dim += part.codomain.event_dim - part.domain.event_dim
        return total

    def forward_shape(self, shape):
        """The shape after each part in order."""
        for part in self.parts:
            shape = part.forward_shape(shape)
        return shape

    def inverse_shape(self, shape):
        """The shape before each part, last part first."""
        for part in reversed(self.parts):
            shape = part.inverse_shape(shape)
        return shape

    def __repr__(self) -> str:
        return "ComposeTransform(" + ", ".join(repr(p) for p in self.parts) + ")"


class _Parameterless(Transform):
    """A transform with no parameters: every instance of its class is equal, as torch's."""

    def __eq__(self, other) -> bool:
        return isinstance(other, type(self))

    __hash__ = object.__hash__
