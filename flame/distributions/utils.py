"""Helpers of flame.distributions, as torch.distributions.utils: broadcasting parameters, probs <-> logits,
the clamp that keeps log(probs) finite, and lazy_property (a parameter computed on first use)."""

from __future__ import annotations

from numbers import Number

from flame.distributions import _frontend as ops
from flame.frontend.tensor import Tensor
from flame.ir.dtypes import finfo

__all__ = ["EULER", "broadcast_all", "clamp_probs", "lazy_property", "logits_to_probs", "probs_to_logits"]

EULER = 0.57721566490153286060  # the Euler-Mascheroni constant (torch.distributions.utils.euler_constant)


def finfo_eps(dtype) -> float:
    """The machine epsilon of a floating dtype (torch.finfo(dtype).eps)."""
    return float(finfo(dtype).eps)


def finfo_tiny(dtype) -> float:
    """The smallest positive normal value of a floating dtype (torch.finfo(dtype).tiny)."""
    return float(finfo(dtype).tiny)


def finfo_min(dtype) -> float:
    """The most negative finite value of a floating dtype (torch.finfo(dtype).min)."""
    return float(finfo(dtype).min)


def broadcast_all(*values) -> tuple[Tensor, ...]:
    """The values as tensors of one broadcast shape: Python numbers become tensors of the first tensor's
    dtype (the default floating dtype when all are numbers), as torch.distributions.utils.broadcast_all."""
    if not all(isinstance(v, (Tensor, Number)) for v in values):
        raise ValueError(
            "Input arguments must all be instances of numbers.Number, flame.Tensor or objects "
            "implementing __torch_function__."
        )
    if all(isinstance(v, Tensor) for v in values):
        return tuple(ops.broadcast_tensors(*values))
    dtype = next((v.dtype for v in values if isinstance(v, Tensor)), ops.get_default_dtype())
    tensors = [v if isinstance(v, Tensor) else ops.tensor(float(v), dtype=dtype) for v in values]
    return tuple(ops.broadcast_tensors(*tensors))


def sum_rightmost(value: Tensor, dim: int) -> Tensor:
    """value summed over its `dim` rightmost dimensions."""
    if dim == 0:
        return value
    return value.reshape(*value.shape[: value.ndim - dim], -1).sum(-1)


def clamp_probs(probs: Tensor) -> Tensor:
    """probs clamped to [eps, 1 - eps] of their dtype, so that their logs stay finite."""
    eps = finfo_eps(probs.dtype)
    return probs.clamp(min=eps, max=1 - eps)


def probs_to_logits(probs: Tensor, is_binary: bool = False) -> Tensor:
    """Logits of probabilities: log(p) for categorical ones, log(p) - log1p(-p) for binary ones (each
    clamped away from 0 and 1 first)."""
    ps = clamp_probs(probs)
    return ps.log() - (-ps).log1p() if is_binary else ps.log()


def logits_to_probs(logits: Tensor, is_binary: bool = False) -> Tensor:
    """Probabilities of logits: sigmoid for binary ones, softmax over the last dim for categorical ones."""
    return logits.sigmoid() if is_binary else ops.softmax(logits, -1)


class lazy_property:  # noqa: N801  (torch's name)
    """A property computed on first use and then kept on the instance (so `"probs" in d.__dict__` says
    which parameterisation a distribution was given), computed with gradients enabled."""

    def __init__(self, wrapped):
        self.wrapped = wrapped
        self.__doc__ = wrapped.__doc__

    def __get__(self, instance, obj_type=None):
        if instance is None:
            return self
        with ops.enable_grad():
            value = self.wrapped(instance)
        setattr(instance, self.wrapped.__name__, value)
        return value


class BinaryProbs:
    """`probs` and `logits` of a distribution given one of them for a success probability (Bernoulli,
    Binomial, NegativeBinomial, Geometric): each derived from the other at first use (lazy_property)."""

    @lazy_property
    def logits(self):
        """log(p) - log1p(-p) of probs (clamped away from 0 and 1)."""
        return probs_to_logits(self.probs, is_binary=True)

    @lazy_property
    def probs(self):
        """sigmoid(logits)."""
        return logits_to_probs(self.logits, is_binary=True)

    def _take_param(self, probs, logits) -> tuple[int, ...]:
        """Keep the one of probs and logits given (broadcast to a tensor), also as `_param`, and return the
        batch shape it makes (() for a Python number); torch's ValueError unless exactly one is given."""
        if (probs is None) == (logits is None):
            raise ValueError("Either `probs` or `logits` must be specified, but not both.")
        name, given = ("probs", probs) if probs is not None else ("logits", logits)
        (value,) = broadcast_all(given)
        setattr(self, name, value)
        self._param = value
        return () if isinstance(given, Number) else tuple(value.shape)

    def _expand_probs(self, new, batch_shape: tuple) -> None:
        """Give `new` (expand's instance) the parameters known here, probs or logits or both, expanded to
        batch_shape; its `_param`, where the class keeps one, is the expanded logits if known, else probs."""
        for name in ("probs", "logits"):
            if name in self.__dict__:
                setattr(new, name, getattr(self, name).expand(*batch_shape))
                if hasattr(self, "_param"):
                    new._param = getattr(new, name)


def shape_of(sample_shape) -> tuple[int, ...]:
    """A sample_shape argument (tuple, list or torch-style Size) as a tuple of ints."""
    if isinstance(sample_shape, int) or not hasattr(sample_shape, "__iter__"):
        raise TypeError(f"sample_shape must be a tuple of ints, got {sample_shape!r}")
    return tuple(int(s) for s in sample_shape)
