"""The torch-level functions of the package root (flame.exp, flame.where, flame.cat, ...): thin
wrappers over Tensor methods, with PyTorch names and semantics, and the functions written beside the
methods they build on (where, cat, stack, pad in tensor_core.py; vector_norm in norms.py).
flame/__init__.py only re-exports them."""

from __future__ import annotations

import inspect

import numpy as np

from flame.frontend import methods  # noqa: F401  (Tensor's methods are bound: _unary reads them)
from flame.frontend.broadcasting import broadcast_shapes, broadcast_tensors  # noqa: F401  (the package root's)
from flame.frontend.creation import tensor
from flame.frontend.functional import log_softmax as _log_softmax
from flame.frontend.functional import softmax as _softmax
from flame.frontend.methods import numpy_names
from flame.frontend.norms import vector_norm  # noqa: F401  (the package root's name)
from flame.frontend.promotion import tensor_sequence
from flame.frontend.tensor import Tensor
from flame.frontend.tensor_core import (  # noqa: F401  (the package root's names)
    binary,
    pad,
    where,
)
from flame.frontend.tensor_core import cat as _cat
from flame.frontend.tensor_core import concat as _concat
from flame.frontend.tensor_core import stack as _stack

cat, concat, stack = numpy_names(_cat), numpy_names(_concat), numpy_names(_stack)  # torch.cat(xs, axis=0)

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


def _unary(name: str, first: str = "input", renamed: dict[str, str] | None = None):
    """flame.NAME(input, ...) = input.NAME(...), input converted to a Tensor first; its signature and
    docstring are the method's (so help(flame.sum) shows dim, keepdim, dtype). first: torch's name of the
    tensor argument; renamed: torch's names of the function's other parameters where the method's differ
    ({function's name: method's name})."""
    method = getattr(Tensor, name)
    renamed = renamed or {}

    def op(*args, **kwargs) -> Tensor:
        if first in kwargs:
            args = (kwargs.pop(first), *args)
        if not args:
            raise TypeError(f"{name}() missing 1 required positional argument: '{first}'")
        x, kwargs = args[0], {renamed.get(k, k): v for k, v in kwargs.items()}
        return getattr(x if isinstance(x, Tensor) else tensor(x), name)(*args[1:], **kwargs)

    sig = inspect.signature(method)
    params = list(sig.parameters.values())
    back = {m: f for f, m in renamed.items()}
    op.__signature__ = sig.replace(parameters=[params[0].replace(name=first),
                                               *(p.replace(name=back.get(p.name, p.name)) for p in params[1:])],
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
# PyTorch's function forms of the other Tensor methods (frontend/tensor_ops.py has their docstrings)
add, sub, mul, div, true_divide = (_unary(n) for n in ("add", "sub", "mul", "div", "true_divide"))
eq, ne, lt, le, gt, ge = (_unary(n) for n in ("eq", "ne", "lt", "le", "gt", "ge"))
logical_and, logical_or, logical_not = (_unary(n) for n in ("logical_and", "logical_or", "logical_not"))
bitwise_and, bitwise_or, bitwise_xor, bitwise_not = (
    _unary(n) for n in ("bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not"))
bitwise_left_shift, bitwise_right_shift = _unary("bitwise_left_shift"), _unary("bitwise_right_shift")
logical_xor = _unary("logical_xor")
mm, bmm, dot, outer, addmm = (_unary(n) for n in ("mm", "bmm", "dot", "outer", "addmm"))
logsumexp, var, std, square, argmin = (_unary(n) for n in ("logsumexp", "var", "std", "square", "argmin"))
lerp, addcmul, addcdiv = _unary("lerp"), _unary("addcmul"), _unary("addcdiv")
gather, index_select, scatter_add, clone = (_unary(n) for n in ("gather", "index_select", "scatter_add", "clone"))
select, unbind, roll, movedim, flatten = (_unary(n) for n in ("select", "unbind", "roll", "movedim", "flatten"))
swapaxes, swapdims, t, is_floating_point = (_unary(n) for n in ("swapaxes", "swapdims", "t", "is_floating_point"))
log1p, expm1 = _unary("log1p"), _unary("expm1")
trunc, fix, frac, log2, log10 = (_unary(n) for n in ("trunc", "fix", "frac", "log2", "log10"))
sinh, cosh, tan, xlogy, logit = (_unary(n) for n in ("sinh", "cosh", "tan", "xlogy", "logit"))
prod, nansum, nanmean = _unary("prod"), _unary("nansum"), _unary("nanmean")
diagonal, diag, trace, take_along_dim, take = (
    _unary(n) for n in ("diagonal", "diag", "trace", "take_along_dim", "take")
)
index_add, masked_select, unflatten, ravel = (_unary(n) for n in ("index_add", "masked_select", "unflatten", "ravel"))
scatter, index_copy, index_fill, index_put = (_unary(n) for n in ("scatter", "index_copy", "index_fill", "index_put"))
baddbmm, scatter_reduce = _unary("baddbmm"), _unary("scatter_reduce")
kthvalue, median, kron, cross = (_unary(n) for n in ("kthvalue", "median", "kron", "cross"))
nanmedian, logcumsumexp = _unary("nanmedian"), _unary("logcumsumexp")
cummax, cummin = _unary("cummax"), _unary("cummin")
tensordot = _unary("tensordot", first="a", renamed={"b": "other"})
cov, corrcoef = _unary("cov"), _unary("corrcoef")
broadcast_to = _unary("broadcast_to")
lgamma, digamma, erfinv = _unary("lgamma"), _unary("digamma"), _unary("erfinv")
asin, acos, atan, asinh, acosh, atanh, erfc, atan2 = (
    _unary(n) for n in ("asin", "acos", "atan", "asinh", "acosh", "atanh", "erfc", "atan2")
)
arcsin, arccos, arctan, arcsinh, arccosh, arctanh, arctan2 = asin, acos, atan, asinh, acosh, atanh, atan2


def polygamma(n: int, input) -> Tensor:  # noqa: A002  (torch's name)
    """The n-th derivative of digamma of each element (n = 0: digamma), as torch.polygamma(n, input)."""
    return (input if isinstance(input, Tensor) else tensor(input)).polygamma(n)


def tril_indices(row: int, col: int, offset: int = 0, *, dtype=None) -> Tensor:
    """[2, n] int64: the (row, column) of each element of the lower triangle, row by row, as torch."""
    return tensor(np.stack(np.tril_indices(row, offset, col)).astype(np.int64), dtype)


def triu_indices(row: int, col: int, offset: int = 0, *, dtype=None) -> Tensor:
    """[2, n] int64: the (row, column) of each element of the upper triangle, row by row, as torch."""
    return tensor(np.stack(np.triu_indices(row, offset, col)).astype(np.int64), dtype)


def atleast_1d(*tensors):
    out = [t.reshape(1) if t.ndim == 0 else t for t in tensors]
    return out[0] if len(out) == 1 else tuple(out)


def atleast_2d(*tensors):
    out = [t.reshape(1, -1) if t.ndim < 2 else t for t in tensors]
    return out[0] if len(out) == 1 else tuple(out)


def atleast_3d(*tensors):
    """Each tensor with at least 3 dims, as torch.atleast_3d: [] -> [1, 1, 1], [n] -> [1, n, 1],
    [m, n] -> [m, n, 1]."""
    shape = {0: lambda t: (1, 1, 1), 1: lambda t: (1, t.shape[0], 1), 2: lambda t: (*t.shape, 1)}
    out = [t.reshape(*shape[t.ndim](t)) if t.ndim < 3 else t for t in tensors]
    return out[0] if len(out) == 1 else tuple(out)


def hstack(tensors) -> Tensor:
    """cat along dim 1, or dim 0 for 1-D tensors (0-d ones made 1-D), as torch.hstack."""
    ts = [atleast_1d(t) for t in tensor_sequence("hstack", tensors)]
    return cat(ts, 0 if ts and ts[0].ndim == 1 else 1)


def vstack(tensors) -> Tensor:
    """cat along dim 0 of the tensors made at least 2-D, as torch.vstack."""
    return cat([atleast_2d(t) for t in tensor_sequence("vstack", tensors)], 0)


def dstack(tensors) -> Tensor:
    """cat along dim 2 of the tensors made at least 3-D, as torch.dstack."""
    return cat([atleast_3d(t) for t in tensor_sequence("dstack", tensors)], 2)


def column_stack(tensors) -> Tensor:
    """The tensors as columns (0-d and 1-D ones made [n, 1]) side by side, as torch.column_stack."""
    tensors = tensor_sequence("column_stack", tensors)
    return cat([t.reshape(t.numel(), 1) if t.ndim < 2 else t for t in tensors], 1)


def tensor_split(input, tensor_indices_or_sections=None, dim: int = 0, *, sections=None, indices=None):  # noqa: A002
    """torch.tensor_split: Tensor.tensor_split's views (sections or indices, positionally or by keyword)."""
    return input.tensor_split(tensor_indices_or_sections, dim, sections=sections, indices=indices)


def fliplr(input) -> Tensor:  # noqa: A002
    return input.fliplr()


def flipud(input) -> Tensor:  # noqa: A002
    return input.flipud()


def max(input, dim=None, keepdim: bool = False):  # noqa: A001, A002 - PyTorch's names
    """torch.max: the largest element; with dim, (values, indices) along it; with a tensor as the
    second argument, the elementwise maximum (torch.max(a, b) = torch.maximum(a, b))."""
    if isinstance(dim, Tensor):
        return maximum(input, dim)
    return (input if isinstance(input, Tensor) else tensor(input)).max(dim, keepdim)


def min(input, dim=None, keepdim: bool = False):  # noqa: A001, A002
    """torch.min: the smallest element; with dim, (values, indices); with a tensor, torch.minimum."""
    if isinstance(dim, Tensor):
        return minimum(input, dim)
    return (input if isinstance(input, Tensor) else tensor(input)).min(dim, keepdim)


def is_tensor(obj) -> bool:
    """Whether obj is a flame.Tensor, as torch.is_tensor."""
    return isinstance(obj, Tensor)


def numel(input) -> int:  # noqa: A002
    return input.numel()


def maximum(input, other) -> Tensor:  # noqa: A002
    """Elementwise maximum of input and other (broadcast), as torch.maximum."""
    return binary("maximum", input, other)


def minimum(input, other) -> Tensor:  # noqa: A002
    """Elementwise minimum of input and other (broadcast), as torch.minimum."""
    return binary("minimum", input, other)


def pow(input, exponent) -> Tensor:  # noqa: A001, A002
    """input to the power exponent, elementwise (broadcast), as torch.pow."""
    return binary("pow", input, exponent)


argsort, sort, topk, narrow = (_unary(n) for n in ("argsort", "sort", "topk", "narrow"))
cumsum, cumprod, any, all = (_unary(n) for n in ("cumsum", "cumprod", "any", "all"))  # noqa: A001
isnan, isinf, isfinite = (_unary(n) for n in ("isnan", "isinf", "isfinite"))
chunk, tile, repeat_interleave = (_unary(n) for n in ("chunk", "tile", "repeat_interleave"))
split = _unary("split", first="tensor", renamed={"split_size_or_sections": "split_size"})
norm, floor_divide, remainder, fmod = (_unary(n) for n in ("norm", "floor_divide", "remainder", "fmod"))
masked_fill = _unary("masked_fill")
clip, clamp_min, clamp_max = _unary("clip"), _unary("clamp_min"), _unary("clamp_max")
for _f in (argsort, sort, topk, narrow, cumsum, cumprod, any, all, isnan, isinf, isfinite, split, chunk, tile,
           repeat_interleave, norm, floor_divide, remainder, fmod, masked_fill, clamp, clip, clamp_min, clamp_max):
    _f.__doc__ = f"flame.{_f.__name__}(x, ...) = x.{_f.__name__}(...): " + (getattr(Tensor, _f.__name__).__doc__ or
                                                                             "as in PyTorch.")


def softmax(input: Tensor, dim: int = -1, dtype=None) -> Tensor:  # noqa: A002
    """flame.softmax(x, dim) (torch.softmax)."""
    return _softmax(input, dim, dtype=dtype)


def log_softmax(input: Tensor, dim: int = -1, dtype=None) -> Tensor:  # noqa: A002
    """flame.log_softmax(x, dim) (torch.log_softmax)."""
    return _log_softmax(input, dim, dtype=dtype)


def repeat(x: Tensor, *sizes) -> Tensor:
    return x.repeat(*sizes)


isclose, allclose, equal = _unary("isclose"), _unary("allclose"), _unary("equal")
mv, inner, addr, addbmm = _unary("mv"), _unary("inner"), _unary("addr"), _unary("addbmm")
moveaxis = _unary("moveaxis")


max, min, softmax, log_softmax = (numpy_names(f) for f in (max, min, softmax, log_softmax))  # noqa: A001
