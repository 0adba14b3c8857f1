"""Bernoulli(probs or logits), as torch.distributions.Bernoulli."""

from __future__ import annotations

from flame.distributions import _frontend as ops
from flame.distributions import constraints
from flame.distributions.exp_family import ExponentialFamily
from flame.distributions.utils import BinaryProbs, broadcast_all
from flame.frontend.losses import binary_cross_entropy_with_logits

__all__ = ["Bernoulli"]


class Bernoulli(BinaryProbs, ExponentialFamily):
    """1 with probability probs (or sigmoid(logits)), else 0."""

    arg_constraints = {"probs": constraints.unit_interval, "logits": constraints.real}
    support = constraints.boolean
    has_enumerate_support = True

    def __init__(self, probs=None, logits=None, validate_args: bool | None = None) -> None:
        super().__init__(self._take_param(probs, logits), validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        """This distribution with its parameter expanded to batch_shape."""
        new = self._get_checked_instance(Bernoulli, _instance)
        batch_shape = tuple(batch_shape)
        self._expand_probs(new, batch_shape)
        super(Bernoulli, new).__init__(batch_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    @property
    def mean(self):
        """The mean."""
        return self.probs

    @property
    def mode(self):
        """The mode (the most likely value)."""
        mode = (self.probs >= 0.5).to(self.probs.dtype)
        return ops.where(self.probs == 0.5, float("nan"), mode)

    @property
    def variance(self):
        """The variance."""
        return self.probs * (1 - self.probs)

    @property
    def param_shape(self):
        """The shape of the parameter tensor."""
        return self._param.shape

    def sample(self, sample_shape=()):
        """0/1 draws of the parameters' dtype from flame's generator (no gradients)."""
        shape = self._extended_shape(sample_shape)
        with ops.no_grad():
            u = ops.rand(shape, dtype=self._param.dtype)
            return (u < self.probs.expand(*shape)).to(self._param.dtype)

    def log_prob(self, value):
        """-binary_cross_entropy_with_logits(logits, value)."""
        if self._validate_args:
            self._validate_sample(value)
        logits, value = broadcast_all(self.logits, value)
        return -binary_cross_entropy_with_logits(logits, value, reduction="none")

    def entropy(self):
        """binary_cross_entropy_with_logits(logits, probs)."""
        return binary_cross_entropy_with_logits(self.logits, self.probs, reduction="none")

    def enumerate_support(self, expand: bool = True):
        """[0, 1] along dim 0, over the batch shape."""
        values = ops.arange(2, dtype=self._param.dtype).reshape(-1, *(1,) * len(self._batch_shape))
        return values.expand(2, *self._batch_shape) if expand else values

    _mean_carrier_measure = 0

    @property
    def _natural_params(self):
        return (self.probs.log() - (-self.probs).log1p(),)

    def _log_normalizer(self, x):
        return x.exp().log1p()
