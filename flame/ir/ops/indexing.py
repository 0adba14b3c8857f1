"""gather (take-along-axis), index_select, scatter_add and scatter (its non-accumulating twin), and
segment_sum (index_select's gradient: src's slices summed into zeros at a 1-D index, JAX's
segment_sum along an axis; no broadcast index and no zero tensor to read).

Indices are i32 or i64 and must lie in [0, n) for an axis of size n, as PyTorch's gather, scatter
and index_select require: a negative index does not count from the end (the frontend wraps one
where PyTorch does, `x[idx]` and take_along_dim, before it reaches these ops). An index outside
[0, n) raises IndexValueError in the reference executor (naming the op and the user's line) and
stops the CUDA kernel with a device-side assertion (as PyTorch on CUDA does); it is never read
from another element, so a value and its gradient cannot disagree.

scatter writes src[i] at out[.., idx[i], ..]; where several i name one position the last in
row-major order wins, on both executors (PyTorch's CPU order), so a compiled write gives what an
eager one gives."""

from __future__ import annotations

import numpy as np

from flame.errors import DTypeError, IndexingError, IndexValueError, ShapeError
from flame.ir import symbolic
from flame.ir.ops._shapes import norm_axis
from flame.ir.registry import Attr, OpDef, check_dtype, register


def _check_index(op, idx):
    if idx.dtype.kind != "int":
        raise DTypeError(f"{op}: index {idx} must be an integer tensor")


def _in_range(op: str, idx: np.ndarray, n: int, axis: int) -> np.ndarray:
    """idx as i64, after checking every index lies in [0, n) (PyTorch's message)."""
    idx = idx.astype(np.int64, copy=False)
    bad = (idx < 0) | (idx >= n)
    if bad.any():
        raise IndexValueError(f"{op}: index {int(idx[bad].flat[0])} is out of bounds for dimension {axis} "
                              f"with size {n}")
    return idx


def _same_off_axis(op, x, idx, ax):
    if idx.rank != x.rank or any(a != b for i, (a, b) in enumerate(zip(x.shape, idx.shape)) if i != ax):
        raise ShapeError(f"{op}: index {idx} must match {x} on every axis but {ax}")


def _gather_infer(types, axis):
    x, idx = types
    _check_index("gather", idx)
    ax = norm_axis("gather", axis, x.rank)
    _same_off_axis("gather", x, idx, ax)
    return x.with_shape(idx.shape)


def _gather_vjp(b, g, x, idx, out, axis):
    ax = axis % x.type.rank
    if idx.shape[ax] == 1:
        # one index per row (cross-entropy's label pick): scattering g into zeros puts g where the
        # position equals the index — an elementwise select, which fuses with its neighbours
        shape = [1] * x.type.rank
        shape[ax] = x.shape[ax]
        pos = b.reshape(b.arange(start=0, stop=x.shape[ax], step=1, dtype=idx.dtype), shape=shape)
        return b.where(b.eq(pos, idx), g, 0), None
    return b.scatter_add(b.zeros_like(x), idx, g, axis=axis), None


register(OpDef("gather", "opaque", 2, _gather_infer,
               lambda x, idx, axis: np.take_along_axis(x, _in_range("gather", idx, x.shape[axis], axis % x.ndim),
                                                       axis=axis),
               {"axis": Attr("int")}, _gather_vjp, selects=True))


def _index_select_infer(types, axis):
    x, idx = types
    _check_index("index_select", idx)
    if idx.rank != 1:
        raise IndexingError(f"index_select: index {idx} must be 1-D (Index is supposed to be a vector)")
    ax = norm_axis("index_select", axis, x.rank)
    return x.with_shape(x.shape[:ax] + idx.shape + x.shape[ax + 1:])


def _index_select_vjp(b, g, x, idx, out, axis):
    ax = axis % x.type.rank
    if not isinstance(x.shape[ax], symbolic.SymInt):  # (segment_sum's size is a plain number)
        return b.segment_sum(idx, g, axis=ax, size=x.shape[ax]), None
    shape = [1] * x.type.rank
    shape[ax] = idx.shape[0]
    wide = b.broadcast_to(b.reshape(idx, shape=shape), shape=g.shape)
    return b.scatter_add(b.zeros_like(x), wide, g, axis=ax), None


register(OpDef("index_select", "opaque", 2, _index_select_infer,
               lambda x, idx, axis: np.take(x, _in_range("index_select", idx, x.shape[axis], axis % x.ndim),
                                            axis=axis),
               {"axis": Attr("int")}, _index_select_vjp, selects=True))


def _scatter_checks(name: str, types, axis):
    """What scatter and scatter_add ask of their operands: x, an index and src of the index's shape
    and x's dtype, the index matching x off the axis. Returns x's type."""
    x, idx, src = types
    _check_index(name, idx)
    if src.dtype != x.dtype:
        raise DTypeError(f"{name}: src {src} must have the dtype of {x}")
    if idx.shape != src.shape:
        raise ShapeError(f"{name}: index {idx} and src {src} must have the same shape")
    _same_off_axis(name, x, idx, norm_axis(name, axis, x.rank))
    return x


def _scatter_add_infer(types, axis):
    x = types[0]
    check_dtype("scatter_add", x, ("float", "int"))
    if x.dtype.is_int and x.dtype.itemsize < 4:
        raise DTypeError(f"scatter_add: {x} has dtype {x.dtype}, expected a float, i32 or i64 dtype (the GPU adds "
                         f"atomically in 32 or 64 bits; cast to i32 first)")
    return _scatter_checks("scatter_add", types, axis)


def _scatter_add_ref(x, idx, src, axis):
    out = x.copy()
    ax = axis % x.ndim
    grid = list(np.indices(idx.shape, sparse=True))
    grid[ax] = _in_range("scatter_add", idx, x.shape[ax], ax)
    np.add.at(out, tuple(grid), src)
    return out


register(OpDef("scatter_add", "opaque", 3, _scatter_add_infer, _scatter_add_ref, {"axis": Attr("int")},
               lambda b, g, x, idx, src, out, axis: (g, None, b.gather(g, idx, axis=axis)),
               compute_f32=True))  # autocast: frontend/index_ops.py's scatter_add declares torch's promote


def _scatter_infer(types, axis):
    return _scatter_checks("scatter", types, axis)


def _scatter_ref(x, idx, src, axis):
    out = x.copy()
    ax = axis % x.ndim
    grid = list(np.indices(idx.shape))
    grid[ax] = _in_range("scatter", idx, x.shape[ax], ax)
    at = np.ravel_multi_index(tuple(grid), x.shape).reshape(-1)
    # the last write to each position, in row-major order of idx (NumPy's fancy assignment does
    # not promise an order)
    _, last = np.unique(at[::-1], return_index=True)
    keep = at.size - 1 - last
    out.reshape(-1)[at[keep]] = src.reshape(-1)[keep]
    return out


def _scatter_vjp(b, g, x, idx, src, out, axis):
    """PyTorch's: x's gradient is g with the written positions zeroed; every write (a duplicate that
    lost too) gets the gradient of the position it names."""
    return b.scatter(g, idx, b.zeros_like(src), axis=axis), None, b.gather(g, idx, axis=axis)


register(OpDef("scatter", "opaque", 3, _scatter_infer, _scatter_ref, {"axis": Attr("int")}, _scatter_vjp))


def _segment_sum_infer(types, axis, size):
    idx, src = types
    _check_index("segment_sum", idx)
    check_dtype("segment_sum", src, ("float", "int"), "src")
    if src.dtype.is_int and src.dtype.itemsize < 4:
        raise DTypeError(f"segment_sum: src {src} has dtype {src.dtype}, expected a float, i32 or i64 dtype")
    if idx.rank != 1:
        raise IndexingError(f"segment_sum: index {idx} must be 1-D")
    ax = norm_axis("segment_sum", axis, src.rank)
    if src.shape[ax] != idx.shape[0]:
        raise ShapeError(f"segment_sum: src {src} needs one slice along axis {ax} per index of {idx}")
    if size < 0:
        raise ShapeError(f"segment_sum: size {size} must not be negative")
    return src.with_shape(src.shape[:ax] + (size,) + src.shape[ax + 1:])


def _segment_sum_ref(idx, src, axis, size):
    ax = axis % src.ndim
    out = np.zeros(src.shape[:ax] + (size,) + src.shape[ax + 1:], src.dtype)
    np.add.at(np.moveaxis(out, ax, 0), _in_range("segment_sum", idx, size, ax), np.moveaxis(src, ax, 0))
    return out


# out[.., idx[i], ..] += src[.., i, ..] into zeros of size `size` along axis (torch's embedding
# backward; f16 / bf16 sum in f32 and round once, as torch's CUDA embedding_dense_backward does)
register(OpDef("segment_sum", "opaque", 2, _segment_sum_infer, _segment_sum_ref,
               {"axis": Attr("int"), "size": Attr("int")},
               lambda b, g, idx, src, out, axis, size: (None, b.index_select(g, idx, axis=axis)),
               compute_f32=True))
