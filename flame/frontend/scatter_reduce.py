"""torch.scatter_reduce as a composite of the gather/scatter ops (frontend/index_ops.py): every reduce
("sum", "prod", "mean", "amax", "amin"), with and without the input's own values (include_self).

Along `dim`, the writes that name one position are the elements of src whose other coordinates equal
the position's. So:
- sum and mean are scatter_add (of src, and of ones for mean's count); an integer mean divides with
  floor, as PyTorch's; bool and 8-bit integers add and multiply in int64, wrapped back to their dtype;
- amax and amin sort src along dim (NaN last, so NaN wins, as PyTorch's) and scatter the sorted values:
  the last write to a position, the one that stays (index_ops' rule), is its largest (smallest);
- prod sorts the writes by position (stably, so each position's factors keep their order), multiplies
  them within each run of equal positions by a doubling scan (log2 of the length steps) and adds the
  last of each run into place; its gradient is PyTorch's formula, given by a linear form.

Gradients are PyTorch's: amax and amin share a position's gradient evenly among the values equal to
its result, the input's own value counted even where include_self=False (PyTorch's rule), given by a
linear form through `straight_through`; mean divides by the count; with include_self=False the input
gets no gradient where a write lands."""

from __future__ import annotations

from flame.errors import ArgumentError, DTypeError
from flame.frontend import tensor as _t
from flame.frontend.context import user_location
from flame.frontend.dispatch import apply
from flame.frontend.index_ops import _check_extent, _index_tensor, _one_d, check_indices
from flame.frontend.opmath import float_gradient
from flame.frontend.tensor_core import full, pad, where
from flame.frontend.views import new_tensor
from flame.ir.dtypes import boolean, i64

REDUCES = ("sum", "prod", "mean", "amax", "amin")
_ALIASES = {"max": "amax", "min": "amin"}  # PyTorch takes these too


@new_tensor
def scatter_reduce(x, dim: int, index, src, reduce: str, *, include_self: bool = True):
    """x with src's values reduced into the positions index names along dim, as torch.scatter_reduce:
    reduce is "sum", "prod", "mean", "amax" (or "max") or "amin" (or "min"); include_self=False leaves x's own value out
    where a write lands (module docstring)."""
    axis = _t.dim_index("scatter_reduce", dim, x.ndim)
    index = _index_tensor("scatter_reduce", index)
    reduce = _ALIASES.get(reduce, reduce)
    if reduce not in REDUCES:
        raise ArgumentError(f"reduce argument must be either sum, prod, mean, amax or amin, got {reduce}"
                            f"\n  at {user_location()}")
    if not isinstance(src, _t.Tensor):
        raise DTypeError(f"scatter_reduce(): src must be a tensor, got {type(src).__name__}\n  at {user_location()}")
    if src.dtype != x.dtype:
        raise DTypeError(f"scatter(): Expected self.dtype to be equal to src.dtype, got {x.dtype} and {src.dtype}"
                         f"\n  at {user_location()}")
    if x.ndim == 0:  # torch treats 0-d tensors as one element along dim 0
        return scatter_reduce(x.reshape(1), 0, index.reshape(-1), src.reshape(-1), reduce,
                              include_self=include_self).reshape(())
    index, src = _one_d(x, index), _one_d(x, src)
    _check_extent("scatter_reduce", x, axis, index, src)
    if not index.numel():
        return x.clone() if not src.requires_grad else x + src.reshape(-1)[:0].sum().to(x.dtype)
    check_indices("scatter_reduce", index, x.shape[axis], axis)
    src = src[tuple(slice(0, m) for m in index.shape)] if tuple(src.shape) != tuple(index.shape) else src
    part = tuple(slice(None) if d == axis else slice(0, m) for d, m in enumerate(index.shape))
    whole = tuple(x.shape) == tuple(m if d != axis else x.shape[axis] for d, m in enumerate(index.shape))
    xp = x if whole else x[part]
    out = _narrow_ints(xp, axis, index, src, reduce, include_self) if _narrow(x, reduce) else None
    out = _REDUCE[reduce](xp, axis, index, src, include_self) if out is None else out
    if whole:
        return out
    pads = [(0, n - m) for n, m in zip(x.shape, out.shape)]
    inside = pad(full(tuple(out.shape), True, boolean), pads, False)
    return where(inside, pad(out, pads, 0), x)


def _narrow(x, reduce: str) -> bool:
    """Whether x is bool or an integer narrower than 32 bits (scatter_add's GPU atomics take none) and
    reduce adds or multiplies."""
    return reduce in ("sum", "prod", "mean") and (x.dtype == boolean or (not x.dtype.is_float and
                                                                          x.dtype.itemsize < 4))


def _narrow_ints(x, axis, index, src, reduce, include_self):
    """sum, prod and mean of bool and narrow integers, as PyTorch's: computed in int64 and wrapped back
    to the dtype (a bool sum is an or, a product an and; the mean divides the wrapped sum)."""
    if x.dtype == boolean and reduce == "mean":
        raise DTypeError(f'scatter_reduce(): "scatter_reduce" mean is not implemented for bool tensors (as in '
                         f"PyTorch)\n  at {user_location()}")
    wide = _REDUCE["sum" if reduce == "mean" else reduce](x.to(i64), axis, index, src.to(i64), include_self)
    if x.dtype == boolean:
        return wide != 0
    out = wide.to(x.dtype)
    if reduce != "mean":
        return out
    return _mean(out.to(i64), axis, index, None, include_self, total=out.to(i64)).to(x.dtype)


def _written(x, axis: int, index):
    """The positions of x some write lands on (a constant bool mask)."""
    return apply("scatter", full(tuple(x.shape), False, boolean), index, full(tuple(index.shape), True, boolean),
                 axis=axis)


def _sum(x, axis, index, src, include_self):
    base = x if include_self else where(_written(x, axis, index), full((), 0, x.dtype), x)
    return apply("scatter_add", base, index, src, axis=axis)


def _mean(x, axis, index, src, include_self, total=None):
    total = _sum(x, axis, index, src, include_self) if total is None else total
    count = apply("scatter_add", full(tuple(x.shape), 1 if include_self else 0, x.dtype), index,
                  full(tuple(index.shape), 1, x.dtype), axis=axis)
    count = where(count == 0, full((), 1, x.dtype), count)
    return total // count if not x.dtype.is_float else total / count


def _extreme(x, axis, index, src, include_self, largest: bool):
    """amax (largest) or amin: the value by a sort and a scatter, PyTorch's gradient by a linear form."""
    v, s = x.detach(), src.detach()
    if x.dtype.is_float:  # ascending: the winner (NaN included) comes last
        order = (s if largest else -s).argsort(dim=axis, stable=True)
    else:  # no NaN: a descending sort puts the smallest last (no negation to overflow or wrap)
        order = (s.to(i64) if s.dtype == boolean else s).argsort(dim=axis, descending=not largest, stable=True)
    red = apply("scatter", v, index.gather(axis, order), s.gather(axis, order), axis=axis)
    written = _written(x, axis, index)
    if include_self:
        red = red.maximum(v) if largest else red.minimum(v)
    value = where(written, red, v)
    if not x.dtype.is_float:
        return value
    # PyTorch: each value equal to the result takes grad / (how many are), self counted even when excluded
    self_is = (v == value).to(x.dtype)
    src_is = (s == value.gather(axis, index)).to(x.dtype)
    n = apply("scatter_add", self_is, index, src_is, axis=axis)
    c_self = self_is / n
    if not include_self:
        c_self = where(written, full((), 0, x.dtype), c_self)
    lin = apply("scatter_add", x * c_self, index, src * (src_is / n.gather(axis, index)), axis=axis)
    return apply("straight_through", lin, value)


def _product(x, axis, index, src, include_self):
    order = index.argsort(dim=axis, stable=True)
    pos, y = index.gather(axis, order), src.gather(axis, order)
    length, step = index.shape[axis], 1
    while step < length:
        prev_pos = _shift(pos, axis, step, -1)
        prev_y = _shift(y, axis, step, 1)
        y = where(prev_pos == pos, y * prev_y, y)
        step *= 2
    last = pos != _shift(pos, axis, -1, -1)  # the last write of each run holds the run's product
    red = apply("scatter_add", full(tuple(x.shape), 0, x.dtype), pos, where(last, y, full((), 0, x.dtype)),
                axis=axis)
    return where(_written(x, axis, index), x * red if include_self else red, x)


def _prod(x, axis, index, src, include_self):
    """The product (_product), with PyTorch's gradient given by a linear form: x's the result over x (a zero
    of x replaced by one: the product of the others), src's the result over src, or where src is a
    position's only zero the product of the others (a NaN or infinity reaches only its own position's
    factors, not, through the scan's where, the other positions' factors)."""
    value = _product(x, axis, index, src, include_self)
    if not (float_gradient(x) or float_gradient(src)):
        return value
    v, s, one = x.detach(), src.detach(), full((), 1, x.dtype)
    unzeroed = where(v == 0, one, v)
    c_self = _product(unzeroed, axis, index, s, include_self) / unzeroed
    if not include_self:
        c_self = where(_written(x, axis, index), full((), 0, x.dtype), c_self)
    zero = s == 0
    zeros = apply("scatter_add", full(tuple(x.shape), 0, x.dtype), index, zero.to(x.dtype), axis=axis)
    single = zero & (zeros.gather(axis, index) == 1)
    others = _product(v, axis, index, where(single, one, s), include_self).gather(axis, index)
    c_src = where(single, others, value.detach().gather(axis, index) / where(zero, one, s))
    lin = apply("scatter_add", x * c_self, index, src * c_src, axis=axis)
    return apply("straight_through", lin, value)


def _shift(t, axis: int, by: int, fill):
    """t moved `by` places along axis (toward higher indices when positive), `fill` in the gap."""
    n = t.shape[axis]
    if abs(by) >= n:
        return full(tuple(t.shape), fill, t.dtype)
    keep = slice(0, n - by) if by > 0 else slice(-by, n)
    cut = t[(slice(None),) * axis + (keep,)]
    return pad(cut, [(max(by, 0), max(-by, 0)) if d == axis else (0, 0) for d in range(t.ndim)], fill)


_REDUCE = {
    "sum": _sum,
    "mean": _mean,
    "prod": _prod,
    "amax": lambda x, axis, index, src, inc: _extreme(x, axis, index, src, inc, True),
    "amin": lambda x, axis, index, src, inc: _extreme(x, axis, index, src, inc, False),
}
