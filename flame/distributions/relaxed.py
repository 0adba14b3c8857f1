"""The relaxed (Concrete, Gumbel-softmax) distributions, as torch.distributions': LogitRelaxedBernoulli and
RelaxedBernoulli on (0, 1), ExpRelaxedCategorical and RelaxedOneHotCategorical on the simplex, each of a
temperature and probs or logits; reparameterised draws that approach Bernoulli / one-hot ones as the
temperature goes to 0 (Maddison et al., 2017; Jang et al., 2017)."""

from __future__ import annotations

import math
from numbers import Number

from flame.distributions import _frontend as ops
from flame.distributions import constraints
from flame.distributions.categorical import Categorical
from flame.distributions.distribution import Distribution
from flame.distributions.transformed_distribution import TransformedDistribution
from flame.distributions.transforms import ExpTransform, SigmoidTransform
from flame.distributions.utils import BinaryProbs, broadcast_all, clamp_probs

__all__ = ["ExpRelaxedCategorical", "LogitRelaxedBernoulli", "RelaxedBernoulli", "RelaxedOneHotCategorical"]


def _log(t):
    """log of a temperature given as a tensor or a Python number."""
    return math.log(t) if isinstance(t, Number) else t.log()


class LogitRelaxedBernoulli(BinaryProbs, Distribution):
    """The logit of a RelaxedBernoulli draw: (logit(U) + logits) / temperature of a uniform U."""

    arg_constraints = {"probs": constraints.unit_interval, "logits": constraints.real}
    support = constraints.real

    def __init__(self, temperature, probs=None, logits=None, validate_args: bool | None = None) -> None:
        self.temperature = temperature
        super().__init__(self._take_param(probs, logits), validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        """This distribution with its parameter expanded to batch_shape."""
        new = self._get_checked_instance(LogitRelaxedBernoulli, _instance)
        batch_shape = tuple(batch_shape)
        new.temperature = self.temperature
        self._expand_probs(new, batch_shape)
        super(LogitRelaxedBernoulli, new).__init__(batch_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    @property
    def param_shape(self):
        """The shape of the parameter tensor."""
        return self._param.shape

    def rsample(self, sample_shape=()):
        """(logit(U) + logit(probs)) / temperature of uniform draws U (both clamped away from 0 and 1)."""
        shape = self._extended_shape(sample_shape)
        probs = clamp_probs(self.probs.expand(*shape))
        uniforms = clamp_probs(ops.rand(shape, dtype=probs.dtype))
        return (uniforms.log() - (-uniforms).log1p() + probs.log() - (-probs).log1p()) / self.temperature

    def log_prob(self, value):
        """log(temperature) + d - 2 log1p(exp(d)) with d = logits - temperature value."""
        if self._validate_args:
            self._validate_sample(value)
        logits, value = broadcast_all(self.logits, value)
        diff = logits - value * self.temperature
        return _log(self.temperature) + diff - 2 * diff.exp().log1p()


class _RelaxedParameters:
    """temperature, logits and probs of a relaxed distribution: its base distribution's (the relaxation
    is a transform of a base over logits)."""

    @property
    def temperature(self):
        return self.base_dist.temperature

    @property
    def logits(self):
        return self.base_dist.logits

    @property
    def probs(self):
        return self.base_dist.probs


class RelaxedBernoulli(_RelaxedParameters, TransformedDistribution):
    """sigmoid of a LogitRelaxedBernoulli draw: a reparameterised relaxation of Bernoulli(probs) on
    (0, 1)."""

    arg_constraints = {"probs": constraints.unit_interval, "logits": constraints.real}
    support = constraints.unit_interval
    has_rsample = True

    def __init__(self, temperature, probs=None, logits=None, validate_args: bool | None = None) -> None:
        base_dist = LogitRelaxedBernoulli(temperature, probs, logits)
        super().__init__(base_dist, SigmoidTransform(), validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        """This distribution with its parameter expanded to batch_shape."""
        new = self._get_checked_instance(RelaxedBernoulli, _instance)
        return super().expand(batch_shape, _instance=new)


class ExpRelaxedCategorical(Distribution):
    """The log of a RelaxedOneHotCategorical draw: log_softmax((logits + Gumbel noise) / temperature)."""

    arg_constraints = {"probs": constraints.simplex, "logits": constraints.real_vector}
    support = constraints.real_vector  # the draws lie on a submanifold of it
    has_rsample = True

    def __init__(self, temperature, probs=None, logits=None, validate_args: bool | None = None) -> None:
        self._categorical = Categorical(probs, logits)
        self.temperature = temperature
        batch_shape = self._categorical.batch_shape
        super().__init__(batch_shape, tuple(self._categorical.param_shape[-1:]), validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        """This distribution with its parameter expanded to batch_shape (+ the categories)."""
        new = self._get_checked_instance(ExpRelaxedCategorical, _instance)
        batch_shape = tuple(batch_shape)
        new.temperature = self.temperature
        new._categorical = self._categorical.expand(batch_shape)
        super(ExpRelaxedCategorical, new).__init__(batch_shape, self.event_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    @property
    def param_shape(self):
        """The shape of the parameter tensor."""
        return self._categorical.param_shape

    @property
    def logits(self):
        """The categories' normalised log-probabilities."""
        return self._categorical.logits

    @property
    def probs(self):
        """The categories' probabilities."""
        return self._categorical.probs

    def rsample(self, sample_shape=()):
        """log_softmax((logits + Gumbel draws) / temperature)."""
        shape = self._extended_shape(sample_shape)
        uniforms = clamp_probs(ops.rand(shape, dtype=self.logits.dtype))
        gumbels = -((-(uniforms.log())).log())
        scores = (self.logits + gumbels) / self.temperature
        return scores - scores.logsumexp(dim=-1, keepdim=True)

    def log_prob(self, value):
        """The Concrete density's log at log-simplex value, as torch writes it."""
        k = self._categorical._num_events
        if self._validate_args:
            self._validate_sample(value)
        logits, value = broadcast_all(self.logits, value)
        log_scale = math.lgamma(k) - _log(self.temperature) * -(k - 1)
        score = logits - value * self.temperature
        score = (score - score.logsumexp(dim=-1, keepdim=True)).sum(-1)
        return score + log_scale


class RelaxedOneHotCategorical(_RelaxedParameters, TransformedDistribution):
    """exp of an ExpRelaxedCategorical draw: a reparameterised relaxation of OneHotCategorical on the
    simplex (the Gumbel-softmax)."""

    arg_constraints = {"probs": constraints.simplex, "logits": constraints.real_vector}
    support = constraints.simplex
    has_rsample = True

    def __init__(self, temperature, probs=None, logits=None, validate_args: bool | None = None) -> None:
        base_dist = ExpRelaxedCategorical(temperature, probs, logits, validate_args=validate_args)
        super().__init__(base_dist, ExpTransform(), validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        """This distribution with its parameter expanded to batch_shape."""
        new = self._get_checked_instance(RelaxedOneHotCategorical, _instance)
        return super().expand(batch_shape, _instance=new)
