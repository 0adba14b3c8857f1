"""Distribution, the base class of flame.distributions (torch.distributions.Distribution): shapes,
argument validation (on by default, as torch's), sample via rsample under no_grad. Validation reads
values: eagerly always; inside @flame.compile where they are known while tracing (Python numbers and
concrete tensors, and what is computed from them: flame/distributions/_known.py), not where they are
computed from the compiled function's arguments (docs/coming_from_pytorch.md, Distributions)."""

from __future__ import annotations

import warnings
from numbers import Number

from flame.distributions import _frontend as ops
from flame.distributions import constraints
from flame.distributions._known import known_value, shown
from flame.distributions.utils import broadcast_all, lazy_property, shape_of
from flame.frontend.context import user_location
from flame.frontend.tensor import Tensor

__all__ = ["Distribution"]


def _all_true(valid: Tensor) -> bool:
    """Whether every element of a check's result is true. Inside @flame.compile a result whose value is
    not known while tracing (it reads the function's arguments: flame/distributions/_known.py) counts as
    true: it is not checked."""
    if not isinstance(valid, Tensor):
        return bool(valid)
    known = known_value(valid)
    return True if known is None else bool(known.all())


class Distribution:
    """The abstract base class of probability distributions: batch_shape (the shape over which
    parameters are batched) and event_shape (the shape of one sample)."""

    has_rsample = False
    has_enumerate_support = False
    _validate_args = __debug__

    @staticmethod
    def set_default_validate_args(value: bool) -> None:
        """Turn argument validation on or off for distributions made without validate_args."""
        if value not in [True, False]:
            raise ValueError(f"set_default_validate_args: value must be True or False, got {value!r}")
        Distribution._validate_args = value

    def __init__(self, batch_shape=(), event_shape=(), validate_args: bool | None = None) -> None:
        self._batch_shape, self._event_shape = tuple(batch_shape), tuple(event_shape)
        if validate_args is not None:
            self._validate_args = validate_args
        if self._validate_args:
            try:
                arg_constraints = self.arg_constraints
            except NotImplementedError:
                arg_constraints = {}
                warnings.warn(
                    f"{self.__class__} does not define `arg_constraints`. Please set "
                    f"`arg_constraints = {{}}` or initialize the distribution with `validate_args=False` "
                    f"to turn off validation.",
                    stacklevel=2,
                )
            for param, constraint in arg_constraints.items():
                if constraints.is_dependent(constraint):
                    continue
                if param not in self.__dict__ and isinstance(getattr(type(self), param), lazy_property):
                    continue
                value = getattr(self, param)
                if not _all_true(constraint.check(value)):
                    raise ValueError(
                        f"Expected parameter {param} ({type(value).__name__} of shape "
                        f"{tuple(value.shape)}) of distribution {self!r} to satisfy the constraint "
                        f"{constraint!r}, but found invalid values:\n{shown(value)}\n  at {user_location()}"
                    )
        super().__init__()

    def expand(self, batch_shape, _instance=None):
        """A distribution of the same kind with its batch dimensions expanded to batch_shape (the
        parameters are expanded, not copied, and not checked again)."""
        raise NotImplementedError

    @property
    def batch_shape(self) -> tuple[int, ...]:
        """The shape over which parameters are batched."""
        return self._batch_shape

    @property
    def event_shape(self) -> tuple[int, ...]:
        """The shape of a single sample (without batching)."""
        return self._event_shape

    @property
    def arg_constraints(self) -> dict:
        """The constraint each tensor parameter must satisfy, by name."""
        raise NotImplementedError

    @property
    def support(self):
        """The constraint the distribution's values satisfy."""
        raise NotImplementedError

    @property
    def mean(self) -> Tensor:
        """The mean of the distribution."""
        raise NotImplementedError

    @property
    def mode(self) -> Tensor:
        """The mode of the distribution."""
        raise NotImplementedError(f"{self.__class__} does not implement mode")

    @property
    def variance(self) -> Tensor:
        """The variance of the distribution."""
        raise NotImplementedError

    @property
    def stddev(self) -> Tensor:
        """The standard deviation of the distribution."""
        return self.variance.sqrt()

    def sample(self, sample_shape=()) -> Tensor:
        """A sample of shape sample_shape + batch_shape + event_shape, without gradients."""
        with ops.no_grad():
            return self.rsample(sample_shape)

    def sample_n(self, n: int) -> Tensor:
        """sample((n,)), with torch's warning that sample_n will be deprecated."""
        warnings.warn("`sample_n(n)` will be deprecated. Use `sample((n,))` instead.", FutureWarning, stacklevel=2)
        return self.sample((n,))

    def rsample(self, sample_shape=()) -> Tensor:
        """A reparameterised sample: gradients flow from it to the parameters."""
        raise NotImplementedError

    def log_prob(self, value: Tensor) -> Tensor:
        """The log of the probability density or mass function at value."""
        raise NotImplementedError

    def cdf(self, value: Tensor) -> Tensor:
        """The cumulative distribution function at value."""
        raise NotImplementedError

    def icdf(self, value: Tensor) -> Tensor:
        """The inverse cumulative distribution function at value."""
        raise NotImplementedError

    def enumerate_support(self, expand: bool = True) -> Tensor:
        """Every value of a discrete distribution, along dim 0."""
        raise NotImplementedError

    def entropy(self) -> Tensor:
        """The entropy, of shape batch_shape."""
        raise NotImplementedError

    def perplexity(self) -> Tensor:
        """exp(entropy)."""
        return self.entropy().exp()

    def _extended_shape(self, sample_shape=()) -> tuple[int, ...]:
        return shape_of(sample_shape) + self._batch_shape + self._event_shape

    def _validate_sample(self, value) -> None:
        """Check that value's rightmost dims broadcast with batch_shape + event_shape and that it lies
        in the support (torch's ValueErrors); a distribution without a support warns instead."""
        if not isinstance(value, Tensor):
            raise ValueError("The value argument to log_prob must be a Tensor")
        start = value.ndim - len(self._event_shape)
        if tuple(value.shape[start:]) != self._event_shape:
            raise ValueError(
                f"The right-most size of value must match event_shape: {tuple(value.shape)} vs {self._event_shape}."
            )
        actual, expected = tuple(value.shape), self._batch_shape + self._event_shape
        for i, j in zip(reversed(actual), reversed(expected)):
            if i != 1 and j != 1 and i != j:
                raise ValueError(f"Value is not broadcastable with batch_shape+event_shape: {actual} vs {expected}.")
        try:
            support = self.support
        except NotImplementedError:  # a user's subclass without a support: warned and not checked, as torch's
            warnings.warn(
                f"{self.__class__} does not define `support` to enable sample validation. Please initialize "
                f"the distribution with `validate_args=False` to turn off validation.",
                stacklevel=3,
            )
            return
        if not _all_true(support.check(value)):
            raise ValueError(
                f"Expected value argument ({type(value).__name__} of shape {tuple(value.shape)}) to be "
                f"within the support ({support!r}) of the distribution {self!r}, but found invalid "
                f"values:\n{shown(value)}\n  at {user_location()}"
            )

    def _get_checked_instance(self, cls, _instance=None):
        if _instance is None and type(self).__init__ != cls.__init__:
            raise NotImplementedError(
                f"Subclass {self.__class__.__name__} of {cls.__name__} that defines a custom "
                f"__init__ method must also define a custom .expand() method."
            )
        return self.__new__(type(self)) if _instance is None else _instance

    def __repr__(self) -> str:
        names = [k for k in self.arg_constraints if k in self.__dict__]
        args = [
            f"{p}: {shown(self.__dict__[p]) if self.__dict__[p].numel() == 1 else tuple(self.__dict__[p].shape)}"
            for p in names
        ]
        return self.__class__.__name__ + "(" + ", ".join(args) + ")"


class LocScale(Distribution):
    """A distribution of a real location loc and a positive scale, broadcast together (Normal, Laplace):
    their constraints, construction, expand, mean and mode, as torch's."""

    arg_constraints = {"loc": constraints.real, "scale": constraints.positive}
    support = constraints.real
    has_rsample = True

    def __init__(self, loc, scale, validate_args: bool | None = None) -> None:
        self.loc, self.scale = broadcast_all(loc, scale)
        batch_shape = () if isinstance(loc, Number) and isinstance(scale, Number) else self.loc.shape
        super().__init__(batch_shape, validate_args=validate_args)

    def _expand_as(self, cls, batch_shape, _instance):
        """expand for class cls (the subclass whose __init__ an instance of it would run, as torch's)."""
        new = self._get_checked_instance(cls, _instance)
        batch_shape = tuple(batch_shape)
        new.loc, new.scale = self.loc.expand(*batch_shape), self.scale.expand(*batch_shape)
        Distribution.__init__(new, batch_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    @property
    def mean(self):
        """The mean."""
        return self.loc

    @property
    def mode(self):
        """The mode (the most likely value)."""
        return self.loc
