"""PyTorch's layout rules for the view ops (their View trait's `layout`): the strides and offset, in
elements, PyTorch gives a view from its input's. Where the elements alone fix a stride (a dim of more
than one element, of a tensor that has elements) every rule agrees with the view's memory; the rules
matter for dims of size 1 and tensors with no element, where each PyTorch op keeps its own convention
(unsqueeze's new dim strides over the dim after it, expand keeps a size-1 dim's stride, a slice starts
at its start even where it is empty)."""

from __future__ import annotations

import math


def contiguous_strides(shape) -> tuple[int, ...]:
    """Row-major strides, a dim of size 0 counted as 1 (PyTorch's contiguous strides)."""
    out, s = [], 1
    for n in reversed(shape):
        out.append(s)
        s *= max(n, 1)
    return tuple(reversed(out))


def view_strides(shape, strides, new_shape) -> list[int] | None:
    """The strides of `shape`/`strides` seen as `new_shape` without a copy, or None where no such view
    exists (PyTorch's computeStride, the rule of view and reshape: each run of dims that are contiguous in
    memory splits or merges only within itself; a tensor with no element gets contiguous strides)."""
    if math.prod(shape) == 0 or not shape:
        return list(contiguous_strides(new_shape))
    out = [0] * len(new_shape)
    view_d, base = len(new_shape) - 1, strides[-1]
    numel = view_numel = 1
    for d in range(len(shape) - 1, -1, -1):
        numel *= shape[d]
        if d == 0 or (shape[d - 1] != 1 and strides[d - 1] != numel * base):
            while view_d >= 0 and (view_numel < numel or new_shape[view_d] == 1):
                out[view_d] = view_numel * base
                view_numel *= new_shape[view_d]
                view_d -= 1
            if view_numel != numel:
                return None
            if d > 0:
                base, numel, view_numel = strides[d - 1], 1, 1
    return out if view_d == -1 else None


def reshape_layout(shape, strides, out, /, **_) -> tuple[int, list[int]]:
    return 0, view_strides(shape, strides, out) or list(contiguous_strides(out))


def squeeze_layout(shape, strides, out, /, axes) -> tuple[int, list[int]]:
    """The dims of size 1 dropped; the others keep their strides."""
    drop = {a % len(shape) for a in axes}
    return 0, [s for d, s in enumerate(strides) if d not in drop]


def unsqueeze_layout(shape, strides, out, /, axes) -> tuple[int, list[int]]:
    """Each new dim (inserted in increasing order) strides over the dim it comes before: that dim's size
    times its stride, or 1 as the last dim (PyTorch's inferUnsqueezeGeometry)."""
    shape, strides = list(shape), list(strides)
    for a in sorted(a % len(out) for a in axes):
        strides.insert(a, 1 if a >= len(shape) else shape[a] * strides[a])
        shape.insert(a, 1)
    return 0, strides


def permute_layout(shape, strides, out, /, perm) -> tuple[int, list[int]]:
    return 0, [strides[p] for p in perm]


def expand_layout(shape, strides, out, /, **_) -> tuple[int, list[int]]:
    """PyTorch's inferExpandGeometry: a dim keeps its stride where its size stays, a dim of size 1 that
    grows gets 0; a new leading dim gets 0, or where it has size 1 the size times the stride of the dim
    after it (0 after a 0-d input)."""
    lead = len(out) - len(shape)
    got = [0] * len(out)
    for i in range(len(out) - 1, -1, -1):
        d = i - lead
        n, s = (shape[d], strides[d]) if d >= 0 else (1, out[i + 1] * got[i + 1] if i + 1 < len(out) else 0)
        got[i] = 0 if n != out[i] else s
    return 0, got


def slice_layout(shape, strides, out, /, starts, stops, steps) -> tuple[int, list[int]]:
    """The first element at the starts (an empty slice's too); the strides times the steps."""
    return sum(a * s for a, s in zip(starts, strides)), [s * k for s, k in zip(strides, steps)]


def as_strided_layout(shape, strides, out, /, size, stride, offset) -> tuple[int, list[int]]:
    """The given strides and offset, in elements of the flat input."""
    step = strides[0] if strides else 1
    return offset * step, [s * step for s in stride]


def diagonal_layout(shape, strides, out, /, offset, axis1, axis2) -> tuple[int, list[int]]:
    """The other dims keep their strides; the diagonal's dim strides over both planes' (the sum of
    axis1's and axis2's); its first element is offset along axis2 (axis1 for a negative offset) only where
    the diagonal has an element (PyTorch's diagonal: an empty one starts at the input's first)."""
    kept = [s for d, s in enumerate(strides) if d not in (axis1, axis2)]
    moved = 0 if out[-1] == 0 else offset * strides[axis2] if offset >= 0 else -offset * strides[axis1]
    return moved, kept + [strides[axis1] + strides[axis2]]
