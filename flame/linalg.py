"""flame.linalg: the torch.linalg functions flame has (re-exports; the code lives in flame.frontend)."""

from flame.frontend.ops import vector_norm

__all__ = ["vector_norm"]
