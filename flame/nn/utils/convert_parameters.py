"""parameters_to_vector / vector_to_parameters (torch.nn.utils's): a model's parameters as one flat vector
and back."""

from __future__ import annotations

from collections.abc import Iterable

from flame.errors import DTypeError
from flame.frontend.context import no_grad, user_location
from flame.frontend.ops import cat
from flame.frontend.tensor import Tensor

__all__ = ["parameters_to_vector", "vector_to_parameters"]


def parameters_to_vector(parameters: Iterable[Tensor]) -> Tensor:
    """The parameters flattened and concatenated in order (differentiable, as torch's)."""
    return cat([p.reshape(-1) for p in parameters])


def vector_to_parameters(vec: Tensor, parameters: Iterable[Tensor]) -> None:
    """Copy consecutive slices of vec into the parameters, in order. Eagerly each parameter's .data becomes
    its slice of vec (sharing vec's memory and taking its dtype, as torch's); inside @flame.compile the
    slice is copied into the parameter, whose dtype must then be vec's."""
    if not isinstance(vec, Tensor):
        raise TypeError(f"vector_to_parameters: expected a flame.Tensor, but got: {type(vec).__name__}")
    at = 0
    for p in parameters:
        n = p.numel()
        part = vec[at : at + n].view(p.shape)
        if vec.is_traced or p.is_traced:
            if part.dtype != p.dtype:
                raise DTypeError(
                    f"vector_to_parameters: inside @flame.compile the vector's dtype ({vec.dtype}) must "
                    f"be the parameter's ({p.dtype})\n  at {user_location()}"
                )
            with no_grad():
                p.copy_(part)
        else:
            p.data = part.data
        at += n
