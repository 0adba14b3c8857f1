"""flame.utils: PyTorch's torch.utils names that flame has. `flame.utils.checkpoint(fn, *args)`
is activation checkpointing (also reachable as flame.utils.checkpoint.checkpoint, PyTorch's path);
flame.utils.data shards indices over ranks (DistributedSampler)."""

from flame.utils._checkpoint import checkpoint

__all__ = ["checkpoint"]
