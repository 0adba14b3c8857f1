"""Movement ops: views and copies that only rearrange elements."""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from flame.errors import DTypeError, ShapeError
from flame.ir.dtypes import i64
from flame.ir.indexmap import (
    as_strided_map,
    broadcast_map,
    concat_pieces,
    diagonal_map,
    flip_map,
    pad_pieces,
    permute_map,
    reshape_map,
    slice_map,
)
from flame.ir.ops._layouts import (
    as_strided_layout,
    diagonal_layout,
    expand_layout,
    permute_layout,
    reshape_layout,
    slice_layout,
    squeeze_layout,
    unsqueeze_layout,
)
from flame.ir.ops._shapes import broadcast_shapes, norm_axes, norm_axis
from flame.ir.registry import Attr, OpDef, View, register


def _reshaped(x, out, **_):
    return x.reshape(out)


_RELABEL = View(reshape_map, relabel=True, strided=_reshaped, layout=reshape_layout)  # contiguous bytes, another shape


def _reshape_infer(types, shape):
    (t,) = types
    if math.prod(shape) != t.numel or any(s < 0 for s in shape):
        raise ShapeError(f"reshape {t} -> {list(shape)}: element counts differ "
                         f"({t.numel} vs {math.prod(shape)})")
    return t.with_shape(shape)


RESHAPE = register(OpDef("reshape", "movement", 1, _reshape_infer, lambda x, shape: np.reshape(x, shape),
                          {"shape": Attr("ints")}, lambda b, g, x, out, shape: (b.reshape(g, shape=x.shape),),
                          view=_RELABEL))


def _broadcast_infer(types, shape):
    (t,) = types
    got = broadcast_shapes("broadcast_to", [t, t.with_shape(shape)])
    if got != tuple(shape):
        raise ShapeError(f"broadcast_to {t} -> {list(shape)}: not a broadcast of the input")
    return t.with_shape(shape)


register(OpDef("broadcast_to", "movement", 1, _broadcast_infer,
               lambda x, shape: np.broadcast_to(x, shape).copy(), {"shape": Attr("ints")},
               lambda b, g, x, out, shape: (b.sum_to(g, x.shape),),
               view=View(broadcast_map, strided=lambda x, out, shape: np.broadcast_to(x, out), layout=expand_layout)))


def _permute_infer(types, perm):
    (t,) = types
    if sorted(perm) != list(range(t.rank)):
        raise ShapeError(f"permute {t}: perm {list(perm)} is not a permutation of {t.rank} axes")
    return t.with_shape(tuple(t.shape[p] for p in perm))


def _permute_vjp(b, g, x, out, perm):
    inverse = [0] * len(perm)  # (np.argsort of the permutation, without NumPy's call per op)
    for i, p in enumerate(perm):
        inverse[p] = i
    return (b.permute(g, perm=tuple(inverse)),)


register(OpDef("permute", "movement", 1, _permute_infer, lambda x, perm: np.transpose(x, perm),
               {"perm": Attr("ints")}, _permute_vjp,
               view=View(permute_map, perm=lambda op: op.attrs["perm"],
                         strided=lambda x, out, perm: x.transpose(perm), layout=permute_layout)))


def slice_len(start: int, stop: int, step: int) -> int:
    return max(0, -(-(stop - start) // step))


def _slice_infer(types, starts, stops, steps):
    (t,) = types
    if not len(starts) == len(stops) == len(steps) == t.rank:
        raise ShapeError(f"slice {t}: starts/stops/steps need one entry per axis ({t.rank})")
    for d, (a, z, s) in enumerate(zip(starts, stops, steps)):
        if s <= 0 or not 0 <= a <= t.shape[d] or not a <= z <= t.shape[d]:
            raise ShapeError(f"slice {t}: axis {d} range {a}:{z}:{s} is invalid "
                             f"(need 0 <= start <= stop <= {t.shape[d]}, step > 0)")
    return t.with_shape(tuple(slice_len(a, z, s) for a, z, s in zip(starts, stops, steps)))


def _slice_ref(x, starts, stops, steps):
    return x[tuple(slice(a, z, s) for a, z, s in zip(starts, stops, steps))]


def place_strided(b, v, axis: int, start: int, step: int, length: int):
    """v's entries along `axis` moved to start, start + step, ... of a zero tensor `length` long there
    (the adjoint of a strided slice; a transposed convolution's decomposition places its slabs so):
    each entry padded with zeros to `step` (start % step before it, the rest after: unsqueeze + pad +
    reshape), those past `length` cut away, then zero padding before and after. Every other entry
    of x[..., 1::2]'s gradient is so one pad and reshape, with nothing cut or padded after."""
    n = v.shape[axis]
    if step > 1 and n > 0:
        v = b.unsqueeze(v, axes=[axis + 1])
        pads = [(0, 0)] * v.type.rank
        pads[axis + 1] = (start % step, step - 1 - start % step)
        start -= start % step
        v = b.pad(v, pads=pads, value=0)
        shape = list(v.shape)
        v = b.reshape(v, shape=shape[:axis] + [n * step] + shape[axis + 2:])
    hi = length - start - v.shape[axis]
    if hi < 0:
        stops = list(v.shape)
        stops[axis] = length - start
        v = b.slice(v, starts=[0] * v.type.rank, stops=stops, steps=[1] * v.type.rank)
        hi = 0
    if start or hi:
        pads = [(0, 0)] * v.type.rank
        pads[axis] = (start, hi)
        v = b.pad(v, pads=pads, value=0)
    return v


def _slice_vjp(b, g, x, out, starts, stops, steps):
    for d, (a, s) in enumerate(zip(starts, steps)):  # scatter g back into zeros, one axis at a time
        g = place_strided(b, g, d, a, s, x.shape[d])
    return (g,)


SLICE = register(OpDef("slice", "movement", 1, _slice_infer, _slice_ref,
                       {"starts": Attr("ints"), "stops": Attr("ints"), "steps": Attr("ints")}, _slice_vjp,
                       view=View(slice_map, strided=lambda x, out, **attrs: _slice_ref(x, **attrs),
                                 layout=slice_layout)))


def _diagonal_infer(types, offset, axis1, axis2):
    (t,) = types
    if not (0 <= axis1 < t.rank and 0 <= axis2 < t.rank and axis1 != axis2):
        raise ShapeError(f"diagonal {t}: axis1 {axis1} and axis2 {axis2} must be two axes of the input")
    rows, cols = t.shape[axis1], t.shape[axis2]
    n = max(0, min(rows - max(-offset, 0), cols - max(offset, 0)))
    return t.with_shape(tuple(s for d, s in enumerate(t.shape) if d not in (axis1, axis2)) + (n,))


def _diagonal_view(x, out, offset, axis1, axis2):
    """The diagonal sharing x's memory (NumPy's is a read-only view, torch's is writable where x is)."""
    d = x.diagonal(offset, axis1, axis2)
    if isinstance(d, np.ndarray) and not d.flags.writeable and x.flags.writeable:
        d.flags.writeable = True
    return d


def _diagonal_vjp(b, g, x, out, offset, axis1, axis2):
    """g on the diagonal of zeros: each plane laid out flat takes g at start, start + cols + 1, ...
    (place_strided, as a strided slice's gradient), then the plane's two dims go back to their axes."""
    if out.shape[-1] == 0:
        return (b.zeros_like(x),)
    rank, rows, cols = x.type.rank, x.shape[axis1], x.shape[axis2]
    rest = [d for d in range(rank) if d not in (axis1, axis2)]
    flat = place_strided(b, g, rank - 2, max(-offset, 0) * cols + max(offset, 0), cols + 1, rows * cols)
    planes = b.reshape(flat, shape=[x.shape[d] for d in rest] + [rows, cols])
    order = rest + [axis1, axis2]
    perm = [order.index(d) for d in range(rank)]
    return (planes if perm == list(range(rank)) else b.permute(planes, perm=perm),)


DIAGONAL = register(OpDef("diagonal", "movement", 1, _diagonal_infer,
                          lambda x, offset, axis1, axis2: np.diagonal(x, offset, axis1, axis2).copy(),
                          {"offset": Attr("int"), "axis1": Attr("int"), "axis2": Attr("int")}, _diagonal_vjp,
                          view=View(diagonal_map, strided=_diagonal_view, layout=diagonal_layout)))


def _as_strided_infer(types, size, stride, offset):
    (t,) = types
    if t.rank != 1:
        raise ShapeError(f"as_strided {t}: reads a flat storage (a 1-d input)")
    if len(size) != len(stride) or any(n < 0 for n in size) or any(s < 0 for s in stride) or offset < 0:
        raise ShapeError(f"as_strided {t}: size {list(size)}, stride {list(stride)} and offset {offset} must be "
                         f"as many non-negative numbers")
    if all(size) and offset + sum((n - 1) * s for n, s in zip(size, stride)) >= t.shape[0]:
        raise ShapeError(f"as_strided {t}: size {list(size)}, stride {list(stride)} and offset {offset} read past "
                         f"the storage's {t.shape[0]} elements")
    return t.with_shape(tuple(size))


def _as_strided_view(x, out, size, stride, offset):
    """x[offset + sum_k stride_k * c_k] at coordinates c, sharing x's memory (elements may repeat)."""
    step = x.strides[0]
    return np.lib.stride_tricks.as_strided(x[offset:], tuple(size), tuple(s * step for s in stride))


def _as_strided_vjp(b, g, x, out, size, stride, offset):
    """Each element of g added into the storage element it reads (an element read twice gets both)."""
    pos = b.const(offset, i64)
    for d, (n, s) in enumerate(zip(size, stride)):
        shape = [1] * len(size)
        shape[d] = n
        pos = b.add(pos, b.reshape(b.mul(b.arange(start=0, stop=n, step=1, dtype=i64), s), shape=shape))
    n = math.prod(size)
    idx = b.reshape(b.broadcast_to(pos, shape=tuple(size)) if size else pos, shape=[n])
    return (b.scatter_add(b.zeros_like(x), idx, b.reshape(g, shape=[n]), axis=0),)


AS_STRIDED = register(OpDef("as_strided", "movement", 1, _as_strided_infer,
                            lambda x, **attrs: _as_strided_view(x, None, **attrs).copy(),
                            {"size": Attr("ints"), "stride": Attr("ints"), "offset": Attr("int")}, _as_strided_vjp,
                            view=View(as_strided_map, strided=_as_strided_view,
                                      layout=as_strided_layout)))


def _concat_infer(types, axis):
    t0 = types[0]
    ax = norm_axis("concat", axis, t0.rank)
    for t in types[1:]:
        if t.dtype != t0.dtype:
            raise DTypeError(f"concat {t0}, {t}: dtypes differ")
        if t.rank != t0.rank or any(a != c for i, (a, c) in enumerate(zip(t.shape, t0.shape)) if i != ax):
            raise ShapeError(f"concat along axis {axis}: {t0} and {t} differ off that axis")
    shape = list(t0.shape)
    shape[ax] = sum(t.shape[ax] for t in types)
    return t0.with_shape(tuple(shape))


def _concat_vjp(b, g, *xs_out, axis):
    xs = xs_out[:-1]
    ax = axis % g.type.rank
    grads, at = [], 0
    for x in xs:
        starts, stops = [0] * g.type.rank, list(g.shape)
        starts[ax], stops[ax] = at, at + x.shape[ax]
        grads.append(b.slice(g, starts=starts, stops=stops, steps=[1] * g.type.rank))
        at += x.shape[ax]
    return tuple(grads)


register(OpDef("concat", "movement", -1, _concat_infer, lambda *xs, axis: np.concatenate(xs, axis=axis),
               {"axis": Attr("int")}, _concat_vjp, pieces=concat_pieces))


def _flip_infer(types, axes):
    norm_axes("flip", axes, types[0].rank)
    return types[0]


register(OpDef("flip", "movement", 1, _flip_infer, lambda x, axes: np.flip(x, axis=tuple(axes)).copy(),
               {"axes": Attr("ints")}, lambda b, g, x, out, axes: (b.flip(g, axes=axes),),
               view=View(flip_map)))


def _squeeze_infer(types, axes):
    (t,) = types
    ax = norm_axes("squeeze", axes, t.rank)
    if any(t.shape[a] != 1 for a in ax):
        raise ShapeError(f"squeeze {t}: axes {list(axes)} must all have size 1")
    return t.with_shape(tuple(s for i, s in enumerate(t.shape) if i not in ax))


def _unsqueeze_infer(types, axes):
    (t,) = types
    rank = t.rank + len(axes)
    ax = norm_axes("unsqueeze", axes, rank)
    it = iter(t.shape)
    return t.with_shape(tuple(1 if i in ax else next(it) for i in range(rank)))


_to_input_shape = lambda b, g, x, out, axes: (b.reshape(g, shape=x.shape),)  # noqa: E731
register(OpDef("squeeze", "movement", 1, _squeeze_infer,
               lambda x, axes: np.squeeze(x, axis=tuple(axes)), {"axes": Attr("ints")}, _to_input_shape,
               view=dataclasses.replace(_RELABEL, layout=squeeze_layout)))
register(OpDef("unsqueeze", "movement", 1, _unsqueeze_infer,
               lambda x, axes: np.expand_dims(x, axis=tuple(axes)), {"axes": Attr("ints")},
               _to_input_shape, view=dataclasses.replace(_RELABEL, layout=unsqueeze_layout)))


def _pad_infer(types, pads, value):
    (t,) = types
    if len(pads) != t.rank or any(len(p) != 2 or p[0] < 0 or p[1] < 0 for p in pads):
        raise ShapeError(f"pad {t}: pads {list(pads)} need one non-negative (lo, hi) pair per axis")
    return t.with_shape(tuple(s + lo + hi for s, (lo, hi) in zip(t.shape, pads)))


def _pad_vjp(b, g, x, out, pads, value):
    starts = [lo for lo, _ in pads]
    stops = [lo + s for (lo, _), s in zip(pads, x.shape)]
    return (b.slice(g, starts=starts, stops=stops, steps=[1] * len(pads)),)


register(OpDef("pad", "movement", 1, _pad_infer,
               lambda x, pads, value: np.pad(x, pads, constant_values=value) if pads else x.copy(),
               {"pads": Attr("pairs"), "value": Attr("number", 0)}, _pad_vjp, pads=True,
               pieces=pad_pieces))
