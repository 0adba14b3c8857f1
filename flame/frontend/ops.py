"""The torch-level functions of the package root (flame.exp, flame.where, flame.cat, ...): thin
wrappers over Tensor methods and apply(), with PyTorch names and semantics. flame/__init__.py only
re-exports them."""

from __future__ import annotations

from flame.errors import ShapeError
from flame.frontend.context import user_location
from flame.frontend.creation import tensor
from flame.frontend.dispatch import apply
from flame.frontend.tensor import Tensor, binary, dim_index, full, result_type
from flame.ir.dtypes import boolean


def _unary(name: str):
    """flame.NAME(x, ...) = x.NAME(...), x converted to a Tensor first."""

    def op(x: Tensor, *args, **kwargs) -> Tensor:
        return getattr(x if isinstance(x, Tensor) else tensor(x), name)(*args, **kwargs)

    op.__name__ = name
    op.__doc__ = f"flame.{name}(x): elementwise {name}."
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
    return binary("maximum", a, b)


def minimum(a, b) -> Tensor:
    return binary("minimum", a, b)


def pow(a, b) -> Tensor:  # noqa: A001
    return binary("pow", a, b)


def where(cond: Tensor, a, b) -> Tensor:
    """Elementwise cond ? a : b (NumPy broadcasting); a and b are promoted to one dtype (result_type)."""
    dt = result_type(a, b)
    if not any(isinstance(x, Tensor) for x in (a, b)):
        a = full((), a, dt)
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
