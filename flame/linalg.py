"""flame.linalg: the torch.linalg functions flame has (re-exports; the code lives in flame.frontend:
vector_norm in norms.py, the matrix norms and products in linalg_functions.py). torch.linalg's
factorisations, inverses and solvers (inv, solve, cholesky, qr, svd, det, eigh ...) are not here: asking
for one raises AttributeError naming docs/coming_from_pytorch.md, which says what to write instead."""

from flame.errors import LinAlgError
from flame.frontend.linalg_functions import matrix_norm, matrix_power, multi_dot, norm, vander, vecdot
from flame.frontend.norms import vector_norm
from flame.frontend.tensor import Tensor
from flame.frontend.tensor_core import matmul as _matmul

__all__ = ["LinAlgError", "cross", "diagonal", "matmul", "matrix_norm", "matrix_power", "multi_dot", "norm",
           "vander", "vecdot", "vector_norm"]


def cross(input: Tensor, other: Tensor, *, dim: int = -1) -> Tensor:  # noqa: A002
    """The cross product of 3-vectors along dim (default the last), as torch.linalg.cross."""
    return input.cross(other, dim)


def matmul(input: Tensor, other: Tensor) -> Tensor:  # noqa: A002
    """input @ other, as torch.linalg.matmul (torch.matmul)."""
    return _matmul(input, other)


def diagonal(A: Tensor, *, offset: int = 0, dim1: int = -2, dim2: int = -1) -> Tensor:  # noqa: N803
    """The diagonal of the matrices of A over (dim1, dim2) (the last two by default) as its last dim, as
    torch.linalg.diagonal (torch.diagonal with other defaults)."""
    return A.diagonal(offset, dim1, dim2)


def __getattr__(name: str):
    raise AttributeError(f"module 'flame.linalg' has no attribute {name!r} (docs/coming_from_pytorch.md lists "
                         f"what flame does not have yet, with the workaround)")
