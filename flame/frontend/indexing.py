"""Tensor.__getitem__: ints, slices (any step, negative too), None, Ellipsis, and one integer tensor
(index_select). Built from slice / flip / squeeze / unsqueeze / index_select primitives."""

from __future__ import annotations

from flame.errors import ShapeError
from flame.frontend.context import user_location
from flame.frontend.dispatch import apply


def _expand_ellipsis(key: tuple, rank: int) -> tuple:
    n_real = sum(1 for k in key if k is not None and k is not Ellipsis)
    if sum(1 for k in key if k is Ellipsis) > 1:
        raise ShapeError("an index can only have one ellipsis")
    if any(k is Ellipsis for k in key):  # `in`/.index() would call Tensor.__eq__ on tensor indices
        i = next(j for j, k in enumerate(key) if k is Ellipsis)
        key = key[:i] + (slice(None),) * (rank - n_real) + key[i + 1:]
    return key + (slice(None),) * (rank - sum(1 for k in key if k is not None))


def getitem(t, key):
    from flame.frontend.tensor import Tensor

    if not isinstance(key, tuple):
        key = (key,)
    key = _expand_ellipsis(key, t.ndim)
    real = [k for k in key if k is not None]
    if len(real) > t.ndim:
        raise ShapeError(f"too many indices for a tensor of shape {list(t.shape)}\n  at {user_location()}")
    starts, stops, steps, flips, drop, tensor_idx = [], [], [], [], [], []
    for axis, (k, n) in enumerate(zip(real, t.shape)):
        if isinstance(k, Tensor):
            tensor_idx.append((axis, k))
            k = slice(None)
        if isinstance(k, int):
            if not -n <= k < n:
                raise ShapeError(f"index {k} is out of bounds for axis {axis} of size {n}\n  at {user_location()}")
            k = k % n
            starts.append(k), stops.append(k + 1), steps.append(1)
            drop.append(axis)
            continue
        if not isinstance(k, slice):
            raise ShapeError(f"unsupported index {k!r}")
        a, z, s = k.indices(n)
        if s < 0:
            flips.append(axis)
            a, z, s = n - 1 - a, n - 1 - z, -s  # the same elements, read from the flipped axis
        starts.append(a), stops.append(max(a, z)), steps.append(s)
    out = t
    if flips:
        out = apply("flip", out, axes=flips)
    if (starts, stops, steps) != ([0] * t.ndim, list(t.shape), [1] * t.ndim):
        out = apply("slice", out, starts=starts, stops=stops, steps=steps)
    for axis, idx in tensor_idx:
        if idx.ndim != 1:
            raise ShapeError("only 1-D integer tensors are supported as indices")
        out = apply("index_select", out, idx, axis=axis)
    if drop:
        out = apply("squeeze", out, axes=drop)
    # re-insert the None axes at their positions in the result
    pos, news = 0, []
    for k in key:
        if k is None:
            news.append(pos)
            pos += 1
        elif not isinstance(k, int):
            pos += 1
    if news:
        out = apply("unsqueeze", out, axes=news)
    return out
