"""torch.broadcast_shapes and torch.broadcast_tensors: the shape given shapes broadcast to, and tensors
broadcast to their common shape (NumPy's rules)."""

from __future__ import annotations

import numpy as np

from flame.errors import ShapeError
from flame.frontend.context import user_location
from flame.frontend.tensor import Tensor

__all__ = ["broadcast_shapes", "broadcast_tensors"]


def broadcast_shapes(*shapes) -> tuple[int, ...]:
    """The shape the given shapes broadcast to (NumPy's rules), as torch.broadcast_shapes."""
    try:
        return tuple(np.broadcast_shapes(*[tuple(s) if not isinstance(s, int) else (s,) for s in shapes]))
    except ValueError:
        raise ShapeError(f"broadcast_shapes: {[list(s) if not isinstance(s, int) else [s] for s in shapes]} do "
                         f"not broadcast\n  at {user_location()}") from None


def broadcast_tensors(*tensors) -> tuple[Tensor, ...]:
    """Every tensor broadcast to their common shape, as torch.broadcast_tensors."""
    ts = [t if isinstance(t, Tensor) else Tensor(t) for t in tensors]
    shape = broadcast_shapes(*[t.shape for t in ts])
    return tuple(t.broadcast_to(shape) for t in ts)
