"""Batch normalisation (torch.nn.modules.batchnorm): _NormBase, what batch and instance norm share (the
affine weight and bias, the running statistics), the BatchNorm1d/2d/3d layers and their lazy forms."""

from __future__ import annotations

from typing import Any

from flame.errors import ShapeError
from flame.frontend import norms as N
from flame.frontend.context import current_trace, in_checkpoint, is_grad_enabled, no_grad, user_location
from flame.frontend.creation import ones, zeros
from flame.frontend.default_dtype import float_dtype
from flame.frontend.tensor import Tensor
from flame.ir.dtypes import i64
from flame.nn.layers import _register_affine, _reset_affine
from flame.nn.lazy import LazyModuleMixin
from flame.nn.module import Module
from flame.nn.parameter import UninitializedBuffer, is_lazy

__all__ = ["BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "LazyBatchNorm1d", "LazyBatchNorm2d", "LazyBatchNorm3d"]

class _NormBase(Module):
    """What batch and instance norm share (PyTorch's _NormBase): the per-channel weight and bias
    (affine) and, with track_running_stats, the buffers running_mean, running_var and
    num_batches_tracked."""

    _version = 2  # as torch's: a checkpoint of version 2 or later holds num_batches_tracked

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1, affine: bool = True,
                 track_running_stats: bool = True, device: Any = None, dtype: Any = None, *, bias: bool = True):
        super().__init__()
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        self.affine, self.track_running_stats = affine, track_running_stats
        dt = float_dtype(dtype)
        _register_affine(self, (num_features,), dt, affine, bias)
        if track_running_stats:
            self.register_buffer("running_mean", zeros(num_features, dtype=dt))
            self.register_buffer("running_var", ones(num_features, dtype=dt))
            self.register_buffer("num_batches_tracked", zeros(dtype=i64))
        else:
            for name in ("running_mean", "running_var", "num_batches_tracked"):
                self.register_buffer(name, None)
        self._place(device)

    def reset_parameters(self) -> None:
        """The running statistics back to their start, weight ones and bias zeros, as torch's."""
        self.reset_running_stats()
        _reset_affine(self)

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                              error_msgs) -> None:
        """A checkpoint without num_batches_tracked (PyTorch's from before version 2 of its norms, or one
        built by hand, whose metadata gives no version) keeps this module's own count, as torch's _NormBase."""
        key = prefix + "num_batches_tracked"
        version = local_metadata.get("version")
        if self.track_running_stats and key not in state_dict and (version is None or version < 2):
            state_dict[key] = self.num_batches_tracked
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                                      error_msgs)

    def reset_running_stats(self) -> None:
        if self.track_running_stats:
            self.running_mean.zero_()
            self.running_var.fill_(1)
            self.num_batches_tracked.zero_()

    def extra_repr(self) -> str:
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, affine={self.affine}, "
                f"bias={self.bias is not None}, track_running_stats={self.track_running_stats}")


class _BatchNorm(_NormBase):
    """Per-channel normalisation with running statistics as buffers (running_mean, running_var,
    num_batches_tracked), updated in place in training mode: inside @flame.compile they are `state`
    inputs whose new values the step writes back (aliased outputs). momentum=None averages every
    batch seen so far (factor 1 / num_batches_tracked), as PyTorch."""

    ranks: tuple[int, ...] = (4,)

    def forward(self, x: Tensor) -> Tensor:
        name = type(self).__name__
        if x.ndim not in self.ranks:
            want = " or ".join(f"{r}-D" for r in self.ranks)
            raise ShapeError(f"{name}: expected a {want} input, got {x.ndim}-D {list(x.shape)}\n  at {user_location()}")
        if x.shape[1] != self.num_features:
            raise ShapeError(f"{name}: expected {self.num_features} channels (dim 1), got {x.shape[1]} in input "
                             f"{list(x.shape)}\n  at {user_location()}")
        batch_stats = self.training or self.running_mean is None  # as PyTorch's _BatchNorm.forward
        stats = (self.running_mean, self.running_var, self.weight, self.bias)
        y = N.batch_norm(x, *stats, batch_stats, self._count_batch(x), self.eps)
        if self.training and self.track_running_stats and self.running_mean is not None:
            if self._checkpoint_runs_again(y):  # torch's second update, in its recomputation
                with no_grad():
                    N.batch_norm(x.detach(), *stats, True, self._count_batch(x), self.eps)
        return y

    def _checkpoint_runs_again(self, y: Tensor) -> bool:
        """Whether torch would run this forward a second time: inside activation checkpointing
        (flame.utils.checkpoint) with y recording a gradient, torch's checkpoint recomputes the region in
        the backward by running its Python again, and the recomputation always reaches a BatchNorm (its
        kernel makes the values its backward saves), so the running statistics and num_batches_tracked
        move twice a training step. flame's recomputes values without running the Python, so the module
        makes the second update itself, right after the first: torch's state wherever backward() follows
        the forward (a training step). (A tracking InstanceNorm's second update in torch depends on
        whether the region's recomputation stops before the copy that follows its kernel: not mirrored.)"""
        if in_checkpoint.get() is None or not is_grad_enabled():
            return False
        trace = current_trace.get()
        return trace.requires_grad(y) if trace is not None else y.requires_grad

    def _count_batch(self, x: Tensor) -> float | Tensor:
        """The momentum of this batch's update of the running statistics, the batch counted in
        num_batches_tracked when training with them (momentum=None: the cumulative average's 1 / count)."""
        momentum = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats:
            self.num_batches_tracked.add_(1)
            if self.momentum is None:  # cumulative moving average
                momentum = 1.0 / self.num_batches_tracked.to(x.dtype)
        return momentum


class BatchNorm1d(_BatchNorm):
    """Over [N, C] or [N, C, L]."""

    ranks = (2, 3)


class BatchNorm2d(_BatchNorm):
    """Over [N, C, H, W]."""

    ranks = (4,)


class BatchNorm3d(_BatchNorm):
    ranks = (5,)


# ---- lazy modules: in_channels / num_features from the first input (flame/nn/lazy.py) -------------


class _LazyNorm(LazyModuleMixin):
    """A norm layer whose num_features is its first input's dim 1 (torch's _LazyNormBase): weight, bias,
    running_mean and running_var are placeholders until then (num_batches_tracked is made at once)."""

    def __init__(self, eps: float = 1e-5, momentum: float | None = 0.1, affine: bool = True,
                 track_running_stats: bool = True, device: Any = None, dtype: Any = None, *, bias: bool = True):
        super().__init__(0, eps, momentum, affine, track_running_stats, device, dtype, bias=bias)
        dt = float_dtype(dtype)
        if affine:
            self._lazy_weight_and_bias(bias, dt)
        if track_running_stats:
            self.running_mean = UninitializedBuffer(dtype=dt)
            self.running_var = UninitializedBuffer(dtype=dt)

    def reset_parameters(self) -> None:
        if not self.has_uninitialized_params() and self.num_features != 0:
            super().reset_parameters()

    def initialize_parameters(self, input: Tensor, *args, **kwargs) -> None:  # noqa: A002
        if not self.has_uninitialized_params():
            return
        self.num_features = input.shape[1]
        for t in (self.weight, self.bias, self.running_mean, self.running_var):
            if t is not None:
                t.materialize((self.num_features,))
        for t in (self.weight, self.running_var):  # PyTorch's reset_parameters: ones there, zeros elsewhere
            if t is not None:
                t.fill_(1)
        self.reset_running_stats()

    def _sizes_from_parameters(self) -> None:
        sized = [t for t in (self.weight, self.running_mean) if t is not None and not is_lazy(t)]
        if sized:
            self.num_features = sized[0].shape[0]


class _LazyBatchNorm(_LazyNorm, _BatchNorm):
    """BatchNorm whose num_features is its first input's dim 1 (torch.nn.LazyBatchNormNd)."""


class LazyBatchNorm1d(_LazyBatchNorm):
    ranks, cls_to_become = (2, 3), BatchNorm1d


class LazyBatchNorm2d(_LazyBatchNorm):
    """BatchNorm2d whose num_features is its first input's channel dim; then it is a BatchNorm2d."""

    ranks, cls_to_become = (4,), BatchNorm2d


class LazyBatchNorm3d(_LazyBatchNorm):
    ranks, cls_to_become = (5,), BatchNorm3d
