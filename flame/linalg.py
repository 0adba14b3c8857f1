"""flame.linalg: the torch.linalg functions flame has (re-exports; the code lives in flame.frontend)."""

from flame.errors import LinAlgError
from flame.frontend.ops import vector_norm
from flame.frontend.tensor import Tensor

__all__ = ["LinAlgError", "cross", "vector_norm"]


def cross(input: Tensor, other: Tensor, *, dim: int = -1) -> Tensor:  # noqa: A002
    """The cross product of 3-vectors along dim (default the last), as torch.linalg.cross."""
    return input.cross(other, dim)
