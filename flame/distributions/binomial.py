"""Binomial and NegativeBinomial(total_count, probs or logits), as torch.distributions'."""

from __future__ import annotations

from flame.distributions import _frontend as ops
from flame.distributions import constraints
from flame.distributions._known import known_value
from flame.distributions.distribution import Distribution
from flame.distributions.gamma import standard_gamma
from flame.distributions.utils import BinaryProbs, broadcast_all
from flame.frontend.activations import logsigmoid

__all__ = ["Binomial", "NegativeBinomial"]


def _clamp_by_zero(x):
    """max(x, 0) with gradient 1/2 at 0, as torch's."""
    return (x.clamp(min=0) + x - x.clamp(max=0)) / 2


class _Counts(BinaryProbs, Distribution):
    """A count distribution of a total_count and a success probability given as probs or logits:
    construction (both broadcast, total_count in the parameter's dtype), expand, probs <-> logits."""

    def __init__(self, total_count=1, probs=None, logits=None, validate_args: bool | None = None) -> None:
        if (probs is None) == (logits is None):
            raise ValueError("Either `probs` or `logits` must be specified, but not both.")
        if probs is not None:
            self.total_count, self.probs = broadcast_all(total_count, probs)
            self.total_count = self.total_count.to(self.probs.dtype)
        else:
            self.total_count, self.logits = broadcast_all(total_count, logits)
            self.total_count = self.total_count.to(self.logits.dtype)
        self._param = self.probs if probs is not None else self.logits
        super().__init__(self._param.shape, validate_args=validate_args)

    def _expand_as(self, cls, batch_shape, _instance):
        """expand for class cls (the subclass whose __init__ an instance of it would run, as torch's)."""
        new = self._get_checked_instance(cls, _instance)
        batch_shape = tuple(batch_shape)
        new.total_count = self.total_count.expand(*batch_shape)
        self._expand_probs(new, batch_shape)
        Distribution.__init__(new, batch_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    @property
    def param_shape(self):
        """The shape of the parameter tensor."""
        return self._param.shape


class Binomial(_Counts):
    """The number of successes in total_count Bernoulli(probs) trials."""

    arg_constraints = {
        "total_count": constraints.nonnegative_integer,
        "probs": constraints.unit_interval,
        "logits": constraints.real,
    }
    has_enumerate_support = True

    def expand(self, batch_shape, _instance=None):
        """This distribution with its parameters expanded to batch_shape."""
        return self._expand_as(Binomial, batch_shape, _instance)

    @constraints.dependent_property(is_discrete=True, event_dim=0)
    def support(self):
        """The integers 0 ... total_count."""
        return constraints.integer_interval(0, self.total_count)

    @property
    def mean(self):
        """total_count probs."""
        return self.total_count * self.probs

    @property
    def mode(self):
        """floor((total_count + 1) probs), at most total_count."""
        return ((self.total_count + 1) * self.probs).floor().clamp(max=self.total_count)

    @property
    def variance(self):
        """total_count probs (1 - probs)."""
        return self.total_count * self.probs * (1 - self.probs)

    def _homogeneous_count(self, what: str) -> int:
        """total_count, the same for every batch element (torch's NotImplementedError otherwise)."""
        counts = known_value(self.total_count)
        if counts is None:
            raise NotImplementedError(
                f"Binomial.{what}: total_count must be known while tracing (a Python number or a concrete "
                f"tensor) inside @flame.compile"
            )
        n = int(counts.max()) if counts.size else 0
        if counts.size and counts.min() != n:
            raise NotImplementedError(f"Inhomogeneous total count not supported by `{what}`.")
        return n

    def sample(self, sample_shape=()):
        """The count of u < probs among total_count uniform draws per element (no gradients). The
        largest total_count must be known while tracing: it sets how many draws are made."""
        shape = self._extended_shape(sample_shape)
        counts = known_value(self.total_count)
        if counts is None:
            raise NotImplementedError(
                "Binomial.sample: total_count must be known while tracing (a Python number or a concrete "
                "tensor) inside @flame.compile"
            )
        n = int(counts.max()) if counts.size else 0
        with ops.no_grad():
            dtype = self._param.dtype
            if n == 0:
                return ops.zeros_like(self.probs.expand(*shape))
            u = ops.rand((n, *shape), dtype=dtype)
            trial = ops.arange(n, dtype=dtype).reshape(n, *(1,) * len(shape))
            hit = (u < self.probs.detach().expand(*shape)) & (trial < self.total_count.expand(*shape))
            return hit.to(dtype).sum(0)

    def log_prob(self, value):
        """log C(n, value) + value logits - n log(1 + exp(logits)), written stably as torch's."""
        if self._validate_args:
            self._validate_sample(value)
        n, logits = self.total_count, self.logits
        log_factorial_n = (n + 1).lgamma()
        log_factorial_k = (value + 1).lgamma()
        log_factorial_nmk = (n - value + 1).lgamma()
        normalize = n * _clamp_by_zero(logits) + n * (-logits.abs()).exp().log1p() - log_factorial_n
        return value * logits - log_factorial_k - log_factorial_nmk - normalize

    def entropy(self):
        """-sum p log p over the support (one total_count for the whole batch, as torch's)."""
        self._homogeneous_count("entropy")
        log_prob = self.log_prob(self.enumerate_support(False))
        return -(log_prob.exp() * log_prob).sum(0)

    def enumerate_support(self, expand: bool = True):
        """0 ... total_count along dim 0, over the batch shape (one total_count for the whole batch)."""
        n = self._homogeneous_count("enumerate_support")
        values = ops.arange(1 + n, dtype=self._param.dtype).reshape(-1, *(1,) * len(self._batch_shape))
        return values.expand(-1, *self._batch_shape) if expand else values


class NegativeBinomial(_Counts):
    """The number of successes before total_count failures of Bernoulli(probs) trials."""

    arg_constraints = {
        "total_count": constraints.greater_than_eq(0),
        "probs": constraints.half_open_interval(0.0, 1.0),
        "logits": constraints.real,
    }
    support = constraints.nonnegative_integer

    def expand(self, batch_shape, _instance=None):
        """This distribution with its parameters expanded to batch_shape."""
        return self._expand_as(NegativeBinomial, batch_shape, _instance)

    @property
    def mean(self):
        """total_count exp(logits)."""
        return self.total_count * self.logits.exp()

    @property
    def mode(self):
        """floor((total_count - 1) exp(logits)), at least 0."""
        return ((self.total_count - 1) * self.logits.exp()).floor().clamp(min=0.0)

    @property
    def variance(self):
        """mean / sigmoid(-logits)."""
        return self.mean / (-self.logits).sigmoid()

    def sample(self, sample_shape=()):
        """Poisson(Gamma(total_count, exp(-logits))) draws: the Gamma-Poisson mixture (no gradients)."""
        shape = self._extended_shape(sample_shape)
        with ops.no_grad():
            rate = standard_gamma(self.total_count, shape) * self.logits.detach().exp().expand(*shape)
            return ops.poisson(rate)

    def log_prob(self, value):
        """total_count logsigmoid(-logits) + value logsigmoid(logits) + log C(total_count + value - 1, value);
        0 where total_count and value are both 0."""
        if self._validate_args:
            self._validate_sample(value)
        n, logits = self.total_count, self.logits
        log_unnormalized = n * logsigmoid(-logits) + value * logsigmoid(logits)
        log_normalization = -(n + value).lgamma() + (1.0 + value).lgamma() + n.lgamma()
        log_normalization = ops.where(n + value == 0.0, 0.0, log_normalization)
        return log_unnormalized - log_normalization
