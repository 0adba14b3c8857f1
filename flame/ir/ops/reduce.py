"""Reductions over any set of axes, with keepdim. An empty `axes` list reduces nothing (the frontend
spells "all axes" out explicitly, so printed IR is unambiguous)."""

from __future__ import annotations

import numpy as np

from flame.errors import ShapeError
from flame.ir.dtypes import i64
from flame.ir.ops._shapes import norm_axes, norm_axis
from flame.ir.registry import Attr, OpDef, Reduce, check_dtype, register
from flame.ir.types import TensorType

_AXES = {"axes": Attr("ints"), "keepdim": Attr("bool", False)}


def reduced_shape(shape, axes, keepdim):
    return tuple(1 if i in axes else s for i, s in enumerate(shape) if keepdim or i not in axes)


def _reduce_infer(name, kinds, needs_items=False):
    def infer(types, axes, keepdim):
        (t,) = types
        check_dtype(name, t, kinds)
        ax = norm_axes(name, axes, t.rank)
        if needs_items and t.rank and any(t.shape[a] == 0 for a in ax):
            raise ShapeError(f"{name} over a zero-size axis of {t}: the reduction has no identity")
        return TensorType(reduced_shape(t.shape, ax, keepdim), t.dtype)
    return infer


def _np_axes(x, axes):
    return tuple(a % x.ndim for a in axes) if x.ndim else ()  # a 0-d tensor reduces to itself


def _sum_vjp(b, g, x, out, axes, keepdim):
    return (b.expand_reduced(g, x.shape, _np_axes_v(x, axes), keepdim),)


def _mean_vjp(b, g, x, out, axes, keepdim):
    ax = _np_axes_v(x, axes)
    n = int(np.prod([x.shape[a] for a in ax])) if ax else 1
    return (b.expand_reduced(b.mul(g, 1.0 / max(n, 1)), x.shape, ax, keepdim),)


def _extreme_vjp(b, g, x, out, axes, keepdim):
    # the gradient is shared evenly among the elements that attain the extreme (as torch.amax)
    ax = _np_axes_v(x, axes)
    hit = b.cast(b.eq(x, b.expand_reduced(out, x.shape, ax, keepdim)), dtype=x.dtype)
    count = b.reduce_sum(hit, axes=ax, keepdim=True)
    share = b.div(b.expand_reduced(g, x.shape, ax, keepdim), b.broadcast_to(count, shape=x.shape))
    return (b.mul(hit, share),)


def _np_axes_v(v, axes):
    return tuple(sorted(a % v.type.rank for a in axes)) if v.type.rank else ()


def _declare(name, np_fn, vjp, kinds, identity, needs_items=False, autocast="", autocast_cpu=None, regroups=False):
    def ref(x, axes, keepdim):
        x = np.asarray(x)
        if identity == "zero" and not x.flags.c_contiguous:  # NumPy adds in an order its input's strides
            x = np.array(x, order="C")  # choose: a view (a permuted broadcast) and its values copied sum alike
        return np_fn(x, axis=_np_axes(x, axes), keepdims=keepdim)
    return register(OpDef(name, "reduction", 1, _reduce_infer(name, kinds, needs_items), ref, dict(_AXES), vjp,
                          compute_f32=True, reduction=Reduce(identity, regroups=regroups), autocast=autocast,
                          autocast_cpu=autocast_cpu,
                          accumulates=identity == "zero"))


# under CUDA autocast a sum runs in f32 (on PyTorch's CUDA float32 list; on none of its CPU lists); a mean
# is on none of its lists and keeps its input's dtype (it still accumulates in f32 inside the kernel:
# compute_f32). Max and min only pick an element, so they may also run in stages: a row stage in the
# kernel computing the input, then the rest (passes/prepare_fusion.py)
REDUCE_SUM = _declare("reduce_sum", np.sum, _sum_vjp, ("float", "int"), "zero", autocast="f32",
                      autocast_cpu="")
_declare("reduce_mean", np.mean, _mean_vjp, ("float",), "zero")
_declare("reduce_max", np.max, _extreme_vjp, ("float", "int"), "lowest", needs_items=True, regroups=True)
_declare("reduce_min", np.min, _extreme_vjp, ("float", "int"), "highest", needs_items=True, regroups=True)


def _argmax_infer(types, axis, keepdim):
    (t,) = types
    check_dtype("argmax", t, ("float", "int"))
    a = norm_axis("argmax", axis, t.rank)
    if t.rank and t.shape[a] == 0:
        raise ShapeError(f"argmax over a zero-size axis of {t}")
    return TensorType(reduced_shape(t.shape, (a,), keepdim), i64)


def _argmax_ref(x, axis, keepdim):
    return np.argmax(x, axis=axis % max(x.ndim, 1), keepdims=keepdim).astype(np.int64)


register(OpDef("argmax", "reduction", 1, _argmax_infer, _argmax_ref,
               {"axis": Attr("int"), "keepdim": Attr("bool", False)},
               nondiff="integer result has no gradient", compute_f32=True,
               reduction=Reduce("lowest", index=True)))
