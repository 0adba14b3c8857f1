"""The torch-level functions of the package root (flame.exp, flame.where, flame.cat, ...): thin
wrappers over Tensor methods and apply(), with PyTorch names and semantics. flame/__init__.py only
re-exports them."""

from __future__ import annotations

import builtins

from flame.errors import DTypeError, ShapeError
from flame.frontend.context import user_location
from flame.frontend.creation import tensor
from flame.frontend.dispatch import apply
from flame.frontend.tensor import Tensor, binary, dim_index, full
from flame.ir.dtypes import boolean, f32, i64, promote


def _unary(name: str):
    """flame.NAME(x, ...) = x.NAME(...), x converted to a Tensor first."""

    def op(x: Tensor, *args, **kwargs) -> Tensor:
        return getattr(x if isinstance(x, Tensor) else tensor(x), name)(*args, **kwargs)

    op.__name__ = name
    op.__doc__ = f"flame.{name}(x, ...) = x.{name}(...)."
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
    """Elementwise cond ? a : b (NumPy broadcasting); a and b are promoted to one dtype."""
    ts = [x for x in (a, b) if isinstance(x, Tensor)]
    dt = ts[0].dtype if len(ts) == 1 else promote(a.dtype, b.dtype) if ts else None
    if dt is None:
        dt = f32 if builtins.any(isinstance(x, float) for x in (a, b)) else i64
        a = full((), a, dt)
    if builtins.any(isinstance(x, float) for x in (a, b)) and not dt.is_float:
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
    """Constant padding; pads is one (lo, hi) pair per axis, first axis first (NumPy's form; torch's
    order, last dimension first, is flame.nn.functional.pad)."""
    return apply("pad", x, pads=pads, value=value)


argsort, sort, topk, narrow = (_unary(n) for n in ("argsort", "sort", "topk", "narrow"))
cumsum, cumprod, any, all = (_unary(n) for n in ("cumsum", "cumprod", "any", "all"))  # noqa: A001
isnan, isinf, isfinite = (_unary(n) for n in ("isnan", "isinf", "isfinite"))
split, chunk, tile, repeat_interleave = (_unary(n) for n in ("split", "chunk", "tile", "repeat_interleave"))
norm, floor_divide, remainder, masked_fill = (_unary(n) for n in ("norm", "floor_divide", "remainder", "masked_fill"))
clip, clamp_min, clamp_max = _unary("clip"), _unary("clamp_min"), _unary("clamp_max")
for _f in (argsort, sort, topk, narrow, cumsum, cumprod, any, all, isnan, isinf, isfinite, split, chunk, tile,
           repeat_interleave, norm, floor_divide, remainder, masked_fill, clamp, clip, clamp_min, clamp_max):
    _f.__doc__ = f"flame.{_f.__name__}(x, ...) = x.{_f.__name__}(...): " + (getattr(Tensor, _f.__name__).__doc__ or
                                                                             "as in PyTorch.")


def vector_norm(x: Tensor, ord=2, dim=None, keepdim: bool = False, *, dtype=None) -> Tensor:  # noqa: A002
    """The vector ord-norm over dim (all elements by default), as torch.linalg.vector_norm: ord 2
    (default), 1, inf, -inf, 0 (the count of nonzeros) or any other number. At zero the gradient of
    the 2-norm (and of every ord > 0 root) is zero, as in PyTorch."""
    x = x.to(dtype) if dtype is not None else x
    if not x.dtype.is_float:
        raise DTypeError(f"vector_norm: expected a floating-point input, got {x.dtype}\n  at {user_location()}")
    a = x.abs()
    if ord == float("inf"):
        return a.amax(dim, keepdim)
    if ord == float("-inf"):
        return a.amin(dim, keepdim)
    if ord == 0:
        return (x != 0).to(x.dtype).sum(dim, keepdim)
    if ord == 1:
        return a.sum(dim, keepdim)
    s = (x * x if ord == 2 else a**ord).sum(dim, keepdim)
    if ord < 0:
        return s ** (1.0 / ord)
    zero = s == 0  # the root's derivative is infinite there: pick 0 without differentiating the root
    safe = where(zero, 1.0, s)
    return where(zero, 0.0, safe.sqrt() if ord == 2 else safe ** (1.0 / ord))


def softmax(x: Tensor, dim: int = -1, dtype=None) -> Tensor:
    """flame.softmax(x, dim) (torch.softmax)."""
    from flame.frontend.functional import softmax as _softmax

    return _softmax(x.to(dtype) if dtype is not None else x, dim)


def log_softmax(x: Tensor, dim: int = -1, dtype=None) -> Tensor:
    """flame.log_softmax(x, dim) (torch.log_softmax)."""
    from flame.frontend.functional import log_softmax as _log_softmax

    return _log_softmax(x.to(dtype) if dtype is not None else x, dim)


def repeat(x: Tensor, *sizes) -> Tensor:
    return x.repeat(*sizes)


def isclose(a: Tensor, b, rtol: float = 1e-5, atol: float = 1e-8, equal_nan: bool = False) -> Tensor:
    """|a - b| <= atol + rtol * |b| (torch.isclose); infinities are close to themselves."""
    close = ((a - b).abs() <= atol + rtol * (b.abs() if isinstance(b, Tensor) else builtins.abs(b))) | (a == b)
    return close | (a.isnan() & b.isnan()) if equal_nan and isinstance(b, Tensor) else close


def allclose(a: Tensor, b, rtol: float = 1e-5, atol: float = 1e-8, equal_nan: bool = False) -> bool:
    return bool(isclose(a, b, rtol, atol, equal_nan).all())
