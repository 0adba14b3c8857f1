"""Index math: an input read by a copy/elementwise kernel is an affine View of the output's
coordinates (offset = base + sum_d coord_d * strides[d]): the flat form of an IndexMap
(flame.ir.indexmap, where each view op's map is declared once) into a contiguous buffer. Broadcasting
gives stride 0, slice stride*step, flip a negative stride; `collapse` merges output dims that every
view walks contiguously, so the common same-shape case becomes one flat dim (offset == i)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from flame.ir.indexmap import IndexMap, contiguous_strides


@dataclass(frozen=True)
class View:
    base: int
    strides: tuple[int, ...]  # one per output dim (after collapse: one per collapsed dim)


def identity_view(out_shape: tuple[int, ...]) -> View:
    """A contiguous input with the output's element order (reshape, squeeze, same-shape operands)."""
    return View(0, contiguous_strides(out_shape))


def of_map(m: IndexMap, in_shape: tuple[int, ...]) -> View:
    """The View of an input of shape in_shape read at index map m of the output's coordinates."""
    return View(*m.flat(in_shape))


def collapse(shape: tuple[int, ...], views: list[View]) -> tuple[tuple[int, ...], list[View]]:
    """Drop size-1 output dims and merge neighbours that every view walks as one dim."""
    dims: list[tuple[int, list[int]]] = []
    for d, size in enumerate(shape):
        if size == 1:
            continue
        strides = [v.strides[d] for v in views]
        if dims and all(ps == s * size for ps, s in zip(dims[-1][1], strides)):
            dims[-1] = (dims[-1][0] * size, strides)
        else:
            dims.append((size, strides))
    new_shape = tuple(s for s, _ in dims)
    return new_shape, [View(v.base, tuple(st[k] for _, st in dims)) for k, v in enumerate(views)]


def mode(view: View, shape: tuple[int, ...]) -> str:
    """'identity' (offset == i), 'scalar' (one element for all i) or 'general' (decompose i)."""
    if all(s == 0 for s in view.strides):
        return "scalar"
    if view.base == 0 and view.strides == contiguous_strides(shape):
        return "identity"
    return "general"


def offset_expr(view: View, coord: str = "c") -> str:
    """`base + c0 * s0 + ...` over the collapsed coordinates, skipping stride-0 dims."""
    terms = [str(view.base)] if view.base else []
    terms += [f"{coord}{d} * {s}" if s != 1 else f"{coord}{d}" for d, s in enumerate(view.strides) if s]
    return " + ".join(terms) or "0"


def numel(shape) -> int:
    return math.prod(shape)
