"""Gradient buckets, shared by DistributedDataParallel (one collective per bucket) and the ZeRO-1
optimizer (which rank owns which parameter of a bucket). Parameters are taken in reverse order of
registration — roughly the order the backward produces their gradients (the last layer's first) —
and packed, one dtype per bucket, until a bucket holds `cap_bytes`; a bucket's collective can then
start as soon as its last gradient is computed (passes/schedule_collectives.py).

The wrapper that reduces a model's gradients in buckets (flame.nn.parallel.DistributedDataParallel)
registers itself here for its parameters (register_reducer); the ZeRO optimizer, given parameters,
asks which reducer they belong to (reducer_of) and shards that reducer's buckets, and a checkpoint
saves the module a reducer wraps (unwrap)."""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any, Protocol

from flame.ir.dtypes import DType

# id(parameter) -> (the parameter, the reducer that averages its gradient), both held weakly (Tensor's == is
# elementwise, so tensors cannot be the keys of a WeakKeyDictionary)
_REDUCER_OF: dict[int, tuple[weakref.ref, weakref.ref]] = {}
_REDUCERS: weakref.WeakValueDictionary = weakref.WeakValueDictionary()  # id(reducer) -> the reducer


@dataclass(frozen=True)
class Bucket:
    """Indices (into the model's parameter list) of the parameters packed together, in packing order."""

    params: tuple[int, ...]
    dtype: DType
    nbytes: int


def plan_buckets(params: list, cap_bytes: int) -> list[Bucket]:
    """Buckets of at most cap_bytes (a parameter larger than the cap gets a bucket of its own), in the
    order they fill up."""
    done: list[Bucket] = []
    open_: dict[DType, tuple[list[int], int]] = {}
    for i in reversed(range(len(params))):
        p = params[i]
        size = p.numel() * p.dtype.itemsize
        idx, total = open_.get(p.dtype, ([], 0))
        if idx and total + size > cap_bytes:
            done.append(Bucket(tuple(idx), p.dtype, total))
            idx, total = [], 0
        open_[p.dtype] = (idx + [i], total + size)
    done += [Bucket(tuple(idx), dt, total) for dt, (idx, total) in open_.items() if idx]
    return done


@dataclass(frozen=True)
class Shard:
    """How a bucket is split over the ranks for ZeRO-1: owners[r] are the parameters rank r updates
    (in bucket order); every rank's part of the packed bucket is `chunk` elements (its parameters,
    then zeros up to chunk)."""

    owners: tuple[tuple[int, ...], ...]
    chunk: int

    def padding(self, rank: int, numel: dict[int, int]) -> int:
        return self.chunk - sum(numel[i] for i in self.owners[rank])


def shard_bucket(bucket: Bucket, params: list, world_size: int) -> Shard:
    """Whole parameters to ranks, largest first to the least loaded rank (ties: the lower rank), so
    the parts are as even as parameters allow."""
    load = [0] * world_size
    owned: list[list[int]] = [[] for _ in range(world_size)]
    for i in sorted(bucket.params, key=lambda i: (-params[i].numel(), i)):
        r = min(range(world_size), key=lambda r: (load[r], r))
        owned[r].append(i)
        load[r] += params[i].numel()
    order = {i: k for k, i in enumerate(bucket.params)}
    owners = tuple(tuple(sorted(o, key=order.__getitem__)) for o in owned)
    return Shard(owners, max(max(load), 1))


class BucketedReducer(Protocol):
    """What the ZeRO optimizer and checkpoints ask of the wrapper that reduces a model's gradients bucket by
    bucket."""

    buckets: list[Bucket]
    module: Any  # the model it wraps

    @property
    def parameters_reduced(self) -> list:
        """The parameters whose gradients it reduces, in the order the buckets' indices refer to."""

    def shard_for_zero(self) -> list[Shard]:
        """Split every bucket over the ranks: from then on each bucket is reduce-scattered."""


def register_reducer(params: list, reducer: BucketedReducer) -> None:
    """Record that `reducer` reduces the gradients of `params` (both held weakly)."""
    _REDUCERS[id(reducer)] = reducer
    for p in params:
        _REDUCER_OF[id(p)] = (weakref.ref(p), weakref.ref(reducer))


def reducer_of(param) -> BucketedReducer | None:
    """The reducer registered for `param` (the DistributedDataParallel that averages its gradient), if any."""
    p, reducer = _REDUCER_OF.get(id(param), (lambda: None, lambda: None))
    return reducer() if p() is param else None


def unwrap(model):
    """The module a registered reducer (a DistributedDataParallel) wraps (its state_dict is the single-GPU
    one), else model."""
    return model.module if _REDUCERS.get(id(model)) is model else model
