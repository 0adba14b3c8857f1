"""Simplification rules for slabs: pieces of a tensor laid side by side along one axis. The backward of
slicing a tensor into pieces (`qkv[0], qkv[1], qkv[2]`) is a sum of zero pads, one per piece; when the
pieces tile the whole axis that sum is one `concat`, and a concat of adjacent pieces of one tensor is
that tensor. Exact, like every rule of simplify_algebra (see its module docstring)."""

from __future__ import annotations

import math

import numpy as np

from flame.ir.builder import Builder
from flame.ir.graph import Op, Value
from flame.ir.ops.elementwise import ADD
from flame.ir.ops.movement import SLICE
from flame.ir.registry import get, is_relabel

# (axis, [(start, stop, piece)]) : piece lies at [start, stop) along axis, zeros elsewhere
Slabs = tuple[int, list[tuple[int, int, Value]]]


def _zero_pad(v: Value) -> Slabs | None:
    """v = pad(x) with +0 fill along one axis: its single slab; else None."""
    op = v.producer
    if op is None or not get(op.name).pads or op.attrs["value"] != 0 or np.signbit(op.attrs["value"]):
        return None
    padded = [d for d, (lo, hi) in enumerate(op.attrs["pads"]) if lo or hi]
    if len(padded) != 1:
        return None
    (axis,) = padded
    lo = op.attrs["pads"][axis][0]
    x = op.inputs[0]
    return axis, [(lo, lo + x.shape[axis], x)]


def _sum(v: Value) -> Op | None:
    """v's producer when it is an add of two values of one shape (a sum that may be of slabs)."""
    op = v.producer
    return op if op is not None and op.name == ADD.name and op.inputs[0].shape == op.inputs[1].shape else None


def _slabs(v: Value) -> Slabs | None:
    """v as disjoint slabs along one axis: a zero pad, or a sum of such sums on the same axis. The sum's
    tree is walked with a stack (its leaves in order, left first), however deep it is."""
    got = _zero_pad(v)
    if got is not None or _sum(v) is None:
        return got
    leaves, stack = [], [v]
    while stack:
        u = stack.pop()
        got = _zero_pad(u)
        if got is not None:
            leaves.append(got)
            continue
        op = _sum(u)
        if op is None or (_zero_pad(op.inputs[1]) is None and _sum(op.inputs[1]) is None):
            return None  # a term that is no slab (found at once in a long chain of other sums)
        stack += [op.inputs[1], op.inputs[0]]
    if any(axis != leaves[0][0] for axis, _ in leaves):
        return None
    pieces = sorted((p for _, ps in leaves for p in ps), key=lambda p: p[0])
    if any(a[1] > b[0] for a, b in zip(pieces, pieces[1:])):
        return None  # overlapping slabs really add
    return leaves[0][0], pieces


def sum_of_slabs(op: Op, b: Builder) -> Value | None:
    """add(pad(a), pad(b), ...) of zero pads whose slabs tile the whole axis -> concat([a, b, ...]).

    For floats the result is concat(...) + (+0.0): in the sum each element of a piece was added to
    +0.0, which turns -0.0 into +0.0 (the add fuses into the concat's kernel). Slabs that leave a gap
    are kept as pads (the single-pad case is already one kernel)."""
    x, y = op.inputs
    if x.shape != op.out.shape or y.shape != op.out.shape:
        return None
    got = _slabs(op.out)
    if got is None:
        return None
    axis, pieces = got
    if sum(p[1] - p[0] for p in pieces) != op.out.shape[axis]:
        return None  # a gap: the pads stay
    out = b.concat(*[p[2] for p in pieces], axis=axis)
    if op.out.dtype.is_float:
        out = b.add(out, b.full(shape=(), value=0.0, dtype=op.out.dtype))
    return out


def _flat_range(v: Value) -> tuple[Value, int, int] | None:
    """v, looked at through reshapes, as the row-major range [start, stop) of a tensor t: a slice of t
    along its first axis only (step 1), or t itself."""
    while v.producer is not None and is_relabel(v.producer):
        v = v.producer.inputs[0]
    op = v.producer
    if op is None or op.name != SLICE.name:
        return v, 0, v.type.numel
    t = op.inputs[0]
    starts, stops, steps = op.attrs["starts"], op.attrs["stops"], op.attrs["steps"]
    if t.type.rank == 0 or any(s != 1 for s in steps):
        return v, 0, v.type.numel
    if any(starts[d] != 0 or stops[d] != t.shape[d] for d in range(1, t.type.rank)):
        return v, 0, v.type.numel
    inner = math.prod(t.shape[1:])
    return t, starts[0] * inner, stops[0] * inner


def concat_of_pieces(op: Op, b: Builder) -> Value | None:
    """concat(reshape(t[a:b]), reshape(t[b:c]), ...) -> reshape(t) when the pieces are adjacent ranges
    that cover t in order and the concat axis has only size-1 axes before it (so concatenating along it
    lays the pieces end to end in memory, as they lie in t)."""
    axis = op.attrs["axis"] % op.out.type.rank
    if math.prod(op.out.shape[:axis]) != 1:
        return None
    ranges = [_flat_range(v) for v in op.inputs]
    t = ranges[0][0]
    at = 0
    for src, start, stop in ranges:
        if src is not t or start != at:
            return None
        at = stop
    if at != t.type.numel or t.dtype != op.out.dtype:
        return None
    return t if t.shape == op.out.shape else b.reshape(t, shape=op.out.shape)
