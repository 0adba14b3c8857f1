"""Dirichlet(concentration) and Beta(concentration1, concentration0), as torch.distributions.Dirichlet and
Beta (a Beta is the first coordinate of a two-category Dirichlet)."""

from __future__ import annotations

from numbers import Number

from flame.distributions import _frontend as ops
from flame.distributions import constraints
from flame.distributions.distribution import Distribution
from flame.distributions.exp_family import ExponentialFamily
from flame.distributions.gamma import gamma_rsample
from flame.distributions.utils import broadcast_all

__all__ = ["Beta", "Dirichlet"]


class Dirichlet(ExponentialFamily):
    """The Dirichlet distribution on the probability simplex of the last dim of concentration."""

    arg_constraints = {"concentration": constraints.independent(constraints.positive, 1)}
    support = constraints.simplex
    has_rsample = True

    def __init__(self, concentration, validate_args: bool | None = None) -> None:
        if concentration.ndim < 1:
            raise ValueError("`concentration` parameter must be at least one-dimensional.")
        self.concentration = concentration
        shape = tuple(concentration.shape)
        super().__init__(shape[:-1], shape[-1:], validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        """This distribution with concentration's batch dims expanded to batch_shape."""
        new = self._get_checked_instance(Dirichlet, _instance)
        batch_shape = tuple(batch_shape)
        new.concentration = self.concentration.expand(*batch_shape, *self._event_shape)
        Distribution.__init__(new, batch_shape, self._event_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    def rsample(self, sample_shape=()):
        """Gamma(concentration) draws normalised to sum to 1 along the event dim, differentiable through
        gamma_rsample (a pathwise gradient whose expectation is torch's)."""
        g = gamma_rsample(self.concentration, self._extended_shape(sample_shape))
        return g / g.sum(-1, keepdim=True)

    def log_prob(self, value):
        """sum (c - 1) log(value) + lgamma(sum c) - sum lgamma(c)."""
        if self._validate_args:
            self._validate_sample(value)
        c = self.concentration
        return (c - 1.0).xlogy(value).sum(-1) + c.sum(-1).lgamma() - c.lgamma().sum(-1)

    @property
    def mean(self):
        """c / sum c."""
        return self.concentration / self.concentration.sum(-1, keepdim=True)

    @property
    def mode(self):
        """(c - 1)^+ / sum (c - 1)^+; where every c < 1, torch's one-hot of the first category."""
        cm1 = (self.concentration - 1).clamp(min=0.0)
        mode = cm1 / cm1.sum(-1, keepdim=True)
        # torch takes argmax of that row, all NaN (0 / 0), whose argmax is the first element
        first = (ops.arange(cm1.shape[-1]) == 0).to(mode.dtype)
        mask = (self.concentration < 1).all(-1, keepdim=True)
        return ops.where(mask, first, mode)

    @property
    def variance(self):
        """c (c0 - c) / (c0^2 (c0 + 1)), c0 = sum c."""
        c = self.concentration
        c0 = c.sum(-1, keepdim=True)
        return c * (c0 - c) / (c0.pow(2) * (c0 + 1))

    def entropy(self):
        """sum lgamma(c) - lgamma(c0) - (k - c0) digamma(c0) - sum (c - 1) digamma(c)."""
        c = self.concentration
        k, a0 = c.shape[-1], c.sum(-1)
        return c.lgamma().sum(-1) - a0.lgamma() - (k - a0) * a0.digamma() - ((c - 1.0) * c.digamma()).sum(-1)

    @property
    def _natural_params(self):
        return (self.concentration,)

    def _log_normalizer(self, x):
        return x.lgamma().sum(-1) - x.sum(-1).lgamma()


class Beta(ExponentialFamily):
    """The Beta distribution on [0, 1] of concentrations concentration1 (alpha) and concentration0 (beta)."""

    arg_constraints = {"concentration1": constraints.positive, "concentration0": constraints.positive}
    support = constraints.unit_interval
    has_rsample = True

    def __init__(self, concentration1, concentration0, validate_args: bool | None = None) -> None:
        if isinstance(concentration1, Number) and isinstance(concentration0, Number):
            both = ops.tensor([float(concentration1), float(concentration0)], dtype=ops.get_default_dtype())
        else:
            concentration1, concentration0 = broadcast_all(concentration1, concentration0)
            both = ops.stack([concentration1, concentration0], -1)
        self._dirichlet = Dirichlet(both, validate_args=validate_args)
        super().__init__(self._dirichlet._batch_shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        """This distribution with its concentrations expanded to batch_shape."""
        new = self._get_checked_instance(Beta, _instance)
        batch_shape = tuple(batch_shape)
        new._dirichlet = self._dirichlet.expand(batch_shape)
        Distribution.__init__(new, batch_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    @property
    def concentration1(self):
        """alpha, the exponent of x."""
        return self._dirichlet.concentration[..., 0]

    @property
    def concentration0(self):
        """beta, the exponent of 1 - x."""
        return self._dirichlet.concentration[..., 1]

    @property
    def mean(self):
        """alpha / (alpha + beta)."""
        return self.concentration1 / (self.concentration1 + self.concentration0)

    @property
    def mode(self):
        """The Dirichlet's mode, first coordinate."""
        return self._dirichlet.mode[..., 0]

    @property
    def variance(self):
        """alpha beta / ((alpha + beta)^2 (alpha + beta + 1))."""
        total = self.concentration1 + self.concentration0
        return self.concentration1 * self.concentration0 / (total.pow(2) * (total + 1))

    def rsample(self, sample_shape=()):
        """The first coordinate of the two-category Dirichlet's draws."""
        return self._dirichlet.rsample(sample_shape)[..., 0]

    def log_prob(self, value):
        """The Dirichlet's log_prob at (value, 1 - value)."""
        if self._validate_args:
            self._validate_sample(value)
        return self._dirichlet.log_prob(ops.stack([value, 1.0 - value], -1))

    def entropy(self):
        """The Dirichlet's entropy."""
        return self._dirichlet.entropy()

    @property
    def _natural_params(self):
        return (self.concentration1, self.concentration0)

    def _log_normalizer(self, x, y):
        return x.lgamma() + y.lgamma() - (x + y).lgamma()
