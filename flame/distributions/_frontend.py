"""The flame functions flame.distributions builds on, imported from the frontend's own modules (the
library sits below the package face flame/__init__.py)."""

from flame.frontend.context import enable_grad, no_grad
from flame.frontend.creation import arange, eye, full, full_like, multinomial, rand, randn, tensor, zeros_like
from flame.frontend.default_dtype import get_default_dtype
from flame.frontend.ops import broadcast_shapes, broadcast_tensors, cat, erf, erfinv, isclose, softmax, stack, where
from flame.frontend.random_fills import poisson
from flame.frontend.tensor_core import pad

__all__ = [
    "arange",
    "broadcast_shapes",
    "broadcast_tensors",
    "cat",
    "enable_grad",
    "erf",
    "erfinv",
    "eye",
    "full",
    "full_like",
    "get_default_dtype",
    "isclose",
    "multinomial",
    "no_grad",
    "pad",
    "poisson",
    "rand",
    "randn",
    "softmax",
    "stack",
    "tensor",
    "where",
    "zeros_like",
]
