"""Scans and sorting along one axis: cumsum, cumprod, logcumsumexp (running sum / product / log-sum-exp,
accumulated in order, in f64 for f32 and in f32 for f16/bf16, as torch's CPU kernels and flame's do) and
argsort (a stable sort's permutation, NaN ordered after every number as in PyTorch). sort / topk are
argsort + gather in the frontend, so their values get the gather's gradient."""

from __future__ import annotations

import numpy as np

from flame.ir.dtypes import bf16, f16, i64, value_range
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


def _accumulator(dt: np.dtype) -> np.dtype:
    """The dtype a scan accumulates in, as torch's CPU kernels (its acc_type): f64 for f32 (so a long f32
    cumsum rounds once per element, not once per step), f32 for f16 / bf16, the dtype itself otherwise."""
    if dt == np.float32:
        return np.dtype(np.float64)
    return np.dtype(np.float32) if dt in (f16.np_dtype, bf16.np_dtype) else dt


def _scan_ref(np_fn):
    def ref(x, axis):
        if x.ndim == 0:
            return x.copy()
        return np_fn(x.astype(_accumulator(x.dtype)), axis=axis % x.ndim).astype(x.dtype)

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
    # PyTorch's cumprod_backward. d out_k / d x_i = prod_{j <= k, j != i} x_j. Before a line's first zero
    # z1 that is out_k / x_i, summed over k < z1 only (out_k from z1 on holds the zero: 0, not the
    # inf * 0 = NaN an infinity before it makes). At z1 it is the product before z1 times that after z1 up
    # to k, summed over k up to the second zero z2 (later terms masked by a multiplication, so an
    # infinity between z1 and z2 makes them NaN, as torch's). From z1 on, elsewhere, 0.
    if x.type.rank == 0 or x.type.shape[axis] == 1:
        return (g,)
    zero = b.eq(x, 0)
    zeros = b.cumsum(b.cast(zero, dtype=i64), axis=axis)  # the zeros up to each element
    before, between = b.eq(zeros, 0), b.eq(zeros, 1)  # [0, z1) and [z1, z2)
    first = b.logical_and(zero, between)
    plain = b.div(_reverse_cumsum(b, b.where(before, b.mul(g, out), 0), axis), b.where(zero, 1, x))
    prefix = b.cumprod(b.where(before, x, 1), axis=axis)  # at z1: the product before it
    after = b.cumprod(b.where(b.logical_and(between, b.logical_not(zero)), x, 1), axis=axis)
    at_first = b.mul(prefix, _reverse_cumsum(b, b.mul(b.mul(g, after), b.cast(between, dtype=x.dtype)), axis))
    return (b.where(first, at_first, b.where(before, plain, 0)),)


register(
    OpDef(
        "cumsum",
        "opaque",
        1,
        _scan_infer("cumsum"),
        _scan_ref(np.cumsum),
        {"axis": Attr("int")},
        _cumsum_vjp,
        autocast="f32",  # autocast: on PyTorch's CUDA float32 list, on none of its CPU lists
        autocast_cpu="",
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
        autocast="f32",
        autocast_cpu="",
        doc="running product along axis",
    )
)


def log_add_exp(a, b):
    """PyTorch's scan step of logcumsumexp (its _log_add_exp_helper), elementwise on NumPy arrays of one
    dtype: log(exp(a) + exp(b)) as log1p(exp(min - max)) + max, NaN in b carried, and a itself where
    both are the same infinity (no inf - inf)."""
    b_nan = b != b
    mn = np.where(b_nan, b, np.where(b < a, b, a))
    mx = np.where(b_nan, b, np.where(a < b, b, a))
    with np.errstate(all="ignore"):
        out = np.log1p(np.exp(mn - mx)) + mx
    return np.where((mn != mx) | np.isfinite(mn), out, a).astype(a.dtype)


def _logcumsumexp_infer(types, axis):
    (t,) = types
    check_dtype("logcumsumexp", t, ("float",))
    norm_axis("logcumsumexp", axis, t.rank)
    return t


def _logcumsumexp_ref(x, axis):
    if x.ndim == 0:
        return x.copy()
    xm = np.moveaxis(x, axis % x.ndim, -1)
    out = np.empty_like(xm)
    acc_t = _accumulator(x.dtype)
    acc = np.full(xm.shape[:-1], -np.inf, acc_t)
    for c in range(xm.shape[-1]):
        acc = log_add_exp(acc, xm[..., c].astype(acc_t))
        out[..., c] = acc
    return np.moveaxis(out, -1, axis % x.ndim)


def _logcumsumexp_vjp(b, g, x, out, axis):
    """PyTorch's logcumsumexp_backward: exp(x_i) times the reverse running sum of g / exp(out), taken in
    logs separately for the positive and the negative cotangents (no overflow)."""
    if x.type.rank == 0:
        return (g,)
    ax = axis % x.type.rank
    low = value_range(x.dtype)[0]  # torch's numeric_limits lowest: the log of a zero cotangent

    def reverse_lcse(v):
        return b.flip(b.logcumsumexp(b.flip(v, axes=[ax]), axis=ax), axes=[ax])

    log_abs = b.log(b.abs(g))
    pos = b.exp(b.add(reverse_lcse(b.sub(b.where(b.gt(g, 0), log_abs, low), out)), x))
    neg = b.exp(b.add(reverse_lcse(b.sub(b.where(b.lt(g, 0), log_abs, low), out)), x))
    return (b.sub(pos, neg),)


register(
    OpDef(
        "logcumsumexp",
        "opaque",
        1,
        _logcumsumexp_infer,
        _logcumsumexp_ref,
        {"axis": Attr("int")},
        _logcumsumexp_vjp,
        doc="running log-sum-exp along axis (out[k] = log(exp(x[0]) + ... + exp(x[k])), as PyTorch's scan)",
    )
)


def _cumarg_infer(types, axis, largest):
    (t,) = types
    check_dtype("cumarg", t, ("float", "int", "bool"))
    norm_axis("cumarg", axis, t.rank)
    return TensorType(t.shape, i64)


def _cumarg_ref(x, axis, largest):
    """The index of the running maximum (largest) or minimum along axis, as PyTorch's cummax / cummin:
    the latest of equal extremes, and a NaN takes over (the latest NaN once one was seen)."""
    if x.ndim == 0:
        return np.zeros((), np.int64)
    xm = np.moveaxis(x.astype(np.int8) if x.dtype == np.bool_ else x, axis % x.ndim, -1)
    out = np.zeros(xm.shape, np.int64)
    if not xm.shape[-1]:
        return np.moveaxis(out, -1, axis % x.ndim)
    best, arg = xm[..., 0].copy(), np.zeros(xm.shape[:-1], np.int64)
    for c in range(xm.shape[-1]):
        v = xm[..., c]
        with np.errstate(invalid="ignore"):
            wins = (v >= best) if largest else (v <= best)
        take = (v != v) | ((best == best) & wins) | (c == 0)
        best, arg = np.where(take, v, best), np.where(take, c, arg)
        out[..., c] = arg
    return np.moveaxis(out, -1, axis % x.ndim)


register(
    OpDef(
        "cumarg",
        "opaque",
        1,
        _cumarg_infer,
        _cumarg_ref,
        {"axis": Attr("int"), "largest": Attr("bool")},
        nondiff="integer result (the indices) has no gradient",
        compute_f32=True,
        doc="index of the running maximum (largest) or minimum along axis (cummax / cummin's indices: the "
        "latest of equal extremes, a NaN taking over)",
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
