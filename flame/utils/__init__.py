"""flame.utils: PyTorch's torch.utils names that flame has. `flame.utils.checkpoint(fn, *args)`
is activation checkpointing (flame.utils.checkpoint is also the module of PyTorch's path:
flame.utils.checkpoint.checkpoint, checkpoint_sequential), with JAX's policies (checkpoint_policies;
flame.tag names values for them);
flame.utils.data loads data as torch.utils.data does (DataLoader, datasets, samplers, DistributedSampler)."""

from flame.utils import checkpoint
from flame.utils._checkpoint import checkpoint_policies, tag

__all__ = ["checkpoint", "checkpoint_policies", "tag"]


def __getattr__(name: str):
    """flame.utils.data imports on first use: `flame.utils.data.DataLoader` works after a plain `import
    flame`, as `torch.utils.data.DataLoader` does after `import torch`."""
    if name == "data":
        import importlib

        return importlib.import_module("flame.utils.data")
    raise AttributeError(f"module 'flame.utils' has no attribute {name!r}")
