"""The torch-level functions of the package root (flame.exp, flame.where, flame.cat, ...): thin
wrappers over Tensor methods and apply(), with PyTorch names and semantics. flame/__init__.py only
re-exports them."""

from __future__ import annotations

import inspect

from flame.errors import ShapeError
from flame.frontend.context import user_location
from flame.frontend.creation import tensor
from flame.frontend.dispatch import apply
from flame.frontend.tensor import Tensor, binary, dim_index, full
from flame.ir.dtypes import boolean, f32, i64, promote

_DOCS = {
    "exp": "e to the power of each element.", "log": "Natural logarithm of each element.",
    "sqrt": "Square root of each element.", "rsqrt": "1 / sqrt(x), elementwise.",
    "reciprocal": "1 / x, elementwise.", "sin": "Sine of each element.", "cos": "Cosine of each element.",
    "tanh": "Hyperbolic tangent of each element.", "sigmoid": "1 / (1 + exp(-x)), elementwise.",
    "erf": "The error function of each element.", "relu": "max(x, 0), elementwise.",
    "gelu": "GELU: x * Phi(x) (approximate='tanh' for the tanh form), as torch.nn.functional.gelu.",
    "silu": "x * sigmoid(x), elementwise.", "leaky_relu": "x if x >= 0 else negative_slope * x, elementwise.",
    "abs": "Absolute value of each element.", "neg": "-x, elementwise.",
    "floor": "Largest integer <= x, elementwise.", "ceil": "Smallest integer >= x, elementwise.",
    "round": "Round to the nearest integer, ties to even, as torch.round.",
    "sign": "-1, 0 or 1 by the sign of each element.",
    "sum": "Sum over dim (an int, a tuple, or None for every element), keeping reduced dims with keepdim; "
           "dtype casts first, as torch.sum.",
    "mean": "Mean over dim (an int, a tuple, or None for every element), as torch.mean.",
    "amax": "Maximum over dim (an int, a tuple, or None for every element), as torch.amax.",
    "amin": "Minimum over dim (an int, a tuple, or None for every element), as torch.amin.",
    "argmax": "Index of the maximum along dim (of the flattened tensor if dim is None), as torch.argmax.",
    "reshape": "The same elements in a new shape; one dimension may be -1, as torch.reshape.",
    "permute": "The dimensions reordered as dims, as torch.permute.",
    "transpose": "dim0 and dim1 swapped, as torch.transpose.",
    "flip": "The order of elements reversed along the given dims, as torch.flip.",
    "squeeze": "Size-1 dimensions removed (only dim, if given), as torch.squeeze.",
    "unsqueeze": "A size-1 dimension inserted at dim, as torch.unsqueeze.",
    "triu": "The upper triangle of the last two dims (from diagonal up), the rest zero, as torch.triu.",
    "tril": "The lower triangle of the last two dims (up to diagonal), the rest zero, as torch.tril.",
    "clamp": "Each element limited to [min, max] (either may be None), as torch.clamp.",
}


def _unary(name: str):
    """flame.NAME(input, ...) = input.NAME(...), input converted to a Tensor first; its signature and
    docstring are the method's (so help(flame.sum) shows dim, keepdim, dtype)."""
    method = getattr(Tensor, name)

    def op(input, *args, **kwargs) -> Tensor:  # noqa: A002 - PyTorch's parameter name
        return getattr(input if isinstance(input, Tensor) else tensor(input), name)(*args, **kwargs)

    sig = inspect.signature(method)
    params = list(sig.parameters.values())
    op.__signature__ = sig.replace(parameters=[params[0].replace(name="input"), *params[1:]],
                                   return_annotation="Tensor")
    op.__name__ = op.__qualname__ = name
    op.__doc__ = _DOCS.get(name, method.__doc__) or f"Tensor.{name} as a function."
    return op


exp, log, sqrt, rsqrt, reciprocal = (_unary(n) for n in ("exp", "log", "sqrt", "rsqrt", "reciprocal"))
sin, cos, tanh, sigmoid, erf = (_unary(n) for n in ("sin", "cos", "tanh", "sigmoid", "erf"))
relu, gelu, silu, leaky_relu = (_unary(n) for n in ("relu", "gelu", "silu", "leaky_relu"))
abs, neg, floor, ceil, round, sign = (_unary(n) for n in ("abs", "neg", "floor", "ceil", "round", "sign"))  # noqa: A001
sum, mean, amax, amin, argmax = (_unary(n) for n in ("sum", "mean", "amax", "amin", "argmax"))  # noqa: A001
reshape, permute, transpose, flip, squeeze, unsqueeze = (
    _unary(n) for n in ("reshape", "permute", "transpose", "flip", "squeeze", "unsqueeze"))
triu, tril, clamp = _unary("triu"), _unary("tril"), _unary("clamp")


def maximum(a, b) -> Tensor:
    """Elementwise maximum of a and b (broadcast), as torch.maximum."""
    return binary("maximum", a, b)


def minimum(a, b) -> Tensor:
    """Elementwise minimum of a and b (broadcast), as torch.minimum."""
    return binary("minimum", a, b)


def pow(a, b) -> Tensor:  # noqa: A001
    """a to the power b, elementwise (broadcast), as torch.pow."""
    return binary("pow", a, b)


def where(cond: Tensor, a, b) -> Tensor:
    """Elementwise cond ? a : b (NumPy broadcasting); a and b are promoted to one dtype."""
    ts = [x for x in (a, b) if isinstance(x, Tensor)]
    dt = ts[0].dtype if len(ts) == 1 else promote(a.dtype, b.dtype) if ts else None
    if dt is None:
        dt = f32 if any(isinstance(x, float) for x in (a, b)) else i64
        a = full((), a, dt)
    if any(isinstance(x, float) for x in (a, b)) and not dt.is_float:
        dt = f32
    a = a.to(dt) if isinstance(a, Tensor) else a
    b = b.to(dt) if isinstance(b, Tensor) else b
    return apply("where", cond.to(boolean), a, b)


def cat(tensors, dim: int = 0) -> Tensor:
    """Concatenate along dim (all tensors share one dtype)."""
    tensors = list(tensors)
    if not tensors:
        raise ShapeError(f"cat: expected a non-empty list of tensors\n  at {user_location()}")
    for i, t in enumerate(tensors):
        if t.ndim == 0:
            raise ShapeError(f"cat: zero-dimensional tensor (at position {i}) cannot be concatenated"
                             f"\n  at {user_location()}")
    return apply("concat", *tensors, axis=dim_index("cat", dim, tensors[0].ndim))


concat = cat


def stack(tensors, dim: int = 0) -> Tensor:
    """Join same-shaped tensors along a new dimension dim."""
    tensors = list(tensors)
    if not tensors:
        raise ShapeError(f"stack: expected a non-empty list of tensors\n  at {user_location()}")
    dim = dim_index("stack", dim, tensors[0].ndim + 1)
    return cat([t.unsqueeze(dim) for t in tensors], dim)


def pad(x: Tensor, pads, value: float = 0) -> Tensor:
    """Constant padding; pads is one (lo, hi) pair per axis (NumPy's form)."""
    return apply("pad", x, pads=pads, value=value)
