"""More of torch's functions, each composed from the IR's primitives (so they fuse, trace and differentiate
like the rest), with torch's names, arguments and edge values: grids and products (meshgrid,
cartesian_prod, block_diag, diag_embed, rot90, addmv, vdot), differences and sums (diff, trapezoid,
cumulative_trapezoid, cdist), searching sorted values (searchsorted, bucketize), statistics
(var_mean, std_mean, aminmax; cov: covariance.py), the most frequent value (mode) and elementwise functions
(nan_to_num, logaddexp, logaddexp2, hypot, copysign, signbit, heaviside, sinc, fmax, fmin, float_power, exp2,
deg2rad, rad2deg, and the aliases positive, negative, absolute, sgn, rsub)."""

from __future__ import annotations

import math
from collections import namedtuple

import numpy as np

from flame.errors import ArgumentError, ArgumentRangeError, ArgumentTypeError, DTypeError, ShapeError
from flame.frontend import pointwise_formulas, torch_formulas
from flame.frontend.autocast import policy
from flame.frontend.context import user_location
from flame.frontend.creation import arange, as_tensor, zeros
from flame.frontend.default_dtype import as_floating, floating
from flame.frontend.dispatch import apply
from flame.frontend.norms import vector_norm
from flame.frontend.opmath import composite, float_gradient, fused, half_gradient, stat_and_mean, wants_gradient
from flame.frontend.promotion import coefficient, fits, result_type, same_dtype
from flame.frontend.tensor import Tensor, dim_index
from flame.frontend.tensor_core import cat, full, stack, where
from flame.frontend.torch_saves import saves, wants
from flame.ir.dtypes import boolean, f64, finfo, i32, i64

__all__ = ["absolute", "addmv", "aminmax", "block_diag", "bucketize", "cartesian_prod", "cdist", "clamp", "copysign",
           "cumulative_trapezoid", "deg2rad", "diag_embed", "diff", "dist", "exp2", "float_power", "fmax",
           "fmin", "heaviside", "hypot", "isclose", "logaddexp", "logaddexp2", "masked_scatter", "meshgrid", "mode",
           "msort", "nan_to_num", "nanquantile", "negative", "pdist", "positive", "quantile", "rad2deg", "renorm",
           "rot90", "rsub", "searchsorted", "sgn", "signbit", "sinc", "std_mean", "trapezoid", "var_mean", "vdot"]

_MinMax = namedtuple("aminmax", ["min", "max"])
_Mode = namedtuple("mode", ["values", "indices"])  # torch.return_types.mode


def _err(msg: str) -> ShapeError:
    return ShapeError(f"{msg}\n  at {user_location()}")


def _floating(op: str, a, b) -> tuple:
    """a and b in their result dtype, where torch's logaddexp and hypot compute (an integer or bool operand
    beside a float one is converted first: the abs of an int64 minimum is 2**63 there, not a wrapped
    value); they have floating kernels only, so integer and bool results raise. Both are tensors, as
    torch's: a Python number raises its TypeError."""
    for arg, x in (("input", a), ("other", b)):
        if not isinstance(x, Tensor):
            raise ArgumentTypeError(f"{op}(): argument '{arg}' must be Tensor, not {type(x).__name__}\n"
                                    f"  at {user_location()}")
    dt = result_type(a, b)
    if not dt.is_float:
        raise DTypeError(f'{op}: "{op}" is not implemented for {dt} tensors (as in PyTorch: convert '
                         f"with .float())\n  at {user_location()}")
    return tuple(x.to(dt) if isinstance(x, Tensor) else x for x in (a, b))


# ---- grids and products ------------------------------------------------------------------------------

def meshgrid(*tensors, indexing: str = "ij") -> tuple[Tensor, ...]:
    """Coordinate grids of 1-D (or 0-d) tensors: with "ij" output k varies along dim k; with "xy" the
    first two swap (Cartesian, as NumPy's default). torch's default is "ij"."""
    if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
        tensors = tuple(tensors[0])
    if indexing not in ("ij", "xy"):
        raise ValueError(f"meshgrid: indexing must be 'ij' or 'xy', got {indexing!r}")
    ts = [as_tensor(t).reshape(-1) for t in tensors]
    if not ts:
        return ()
    order = list(range(len(ts)))
    if indexing == "xy" and len(ts) >= 2:
        order[0], order[1] = 1, 0
    shape = [ts[k].shape[0] for k in order]
    out = []
    for i, t in enumerate(ts):
        axis = order.index(i)
        out.append(t.reshape([-1 if a == axis else 1 for a in range(len(ts))]).expand(*shape))
    return tuple(out)


def cartesian_prod(*tensors) -> Tensor:
    """Every combination of the 1-D tensors' elements, [prod(n_k), k] (one tensor: itself)."""
    if len(tensors) == 1:
        return as_tensor(tensors[0])
    grids = meshgrid(*tensors, indexing="ij")
    return stack([g.reshape(-1) for g in grids], 1)


def block_diag(*tensors) -> Tensor:
    """The tensors (0-d, 1-D as one row, or 2-D) along the diagonal of one 2-D tensor, zeros elsewhere."""
    if not tensors:
        return zeros(1, 0)
    blocks = []
    tensors = [as_tensor(t) for t in tensors]
    for t in tensors:
        if t.ndim > 2:
            raise _err(f"block_diag: every input must have at most 2 dimensions, got {list(t.shape)}")
        blocks.append(t.reshape(1, -1) if t.ndim < 2 else t)
    width, at, rows = sum(b.shape[1] for b in blocks), 0, []
    dtype = result_type(*tensors)  # as torch's: promoted (a 0-d input as a scalar of its category)
    for b in blocks:
        b = b.to(dtype)
        parts = [zeros(b.shape[0], at, dtype=dtype), b, zeros(b.shape[0], width - at - b.shape[1], dtype=dtype)]
        rows.append(cat([p for p in parts if p.shape[1]], 1) if b.shape[0] else zeros(0, width, dtype=dtype))
        at += b.shape[1]
    return cat(rows, 0)


def diag_embed(input: Tensor, offset: int = 0, dim1: int = -2, dim2: int = -1) -> Tensor:  # noqa: A002
    """[..., n] -> [..., n + |offset|, n + |offset|] with the last dim on the offset diagonal of the
    planes (dim1, dim2) of the result, zeros elsewhere."""
    x = as_tensor(input)
    n, m = x.shape[-1], x.shape[-1] + abs(offset)
    xp = cat([x, zeros(*x.shape[:-1], m - n, dtype=x.dtype)], -1) if m > n else x
    on = (arange(m).reshape(1, m) - arange(m).reshape(m, 1)) == offset  # [m, m]: where the diagonal runs
    y = where(on, xp.unsqueeze(-1) if offset >= 0 else xp.unsqueeze(-2), 0.0).to(x.dtype)  # row i or column j
    nd = y.ndim
    d1, d2 = dim_index("diag_embed", dim1, nd), dim_index("diag_embed", dim2, nd)
    if d1 == d2:
        raise _err(f"diag_embed: dim1 and dim2 cannot be the same dim ({dim1}, {dim2})")
    rest = iter(range(nd - 2))
    return y.permute(*[nd - 2 if a == d1 else nd - 1 if a == d2 else next(rest) for a in range(nd)])


def rot90(input: Tensor, k: int = 1, dims=(0, 1)) -> Tensor:  # noqa: A002
    """input rotated by k * 90 degrees in the plane dims, from the first axis toward the second."""
    x = as_tensor(input)
    if len(dims) != 2:
        raise _err(f"rot90: dims must be two dims, got {dims}")
    a, b = (dim_index("rot90", d, x.ndim) for d in dims)
    if a == b:
        raise _err(f"rot90: dims must differ, got {dims}")
    k %= 4
    if k == 1:
        return x.flip(b).transpose(a, b)
    if k == 2:
        return x.flip(a, b)
    if k == 3:
        return x.flip(a).transpose(a, b)
    return x.clone()  # a new tensor, as torch's: a write into it must not reach the input


@policy("lower", cpu="")  # autocast: on PyTorch's CUDA lower-precision list, none of its CPU lists
def addmv(input: Tensor, mat: Tensor, vec: Tensor, *, beta: float = 1.0, alpha: float = 1.0) -> Tensor:  # noqa: A002
    """beta * input + alpha * (mat @ vec); beta and alpha in the tensors' dtype (integer tensors: truncated
    to integers), as torch's Scalars."""
    dt = same_dtype("addmv", input=input, mat=mat, vec=vec)  # torch's addmv promotes none of them
    beta, alpha = coefficient("addmv", "beta", beta, dt, True), coefficient("addmv", "alpha", alpha, dt, True)
    mv = mat @ vec
    return (mv if alpha == 1 else mv * alpha) + (input if beta == 1 else input * beta)


@policy("promote", cpu="")  # autocast: on PyTorch's CUDA promote list (the widest input), none of its CPU lists
def vdot(input: Tensor, other: Tensor) -> Tensor:  # noqa: A002
    """The dot product of two 1-D tensors (real: dot)."""
    if input.ndim != 1 or other.ndim != 1:
        raise _err(f"vdot: expected 1-D tensors, got {list(input.shape)} and {list(other.shape)}")
    if input.dtype != other.dtype:  # torch's dot kernel promotes neither
        raise DTypeError(f"vdot: expected both vectors to have same dtype, but found {input.dtype} and {other.dtype} "
                         f"(as in PyTorch: convert one with .to)\n  at {user_location()}")
    return (input * other).sum()


# ---- differences, sums, distances ------------------------------------------------------------------

def diff(input: Tensor, n: int = 1, dim: int = -1, prepend: Tensor | None = None,  # noqa: A002
         append: Tensor | None = None) -> Tensor:
    """The n-th forward difference along dim (x[i + 1] - x[i]), after prepending / appending values: tensors
    of input's number of dims, concatenated in their promoted dtype, as torch.cat does (so a float prepend
    to an integer input gives float differences)."""
    x = as_tensor(input)
    if x.ndim == 0:
        raise ShapeError(f"diff expects input to be at least one-dimensional\n  at {user_location()}")
    if n < 0:
        raise ArgumentError(f"diff: order must be non-negative but got {n}, as in PyTorch\n  at {user_location()}")
    d = dim_index("diff", dim, x.ndim)
    parts = [as_tensor(p) for p in (prepend, x, append) if p is not None]
    if len(parts) > 1:
        if any(p.ndim != x.ndim for p in parts):
            raise _err("diff expects prepend or append to be the same dimension as input")
        dtype = result_type(*parts)
        x = cat([p.to(dtype) for p in parts], d)
    for _ in range(n):
        length = x.shape[d]
        if length == 0:
            break
        hi, lo = x.narrow(d, 1, length - 1), x.narrow(d, 0, length - 1)
        x = (hi != lo) if x.dtype.name == "bool" else hi - lo
    return x.clone() if x is input else x  # n=0: a new tensor, as torch's


def trapezoid(y: Tensor, x: Tensor | None = None, *, dx: float | None = None, dim: int = -1) -> Tensor:
    """The trapezoid rule's integral of y along dim: over sample points x, or spacing dx (default 1). As
    torch's: with dx, (sum(y) - (y[0] + y[-1]) / 2) * dx (an integer sum in int64); with x,
    sum(diff(x) * (y[1:] + y[:-1])) / 2."""
    _no_bool("trapezoid", y)
    d = dim_index("trapezoid", dim, y.ndim)
    if not y.shape[d]:
        return _trapezoids(y, x, dx, dim).sum(d)
    if x is None:
        return (y.sum(d) - (y.select(d, 0) + y.select(d, -1)) * 0.5) * (1.0 if dx is None else dx)
    return _trapezoids(y, x, dx, dim, halved=False).sum(d) / 2.0


def cumulative_trapezoid(y: Tensor, x: Tensor | None = None, *, dx: float | None = None, dim: int = -1) -> Tensor:
    """The trapezoid rule's running integral of y along dim (one element shorter)."""
    _no_bool("cumulative_trapezoid", y)
    return _trapezoids(y, x, dx, dim).cumsum(dim_index("cumulative_trapezoid", dim, y.ndim))


def _no_bool(op: str, y: Tensor) -> None:
    if isinstance(y, Tensor) and y.dtype == boolean:
        raise DTypeError(f"{op}: received a bool input for `y`, but bool is not supported (as in PyTorch)\n"
                         f"  at {user_location()}")


def _trapezoids(y: Tensor, x: Tensor | None, dx: float | None, dim: int, halved: bool = True) -> Tensor:
    d = dim_index("trapezoid", dim, y.ndim)
    length = y.shape[d]
    mid = (y.narrow(d, 1, length - 1) + y.narrow(d, 0, length - 1)) if length else y
    mid = mid / 2 if halved else mid
    if x is None:
        return mid * (1.0 if dx is None else dx)
    if dx is not None:
        raise ValueError("trapezoid: give x or dx, not both")
    steps = diff(x, dim=-1 if x.ndim == 1 else dim)
    if x.ndim == 1:
        steps = steps.reshape([steps.shape[0] if a == d else 1 for a in range(y.ndim)])
    return mid * steps


@policy("f32")  # autocast: on PyTorch's float32 list
@saves("x1", "x2", "result", vjp=torch_formulas.cdist)
def cdist(x1: Tensor, x2: Tensor, p: float = 2.0, compute_mode: str | None = None) -> Tensor:
    """The p-norm distance between each row of x1 [..., P, M] and each row of x2 [..., R, M]: [..., P, R],
    computed from the differences (exact at any distance; torch's matrix-product shortcut for large
    inputs is not taken)."""
    if x1.ndim < 2 or x2.ndim < 2 or x1.shape[-1] != x2.shape[-1]:
        raise _err(f"cdist: expected [..., P, M] and [..., R, M], got {list(x1.shape)} and {list(x2.shape)}")
    if p < 0:
        raise ValueError(f"cdist: p must be non-negative, got {p}")
    return _distance(x1.unsqueeze(-2) - x2.unsqueeze(-3), p)


def _distance(diff: Tensor, p: float) -> Tensor:
    """The p-norm of diff over its last dim, as cdist and pdist: with p = inf the gradient goes whole to
    every coordinate tied at the maximum (torch's _cdist_backward), not split among them as the
    norm's; the tie term adds exactly zero to a finite distance."""
    out = vector_norm(diff, p, -1)
    if p != math.inf:
        return out
    a = diff.abs()
    tie = a.detach() == out.detach().unsqueeze(-1)
    whole = where(tie, a - a.detach(), 0.0).sum(-1)
    return where(out.isfinite(), out.detach() + whole, out)


@policy("f32", cpu="")  # autocast: on PyTorch's CUDA float32 list; on none of its CPU lists
@saves("input", "other", "result", vjp=torch_formulas.dist)
def dist(input: Tensor, other: Tensor, p: float = 2.0) -> Tensor:  # noqa: A002
    """The p-norm of input - other (broadcast), a 0-d tensor, as torch.dist."""
    return vector_norm(input - other, p)


@policy("f32", cpu="")  # autocast: on PyTorch's CUDA float32 list; on none of its CPU lists
@saves("input", "result", vjp=torch_formulas.not_in_flame)
def pdist(input: Tensor, p: float = 2.0) -> Tensor:  # noqa: A002
    """The p-norm distance between each pair of rows i < j of input [N, M], row-major: [N (N - 1) / 2],
    as torch.nn.functional.pdist."""
    if input.ndim != 2:
        raise _err(f"pdist: expected a 2-D input [N, M], got {list(input.shape)}")
    if p < 0:
        raise ValueError(f"pdist: p must be non-negative, got {p}")
    i, j = np.triu_indices(input.shape[0], 1)
    return _distance(input[as_tensor(i)] - input[as_tensor(j)], p)


# ---- sorted values ---------------------------------------------------------------------------------

def searchsorted(sorted_sequence: Tensor, input: Tensor | float, *, out_int32: bool = False,  # noqa: A002
                 right: bool = False, side: str | None = None, sorter: Tensor | None = None) -> Tensor:
    """For each value, where it would go in the sorted last dim of sorted_sequence to keep it sorted:
    the count of elements below it (at or below it with right=True or side="right"). A 1-D sequence
    serves every value; else its leading dims match the values'. It is torch's binary search, step for
    step, so NaN (a value or in the sequence) lands where torch's does: a NaN value goes past the end."""
    seq = as_tensor(sorted_sequence)
    if sorter is not None:
        seq = seq.take_along_dim(as_tensor(sorter), -1)
    if side is not None:
        if side not in ("left", "right") or (right and side == "left"):
            raise ValueError(f"searchsorted: side must be 'left' or 'right' and agree with right, got {side!r}")
        right = side == "right"
    if seq.ndim == 0:
        raise _err("searchsorted: boundaries tensor should have positive dimension, as in PyTorch")
    scalar = not isinstance(input, Tensor)
    v = as_tensor(input).to(seq.dtype) if scalar else input
    if seq.ndim > 1 and tuple(seq.shape[:-1]) != tuple(v.shape[:-1]):
        raise _err(f"searchsorted: the leading dims of sorted_sequence {list(seq.shape)} and of the values "
                   f"{list(v.shape)} must match")
    n = seq.shape[-1]
    lo, hi = zeros(tuple(v.shape), dtype=i64), zeros(tuple(v.shape), dtype=i64) + n
    for _ in range(n.bit_length()):  # torch's lower/upper bound: go right unless mid >= v (mid > v)
        mid = (lo + hi) // 2
        pick = mid.clamp(max=n - 1)
        m = seq[pick] if seq.ndim == 1 else seq.gather(-1, pick)
        live = lo < hi
        go_right = ~((m > v) if right else (m >= v))
        lo, hi = where(live & go_right, mid + 1, lo), where(live & ~go_right, mid, hi)
    return lo.to(i32 if out_int32 else i64)


def msort(input: Tensor) -> Tensor:  # noqa: A002
    """The values sorted along the first dim, as torch.msort."""
    return as_tensor(input).sort(dim=0).values


_INTERPOLATIONS = ("linear", "lower", "higher", "midpoint", "nearest")


def quantile(input: Tensor, q, dim: int | None = None, keepdim: bool = False, *,  # noqa: A002
             interpolation: str = "linear") -> Tensor:
    """The q-th quantiles of input along dim (every element when dim is None), as torch.quantile (see
    _quantile)."""
    return _quantile(input, q, dim, keepdim, interpolation, False, "quantile")


def nanquantile(input: Tensor, q, dim: int | None = None, keepdim: bool = False, *,  # noqa: A002
                interpolation: str = "linear") -> Tensor:
    """quantile over the values that are not NaN, as torch.nanquantile."""
    return _quantile(input, q, dim, keepdim, interpolation, True, "nanquantile")


@policy("", cpu="f32")  # autocast: (nan)quantile is on PyTorch's CPU float32 list, none of its CUDA lists
def _quantile(input: Tensor, q, dim: int | None, keepdim: bool, interpolation: str, _ignore_nan: bool,  # noqa: A002
              _name: str) -> Tensor:
    """The q-th quantiles of input along dim (every element when dim is None), as torch.quantile: the
    sorted values at rank q * (n - 1), between two neighbours by `interpolation`; NaN where a line holds
    a NaN (nanquantile: the values that are not NaN, NaN where a line holds nothing else). q: a number
    or a 0-d / 1-D tensor in [0, 1] (a 1-D one puts its dim first). The gradient goes to the picked
    values, as torch's (sort, gather and lerp)."""
    x = as_tensor(input)
    if interpolation not in _INTERPOLATIONS:
        raise ArgumentRangeError(f"quantile() interpolation must be one of linear, lower, higher, midpoint or "
                                 f"nearest, but got {interpolation}\n  at {user_location()}")
    if x.dtype.name not in ("f32", "f64"):  # torch's kernels: f16 and bf16 are refused too
        raise DTypeError(f"quantile() input tensor must be either float or double dtype, got {x.dtype.name}"
                         f"\n  at {user_location()}")
    if not isinstance(q, Tensor) and not 0 <= float(q) <= 1:  # (NaN too)
        raise ArgumentRangeError(f"quantile() q must be in the range [0, 1] but got {q}\n  at {user_location()}")
    qs = q if isinstance(q, Tensor) else as_tensor(float(q), dtype=x.dtype)  # the number in x's dtype, as torch
    if qs.dtype != x.dtype:
        raise DTypeError(f"{_name}() q tensor must be same dtype as the input tensor ({x.dtype.name}), got "
                         f"{qs.dtype.name}\n  at {user_location()}")
    if qs.ndim > 1:
        raise _err(f"{_name}() q must be a scalar or 1D tensor, got {list(qs.shape)}")
    if qs._value is None and qs.numel() and not ((qs.numpy() >= 0) & (qs.numpy() <= 1)).all():  # (NaN too)
        raise ArgumentRangeError(f"quantile() q values must be in the range [0, 1]\n  at {user_location()}")
    if not x.numel():
        raise _err(f"{_name}() input tensor must be non-empty")
    if x.ndim == 0 and dim is not None:  # a 0-d input's one dim (0 or -1) is all of it, keepdim or not
        dim_index(_name, dim, 0)
        dim = None
    line = x.reshape(-1) if dim is None else x.movedim(dim_index(_name, dim, x.ndim), -1)
    ranked = line.sort(-1).values  # NaN last
    n = ranked.shape[-1]
    qv = qs.to(x.dtype).reshape(-1)
    if _ignore_nan:
        count = (~ranked.isnan()).sum(-1, keepdim=True).to(x.dtype)
        ranks = (qv * (count - 1)).clamp(min=0)
    else:
        ranks = where(ranked.isnan().any(-1, keepdim=True), float(n - 1), qv * float(n - 1))
    ranks = ranks.expand(*ranked.shape[:-1], qv.shape[0])
    if interpolation == "nearest":
        lower = upper = ranks.round().to(i64)
    else:
        lower, upper = ranks.floor().to(i64), ranks.ceil().to(i64).clamp(max=n - 1)
    low, high = ranked.gather(-1, lower), ranked.gather(-1, upper)
    out = {"lower": low, "higher": high, "nearest": low, "midpoint": low.lerp(high, 0.5)}.get(interpolation)
    if out is None:
        out = low.lerp(high, ranks - lower.to(x.dtype))
    out = out.movedim(-1, 0)  # the q dim first
    if keepdim:
        out = out.reshape(qv.shape[0], *([1] * x.ndim)) if dim is None else out.unsqueeze(
            1 + dim_index(_name, dim, x.ndim))
    return out[0] if qs.ndim == 0 else out


def bucketize(input: Tensor | float, boundaries: Tensor, *, out_int32: bool = False, right: bool = False) -> Tensor:  # noqa: A002
    """The bucket of each value among the 1-D sorted boundaries: i with boundaries[i - 1] < x <=
    boundaries[i] (right=True: boundaries[i - 1] <= x < boundaries[i])."""
    if boundaries.ndim != 1:
        raise _err(f"bucketize: boundaries must be 1-D, got {list(boundaries.shape)}")
    return searchsorted(boundaries, input, out_int32=out_int32, right=right)


# ---- statistics pairs ------------------------------------------------------------------------------

def var_mean(input: Tensor, dim=None, unbiased: bool | None = None, keepdim: bool = False, *,  # noqa: A002
             correction: float | None = None):
    """(var, mean) over dim (all by default): var's arguments; the mean NaN where PyTorch's is (welford_mean)."""
    return stat_and_mean("var_mean", input, dim, unbiased, keepdim, correction)


def std_mean(input: Tensor, dim=None, unbiased: bool | None = None, keepdim: bool = False, *,  # noqa: A002
             correction: float | None = None):
    """(std, mean) over dim (all by default): std's arguments; the mean NaN where PyTorch's is (welford_mean)."""
    return stat_and_mean("std_mean", input, dim, unbiased, keepdim, correction)


def aminmax(input: Tensor, *, dim: int | None = None, keepdim: bool = False):  # noqa: A002
    """(min, max) over dim (all by default; keepdim then keeps every dim, as size 1), as a named tuple."""
    if dim is None and not keepdim:
        return _MinMax(input.amin(), input.amax())
    return _MinMax(input.amin(dim, keepdim=keepdim), input.amax(dim, keepdim=keepdim))


def mode(input: Tensor, dim: int = -1, keepdim: bool = False):  # noqa: A002
    """(values, indices): the most frequent value of each line along dim, as torch.mode: of values as
    frequent, the smallest; its index is the last place it occurs (the largest index, the one PyTorch's
    CPU kernel means to return; it keeps that promise for lines of up to 16 elements, past which its
    unstable sort decides). NaNs count as one value, larger than any other (torch.sort's order; PyTorch's
    CPU result there depends on its sort). The gradient goes to the picked element, as torch's."""
    axis = dim_index("mode", dim, input.ndim)
    x = input.reshape(1) if input.ndim == 0 else input
    n = x.shape[axis]
    if not n:
        raise ShapeError(f"mode(): Expected reduction dim {axis} to have non-zero size.\n  at {user_location()}")
    ranked = x.detach().sort(axis, stable=True)  # equal values keep their order: the last is the largest index
    v = ranked.values.to(i64) if x.dtype.name == "bool" else ranked.values
    line = [1] * x.ndim
    line[axis] = n
    pos = arange(n).reshape(*line)
    prev = v.narrow(axis, 0, n - 1)
    nxt = v.narrow(axis, 1, n - 1)
    same = (prev == nxt) | (prev != prev) & (nxt != nxt)  # NaNs count as one value
    shape = list(x.shape)
    shape[axis] = 1
    edge = as_tensor(np.zeros(shape, bool))
    starts = cat([~edge, ~same], axis)  # where a run of equal values starts, and where one ends:
    ends = cat([~same, ~edge], axis)
    first = where(starts, pos, 0).cummax(axis).values
    count = where(ends, pos - first + 1, 0)  # each run's length, at its last element
    pick = count.argmax(axis, keepdim=True)  # the first longest run: the smallest value
    indices = ranked.indices.gather(axis, pick)
    values = x.gather(axis, indices)
    if not keepdim or input.ndim == 0:
        values, indices = values.squeeze(axis), indices.squeeze(axis)
    return _Mode(values, indices)


def masked_scatter(input: Tensor, mask: Tensor, source: Tensor) -> Tensor:  # noqa: A002
    """source's elements, in order, where mask (broadcast to input's shape) is True; input elsewhere, as
    torch.masked_scatter. No shape depends on the mask's values (inside @flame.compile too): the k-th
    True reads source's element k, the count of Trues up to it. Eagerly a source with fewer elements than
    the mask has Trues raises, as torch's."""
    if not isinstance(mask, Tensor) or mask.dtype.name != "bool":
        got = mask.dtype if isinstance(mask, Tensor) else type(mask).__name__
        raise DTypeError(f"masked_scatter: the mask must be a bool tensor, got {got}\n  at {user_location()}")
    if source.dtype != input.dtype:
        raise DTypeError(f"masked_scatter: expected self and source to have same dtypes but got {input.dtype} and "
                         f"{source.dtype}\n  at {user_location()}")
    if np.broadcast_shapes(tuple(mask.shape), tuple(input.shape)) != tuple(input.shape):
        raise ShapeError(f"masked_scatter: mask {list(mask.shape)} does not broadcast to the shape of the tensor "
                         f"{list(input.shape)}\n  at {user_location()}")
    flat = mask.broadcast_to(input.shape).reshape(-1)
    n = source.numel()
    ones = int(np.broadcast_to(mask.numpy(), input.shape).sum()) if mask._value is None else 0  # (a traced one:
    if ones > n:  # unchecked)
        raise ShapeError(f"masked_scatter: Number of elements of source < number of ones in mask ({n} < {ones})"
                         f"\n  at {user_location()}")
    if n == 0:  # (no True: checked eagerly)
        return where(flat.reshape(input.shape), zeros((), dtype=input.dtype), input)
    at = (flat.to(i64).cumsum(0) - 1).clamp(0, n - 1)
    return where(flat.reshape(input.shape), source.reshape(-1).gather(0, at).reshape(input.shape), input)


# ---- elementwise -------------------------------------------------------------------------------------

@saves("input")
def nan_to_num(input: Tensor, nan: float = 0.0, posinf: float | None = None,  # noqa: A002
               neginf: float | None = None) -> Tensor:
    """NaN, +inf and -inf replaced (by default with 0 and the dtype's largest and lowest finite
    values); the gradient is torch's grad * isfinite(input): a NaN or infinite gradient reaching a
    replaced element gives NaN there, as torch's (a `where` would give 0)."""
    x = as_tensor(input)
    if not x.dtype.is_float:  # (a new tensor, as torch's: a write into it must not reach the input)
        return x.clone() if x is input else x
    info = finfo(x.dtype)
    hi = float(info.max) if posinf is None else posinf
    lo = float(info.min) if neginf is None else neginf
    out = where(x != x, nan, where(x == math.inf, hi, where(x == -math.inf, lo, x)))
    if not x.requires_grad:
        return out
    finite = (x.detach() == x.detach()) & (x.detach().abs() != math.inf)
    return apply("straight_through", x * finite.to(x.dtype), out)


def _torch_backward(value: Tensor, a, b, form) -> Tensor:
    """value, whose gradient to each floating tensor operand t of (a, b) is that of form(t, u) (u the other
    operand): PyTorch's backward formula, computed in the ops (f16 / bf16: each rounded) PyTorch's autograd
    runs, the gradient of a form whose value is not used (straight_through). Autodiff of the overflow-safe
    forward differs from it at infinities and NaNs."""
    pairs = ((a, b), (b, a))
    forms = [form(t, u) for t, u in pairs if isinstance(t, Tensor) and t.dtype.is_float and wants_gradient(t)]
    if not forms:
        return value
    return apply("straight_through", forms[0] + forms[1] if len(forms) == 2 else forms[0], value)


def _logaddexp(a, b) -> Tensor:
    d = -(a - b).abs()
    d = where(d != d, 0.0, d)  # inf - inf: the two are equal infinities
    return a.maximum(b) + d.exp().log1p()


@policy("")  # autocast: on none of PyTorch's lists: its inputs' dtype
@saves("input", "other", vjp=pointwise_formulas.logaddexp)
def logaddexp(input: Tensor, other: Tensor) -> Tensor:  # noqa: A002
    """log(exp(a) + exp(b)) without overflow: max(a, b) + log1p(exp(-|a - b|)); both -inf: -inf. For f16 /
    bf16, in f32 rounded once; the gradient PyTorch's grad / (1 + exp(other - self)) in the inputs' dtype
    (NaN where an operand is NaN or both are -inf, as torch's)."""
    input, other = _floating("logaddexp", input, other)
    value = fused(_logaddexp, input, other)
    return _torch_backward(value, input, other, lambda t, u: t / (1 + (u - t).exp()).detach())


def _logaddexp2(a, b) -> Tensor:
    return _logaddexp(a * math.log(2), b * math.log(2)) / math.log(2)


@policy("")  # autocast: on none of PyTorch's lists: its inputs' dtype
@saves("input", "other", vjp=torch_formulas.logaddexp2)
def logaddexp2(input: Tensor, other: Tensor) -> Tensor:  # noqa: A002
    """log2(2^a + 2^b): logaddexp in base 2. For f16 / bf16, in f32 rounded once; the gradient PyTorch's
    grad / (1 + 2 ** (other - self)) in the inputs' dtype."""
    input, other = _floating("logaddexp2", input, other)
    value = fused(_logaddexp2, input, other)
    return _torch_backward(value, input, other, lambda t, u: t / (1 + 2 ** (u - t)).detach())


@policy("")  # autocast: on none of PyTorch's lists: its inputs' dtype
def hypot(input: Tensor, other: Tensor) -> Tensor:  # noqa: A002
    """sqrt(a^2 + b^2) without overflow or underflow; inf where either is infinite. For f16 / bf16, in f32
    rounded once; the gradient PyTorch's grad * self / result (the hypot op's VJP) in the inputs' dtype
    (the product rounded, then the quotient; 0 beside an infinite operand)."""
    input, other = _floating("hypot", input, other)
    return apply("hypot", input, other)


# torch's ClampBackward0 / ClampBackward1: the input and the tensor bounds
@saves("input", "min", "max", vjp=pointwise_formulas.clamp)
def clamp(input: Tensor, min=None, max=None) -> Tensor:  # noqa: A002
    """Elementwise min(max(x, min), max); min and max may be numbers or tensors. Where min > max the
    result is max; NaN stays NaN, and a NaN bound makes the result NaN. The gradient goes to x where
    min <= x <= max, else to the bound that won (none for NaN), as in PyTorch."""
    if min is None and max is None:
        raise ShapeError(f"clamp: at least one of 'min' or 'max' must not be None\n  at {user_location()}")
    dt = result_type(input, *(b for b in (min, max) if b is not None))  # torch's: a 0-d bound counts less
    for name, bound in (("min", min), ("max", max)):
        fits("clamp", name, bound, dt)
    out = input.to(dt)
    if min is not None:
        lo = min.to(dt) if isinstance(min, Tensor) else min
        out = apply("where", out < lo, lo if isinstance(lo, Tensor) else full((), lo, dt), out)
    if max is not None:
        hi = max.to(dt) if isinstance(max, Tensor) else max
        out = apply("where", out > hi, hi if isinstance(hi, Tensor) else full((), hi, dt), out)
    if dt.is_float:  # NaN stays NaN, with no gradient (PyTorch's mask min <= x <= max is False there)
        for bound in (min, max):  # a NaN bound wins over x (comparisons with it are False), no gradient
            if isinstance(bound, Tensor) or (isinstance(bound, float) and math.isnan(bound)):
                b = bound.to(dt).detach() if isinstance(bound, Tensor) else full((), bound, dt)
                out = apply("where", b != b, b, out)
        x = input.to(dt)
        out = apply("where", x != x, x.detach(), out)
    return out


def isclose(input: Tensor, other, rtol: float = 1e-5, atol: float = 1e-8, equal_nan: bool = False) -> Tensor:  # noqa: A002
    """Where input == other, or |input - other| is finite and at most atol + |rtol * other|, as torch.isclose
    (an infinite difference is never close: 2.5 is not close to inf; integers and bools subtract in the
    default float dtype); with equal_nan, NaN is close to NaN. Two tensors must have one dtype."""
    a, b = input, other
    if isinstance(b, Tensor) and b.dtype != a.dtype:
        raise DTypeError(f"isclose: {a.dtype} and {b.dtype} tensors: both must have one dtype (as in PyTorch)"
                         f"\n  at {user_location()}")
    if rtol < 0 or atol < 0:
        raise ArgumentError(f"isclose: rtol ({rtol}) and atol ({atol}) must be non-negative")
    close = a == b
    if equal_nan and a.dtype.is_float:
        close = close | (a.isnan() & (b.isnan() if isinstance(b, Tensor) else b != b))
    if rtol == 0 and atol == 0:
        return close
    a, b = (as_floating(x) if isinstance(x, Tensor) else x for x in (a, b))  # integers: no wrap-around
    actual, scaled = (a - b).abs(), b * rtol
    allowed = atol + (scaled.abs() if isinstance(scaled, Tensor) else abs(scaled))
    return close | (actual.isfinite() & (actual <= allowed))


def signbit(input: Tensor) -> Tensor:  # noqa: A002
    """Whether the sign bit is set: negative numbers and -0.0."""
    x = as_tensor(input)
    if not x.dtype.is_float:
        return x < 0
    return (x < 0) | ((x == 0) & ((1 / x) < 0))


@saves(lambda given: ("result", *(("input",) if wants(given, "input") else ())), vjp=torch_formulas.copysign)
def copysign(input: Tensor, other) -> Tensor:  # noqa: A002
    """|input| with the sign (bit) of other, in torch's dtype: integers and bools give the default
    floating dtype. The gradient is PyTorch's: result / input to input (0 where input is 0, NaN where it
    is infinite or NaN: not abs's sign), zeros to other."""
    dt = result_type(input, other)
    x = input.to(floating(dt))
    value = where(signbit(as_tensor(other)), -x.abs(), x.abs())
    forms = [x * where(x == 0, 0.0, value / x).detach()] if float_gradient(x) else []
    if float_gradient(other):
        forms.append(other.floor())  # floor's gradient: zeros
    if not forms:
        return value
    return apply("straight_through", forms[0] if len(forms) == 1 else forms[0] + forms[1], value.detach())


def heaviside(input: Tensor, values) -> Tensor:  # noqa: A002
    """0 where input < 0, values where input == 0, 1 where input > 0. As torch.heaviside, values is a
    tensor of input's dtype (torch has no promotion for it: a mixed pair raises)."""
    if not isinstance(values, Tensor):
        raise ArgumentTypeError(f"heaviside(): argument 'values' must be Tensor, not {type(values).__name__}"
                                f"\n  at {user_location()}")
    if values.dtype != input.dtype:
        raise DTypeError(f"heaviside is not yet implemented for tensors with different dtypes ({input.dtype} "
                         f"input, {values.dtype} values), as in PyTorch\n  at {user_location()}")
    return where(input == 0, values, (input > 0).to(input.dtype)).to(input.dtype)


@composite
def _sinc(x: Tensor) -> Tensor:
    safe = where(x == 0, 1.0, x) * math.pi
    return where(x == 0, 1.0, safe.sin() / safe)


@saves("input", vjp=torch_formulas.sinc)
def sinc(input: Tensor) -> Tensor:  # noqa: A002
    """sin(pi x) / (pi x), 1 at 0 (whose gradient there is 0). For f16 / bf16, in f32 rounded once; the
    gradient PyTorch's sinc_backward, grad * (pi x cos(pi x) - sin(pi x)) / (x x pi), in the input's dtype."""
    x = input if input.dtype.is_float else input.float()
    value = _sinc(x)
    if not half_gradient(x):
        return value
    t = x.detach()
    spi, ssp = t * math.pi, t * t * math.pi
    zero = ssp == 0
    num = spi * spi.cos() - spi.sin()
    form = where(zero, 0.0, (x / where(zero, 1.0, ssp)) * num)  # the cotangent times num, then the quotient
    return apply("straight_through", form, value)


@saves("input", vjp=torch_formulas.not_in_flame)
def renorm(input: Tensor, p: float, dim: int, maxnorm: float) -> Tensor:  # noqa: A002
    """Each sub-tensor along dim (input.select(dim, i)) whose p-norm exceeds maxnorm rescaled to norm
    maxnorm (by maxnorm / (norm + 1e-7)), the others as they are, as torch.renorm; the gradient flows
    through the norm, as PyTorch's renorm_backward."""
    if input.ndim < 2:
        raise _err(f"renorm: input needs at least 2 dimensions, got {input.ndim} dimensions")
    if not input.dtype.is_float:
        raise DTypeError(f"renorm: Expected a floating point tensor as input. Got {input.dtype}\n"
                         f"  at {user_location()}")
    if p <= 0:
        raise ArgumentError(f"renorm: non-positive-norm not supported\n  at {user_location()}")
    if maxnorm < 0:
        raise ArgumentError(f"renorm: expected maxnorm to be >= 0 but got {maxnorm}\n  at {user_location()}")
    axis = dim_index("renorm", dim, input.ndim)
    others = tuple(a for a in range(input.ndim) if a != axis)
    big = vector_norm(input.detach(), p, others, keepdim=True) > maxnorm
    # the sub-tensors left as they are take the cotangent whole, as PyTorch's renorm_backward picks it there:
    # their norm is not differentiated (its gradient at a NaN norm is NaN, which 0 * NaN would pass on)
    norm = vector_norm(where(big, input, 0.0), p, others, keepdim=True)
    return input * where(big, maxnorm / (norm + 1e-7), 1.0)


@saves("input", "other", vjp=torch_formulas.fmax)
def fmax(input: Tensor, other: Tensor) -> Tensor:  # noqa: A002
    """maximum, but a NaN loses to a number (NaN only where both are). The gradient goes whole to the
    operand picked, to input at a tie, as PyTorch's (maximum splits a tie evenly instead)."""
    return where((input >= other) | (other != other), input, other)


@saves("input", "other", vjp=pointwise_formulas.fmin)
def fmin(input: Tensor, other: Tensor) -> Tensor:  # noqa: A002
    """minimum, but a NaN loses to a number (NaN only where both are). The gradient goes whole to the
    operand picked, to input at a tie, as PyTorch's (minimum splits a tie evenly instead)."""
    return where((input <= other) | (other != other), input, other)


def float_power(input, exponent) -> Tensor:  # noqa: A002
    """input ** exponent in double precision (f64), as torch.float_power."""
    base = as_tensor(input).to(f64)
    return base ** (exponent.to(f64) if isinstance(exponent, Tensor) else exponent)


@policy("")  # autocast: on none of PyTorch's lists: its inputs' dtype
@saves("result", vjp=pointwise_formulas.exp2)
def exp2(input: Tensor) -> Tensor:  # noqa: A002
    """2 ** input."""
    x = input if input.dtype.is_float else input.float()
    return 2.0 ** x


def deg2rad(input: Tensor) -> Tensor:  # noqa: A002
    return input * (math.pi / 180)


def rad2deg(input: Tensor) -> Tensor:  # noqa: A002
    return input * (180 / math.pi)


def positive(input: Tensor) -> Tensor:  # noqa: A002
    return input.positive()


def negative(input: Tensor) -> Tensor:  # noqa: A002
    return -input


def absolute(input: Tensor) -> Tensor:  # noqa: A002
    return input.abs()


@saves("input", "result", vjp=pointwise_formulas.sgn)  # (torch's SgnBackward0 saves both; sign's nothing)
def sgn(input: Tensor) -> Tensor:  # noqa: A002
    """sign (real tensors)."""
    return input.sign()


def rsub(input: Tensor, other, alpha: float = 1) -> Tensor:  # noqa: A002
    """other - alpha * input."""
    return other - (input if alpha == 1 else input * alpha)
