"""The gather/scatter family with PyTorch's semantics: gather, take_along_dim, index_select,
scatter, scatter_add, index_add, index_copy, index_fill, index_put, embedding's lookup.

Indices: the IR ops take indices in [0, n) only (flame/ir/ops/indexing.py). Where PyTorch counts a
negative index from the end (take_along_dim along a dim, index_fill, `x[idx]`, index_put) it is
wrapped here, in the value and so in the gradient; where PyTorch raises on one (gather, scatter,
scatter_add, index_select, index_add, index_copy, embedding), so does flame. Eagerly the index
values are known and an out-of-bounds one raises IndexValueError at the user's line, before
anything runs. Inside @flame.compile they are not known while tracing: the reference executor
raises the same IndexValueError when the step runs, and a CUDA kernel stops at a device-side
assertion (as PyTorch on CUDA); an out-of-bounds index never reads or writes another element.

Duplicate indices: scatter, index_copy and index_put (accumulate=False) keep the last write in
row-major order of the index, eagerly and compiled, on both executors (PyTorch's CPU result; it
leaves the winner unspecified on CUDA). Their gradient is PyTorch's: every write, a duplicate that
lost included, gets the gradient of the position it names. scatter_add, index_add and index_put
(accumulate=True) add the duplicates up.

Shapes: as in PyTorch, gather's and scatter's index may be smaller than the input on the dims but
`dim` (and than src on every dim). The IR ops want the index to match the input there: gather reads
the input's leading part, scatter and scatter_add pad the index with 0 and src with zeros, and
scatter keeps the input where only that padding writes."""

from __future__ import annotations

import numpy as np

from flame.errors import DTypeError, IndexValueError, ShapeError
from flame.frontend import tensor as _t
from flame.frontend.autocast import policy
from flame.frontend.context import user_location
from flame.frontend.dispatch import apply
from flame.frontend.promotion import coefficient, fits
from flame.frontend.tensor_core import full, pad, where
from flame.frontend.views import new_tensor
from flame.ir.dtypes import boolean


def check_indices(op: str, index, size: int, dim: int, *, negative: bool = False) -> None:
    """Eagerly (the values known): every index in [0, size), or in [-size, size) where PyTorch
    counts negative ones from the end; else IndexValueError with PyTorch's message (after `op: `
    unless op is empty). Inside
    @flame.compile the executors check when the step runs (module docstring)."""
    if index._value is not None or not index.numel():
        return
    a = index.numpy()
    bad = (a < (-size if negative else 0)) | (a >= size)
    if bad.any():
        raise IndexValueError(
            f"{op + ': ' if op else ''}index {int(a[bad].flat[0])} is out of bounds for dimension "
            f"{dim} with size {size}\n  at {user_location()}"
        )


def wrap_negative(index, size: int):
    """index + size where it is negative (PyTorch's count from the end), for the ops whose IR
    takes [0, size). Known values wrap on the host; traced ones through a where."""
    if index._value is None:
        a = index.numpy()
        return _t.Tensor(np.where(a < 0, a + size, a).astype(a.dtype)) if (a < 0).any() else index
    return apply("where", index < 0, index + size, index)


def _index_tensor(op: str, index):
    if not isinstance(index, _t.Tensor):
        index = _t.Tensor(np.asarray(index, np.int64))
    if not index.dtype.is_int:
        raise DTypeError(f"{op}: index must be an integer tensor, got {index.dtype}\n  at {user_location()}")
    return index


@new_tensor
def gather(x, dim: int, index):
    """out[.., i, ..] = x[.., index[.., i, ..], ..] along dim; an index must be in [0, size)."""
    axis = _t.dim_index("gather", dim, x.ndim)
    index = _index_tensor("gather", index)
    _check_extent("gather", x, axis, index)
    if not index.numel():  # no element read (x's gradient: zeros)
        return x.reshape(-1)[:0].reshape(*index.shape)
    if x.ndim == 0 or index.ndim == 0:  # PyTorch treats a 0-d tensor as one element along dim 0
        return gather(x.reshape(1) if x.ndim == 0 else x, axis, index.reshape(1)).reshape(index.shape)
    check_indices("gather", index, x.shape[axis], axis)
    return apply("gather", _leading(x, index.shape, axis), index, axis=axis)


def _check_extent(op: str, x, axis: int, index, src=None) -> None:
    """PyTorch's shape rule for gather and scatter: index has x's rank and is no larger than x on
    every dim but axis (and no larger than src on every dim); an empty index is not checked."""
    if not index.numel():
        return
    if max(index.ndim, 1) != max(x.ndim, 1):
        raise ShapeError(
            f"{op}: index {list(index.shape)} must have as many dimensions as the input {list(x.shape)}"
            f"\n  at {user_location()}"
        )
    if src is not None and max(src.ndim, 1) != max(x.ndim, 1):
        raise ShapeError(
            f"{op}: src {list(src.shape)} must have as many dimensions as the input {list(x.shape)}"
            f"\n  at {user_location()}"
        )
    if any(i > n for d, (i, n) in enumerate(zip(index.shape, x.shape)) if d != axis) or (
        src is not None and any(i > n for i, n in zip(index.shape, src.shape))
    ):
        against = f" and src {list(src.shape)} on every dim" if src is not None else ""
        raise ShapeError(
            f"{op}: index {list(index.shape)} must be no larger than the input {list(x.shape)} on every "
            f"dim but {axis}{against}\n  at {user_location()}"
        )


def _one_d(x, t):
    """A 0-d index or src of a 1-D x as one element (PyTorch treats a 0-d tensor as 1-D here)."""
    return t.reshape(1) if x.ndim == 1 and isinstance(t, _t.Tensor) and t.ndim == 0 else t


def _one_element(op: str, fn, x, dim: int, index, *rest, **kw):
    """fn on a 0-d x as the one element along dim 0 (PyTorch's rule for its index ops), index and any
    tensor of rest flattened alike; the result 0-d again."""
    _t.dim_index(op, dim, 0)
    flat = [t.reshape(-1) if isinstance(t, _t.Tensor) else t for t in (index, *rest)]
    return fn(x.reshape(1), 0, *flat, **kw).reshape(())


def _leading(t, shape, axis: int | None = None):
    """t's leading part of the given extent on every dim (but axis): PyTorch's gather and scatter
    use only the part of the input (or src) an index smaller than it covers."""
    if all(n == m or d == axis for d, (n, m) in enumerate(zip(t.shape, shape))):
        return t
    return t[tuple(slice(None) if d == axis else slice(0, m) for d, m in enumerate(shape))]


def _widen(index, src, shape, axis: int):
    """index and src padded to shape on every dim but axis (index with 0, src with 0), so the IR
    ops, which want the index to match the input there, see a full index; the padded writes land on
    positions no real write touches (their other coordinates lie past the index's extent)."""
    pads = [(0, 0) if d == axis else (0, n - m) for d, (n, m) in enumerate(zip(shape, index.shape))]
    if not any(hi for _, hi in pads):
        return index, src, None
    return pad(index, pads, 0), pad(src, pads, 0), pads


@new_tensor
def take_along_dim(x, indices, dim: int | None = None):
    """x's elements at indices along dim (of the flattened x when dim is None), x and indices
    broadcast except along dim, as torch.take_along_dim: along a dim a negative index counts from
    the end (PyTorch wraps it there); with dim=None it is out of bounds, as in gather."""
    indices = _index_tensor("take_along_dim", indices)
    if dim is None:
        return gather(x.reshape(-1), 0, indices.reshape(-1))
    axis = _t.dim_index("take_along_dim", dim, x.ndim)
    n = x.shape[axis]
    shape = [b if a == 1 else a for a, b in zip(x.shape, indices.shape)]  # broadcast: 1 takes the other
    if np.prod([m if i != axis else indices.shape[axis] for i, m in enumerate(shape)], dtype=np.int64):
        check_indices("take_along_dim", indices, n, axis, negative=True)  # (PyTorch: not for no element)
    src = x.broadcast_to(*[s if i != axis else n for i, s in enumerate(shape)])
    idx = indices.broadcast_to(*[s if i != axis else indices.shape[axis] for i, s in enumerate(shape)])
    return apply("gather", src, wrap_negative(idx, n), axis=axis)


@new_tensor
def index_select(x, dim: int, index):
    """The slices of x at index (1-D) along dim; an index must be in [0, size)."""
    if x.ndim == 0:
        return _one_element("index_select", index_select, x, dim, index)
    axis = _t.dim_index("index_select", dim, x.ndim)
    index = _index_tensor("index_select", index)
    index = index.reshape(1) if index.ndim == 0 else index  # torch takes a 0-d index as one element
    check_indices("index_select", index, x.shape[axis], axis)
    return apply("index_select", x, index, axis=axis)


def embedding_rows(weight, idx):
    """weight's rows at idx (any shape): F.embedding's lookup; an index must be in [0, rows)."""
    check_indices("embedding", idx, weight.shape[0], 0)
    flat = apply("index_select", weight, idx.reshape(-1), axis=0)
    return flat.reshape(*idx.shape, *weight.shape[1:])


@new_tensor
@policy("promote", cpu="")  # autocast: on PyTorch's CUDA promote list (the widest input), none of its CPU lists
def scatter_add(x, dim: int, index, src):
    """x with src[.., i, ..] added at x[.., index[.., i, ..], ..] (duplicates add up)."""
    if x.ndim == 0:
        return _one_element("scatter_add", scatter_add, x, dim, index, src)
    axis = _t.dim_index("scatter_add", dim, x.ndim)
    index = _index_tensor("scatter_add", index)
    index, src = _one_d(x, index), _one_d(x, src)
    if x.ndim and isinstance(src, _t.Tensor):
        _check_extent("scatter_add", x, axis, index, src)
        if not index.numel():
            return _untouched(x, src)
        src = _leading(src, index.shape)
        check_indices("scatter_add", index, x.shape[axis], axis)
        index, src, _ = _widen(index, src, x.shape, axis)  # added zeros change nothing
    else:
        check_indices("scatter_add", index, x.shape[axis] if x.ndim else 1, axis)
    return apply("scatter_add", x, index, src, axis=axis)


@new_tensor
def scatter(x, dim: int, index, src=None, value=None, *, reduce: str | None = None):
    """x with src[.., i, ..] (or the number value) written at x[.., index[.., i, ..], ..]; where
    several writes name one position the last in row-major order wins (module docstring). src may
    be larger than index (its leading part is used), as in PyTorch; reduce='add' is scatter_add."""
    if x.ndim == 0:
        return _one_element("scatter", scatter, x, dim, index, src, value, reduce=reduce)
    axis = _t.dim_index("scatter", dim, x.ndim)
    index = _index_tensor("scatter", index)
    if (src is None) == (value is None):
        raise ShapeError(
            f"scatter: give one of src (a tensor or a number) and value (a number)\n  at {user_location()}"
        )
    src = value if src is None else src
    index = _one_d(x, index)
    if isinstance(src, _t.Tensor) and src.dtype != x.dtype:
        raise DTypeError(f"scatter(): Expected self.dtype to be equal to src.dtype, got {x.dtype} and {src.dtype} "
                         f"(as in PyTorch: convert src with .to({x.dtype.name!r}))\n  at {user_location()}")
    src = _one_d(x, src) if isinstance(src, _t.Tensor) else full(tuple(index.shape), src, x.dtype)
    if x.ndim:
        _check_extent("scatter", x, axis, index, src)
        src = _leading(src, index.shape)
    src = src.to(x.dtype) if src.dtype != x.dtype else src
    if reduce == "add":
        return scatter_add(x, dim, index, src)
    if reduce is not None:
        raise ShapeError(
            f"scatter: reduce must be None, 'add' or 'multiply', got {reduce!r} (scatter_reduce takes 'sum', "
            f"'prod', 'mean', 'amax' and 'amin')\n  at {user_location()}"
        )
    if x.ndim and not index.numel():
        return _untouched(x, src)
    check_indices("scatter", index, x.shape[axis] if x.ndim else 1, axis)
    if not x.ndim:
        return apply("scatter", x, index, src, axis=axis)
    index, src, pads = _widen(index, src, x.shape, axis)
    out = apply("scatter", x, index, src, axis=axis)
    return out if pads is None else where(_padded_writes(x.shape, axis, pads), x, out)


def _untouched(x, src):
    """x unchanged (a scatter with an empty index writes nothing), with src kept in the result's
    graph as PyTorch keeps it: src's gradient is zeros of its shape, not missing. x minus the sum of
    no element of src (+0.0) is x bit for bit, -0.0, inf and NaN included."""
    if not (isinstance(src, _t.Tensor) and src.dtype.is_float and x.dtype.is_float):
        return x.clone()
    return x - src.reshape(-1)[:0].sum().to(x.dtype)


def _padded_writes(shape, axis: int, pads):
    """The positions only _widen's padding writes (index 0 along axis, past the index's extent on
    another dim): a constant mask that keeps x there, in the value and in the gradient."""
    outside = np.zeros(shape, bool)
    for d, (_, hi) in enumerate(pads):
        if hi:
            outside[(slice(None),) * d + (slice(shape[d] - hi, None),)] = True
    first = np.zeros(shape, bool)
    first[(slice(None),) * axis + (0,)] = True
    return _t.Tensor(outside & first)


def _along(op: str, x, dim: int, index, source):
    """(axis, index as 1-D broadcast to source's shape along axis) for index_add / index_copy."""
    axis = _t.dim_index(op, dim, x.ndim)
    index = _index_tensor(op, index).reshape(-1)
    if (
        source.ndim != x.ndim
        or source.shape[axis] != index.shape[0]
        or any(s != n for i, (s, n) in enumerate(zip(source.shape, x.shape)) if i != axis)
    ):
        raise ShapeError(
            f"{op}: source {list(source.shape)} must match {list(x.shape)} except along dim {dim}, "
            f"where it needs one slice per index ({index.shape[0]})\n  at {user_location()}"
        )
    check_indices(op, index, x.shape[axis], axis)
    shape = [1] * source.ndim
    shape[axis] = index.shape[0]
    return axis, index.reshape(*shape).broadcast_to(*source.shape)


@new_tensor
def index_add(x, dim: int, index, source, *, alpha=1):
    """x with alpha * source's slices added at index along dim (repeated indices add up)."""
    if x.ndim == 0:
        return _one_element("index_add", index_add, x, dim, index, source, alpha=alpha)
    axis, idx = _along("index_add", x, dim, index, source)
    alpha = coefficient("index_add", "alpha", alpha, x.dtype, checked=True)  # in x's dtype, as torch's Scalar
    return apply("scatter_add", x, idx, source * alpha if alpha != 1 else source, axis=axis)


@new_tensor
@policy("", cpu="promote")  # autocast: on PyTorch's CPU promote list, none of its CUDA lists (index_copy_: neither)
def index_copy(x, dim: int, index, source):
    """x with source's slices written at index along dim (a repeated index: the last slice wins)."""
    return copy_slices(x, dim, index, source)


def copy_slices(x, dim: int, index, source, op: str = "index_copy_()"):
    """index_copy without its autocast policy (index_copy_'s body): source must have x's dtype, as
    PyTorch's index_copy_ requires (it casts neither)."""
    if source.dtype != x.dtype:
        raise DTypeError(f"{op}: self and source expected to have the same dtype, but got (self) {x.dtype} and "
                         f"(source) {source.dtype} (as in PyTorch: convert source with .to({x.dtype.name!r}))"
                         f"\n  at {user_location()}")
    if x.ndim == 0:
        return _one_element("index_copy", copy_slices, x, dim, index, source)
    axis, idx = _along("index_copy", x, dim, index, source)
    return apply("scatter", x, idx, source, axis=axis)


@new_tensor
def index_fill(x, dim: int, index, value):
    """x with the slices at index along dim set to value (a number or a 0-d tensor); a negative
    index counts from the end, as in PyTorch."""
    axis = _t.dim_index("index_fill", dim, x.ndim)
    index = _index_tensor("index_fill", index).reshape(-1)
    n = x.shape[axis] if x.ndim else 1
    check_indices("index_fill", index, n, axis, negative=True)
    fits("index_fill", "value", value, x.dtype)
    if isinstance(value, _t.Tensor) and value.ndim:
        raise ShapeError(
            f"index_fill: value must be a number or a 0-d tensor, got shape {list(value.shape)}\n  at {user_location()}"
        )
    hit = apply(
        "scatter",
        full((n,), False, boolean),
        wrap_negative(index, n),
        full(tuple(index.shape), True, boolean),
        axis=0,
    )
    value = value.to(x.dtype) if isinstance(value, _t.Tensor) else full((), value, x.dtype)
    shape = [1] * x.ndim
    if x.ndim:
        shape[axis] = n
    return apply("where", hit.reshape(*shape), value, x)
