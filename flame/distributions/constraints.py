"""The constraints of flame.distributions, as torch.distributions.constraints: each says which values a
parameter or a sample may take; `check(value)` is a boolean tensor of value's shape less event_dim dims."""

from __future__ import annotations

from flame.distributions import _frontend as ops
from flame.distributions._known import shown
from flame.distributions._linalg import cholesky
from flame.distributions.utils import finfo_eps

__all__ = [
    "Constraint",
    "MixtureSameFamilyConstraint",
    "boolean",
    "cat",
    "corr_cholesky",
    "dependent",
    "dependent_property",
    "greater_than",
    "greater_than_eq",
    "half_open_interval",
    "independent",
    "integer_interval",
    "interval",
    "less_than",
    "is_dependent",
    "lower_cholesky",
    "lower_triangular",
    "multinomial",
    "nonnegative",
    "nonnegative_integer",
    "one_hot",
    "positive",
    "positive_definite",
    "positive_integer",
    "real",
    "real_vector",
    "simplex",
    "square",
    "stack",
    "symmetric",
    "unit_interval",
]


class Constraint:
    """A region of values; is_discrete says whether it holds integers, event_dim how many rightmost dims
    make up one event."""

    is_discrete = False
    event_dim = 0

    def check(self, value):
        """A boolean tensor: whether each event of value satisfies the constraint."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return self.__class__.__name__[1:] + "()"


class _Dependent(Constraint):
    """A placeholder for a parameter whose valid values depend on others (Uniform's low and high)."""

    def __init__(self, *, is_discrete=NotImplemented, event_dim=NotImplemented):
        self._is_discrete, self._event_dim = is_discrete, event_dim
        super().__init__()

    @property
    def is_discrete(self) -> bool:
        """Whether the constraint holds integers."""
        if self._is_discrete is NotImplemented:
            raise NotImplementedError(".is_discrete cannot be determined statically")
        return self._is_discrete

    @property
    def event_dim(self) -> int:
        """How many rightmost dims make up one event."""
        if self._event_dim is NotImplemented:
            raise NotImplementedError(".event_dim cannot be determined statically")
        return self._event_dim

    def __call__(self, *, is_discrete=NotImplemented, event_dim=NotImplemented):
        """A dependent constraint with the given is_discrete and event_dim."""
        is_discrete = self._is_discrete if is_discrete is NotImplemented else is_discrete
        event_dim = self._event_dim if event_dim is NotImplemented else event_dim
        return _Dependent(is_discrete=is_discrete, event_dim=event_dim)

    def check(self, x):
        raise ValueError("Cannot determine validity of dependent constraint")


def is_dependent(constraint) -> bool:
    """Whether constraint is a dependent one (not checked when a distribution is made)."""
    return isinstance(constraint, _Dependent)


class _DependentProperty(property, _Dependent):
    """A property that is also a dependent constraint: `support` of a distribution whose support depends
    on its parameters (Uniform, Categorical)."""

    def __init__(self, fn=None, *, is_discrete=NotImplemented, event_dim=NotImplemented):
        property.__init__(self, fn)
        self._is_discrete, self._event_dim = is_discrete, event_dim

    def __call__(self, fn):
        """Decorate fn (as @constraints.dependent_property(is_discrete=..., event_dim=...))."""
        return _DependentProperty(fn, is_discrete=self._is_discrete, event_dim=self._event_dim)


def dependent_property(fn=None, *, is_discrete=NotImplemented, event_dim=NotImplemented):
    """A property whose value is a constraint depending on the distribution's parameters."""
    return _DependentProperty(fn, is_discrete=is_discrete, event_dim=event_dim)


class _IndependentConstraint(Constraint):
    """base_constraint over the reinterpreted_batch_ndims rightmost dims taken together as one event."""

    def __init__(self, base_constraint: Constraint, reinterpreted_batch_ndims: int):
        if not isinstance(base_constraint, Constraint):
            raise TypeError(f"independent: base_constraint must be a Constraint, got {type(base_constraint)}")
        if not isinstance(reinterpreted_batch_ndims, int) or reinterpreted_batch_ndims < 0:
            raise ValueError(
                f"independent: reinterpreted_batch_ndims must be a non-negative int, got {reinterpreted_batch_ndims!r}"
            )
        self.base_constraint, self.reinterpreted_batch_ndims = base_constraint, reinterpreted_batch_ndims
        super().__init__()

    @property
    def is_discrete(self) -> bool:
        """Whether the constraint holds integers."""
        return self.base_constraint.is_discrete

    @property
    def event_dim(self) -> int:
        """How many rightmost dims make up one event."""
        return self.base_constraint.event_dim + self.reinterpreted_batch_ndims

    def check(self, value):
        result = self.base_constraint.check(value)
        if result.ndim < self.reinterpreted_batch_ndims:
            expected = self.base_constraint.event_dim + self.reinterpreted_batch_ndims
            raise ValueError(f"Expected value.dim() >= {expected} but got {value.ndim}")
        n = self.reinterpreted_batch_ndims
        return result.reshape(*result.shape[: result.ndim - n], -1).all(-1) if n else result

    def __repr__(self) -> str:
        return f"IndependentConstraint({self.base_constraint!r}, {self.reinterpreted_batch_ndims})"


class _Boolean(Constraint):
    is_discrete = True

    def check(self, value):
        return (value == 0) | (value == 1)


class _OneHot(Constraint):
    is_discrete = True
    event_dim = 1

    def check(self, value):
        is_int = ((value == 0) | (value == 1)).all(-1)
        return is_int & (value.sum(-1) == 1)


class _IntegerInterval(Constraint):
    is_discrete = True

    def __init__(self, lower_bound, upper_bound):
        self.lower_bound, self.upper_bound = lower_bound, upper_bound
        super().__init__()

    def check(self, value):
        return ((value % 1) == 0) & (value >= self.lower_bound) & (value <= self.upper_bound)

    def __repr__(self) -> str:
        return f"IntegerInterval(lower_bound={shown(self.lower_bound)}, upper_bound={shown(self.upper_bound)})"


class _IntegerGreaterThan(Constraint):
    is_discrete = True

    def __init__(self, lower_bound):
        self.lower_bound = lower_bound
        super().__init__()

    def check(self, value):
        return ((value % 1) == 0) & (value >= self.lower_bound)

    def __repr__(self) -> str:
        return f"IntegerGreaterThan(lower_bound={shown(self.lower_bound)})"


class _Real(Constraint):
    def check(self, value):
        return value == value  # False for NaN


class _GreaterThan(Constraint):
    def __init__(self, lower_bound):
        self.lower_bound = lower_bound
        super().__init__()

    def check(self, value):
        return value > self.lower_bound

    def __repr__(self) -> str:
        return f"GreaterThan(lower_bound={shown(self.lower_bound)})"


class _GreaterThanEq(_GreaterThan):
    def check(self, value):
        return value >= self.lower_bound

    def __repr__(self) -> str:
        return f"GreaterThanEq(lower_bound={shown(self.lower_bound)})"


class _LessThan(Constraint):
    def __init__(self, upper_bound):
        self.upper_bound = upper_bound
        super().__init__()

    def check(self, value):
        return value < self.upper_bound

    def __repr__(self) -> str:
        return f"LessThan(upper_bound={shown(self.upper_bound)})"


class _Interval(Constraint):
    def __init__(self, lower_bound, upper_bound):
        self.lower_bound, self.upper_bound = lower_bound, upper_bound
        super().__init__()

    def check(self, value):
        return (value >= self.lower_bound) & (value <= self.upper_bound)

    def __repr__(self) -> str:
        return f"Interval(lower_bound={shown(self.lower_bound)}, upper_bound={shown(self.upper_bound)})"


class _HalfOpenInterval(_Interval):
    def check(self, value):
        return (value >= self.lower_bound) & (value < self.upper_bound)

    def __repr__(self) -> str:
        return f"HalfOpenInterval(lower_bound={shown(self.lower_bound)}, upper_bound={shown(self.upper_bound)})"


class _Simplex(Constraint):
    event_dim = 1

    def check(self, value):
        return (value >= 0).all(-1) & ((value.sum(-1) - 1).abs() < 1e-6)


class _LowerCholesky(Constraint):
    event_dim = 2

    def check(self, value):
        lower = (value.tril() == value).reshape(*value.shape[:-2], -1).all(-1)
        return lower & (value.diagonal(dim1=-2, dim2=-1) > 0).all(-1)


class _LowerTriangular(Constraint):
    event_dim = 2

    def check(self, value):
        return (value.tril() == value).reshape(*value.shape[:-2], -1).all(-1)


class _CorrCholesky(Constraint):
    """Lower Cholesky factors of correlation matrices: a positive diagonal and rows of unit norm."""

    event_dim = 2

    def check(self, value):
        tol = finfo_eps(value.dtype) * value.shape[-1] * 10
        row_norm = value.detach().pow(2).sum(-1).sqrt()
        unit_row_norm = ((row_norm - 1.0).abs() <= tol).all(-1)
        return _LowerCholesky().check(value) & unit_row_norm


class _Multinomial(Constraint):
    """Nonnegative counts summing to at most upper_bound."""

    is_discrete = True
    event_dim = 1

    def __init__(self, upper_bound):
        self.upper_bound = upper_bound
        super().__init__()

    def check(self, value):
        return (value >= 0).all(-1) & (value.sum(-1) <= self.upper_bound)


class _Cat(Constraint):
    """The constraints cseq applied to consecutive slices of lengths (1 each by default) along dim."""

    def __init__(self, cseq, dim: int = 0, lengths=None):
        if not all(isinstance(c, Constraint) for c in cseq):
            raise AssertionError("cat: every element of cseq must be a Constraint")
        self.cseq = list(cseq)
        self.lengths = [1] * len(self.cseq) if lengths is None else list(lengths)
        if len(self.lengths) != len(self.cseq):
            raise AssertionError("cat: lengths must have one entry per constraint")
        self.dim = dim
        super().__init__()

    @property
    def is_discrete(self) -> bool:
        """Whether any of the constraints holds integers."""
        return any(c.is_discrete for c in self.cseq)

    @property
    def event_dim(self) -> int:
        """The largest event_dim of the constraints."""
        return max(c.event_dim for c in self.cseq)

    def check(self, value):
        if not -value.ndim <= self.dim < value.ndim:
            raise AssertionError(f"cat: dim {self.dim} out of range for a value of {value.ndim} dims")
        checks, start = [], 0
        for constraint, length in zip(self.cseq, self.lengths):
            checks.append(constraint.check(value.narrow(self.dim, start, length)))
            start = start + length
        return ops.cat(checks, self.dim)


class _Stack(Constraint):
    """The constraints cseq applied to the slices of value along dim, one each."""

    def __init__(self, cseq, dim: int = 0):
        if not all(isinstance(c, Constraint) for c in cseq):
            raise AssertionError("stack: every element of cseq must be a Constraint")
        self.cseq, self.dim = list(cseq), dim
        super().__init__()

    @property
    def is_discrete(self) -> bool:
        """Whether any of the constraints holds integers."""
        return any(c.is_discrete for c in self.cseq)

    @property
    def event_dim(self) -> int:
        """The largest event_dim of the constraints, plus the stacked dim where it is an event dim."""
        dim = max(c.event_dim for c in self.cseq)
        return dim + 1 if self.dim + dim < 0 else dim

    def check(self, value):
        if not -value.ndim <= self.dim < value.ndim:
            raise AssertionError(f"stack: dim {self.dim} out of range for a value of {value.ndim} dims")
        parts = [value.select(self.dim, i) for i in range(value.shape[self.dim])]
        return ops.stack([c.check(v) for v, c in zip(parts, self.cseq)], self.dim)


class _Square(Constraint):
    event_dim = 2

    def check(self, value):
        return ops.full(value.shape[:-2], value.shape[-2] == value.shape[-1])


class _Symmetric(_Square):
    def check(self, value):
        if value.shape[-2] != value.shape[-1]:
            return super().check(value)
        return ops.isclose(value, value.transpose(-1, -2), atol=1e-6).all(-2).all(-1)


class _PositiveDefinite(_Symmetric):
    def check(self, value):
        symmetric = super().check(value)
        if value.shape[-2] != value.shape[-1]:
            return symmetric
        return symmetric & (cholesky(value, check=False).diagonal(dim1=-2, dim2=-1) > 0).all(-1)


class MixtureSameFamilyConstraint(Constraint):
    """A MixtureSameFamily's support: its component distribution's constraint, checked with the
    component dim put back and reduced over it."""

    def __init__(self, base_constraint: Constraint):
        if not isinstance(base_constraint, Constraint):
            raise AssertionError(f"base_constraint must be a Constraint, got {type(base_constraint).__name__}")
        self.base_constraint = base_constraint
        super().__init__()

    @property
    def is_discrete(self) -> bool:
        return self.base_constraint.is_discrete

    @property
    def event_dim(self) -> int:
        return self.base_constraint.event_dim

    def check(self, value):
        result = self.base_constraint.check(value.unsqueeze(-1 - self.event_dim))
        if value.ndim < self.event_dim:
            raise ValueError(f"Expected value.dim() >= {self.event_dim} but got {value.ndim}")
        keep = value.ndim - self.event_dim
        return result.reshape(tuple(result.shape[:keep]) + (-1,)).all(-1)

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}({self.base_constraint!r})"


dependent = _Dependent()
boolean = _Boolean()
one_hot = _OneHot()
nonnegative_integer = _IntegerGreaterThan(0)
positive_integer = _IntegerGreaterThan(1)
multinomial = _Multinomial
integer_interval = _IntegerInterval
real = _Real()
real_vector = _IndependentConstraint(real, 1)
positive = _GreaterThan(0.0)
nonnegative = _GreaterThanEq(0.0)
greater_than = _GreaterThan
greater_than_eq = _GreaterThanEq
less_than = _LessThan
unit_interval = _Interval(0.0, 1.0)
interval = _Interval
half_open_interval = _HalfOpenInterval
simplex = _Simplex()
lower_cholesky = _LowerCholesky()
lower_triangular = _LowerTriangular()
corr_cholesky = _CorrCholesky()
cat = _Cat
stack = _Stack
square = _Square()
symmetric = _Symmetric()
positive_definite = _PositiveDefinite()
independent = _IndependentConstraint
