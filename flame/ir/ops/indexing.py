"""gather (take-along-axis), index_select and scatter_add. Indices are i32 or i64; an index out of
range raises in the reference executor and is undefined behaviour on the GPU (as in PyTorch)."""

from __future__ import annotations

import numpy as np

from flame.errors import DTypeError, ShapeError
from flame.ir.ops._shapes import norm_axis
from flame.ir.registry import Attr, OpDef, check_dtype, register


def _check_index(op, idx):
    if idx.dtype.kind != "int":
        raise DTypeError(f"{op}: index {idx} must be an integer tensor")


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
               lambda x, idx, axis: np.take_along_axis(x, idx.astype(np.int64), axis=axis),
               {"axis": Attr("int")}, _gather_vjp, selects=True))


def _index_select_infer(types, axis):
    x, idx = types
    _check_index("index_select", idx)
    if idx.rank != 1:
        raise ShapeError(f"index_select: index {idx} must be 1-D")
    ax = norm_axis("index_select", axis, x.rank)
    return x.with_shape(x.shape[:ax] + idx.shape + x.shape[ax + 1:])


def _index_select_vjp(b, g, x, idx, out, axis):
    ax = axis % x.type.rank
    shape = [1] * x.type.rank
    shape[ax] = idx.shape[0]
    wide = b.broadcast_to(b.reshape(idx, shape=shape), shape=g.shape)
    return b.scatter_add(b.zeros_like(x), wide, g, axis=ax), None


register(OpDef("index_select", "opaque", 2, _index_select_infer,
               lambda x, idx, axis: np.take(x, idx.astype(np.int64), axis=axis),
               {"axis": Attr("int")}, _index_select_vjp, selects=True))


def _scatter_add_infer(types, axis):
    x, idx, src = types
    _check_index("scatter_add", idx)
    if src.dtype != x.dtype:
        raise DTypeError(f"scatter_add: src {src} must have the dtype of {x}")
    check_dtype("scatter_add", x, ("float", "int"))
    if x.dtype.is_int and x.dtype.itemsize < 4:
        raise DTypeError(f"scatter_add: {x} has dtype {x.dtype}, expected a float, i32 or i64 dtype (the GPU adds "
                         f"atomically in 32 or 64 bits; cast to i32 first)")
    if idx.shape != src.shape:
        raise ShapeError(f"scatter_add: index {idx} and src {src} must have the same shape")
    _same_off_axis("scatter_add", x, idx, norm_axis("scatter_add", axis, x.rank))
    return x


def _scatter_add_ref(x, idx, src, axis):
    out = x.copy()
    ax = axis % x.ndim
    grid = list(np.indices(idx.shape, sparse=True))
    grid[ax] = idx.astype(np.int64)
    np.add.at(out, tuple(grid), src)
    return out


register(OpDef("scatter_add", "opaque", 3, _scatter_add_infer, _scatter_add_ref, {"axis": Attr("int")},
               lambda b, g, x, idx, src, out, axis: (g, None, b.gather(g, idx, axis=axis)),
               compute_f32=True))
