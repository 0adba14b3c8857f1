"""flame.utils: PyTorch's torch.utils names that flame has. `flame.utils.checkpoint(fn, *args)`
is activation checkpointing (also reachable as flame.utils.checkpoint.checkpoint, PyTorch's path), with
JAX's policies (checkpoint_policies; flame.tag names values for them);
flame.utils.data loads data as torch.utils.data does (DataLoader, datasets, samplers, DistributedSampler)."""

from flame.utils._checkpoint import checkpoint, checkpoint_policies, tag

__all__ = ["checkpoint", "checkpoint_policies", "tag"]
