"""ContinuousBernoulli(probs or logits), as torch.distributions.ContinuousBernoulli: the density
C(p) p^x (1 - p)^(1 - x) on [0, 1] (Loaiza-Ganem and Cunningham, 2019), with torch's Taylor expansions
inside the unstable region around p = 1/2 (lims)."""

from __future__ import annotations

import math

from flame.distributions import _frontend as ops
from flame.distributions import constraints
from flame.distributions._known import known_value
from flame.distributions.distribution import Distribution
from flame.distributions.exp_family import ExponentialFamily
from flame.distributions.utils import BinaryProbs, broadcast_all, clamp_probs, lazy_property, logits_to_probs
from flame.frontend.losses import binary_cross_entropy_with_logits

__all__ = ["ContinuousBernoulli"]


class ContinuousBernoulli(BinaryProbs, ExponentialFamily):
    """The continuous Bernoulli distribution of parameter probs (or sigmoid(logits)) on [0, 1]."""

    arg_constraints = {"probs": constraints.unit_interval, "logits": constraints.real}
    support = constraints.unit_interval
    _mean_carrier_measure = 0
    has_rsample = True

    def __init__(self, probs=None, logits=None, lims=(0.499, 0.501), validate_args: bool | None = None) -> None:
        batch_shape = self._take_param(probs, logits)
        if probs is not None:
            # checked here when validate_args is given (either way, as torch's): probs is clamped next
            if validate_args is not None:
                known = known_value(self.arg_constraints["probs"].check(self.probs))
                if known is not None and not known.all():
                    raise ValueError("The parameter probs has invalid values")
            self.probs = self._param = clamp_probs(self.probs)
        self._lims = lims
        super().__init__(batch_shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        """This distribution with its parameter expanded to batch_shape."""
        new = self._get_checked_instance(ContinuousBernoulli, _instance)
        new._lims = self._lims
        batch_shape = tuple(batch_shape)
        self._expand_probs(new, batch_shape)
        Distribution.__init__(new, batch_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    @lazy_property
    def probs(self):
        """sigmoid(logits), clamped away from 0 and 1."""
        return clamp_probs(logits_to_probs(self.logits, is_binary=True))

    @property
    def param_shape(self):
        """The shape of the parameter tensor."""
        return self._param.shape

    def _outside_unstable_region(self):
        return (self.probs <= self._lims[0]) | (self.probs > self._lims[1])

    def _cut_probs(self):
        return ops.where(self._outside_unstable_region(), self.probs, self._lims[0])

    def _cont_bern_log_norm(self):
        """log C(p), the log normalising constant, of probs."""
        cut_probs = self._cut_probs()
        below_half = ops.where(cut_probs <= 0.5, cut_probs, 0.0)
        above_half = ops.where(cut_probs >= 0.5, cut_probs, 1.0)
        log_norm = ((-cut_probs).log1p() - cut_probs.log()).abs().log() - ops.where(
            cut_probs <= 0.5, (-2.0 * below_half).log1p(), (2.0 * above_half - 1.0).log()
        )
        x = (self.probs - 0.5).pow(2)
        taylor = math.log(2.0) + (4.0 / 3.0 + 104.0 / 45.0 * x) * x
        return ops.where(self._outside_unstable_region(), log_norm, taylor)

    @property
    def mean(self):
        """p / (2p - 1) + 1 / (log(1 - p) - log p) (a Taylor expansion near p = 1/2)."""
        cut_probs = self._cut_probs()
        mus = cut_probs / (2.0 * cut_probs - 1.0) + 1.0 / ((-cut_probs).log1p() - cut_probs.log())
        x = self.probs - 0.5
        taylor = 0.5 + (1.0 / 3.0 + 16.0 / 45.0 * x.pow(2)) * x
        return ops.where(self._outside_unstable_region(), mus, taylor)

    @property
    def stddev(self):
        """sqrt(variance)."""
        return self.variance.sqrt()

    @property
    def variance(self):
        """p (p - 1) / (1 - 2p)^2 + 1 / (log(1 - p) - log p)^2 (a Taylor expansion near p = 1/2)."""
        cut_probs = self._cut_probs()
        variances = cut_probs * (cut_probs - 1.0) / (1.0 - 2.0 * cut_probs).pow(2) + 1.0 / (
            (-cut_probs).log1p() - cut_probs.log()
        ).pow(2)
        x = (self.probs - 0.5).pow(2)
        taylor = 1.0 / 12.0 - (1.0 / 15.0 - 128.0 / 945.0 * x) * x
        return ops.where(self._outside_unstable_region(), variances, taylor)

    def sample(self, sample_shape=()):
        """icdf of uniform draws (no gradients)."""
        with ops.no_grad():
            return self.rsample(sample_shape)

    def rsample(self, sample_shape=()):
        """icdf of uniform draws: gradients reach probs."""
        shape = self._extended_shape(sample_shape)
        return self.icdf(ops.rand(shape, dtype=self.probs.dtype))

    def log_prob(self, value):
        """-binary_cross_entropy_with_logits(logits, value) + log C(p)."""
        if self._validate_args:
            self._validate_sample(value)
        logits, value = broadcast_all(self.logits, value)
        return -binary_cross_entropy_with_logits(logits, value, reduction="none") + self._cont_bern_log_norm()

    def cdf(self, value):
        """(p^x (1 - p)^(1 - x) + p - 1) / (2p - 1), x itself near p = 1/2; 0 below 0 and 1 above 1."""
        if self._validate_args:
            self._validate_sample(value)
        cut_probs = self._cut_probs()
        cdfs = (cut_probs.pow(value) * (1.0 - cut_probs).pow(1.0 - value) + cut_probs - 1.0) / (2.0 * cut_probs - 1.0)
        unbounded_cdfs = ops.where(self._outside_unstable_region(), cdfs, value)
        return ops.where(value <= 0.0, 0.0, ops.where(value >= 1.0, 1.0, unbounded_cdfs))

    def icdf(self, value):
        """The inverse of cdf (value itself near p = 1/2)."""
        cut_probs = self._cut_probs()
        inverse = ((-cut_probs + value * (2.0 * cut_probs - 1.0)).log1p() - (-cut_probs).log1p()) / (
            cut_probs.log() - (-cut_probs).log1p()
        )
        return ops.where(self._outside_unstable_region(), inverse, value)

    def entropy(self):
        """mean (log(1 - p) - log p) - log C(p) - log(1 - p)."""
        log_probs0, log_probs1 = (-self.probs).log1p(), self.probs.log()
        return self.mean * (log_probs0 - log_probs1) - self._cont_bern_log_norm() - log_probs0

    @property
    def _natural_params(self):
        return (self.logits,)

    def _log_normalizer(self, x):
        """The log normalising constant as a function of the natural parameter (the logits)."""
        out_unst_reg = (x <= self._lims[0] - 0.5) | (x > self._lims[1] - 0.5)
        cut_nat_params = ops.where(out_unst_reg, x, self._lims[0] - 0.5)
        log_norm = cut_nat_params.expm1().abs().log() - cut_nat_params.abs().log()
        taylor = 0.5 * x + x.pow(2) / 24.0 - x.pow(4) / 2880.0
        return ops.where(out_unst_reg, log_norm, taylor)
