"""torch.nn.SyncBatchNorm: batch normalisation whose training-mode statistics are those of every
process's batch together. Each process gathers the per-channel count, mean and sum of squared
deviations of every process once (one all_gather, whose gradient is a reduce_scatter, so the
backward exchanges the gradients of those statistics as torch's does) and combines them exactly
(flame/frontend/norms.batch_norm_across); the running statistics take the global mean and the
unbiased variance of the global count. In eval mode, or without a process group of more than one
process, it is BatchNorm. Eager and inside @flame.compile (the all_gather is an op of the step's
graph, as DistributedDataParallel's all_reduce is)."""

from __future__ import annotations

from typing import Any

from flame.distributed.collectives import _check
from flame.distributed.process_group import get_world_size, is_initialized
from flame.errors import ShapeError
from flame.frontend import norms as N
from flame.frontend.context import user_location
from flame.frontend.dispatch import apply
from flame.frontend.tensor import Tensor
from flame.nn.batchnorm import _BatchNorm
from flame.nn.module import Module


class SyncBatchNorm(_BatchNorm):
    """BatchNorm over [N, C, ...] (any rank from 2) with the statistics of every process's batch in
    training mode (module docstring). process_group: None, the world (flame has no subgroups)."""

    ranks = (2, 3, 4, 5)

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1, affine: bool = True,
                 track_running_stats: bool = True, process_group: Any = None, device: Any = None,
                 dtype: Any = None):
        super().__init__(num_features, eps, momentum, affine, track_running_stats, device, dtype)
        _check(process_group)
        self.process_group = process_group

    def forward(self, x: Tensor) -> Tensor:
        if not (self.training and is_initialized() and get_world_size() > 1):
            return super().forward(x)  # as torch's: no other process to synchronise with
        if x.ndim < 2:
            raise ShapeError(f"SyncBatchNorm: expected at least a 2-D input [N, C, ...], got {x.ndim}-D "
                             f"{list(x.shape)}\n  at {user_location()}")
        if x.shape[1] != self.num_features:
            raise ShapeError(f"SyncBatchNorm: expected {self.num_features} channels (dim 1), got {x.shape[1]} in "
                             f"input {list(x.shape)}\n  at {user_location()}")
        momentum = 0.0 if self.momentum is None else self.momentum
        if self.track_running_stats:
            self.num_batches_tracked.add_(1)
            if self.momentum is None:  # cumulative moving average
                momentum = 1.0 / self.num_batches_tracked.to(x.dtype)
        world = get_world_size()
        running = (self.running_mean, self.running_var) if self.track_running_stats else (None, None)
        return N.batch_norm_across(x, *running, self.weight, self.bias, momentum, self.eps,
                                   lambda t: apply("all_gather", t, world_size=world))

    @classmethod
    def convert_sync_batchnorm(cls, module: Module, process_group: Any = None) -> Module:
        """module with every BatchNorm1d/2d/3d in it replaced by a SyncBatchNorm sharing its parameters
        and buffers (module itself when it is one), as torch's."""
        out = module
        if isinstance(module, _BatchNorm) and not isinstance(module, SyncBatchNorm):
            out = cls(module.num_features, module.eps, module.momentum, module.affine, module.track_running_stats,
                      process_group)
            if module.affine:
                out.weight, out.bias = module.weight, module.bias
            out.running_mean, out.running_var = module.running_mean, module.running_var
            out.num_batches_tracked = module.num_batches_tracked
            out.train(module.training)
            if hasattr(module, "qconfig"):
                out.qconfig = module.qconfig
        for name, child in list(module.named_children()):
            out.add_module(name, cls.convert_sync_batchnorm(child, process_group))
        return out
