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

Parameters that get no gradient in a backward (unused by the forward), as torch's reducer treats
them: with find_unused_parameters=False (the default) their .grad is left as it was and the next
forward that records gradients outside no_sync() raises a DistributedError (a RuntimeError) naming
them; inside @flame.compile the trace of that backward raises it, as no later forward is traced.
With find_unused_parameters=True every rank contributes zeros for them (the
ranks issue identical collectives) and one more all_reduce tells which parameters no rank used:
those keep their .grad untouched (None where they had none), the others get the average. Inside
@flame.compile that set is not known when tracing, so a parameter no rank used gets zeros averaged
into its gradient (a zero .grad where it had none).

With forward_sync_buffers=True (the default; broadcast_buffers is its deprecated name) every forward
first broadcasts the module's buffers from rank 0 (BatchNorm's running statistics), in training and
eval mode alike, as torch does. In a world of one rank nothing is added."""

from __future__ import annotations

import warnings
from contextlib import contextmanager

import numpy as np

from flame.distributed import buckets as _buckets
from flame.distributed.buckets import unwrap
from flame.distributed.process_group import get_rank, get_world_size
from flame.distributed.store import DistributedError
from flame.errors import FlameError
from flame.frontend.context import current_trace, grad_enabled, no_grad
from flame.frontend.creation import tensor, zeros
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


def _unsupported(**given) -> None:
    for name, value in given.items():
        if value is not None:
            raise FlameError(f"DistributedDataParallel: {name} is not supported; pass {name}=None "
                             "(flame's process group is the world of every rank)")


def _buffer_sync(broadcast_buffers: bool | None, forward_sync_buffers: bool | None) -> tuple[bool, bool]:
    """(broadcast buffers when wrapping, broadcast them before every forward), as torch 2.13 reads
    its two arguments."""
    if broadcast_buffers is not None:
        ignored = " and is ignored: forward_sync_buffers is given" if forward_sync_buffers is not None else ""
        warnings.warn(
            f"DistributedDataParallel: `broadcast_buffers` is deprecated{ignored}. Use `forward_sync_buffers` "
            "instead; unlike `broadcast_buffers=False`, `forward_sync_buffers=False` still broadcasts the "
            "buffers when wrapping.",
            FutureWarning,
            stacklevel=3,
        )
    if forward_sync_buffers is not None:
        return True, bool(forward_sync_buffers)
    every = True if broadcast_buffers is None else bool(broadcast_buffers)
    return every, every


class DistributedDataParallel(Module):
    """Averages the gradients of `module`'s parameters over the ranks after each backward (module
    docstring). torch 2.13's arguments, with its meaning:

    init_sync: broadcast rank 0's parameters (and buffers, unless broadcast_buffers=False) when
    wrapping. forward_sync_buffers (default True): broadcast rank 0's buffers before every forward;
    broadcast_buffers is its deprecated spelling (a FutureWarning, as torch's), which also leaves the
    buffers out of the wrap-time broadcast when False. bucket_cap_mb: the bucket size (default 25).

    device_ids / output_device / dim are accepted for torch compatibility (each rank uses GPU
    LOCAL_RANK already); check_reduction, gradient_as_bucket_view, static_graph,
    skip_all_reduce_unused_params, bucket_cap_mb_list and batched_grad_copy only tune how torch
    schedules and stores its buckets, and are accepted without effect. process_group, device_mesh,
    mixed_precision and delay_all_reduce_named_params / param_to_hook_all_reduce are not supported
    (a FlameError unless None)."""

    def __init__(self, module: Module, device_ids=None, output_device=None, dim: int = 0,
                 broadcast_buffers: bool | None = None, init_sync: bool = True, process_group=None,
                 bucket_cap_mb: float | None = None, find_unused_parameters: bool = False,
                 check_reduction: bool = False, gradient_as_bucket_view: bool = False, static_graph: bool = False,
                 delay_all_reduce_named_params=None, param_to_hook_all_reduce=None, mixed_precision=None,
                 device_mesh=None, skip_all_reduce_unused_params: bool = False, bucket_cap_mb_list=None,
                 batched_grad_copy: bool = False, forward_sync_buffers: bool | None = None):
        super().__init__()
        _unsupported(process_group=process_group, device_mesh=device_mesh, mixed_precision=mixed_precision,
                     delay_all_reduce_named_params=delay_all_reduce_named_params,
                     param_to_hook_all_reduce=param_to_hook_all_reduce)
        params = [p for p in module.parameters() if p.requires_grad]
        if not params:
            raise DistributedError("DistributedDataParallel is not needed when a module doesn't have any "
                                   "parameter that requires a gradient.")
        init_buffers, self.forward_sync_buffers = _buffer_sync(broadcast_buffers, forward_sync_buffers)
        self.module = module
        self.bucket_cap_mb = 25.0 if bucket_cap_mb is None else float(bucket_cap_mb)
        self.world_size = get_world_size()
        self.require_backward_grad_sync = True
        self.find_unused_parameters = bool(find_unused_parameters)
        object.__setattr__(self, "_unused_error", None)  # raised by the next forward (module docstring)
        object.__setattr__(self, "_ddp_params", params)
        object.__setattr__(self, "buckets", _buckets.plan_buckets(params, int(self.bucket_cap_mb * 2**20)))
        object.__setattr__(self, "_shards", None)  # set by a ZeroRedundancyOptimizer: one Shard per bucket
        _buckets.register_reducer(params, self)  # the ZeRO optimizer finds it by its parameters
        if self.world_size > 1 and init_sync:
            self._broadcast_from_rank0(init_buffers)
        register_grad_reducer(self)

    @property
    def broadcast_buffers(self) -> bool:
        """The deprecated name of forward_sync_buffers, as torch's."""
        return self.forward_sync_buffers

    @broadcast_buffers.setter
    def broadcast_buffers(self, value: bool) -> None:
        self.forward_sync_buffers = value

    def _broadcast_from_rank0(self, buffers: bool) -> None:
        from flame.distributed.collectives import broadcast

        with no_grad():
            for p in self.module.parameters():
                broadcast(p, src=0)
            if buffers:
                for b in self.module.buffers():
                    broadcast(b, src=0)

    def forward(self, *args, **kwargs):
        if self._unused_error is not None and grad_enabled.get() and self.require_backward_grad_sync:
            error, self._unused_error = self._unused_error, None
            raise error
        if self.world_size > 1 and self.forward_sync_buffers:
            self._sync_buffers()
        return self.module(*args, **kwargs)

    def _sync_buffers(self) -> None:
        """Every buffer <- rank 0's, before the forward reads it (torch's _sync_buffers)."""
        from flame.distributed.collectives import broadcast

        with no_grad():
            for b in self.module.buffers():
                broadcast(b, src=0)

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
        done = {id(t) for t in touched}
        unused = [i for i, p in enumerate(self._ddp_params) if id(p) not in done]
        keep: set[int] = set()
        if unused and not self.find_unused_parameters:
            error = self._unused_parameters_error(unused)
            if trace is not None:
                raise error
            object.__setattr__(self, "_unused_error", error)
            keep = set(unused)  # their .grad untouched, as torch's reducer never finishes their bucket
        elif self.find_unused_parameters and trace is None:  # every rank exchanges its flags, as torch's
            keep = self._unused_everywhere(done)
        with no_grad():
            for i, bucket in enumerate(self.buckets):
                if self._shards is None:
                    self._all_reduce(bucket, keep)
                else:
                    self._reduce_scatter(bucket, self._shards[i])

    def _unused_parameters_error(self, unused: list[int]) -> DistributedError:
        names = {id(p): n for n, p in self.module.named_parameters()}
        listed = ", ".join(f"{i} ({names.get(id(self._ddp_params[i]), '?')})" for i in unused)
        return DistributedError(
            "DistributedDataParallel: expected to have finished reduction in the prior iteration before "
            "starting a new one: the module has parameters that were not used in producing the loss "
            f"(rank {get_rank()}: parameter indices {listed}). Pass find_unused_parameters=True to "
            "DistributedDataParallel, and make sure every output of forward takes part in the loss"
        )

    def _unused_everywhere(self, done: set[int]) -> set[int]:
        """The indices of the parameters no rank computed a gradient for (one all_reduce of flags)."""
        used = np.array([id(p) in done for p in self._ddp_params], dtype=np.float32)
        with no_grad():
            total = apply("all_reduce", tensor(used), op="sum", world_size=self.world_size)
        return {i for i, n in enumerate(total.numpy()) if n == 0}

    def _grad(self, i: int) -> Tensor:
        """The gradient as the backward left it (no reshape: an op traced after the backward would
        hold the bucket's collective back), zeros where this rank has none."""
        p = self._ddp_params[i]
        g = p.grad
        return zeros(*p.shape, dtype=p.dtype) if g is None else g

    def _all_reduce(self, bucket: _buckets.Bucket, keep: set[int]) -> None:
        """One all_reduce of the bucket; the parameters in `keep` (used by no rank) keep their .grad."""
        grads = [self._grad(i) for i in bucket.params]
        flat = apply("all_reduce", *grads, op="avg", world_size=self.world_size)
        params = [self._ddp_params[i] for i in bucket.params]
        for i, p, g in zip(bucket.params, params, flat_parts(flat, params)):
            if i not in keep:
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
