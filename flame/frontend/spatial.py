"""What the spatial functions of flame.nn.functional share (frontend/conv.py, pooling.py, resample.py):
PyTorch's int-or-tuple arguments (ntuple), an unbatched input seen as [N, C, *S], padding of the
spatial dims, and shape errors that name the user's line."""

from __future__ import annotations

import numpy as np

from flame.errors import ShapeError
from flame.frontend.context import user_location
from flame.frontend.dispatch import apply
from flame.frontend.tensor import Tensor


def _err(msg: str) -> ShapeError:
    return ShapeError(f"{msg}\n  at {user_location()}")


def ntuple(v, d: int, what: str, name: str) -> tuple[int, ...]:
    """An int or a sequence of d ints (PyTorch's _ntuple), checked."""
    if isinstance(v, (int, np.integer)) and not isinstance(v, bool):
        return (int(v),) * d
    t = tuple(int(x) for x in v)
    if len(t) == 1:
        t = t * d
    if len(t) != d:
        raise _err(f"{name}: {what} must be an int or {d} ints, got {v!r}")
    return t


def _batched(name: str, x: Tensor, d: int) -> tuple[Tensor, bool]:
    """x as [N, C, *S] with d spatial dims; an unbatched [C, *S] input gets N = 1 (and loses it after)."""
    if x.ndim == d + 1:
        return x.unsqueeze(0), True
    if x.ndim != d + 2:
        raise _err(f"{name}: expected a {d + 1}-D (unbatched) or {d + 2}-D (batched) input, got "
                   f"{x.dtype}{list(x.shape)}")
    return x, False


def _pad_spatial(x: Tensor, pads, value) -> Tensor:
    if not any(lo or hi for lo, hi in pads):
        return x
    return apply("pad", x, pads=[(0, 0), (0, 0)] + [tuple(p) for p in pads], value=value)
