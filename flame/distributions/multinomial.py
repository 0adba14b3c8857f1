"""Multinomial(total_count, probs or logits), as torch.distributions.Multinomial: the counts of each of
K categories among total_count Categorical draws."""

from __future__ import annotations

import math

import numpy as np

from flame.distributions import _frontend as ops
from flame.distributions import constraints
from flame.distributions.binomial import Binomial
from flame.distributions.categorical import Categorical
from flame.distributions.distribution import Distribution
from flame.distributions.utils import broadcast_all
from flame.frontend.losses import one_hot

__all__ = ["Multinomial"]


class Multinomial(Distribution):
    """Counts over the last dim of probs (or softmax(logits)) of total_count draws (a Python int, the same
    for the whole batch, as torch's)."""

    arg_constraints = {"probs": constraints.simplex, "logits": constraints.real_vector}

    def __init__(self, total_count: int = 1, probs=None, logits=None, validate_args: bool | None = None) -> None:
        if not isinstance(total_count, int):
            raise NotImplementedError("inhomogeneous total_count is not supported")
        self.total_count = total_count
        self._categorical = Categorical(probs=probs, logits=logits)
        batch_shape = self._categorical.batch_shape
        event_shape = tuple(self._categorical.param_shape[-1:])
        super().__init__(batch_shape, event_shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        """This distribution with its parameter expanded to batch_shape (+ the categories)."""
        new = self._get_checked_instance(Multinomial, _instance)
        batch_shape = tuple(batch_shape)
        new.total_count = self.total_count
        new._categorical = self._categorical.expand(batch_shape)
        super(Multinomial, new).__init__(batch_shape, self.event_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    @constraints.dependent_property(is_discrete=True, event_dim=1)
    def support(self):
        """Nonnegative counts summing to at most total_count."""
        return constraints.multinomial(self.total_count)

    @property
    def logits(self):
        """The categories' normalised log-probabilities."""
        return self._categorical.logits

    @property
    def probs(self):
        """The categories' probabilities."""
        return self._categorical.probs

    @property
    def param_shape(self):
        """The shape of the parameter tensor."""
        return self._categorical.param_shape

    @property
    def mean(self):
        """total_count probs."""
        return self.probs * self.total_count

    @property
    def variance(self):
        """total_count probs (1 - probs)."""
        return self.total_count * self.probs * (1 - self.probs)

    def sample(self, sample_shape=()):
        """Counts of total_count Categorical draws per event, of the parameters' dtype (no gradients)."""
        shape = self._extended_shape(sample_shape)
        k = self._event_shape[0]
        with ops.no_grad():
            if self.total_count == 0:
                return ops.zeros_like(self.probs.expand(*shape))
            draws = self._categorical.sample((self.total_count, *sample_shape))
            return one_hot(draws, k).sum(0).to(self.probs.dtype)

    def log_prob(self, value):
        """lgamma(sum value + 1) - sum lgamma(value + 1) + sum value logits (0 logits^0 = 0 where a
        category has probability 0)."""
        if self._validate_args:
            self._validate_sample(value)
        logits, value = broadcast_all(self.logits, value)
        log_factorial_n = (value.sum(-1) + 1).lgamma()
        log_factorial_xs = (value + 1).lgamma().sum(-1)
        logits = ops.where((value == 0) & (logits == -math.inf), 0.0, logits)
        return log_factorial_n - log_factorial_xs + (logits * value).sum(-1)

    def entropy(self):
        """n H(categorical) - lgamma(n + 1) + sum over categories of E[lgamma(x_k + 1)] under x_k's
        Binomial(n, p_k) marginal, as torch's."""
        n = self.total_count
        # torch takes lgamma of the integer count as a float32 tensor: its value, rounded to float32
        term1 = n * self._categorical.entropy() - float(np.float32(math.lgamma(n + 1)))
        binomial = Binomial(total_count=n, probs=self.probs, validate_args=False)
        support = binomial.enumerate_support(expand=False)[1:]
        binomial_probs = binomial.log_prob(support).exp()
        weights = (support + 1).lgamma()
        return term1 + (binomial_probs * weights).sum(0).sum(-1)
