"""Shape-rule helpers shared by the op families."""

from __future__ import annotations

from flame.errors import ShapeError
from flame.ir.types import TensorType


def broadcast_shapes(op: str, types: list[TensorType]) -> tuple[int, ...]:
    """NumPy broadcasting of several shapes; ShapeError naming every operand when they don't fit."""
    rank = max((t.rank for t in types), default=0)
    out = []
    for i in range(rank):
        dims = {t.shape[i - rank + t.rank] for t in types if i - rank + t.rank >= 0}
        dims.discard(1)
        if len(dims) > 1:
            shown = ", ".join(str(t) for t in types)
            raise ShapeError(f"{op} {shown}: shapes do not broadcast (dimension {i - rank} has sizes "
                             f"{sorted(dims)})")
        out.append(dims.pop() if dims else 1)
    return tuple(out)


def norm_axis(op: str, axis: int, rank: int) -> int:
    if not -max(rank, 1) <= axis < max(rank, 1):
        raise ShapeError(f"{op}: axis {axis} is out of range for a rank-{rank} tensor")
    return axis % max(rank, 1)


def norm_axes(op: str, axes: tuple[int, ...], rank: int) -> tuple[int, ...]:
    out = tuple(sorted(norm_axis(op, a, rank) for a in axes))
    if len(set(out)) != len(out):
        raise ShapeError(f"{op}: repeated axis in {list(axes)}")
    return out
