"""Scans and sorting along one axis: cumsum, cumprod (running sum / product, accumulated in order, in
f32 for f16/bf16 as the kernels do) and argsort (a stable sort's permutation, NaN ordered after every
number as in PyTorch). sort / topk are argsort + gather in the frontend, so their values get the
gather's gradient."""

from __future__ import annotations

import numpy as np

from flame.ir.dtypes import i64
from flame.ir.ops._shapes import norm_axis
from flame.ir.registry import Attr, OpDef, check_dtype, register
from flame.ir.types import TensorType


def _scan_infer(name):
    def infer(types, axis):
        (t,) = types
        check_dtype(name, t, ("float", "int"))
        norm_axis(name, axis, t.rank)
        return t

    return infer


def _scan_ref(np_fn):
    def ref(x, axis):
        if x.ndim == 0:
            return x.copy()
        return np_fn(x, axis=axis % x.ndim, dtype=x.dtype)

    return ref


def _reverse_cumsum(b, v, axis):
    """sum over positions k >= i along axis: the transpose of cumsum."""
    if v.type.rank == 0:
        return v
    ax = axis % v.type.rank
    return b.flip(b.cumsum(b.flip(v, axes=[ax]), axis=ax), axes=[ax])


def _cumsum_vjp(b, g, x, out, axis):
    return (_reverse_cumsum(b, g, axis),)


def _cumprod_vjp(b, g, x, out, axis):
    # d out_k / d x_i = prod_{j <= k, j != i} x_j. Where x_i != 0 that is out_k / x_i; at the FIRST zero
    # of a line it is the running product with that zero replaced by one (later zeros keep theirs);
    # at a later zero it is 0 (the first zero is still a factor). Exact, zeros included.
    if x.type.rank == 0:
        return (g,)
    zero = b.eq(x, 0)
    first = b.logical_and(zero, b.eq(b.cumsum(b.cast(zero, dtype=i64), axis=axis), 1))
    plain = b.div(_reverse_cumsum(b, b.mul(g, out), axis), b.where(zero, 1, x))
    at_first = _reverse_cumsum(b, b.mul(g, b.cumprod(b.where(first, 1, x), axis=axis)), axis)
    return (b.where(first, at_first, b.where(zero, 0, plain)),)


register(
    OpDef(
        "cumsum",
        "opaque",
        1,
        _scan_infer("cumsum"),
        _scan_ref(np.cumsum),
        {"axis": Attr("int")},
        _cumsum_vjp,
        compute_f32=True,
        autocast="f32",  # autocast: on PyTorch's float32 list
        doc="running sum along axis (out[k] = x[0] + ... + x[k])",
    )
)
register(
    OpDef(
        "cumprod",
        "opaque",
        1,
        _scan_infer("cumprod"),
        _scan_ref(np.cumprod),
        {"axis": Attr("int")},
        _cumprod_vjp,
        compute_f32=True,
        autocast="f32",
        doc="running product along axis",
    )
)


def _argsort_infer(types, axis, descending):
    (t,) = types
    check_dtype("argsort", t, ("float", "int", "bool"))
    norm_axis("argsort", axis, t.rank)
    return TensorType(t.shape, i64)


def _argsort_ref(x, axis, descending):
    if x.ndim == 0:
        return np.zeros((), np.int64)
    ax = axis % x.ndim
    xm = np.moveaxis(x.astype(np.int8) if x.dtype == np.bool_ else x, ax, -1)
    if not descending:  # NumPy's stable sort already puts NaN last
        order = np.argsort(xm, axis=-1, kind="stable")
    else:  # NaN first, then the numbers from the largest; equal keys keep their order
        nan = np.isnan(xm) if xm.dtype.kind == "f" else np.zeros(xm.shape, bool)
        key = -xm if xm.dtype.kind == "f" else ~xm  # ~x = -1 - x reverses integers without overflow
        order = np.lexsort((key, ~nan), axis=-1) if xm.size else np.zeros(xm.shape, np.int64)
    return np.moveaxis(order.astype(np.int64), -1, ax)


register(
    OpDef(
        "argsort",
        "opaque",
        1,
        _argsort_infer,
        _argsort_ref,
        {"axis": Attr("int"), "descending": Attr("bool", False)},
        nondiff="integer result (the permutation) has no gradient",
        compute_f32=True,
        doc="the permutation that sorts x along axis, stably; NaN counts as larger than any number",
    )
)
