"""Categorical and OneHotCategorical (probs or logits over the last dim), as torch.distributions'."""

from __future__ import annotations

from flame.distributions import _frontend as ops
from flame.distributions import constraints
from flame.distributions.distribution import Distribution
from flame.distributions.utils import finfo_min, lazy_property, logits_to_probs, probs_to_logits
from flame.frontend.losses import one_hot as _one_hot
from flame.ir.dtypes import boolean, i64

__all__ = ["Categorical", "OneHotCategorical", "OneHotCategoricalStraightThrough"]


class Categorical(Distribution):
    """Category indices 0 .. K-1 drawn with probabilities probs (normalised over the last dim) or
    softmax(logits)."""

    arg_constraints = {"probs": constraints.simplex, "logits": constraints.real_vector}
    has_enumerate_support = True

    def __init__(self, probs=None, logits=None, validate_args: bool | None = None) -> None:
        if (probs is None) == (logits is None):
            raise ValueError("Either `probs` or `logits` must be specified, but not both.")
        if probs is not None:
            if probs.dim() < 1:
                raise ValueError("`probs` parameter must be at least one-dimensional.")
            self.probs = probs / probs.sum(-1, keepdim=True)
        else:
            if logits.dim() < 1:
                raise ValueError("`logits` parameter must be at least one-dimensional.")
            self.logits = logits - logits.logsumexp(dim=-1, keepdim=True)
        self._param = self.probs if probs is not None else self.logits
        self._num_events = self._param.shape[-1]
        batch_shape = self._param.shape[:-1] if self._param.ndim > 1 else ()
        super().__init__(batch_shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        """This distribution with its parameter expanded to batch_shape (+ the categories)."""
        new = self._get_checked_instance(Categorical, _instance)
        batch_shape = tuple(batch_shape)
        param_shape = (*batch_shape, self._num_events)
        if "probs" in self.__dict__:
            new.probs = self.probs.expand(*param_shape)
            new._param = new.probs
        if "logits" in self.__dict__:
            new.logits = self.logits.expand(*param_shape)
            new._param = new.logits
        new._num_events = self._num_events
        super(Categorical, new).__init__(batch_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    @constraints.dependent_property(is_discrete=True, event_dim=0)
    def support(self):
        """The constraint the values satisfy."""
        return constraints.integer_interval(0, self._num_events - 1)

    @lazy_property
    def logits(self):
        """log(probs) (clamped away from 0)."""
        return probs_to_logits(self.probs)

    @lazy_property
    def probs(self):
        """softmax(logits)."""
        return logits_to_probs(self.logits)

    @property
    def param_shape(self):
        """The shape of the parameter tensor."""
        return self._param.shape

    @property
    def mean(self):
        """The mean."""
        return ops.full(self._extended_shape(), float("nan"), dtype=self.probs.dtype)

    @property
    def mode(self):
        """The mode (the most likely value)."""
        return self.probs.argmax(dim=-1)

    @property
    def variance(self):
        """The variance."""
        return ops.full(self._extended_shape(), float("nan"), dtype=self.probs.dtype)

    def sample(self, sample_shape=()):
        """i64 category indices of shape sample_shape + batch_shape, drawn by ops.multinomial."""
        shape = self._extended_shape(sample_shape)
        n = 1
        for s in shape[: len(shape) - len(self._batch_shape)]:
            n *= s
        with ops.no_grad():
            probs_2d = self.probs.reshape(-1, self._num_events)
            samples_2d = ops.multinomial(probs_2d, n, True).T
            return samples_2d.reshape(*shape)

    def log_prob(self, value):
        """The log-probability of the category index value."""
        if self._validate_args:
            self._validate_sample(value)
        value = value.long().unsqueeze(-1)
        value, log_pmf = ops.broadcast_tensors(value, self.logits)
        return log_pmf.gather(-1, value[..., :1]).squeeze(-1)

    def entropy(self):
        """-sum(probs * logits) over the categories."""
        logits = self.logits.clamp(min=finfo_min(self.logits.dtype))
        return -(logits * self.probs).sum(-1)

    def enumerate_support(self, expand: bool = True):
        """0 .. K-1 along dim 0, over the batch shape."""
        values = ops.arange(self._num_events).reshape(-1, *(1,) * len(self._batch_shape))
        return values.expand(self._num_events, *self._batch_shape) if expand else values


class OneHotCategorical(Distribution):
    """Categorical's draws as one-hot vectors of the parameters' dtype (event_shape (K,))."""

    arg_constraints = {"probs": constraints.simplex, "logits": constraints.real_vector}
    support = constraints.one_hot
    has_enumerate_support = True

    def __init__(self, probs=None, logits=None, validate_args: bool | None = None) -> None:
        self._categorical = Categorical(probs, logits)
        super().__init__(self._categorical.batch_shape, self._categorical.param_shape[-1:], validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        """This distribution with its parameter expanded to batch_shape (+ the categories)."""
        new = self._get_checked_instance(OneHotCategorical, _instance)
        batch_shape = tuple(batch_shape)
        new._categorical = self._categorical.expand(batch_shape)
        super(OneHotCategorical, new).__init__(batch_shape, self.event_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    @property
    def _param(self):
        """The parameter tensor the distribution was given."""
        return self._categorical._param

    @property
    def probs(self):
        """The probabilities."""
        return self._categorical.probs

    @property
    def logits(self):
        """The logits."""
        return self._categorical.logits

    @property
    def mean(self):
        """The mean."""
        return self._categorical.probs

    @property
    def mode(self):
        """The mode (the most likely value)."""
        probs = self._categorical.probs
        return _one_hot(probs.argmax(dim=-1), num_classes=probs.shape[-1]).to(probs.dtype)

    @property
    def variance(self):
        """The variance."""
        return self._categorical.probs * (1 - self._categorical.probs)

    @property
    def param_shape(self):
        """The shape of the parameter tensor."""
        return self._categorical.param_shape

    def sample(self, sample_shape=()):
        """One-hot vectors of the categories Categorical draws."""
        indices = self._categorical.sample(sample_shape)
        return _one_hot(indices, self._categorical._num_events).to(self._categorical.probs.dtype)

    def log_prob(self, value):
        """The log-probability of the category value's one is at (a bool one-hot value too, as torch's)."""
        if self._validate_args:
            self._validate_sample(value)
        if value.dtype == boolean:
            value = value.to(i64)
        return self._categorical.log_prob(value.argmax(-1))

    def entropy(self):
        """Categorical's entropy."""
        return self._categorical.entropy()

    def enumerate_support(self, expand: bool = True):
        """The K one-hot vectors along dim 0, over the batch shape."""
        n = self.event_shape[0]
        values = ops.eye(n, dtype=self._param.dtype).reshape(n, *(1,) * len(self.batch_shape), n)
        return values.expand(n, *self.batch_shape, n) if expand else values


class OneHotCategoricalStraightThrough(OneHotCategorical):
    """OneHotCategorical with rsample by the straight-through estimator: the one-hot draw, whose gradient
    is taken as that of probs (Bengio et al., 2013)."""

    has_rsample = True

    def rsample(self, sample_shape=()):
        """sample + probs - probs.detach(): the draw's values, probs' gradient."""
        samples = self.sample(sample_shape)
        probs = self._categorical.probs
        return samples + (probs - probs.detach())
