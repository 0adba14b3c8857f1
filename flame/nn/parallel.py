"""DistributedDataParallel: data-parallel training, one process per GPU (ARCHITECTURE.md "Collectives are ops").

Wrapping broadcasts the module's parameters and buffers from rank 0, so every rank starts from the
same model. After each backward (eager, or inside @flame.compile: the same code traced), every
parameter's gradient is averaged over the ranks and written back into its .grad, as torch's reducer
copies a bucket back (the same tensor: a reference held to it sees the average; inside
@flame.compile an output aliased to the .grad input, written into its buffer). The gradients are
packed into buckets of about `bucket_cap_mb` (flame/distributed/buckets.py) and each bucket is ONE all_reduce
op (several inputs, packed in the call) of the graph, placed by the compiler right after the last
gradient it packs (passes/schedule_collectives.py) and, on CUDA, run on a second stream while the
rest of the backward computes; the optimizer, clip_grad_norm_ and anything else after the backward
read the averaged gradients. With a ZeroRedundancyOptimizer over the same parameters, each bucket is
instead reduce-scattered: every rank gets the averaged gradients of the parameters it updates.

`no_sync()` skips the averaging (gradient accumulation: the gradients of micro-batches add up
locally; the backward after the last micro-batch averages the sum). Inside @flame.compile the choice
is made when tracing; a call under the other setting re-traces (or reuses its own trace), so one
compiled step may be called both ways.

A parameter without a gradient on this rank contributes zeros to its bucket and gets the average
(the ranks must issue identical collectives). In a world of one rank nothing is added."""

from __future__ import annotations

from contextlib import contextmanager

from flame.distributed import buckets as _buckets
from flame.distributed.buckets import unwrap
from flame.distributed.process_group import get_rank, get_world_size
from flame.frontend.context import current_trace, no_grad
from flame.frontend.creation import zeros
from flame.frontend.dispatch import apply
from flame.frontend.hooks import register_grad_reducer
from flame.frontend.tensor import Tensor
from flame.nn.module import Module

__all__ = ["DistributedDataParallel", "unwrap"]

def flat_parts(flat: Tensor, tensors: list[Tensor]) -> list[Tensor]:
    """The consecutive parts of a packed (1-D) collective result, shaped like `tensors`; a result of
    one input has that input's shape already."""
    if len(tensors) == 1 and flat.numel() == tensors[0].numel():
        return [flat.reshape(tensors[0].shape)]
    out, at = [], 0
    for t in tensors:
        n = t.numel()
        out.append(flat[at: at + n].reshape(t.shape))
        at += n
    return out


def _write_grad(p: Tensor, g: Tensor) -> None:
    """The reduced gradient written back into p's .grad, as torch's reducer copies a bucket back: into
    the existing tensor (a reference held to it sees the average; inside @flame.compile an in-place
    update of the .grad, an output aliased to its buffer), or as p's .grad where it has none."""
    if p.grad is None:
        p.grad = g
    else:
        p.grad.copy_(g)


class DistributedDataParallel(Module):
    """Averages the gradients of `module`'s parameters over the ranks after each backward (module
    docstring). device_ids / output_device are accepted for torch compatibility (each rank uses GPU
    LOCAL_RANK already); find_unused_parameters is implied (missing gradients count as zeros)."""

    def __init__(self, module: Module, device_ids=None, output_device=None, broadcast_buffers: bool = True,
                 bucket_cap_mb: float = 25.0, find_unused_parameters: bool = False, **unused):
        super().__init__()
        self.module = module
        self.bucket_cap_mb = float(bucket_cap_mb)
        self.world_size = get_world_size()
        self.require_backward_grad_sync = True
        params = [p for p in module.parameters() if p.requires_grad]
        object.__setattr__(self, "_ddp_params", params)
        object.__setattr__(self, "buckets", _buckets.plan_buckets(params, int(self.bucket_cap_mb * 2**20)))
        object.__setattr__(self, "_shards", None)  # set by a ZeroRedundancyOptimizer: one Shard per bucket
        _buckets.register_reducer(params, self)  # the ZeRO optimizer finds it by its parameters
        if self.world_size > 1:
            self._broadcast_from_rank0(broadcast_buffers)
        register_grad_reducer(self)

    def _broadcast_from_rank0(self, buffers: bool) -> None:
        from flame.distributed.collectives import broadcast

        with no_grad():
            for p in self.module.parameters():
                broadcast(p, src=0)
            if buffers:
                for b in self.module.buffers():
                    broadcast(b, src=0)

    def forward(self, *args, **kwargs):
        return self.module(*args, **kwargs)

    @contextmanager
    def no_sync(self):
        """Gradients of backward passes inside stay local (accumulate); the next backward outside averages."""
        before = self.require_backward_grad_sync
        self.require_backward_grad_sync = False
        try:
            yield
        finally:
            self.require_backward_grad_sync = before

    @property
    def parameters_reduced(self) -> list[Tensor]:
        return list(self._ddp_params)

    def shard_for_zero(self) -> list[_buckets.Shard]:
        """Split every bucket over the ranks (ZeRO-1): from now on buckets are reduce-scattered."""
        shards = [_buckets.shard_bucket(b, self._ddp_params, self.world_size) for b in self.buckets]
        object.__setattr__(self, "_shards", shards)
        return shards

    # ---- the reduction, after each backward --------------------------------------------------------

    def reduce_grads(self, touched: list[Tensor]) -> None:
        mine = {id(p) for p in self._ddp_params}
        if self.world_size == 1 or not any(id(t) in mine for t in touched):
            return
        trace = current_trace.get()
        if trace is not None:
            trace.guard(lambda: self.require_backward_grad_sync,
                        "DistributedDataParallel.require_backward_grad_sync (no_sync())")
        if not self.require_backward_grad_sync:
            return
        with no_grad():
            for i, bucket in enumerate(self.buckets):
                if self._shards is None:
                    self._all_reduce(bucket)
                else:
                    self._reduce_scatter(bucket, self._shards[i])

    def _grad(self, i: int) -> Tensor:
        """The gradient as the backward left it (no reshape: an op traced after the backward would
        hold the bucket's collective back), zeros where this rank has none."""
        p = self._ddp_params[i]
        g = p.grad
        return zeros(*p.shape, dtype=p.dtype) if g is None else g

    def _all_reduce(self, bucket: _buckets.Bucket) -> None:
        grads = [self._grad(i) for i in bucket.params]
        flat = apply("all_reduce", *grads, op="avg", world_size=self.world_size)
        params = [self._ddp_params[i] for i in bucket.params]
        for p, g in zip(params, flat_parts(flat, params)):
            _write_grad(p, g)

    def _reduce_scatter(self, bucket: _buckets.Bucket, shard: _buckets.Shard) -> None:
        numel = {i: self._ddp_params[i].numel() for i in bucket.params}
        ins = []
        for r, owned in enumerate(shard.owners):
            ins += [self._grad(i) for i in owned]
            pad = shard.padding(r, numel)
            if pad:
                ins.append(zeros(pad, dtype=bucket.dtype))
        part = apply("reduce_scatter", *ins, op="avg", world_size=self.world_size)
        rank = get_rank()
        owned = [self._ddp_params[i] for i in shard.owners[rank]]
        for p, g in zip(owned, flat_parts(part, owned)):
            _write_grad(p, g)
        for i in bucket.params:
            if i not in shard.owners[rank]:
                self._ddp_params[i].grad = None
