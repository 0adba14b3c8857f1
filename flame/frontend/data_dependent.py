"""torch's functions whose result's shape depends on the values: nonzero / argwhere, unique,
unique_consecutive, bincount, histc and histogram (the last two have fixed shapes, but bin over the data's own
range by default). They
run eagerly, on the values read to the host, and return tensors on the current device; none has a
gradient (as in PyTorch). Inside @flame.compile the values are not known: each raises a TraceError
that says what to write instead. count_nonzero has a fixed shape and works compiled."""

from __future__ import annotations

from collections import namedtuple

import numpy as np

from flame.errors import ArgumentError, DimError, DTypeError, ShapeError, TraceError
from flame.frontend.context import user_location
from flame.frontend.creation import linspace, ones, zeros
from flame.frontend.tensor import Tensor, dim_index
from flame.frontend.tensor_core import full, where
from flame.ir.dtypes import i64

__all__ = ["argwhere", "bincount", "count_nonzero", "histc", "histogram", "nonzero", "unique", "unique_consecutive"]

_Histogram = namedtuple("histogram", ["hist", "bin_edges"])


def _values(name: str, t: Tensor, instead: str) -> np.ndarray:
    if t._value is not None:
        raise TraceError(f"{name}: its result's shape depends on the values, which are not known while tracing "
                         f"@flame.compile; {instead}\n  at {user_location()}")
    return np.asarray(t.numpy())


def _slice_axis(name: str, x: np.ndarray, dim: int | None) -> int | None:
    """The axis unique / unique_consecutive compare slices along, as torch checks it: a dim in range (a 0-d
    tensor has none: IndexError), and no other dim of size 0 (RuntimeError: there is no slice to
    compare, where NumPy would call every one equal)."""
    if dim is None:
        return None
    if x.ndim == 0:
        raise DimError(f"{name}: Dimension specified as {dim} but tensor has no dimensions\n  at {user_location()}")
    axis = dim_index(name, dim, x.ndim)
    if any(n == 0 for a, n in enumerate(x.shape) if a != axis):
        raise ShapeError(f"{name}: There are 0 sized dimensions, and they aren't selected, so unique cannot be "
                         f"applied (shape {list(x.shape)}, dim {dim})\n  at {user_location()}")
    return axis


def nonzero(input: Tensor, *, as_tuple: bool = False):  # noqa: A002
    """The indices of the nonzero elements: [n, ndim] int64 (a 0-d input counts as one dim), or with
    as_tuple one 1-D tensor per dimension."""
    x = _values("nonzero", input, "use flame.where(x != 0, ...) or a mask there")
    if as_tuple:
        return tuple(Tensor(i.astype(np.int64)) for i in np.nonzero(np.atleast_1d(x)))
    return Tensor(np.argwhere(x).astype(np.int64))


def argwhere(input: Tensor) -> Tensor:  # noqa: A002
    """nonzero(input): [n, ndim] int64."""
    return nonzero(input)


def count_nonzero(input: Tensor, dim=None) -> Tensor:  # noqa: A002
    """How many elements are nonzero (over dim, an int or a tuple, or all), int64."""
    hits = (input != 0).to(i64)
    return hits.sum() if dim is None else hits.sum(dim)


def unique(input: Tensor, sorted: bool = True, return_inverse: bool = False,  # noqa: A002
           return_counts: bool = False, dim: int | None = None):
    """The distinct values (sorted, as PyTorch's on either setting of `sorted`), or with dim the
    distinct slices along it; return_inverse: where each element (slice) went, in the input's shape
    (along dim: one per slice); return_counts: how often each occurs."""
    x = _values("unique", input, "its output size depends on the data")
    axis = _slice_axis("unique", x, dim)
    # torch: every NaN is a value of its own
    values, inverse, counts = np.unique(x, return_inverse=True, return_counts=True, axis=axis,
                                        **({"equal_nan": False} if axis is None else {}))
    out = [Tensor(values, dtype=input.dtype)]
    if return_inverse:
        inverse = inverse.reshape(x.shape if axis is None else (x.shape[axis],))
        out.append(Tensor(inverse.astype(np.int64)))
    if return_counts:
        out.append(Tensor(counts.astype(np.int64)))
    return out[0] if len(out) == 1 else tuple(out)


def unique_consecutive(input: Tensor, return_inverse: bool = False, return_counts: bool = False,  # noqa: A002
                       dim: int | None = None):
    """The first element (slice along dim) of every run of equal ones, in order, as
    torch.unique_consecutive (a NaN equals nothing, -0.0 equals 0.0); return_inverse: each element's
    (slice's) run, in the input's shape (along dim: one per slice); return_counts: each run's length."""
    x = _values("unique_consecutive", input, "its output size depends on the data")
    axis = _slice_axis("unique_consecutive", x, dim) or 0
    n = x.size if dim is None else x.shape[axis]
    lines = np.moveaxis(x.reshape(-1) if dim is None else x, axis, 0).reshape(n, x.size // max(n, 1))
    starts = np.ones(lines.shape[0], bool)
    starts[1:] = (lines[1:] != lines[:-1]).any(axis=1)  # NaN != NaN: every NaN starts a run, as torch's
    first = np.flatnonzero(starts)
    values = x.reshape(-1)[first] if dim is None else np.take(x, first, axis=axis)
    out = [Tensor(values, dtype=input.dtype)]
    if return_inverse:
        inverse = np.cumsum(starts) - 1
        out.append(Tensor(inverse.reshape(x.shape if dim is None else (x.shape[axis],)).astype(np.int64)))
    if return_counts:
        out.append(Tensor(np.diff(np.append(first, lines.shape[0])).astype(np.int64)))
    return out[0] if len(out) == 1 else tuple(out)


def bincount(input: Tensor, weights: Tensor | None = None, minlength: int = 0) -> Tensor:  # noqa: A002
    """Occurrences of each value 0..max of a 1-D tensor of non-negative integers (at least minlength
    bins), int64; with weights the sum of their weights instead: f32 for f32 weights (added in order, as
    torch's loop), f64 for any other (f16 and bf16 too, as torch)."""
    x = _values("bincount", input, "use one_hot(x, num_classes).sum(0) there")
    if x.ndim != 1 or input.dtype.is_float or input.dtype.name == "bool":
        raise ShapeError(f"bincount: expected a 1-D tensor of integers, got {input.dtype}{list(x.shape)}"
                         f"\n  at {user_location()}")
    if x.size and x.min() < 0:
        raise ArgumentError(f"bincount: the input must be non-negative, got {int(x.min())}\n  at {user_location()}")
    if weights is None or not x.size:  # torch: an empty input counts int64 zeros, weights or not
        return Tensor(np.bincount(x, minlength=minlength).astype(np.int64))
    w = np.asarray(weights.numpy())
    if w.shape != x.shape:
        raise ShapeError(f"bincount: weights {list(w.shape)} must have the input's shape {list(x.shape)}"
                         f"\n  at {user_location()}")
    # torch: f32 weights sum in f32, in order; every other dtype (f16 and bf16 too) in double
    acc = np.float32 if weights.dtype.name == "f32" else np.float64
    out = np.zeros(max(minlength, int(x.max()) + 1), acc)
    np.add.at(out, x, w.astype(acc))
    return Tensor(out, dtype="f32" if acc is np.float32 else "f64")


def histc(input: Tensor, bins: int = 100, min: float = 0.0, max: float = 0.0) -> Tensor:  # noqa: A002
    """A histogram of `bins` equal-width bins over [min, max] (min == max: the data's own range, known
    eagerly only: inside @flame.compile give min < max); elements outside are ignored, max falls in the
    last bin. Float, the input's dtype."""
    if not input.dtype.is_float:
        raise ShapeError(f"histc: expected a floating-point tensor, got {input.dtype}\n  at {user_location()}")
    if bins <= 0 or min > max:
        raise ArgumentError(f"histc: bins must be positive and min <= max, got bins={bins}, min={min}, max={max}"
                            f"\n  at {user_location()}")
    lo, hi = float(min), float(max)
    if lo == hi:  # the data's own range, known eagerly only
        x = _values("histc", input, "pass fixed min < max there")
        if x.size:
            lo, hi = float(x.min()), float(x.max())
        if lo == hi:
            lo, hi = lo - 1, hi + 1
    if not (np.isfinite(lo) and np.isfinite(hi)):
        raise ArgumentError(f"histc: range of [{lo}, {hi}] is not finite\n  at {user_location()}")
    return _histc_counts(input, bins, lo, hi)


def _histc_counts(input: Tensor, bins: int, lo: float, hi: float) -> Tensor:
    """torch's histc binning, each step rounded to input's dtype (f16 and bf16 too, as torch's): an
    element e in [lo, hi] falls in bin int((e - lo) * bins / (hi - lo)), hi in the last; no search
    corrects the rounding at the edges, as torch's (np.histogram's correction puts some elements one bin
    away from torch's). The others count in a bin past the last, which is dropped."""
    dt = input.dtype
    lo_t, hi_t, bins_t = (full((), v, dt) for v in (lo, hi, bins))
    e = input.reshape(-1)
    pos = ((e - lo_t) * bins_t / (hi_t - lo_t)).clamp(0, bins - 1).to(i64)
    pos = where((e >= lo_t) & (e <= hi_t), pos, bins)
    counts = zeros(bins + 1, dtype=i64).scatter_add(0, pos, ones(pos.shape, dtype=i64))
    return counts[:bins].to(dt)


def histogram(input: Tensor, bins, *, range=None, weight: Tensor | None = None,  # noqa: A002
              density: bool = False, out=None):
    """torch.histogram: (hist, bin_edges), both of input's floating dtype. bins: a number of equal-width
    bins over range (by default the data's min and max, widened by 0.5 each side when they agree; an
    empty input: [0, 1]) or a 1-D tensor of increasing edges. An element counts (weight: adds its
    weight) in the bin [edge_i, edge_i+1), the last bin closed; those outside are ignored. density:
    hist / (its sum * the bin widths)."""
    if out is not None:
        raise ArgumentError(f"histogram: out= is not supported; use the returned tensors\n  at {user_location()}")
    instead = "use fixed edges and count with comparisons there, e.g. ((x >= lo) & (x < hi)).sum()"
    x = _values("histogram", input, instead)
    if not input.dtype.is_float:
        raise DTypeError(f"histogram: expected a floating-point input, got {input.dtype}\n  at {user_location()}")
    np_dtype = input.dtype.np_dtype
    if isinstance(bins, Tensor):
        edges = _values("histogram", bins, instead)
        if bins.dtype != input.dtype:
            raise DTypeError(f"torch.histogramdd: input tensor and bins tensors should have the same dtype, but got "
                             f"input with dtype {input.dtype} and bins with dtype {bins.dtype}\n  at {user_location()}")
        if edges.ndim != 1 or edges.size < 1:
            raise ShapeError(f"histogram: bins tensor should be 1-D with at least one edge, got shape "
                             f"{list(bins.shape)}\n  at {user_location()}")
    else:
        edges = _even_edges(x, int(bins), range, input.dtype)
    w = None
    if weight is not None:
        w = _values("histogram", weight, instead)
        if weight.dtype != input.dtype or weight.shape != input.shape:
            raise ShapeError(f"histogram: weight must have input's shape {list(input.shape)} and dtype "
                             f"{input.dtype}, got {list(weight.shape)} {weight.dtype}\n  at {user_location()}")
        w = w.reshape(-1)
    hist = _bin_sums(x.reshape(-1), edges, w, np_dtype)
    if density:
        hist = hist / hist.sum(dtype=np_dtype) / np.diff(edges).astype(np_dtype)
    hist, edges = (Tensor(a.astype(np_dtype), dtype=input.dtype) for a in (hist, edges))
    return _Histogram(hist, edges)


def _even_edges(x: np.ndarray, bins: int, span, dtype) -> np.ndarray:
    """bins + 1 equally spaced edges over span (None: the data's range), as torch.histogram places them."""
    if bins <= 0:
        raise ArgumentError(f"torch.histogram(): bins must be > 0, but got {bins} for dimension 0"
                            f"\n  at {user_location()}")
    if span is not None:
        lo, hi = (float(v) for v in span)
        if lo > hi:
            raise ArgumentError(f"torch.histogramdd: min should not exceed max, but got min {lo:g} max {hi:g} for "
                                f"dimension 0\n  at {user_location()}")
        if not (np.isfinite(lo) and np.isfinite(hi)):
            raise ArgumentError(f"torch.histogramdd: dimension 0's range [{lo:g}, {hi:g}] is not finite"
                                f"\n  at {user_location()}")
    elif x.size:
        lo, hi = float(x.min()), float(x.max())
    else:
        lo, hi = 0.0, 1.0
    if lo == hi:
        lo, hi = lo - 0.5, hi + 0.5
    return np.asarray(linspace(lo, hi, bins + 1, dtype=dtype).numpy())


def _bin_sums(x: np.ndarray, edges: np.ndarray, w: np.ndarray | None, np_dtype) -> np.ndarray:
    """Per bin [edges[i], edges[i+1]) (the last closed) the count of x's elements in it, or with w
    the sum of their weights."""
    hist = np.zeros(max(edges.size - 1, 0), dtype=np_dtype)
    if not hist.size:
        return hist
    inside = (x >= edges[0]) & (x <= edges[-1])
    pos = np.searchsorted(edges, x[inside], side="right") - 1
    pos = np.minimum(pos, hist.size - 1)  # the last edge falls in the last bin
    np.add.at(hist, pos, np.ones(pos.size, dtype=np_dtype) if w is None else w[inside])
    return hist
