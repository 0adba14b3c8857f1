"""Sampling an image at given points: torch.nn.functional.grid_sample (bilinear or nearest, padding
zeros, border or reflection, align_corners either way) and affine_grid, the grids of an affine map
(spatial transformers, warping an image by a flow). Both are written over primitives: the sample
is a gather of the four (or one) neighbouring pixels weighted by the point's fractional position,
so the gradient reaches the image through the gather and the grid through the weights, as
PyTorch's."""

from __future__ import annotations

from flame.errors import ShapeError
from flame.frontend.autocast import policy
from flame.frontend.context import user_location
from flame.frontend.creation import linspace, ones
from flame.frontend.ops import stack, where
from flame.frontend.tensor import Tensor
from flame.ir.dtypes import i64

__all__ = ["affine_grid", "grid_sample"]


def _err(msg: str) -> ShapeError:
    return ShapeError(f"{msg}\n  at {user_location()}")


def _unnormalize(coord: Tensor, size: int, align_corners: bool) -> Tensor:
    """[-1, 1] to pixel coordinates: -1 and 1 are the corner pixels' centres (align_corners) or their
    outer edges."""
    if align_corners:
        return (coord + 1) * ((size - 1) / 2)
    return ((coord + 1) * size - 1) / 2


def _reflect(x: Tensor, twice_low: int, twice_high: int) -> Tensor:
    """x reflected into [twice_low / 2, twice_high / 2] (PyTorch's reflect_coordinates)."""
    if twice_low == twice_high:
        return x * 0
    low, span = twice_low / 2, (twice_high - twice_low) / 2
    x = (x - low).abs()
    flips = (x / span).floor()
    extra = x - flips * span
    return where(flips % 2 == 0, extra + low, span - extra + low)


def _source(coord: Tensor, size: int, padding_mode: str, align_corners: bool) -> Tensor:
    x = _unnormalize(coord, size, align_corners)
    if padding_mode == "reflection":
        x = _reflect(x, 0, 2 * (size - 1)) if align_corners else _reflect(x, -1, 2 * size - 1)
    if padding_mode in ("border", "reflection"):
        # clipped to the pixels; the gradient passes strictly inside only (PyTorch's clip_coordinates:
        # a point on the edge has none)
        inside = (x > 0) & (x < size - 1)
        x = where(inside, x, x.clamp(0.0, float(size - 1)).detach())
    return x


@policy("promote")  # autocast: on PyTorch's promote list: the widest input
def grid_sample(input: Tensor, grid: Tensor, mode: str = "bilinear", padding_mode: str = "zeros",  # noqa: A002
                align_corners: bool | None = None) -> Tensor:
    """input [N, C, H, W] sampled at grid [N, Ho, Wo, 2] ((x, y) in [-1, 1], x along W): [N, C, Ho, Wo].
    mode "bilinear" or "nearest" (halves to even, as PyTorch); padding_mode "zeros" (points outside
    read 0), "border" (the edge pixel) or "reflection"; align_corners default False."""
    if mode not in ("bilinear", "nearest"):
        raise ValueError(f"grid_sample: mode must be 'bilinear' or 'nearest' ('bicubic' is not supported), got "
                         f"{mode!r}")
    if padding_mode not in ("zeros", "border", "reflection"):
        raise ValueError(f"grid_sample: padding_mode must be 'zeros', 'border' or 'reflection', got {padding_mode!r}")
    if input.ndim != 4 or grid.ndim != 4 or grid.shape[-1] != 2 or grid.shape[0] != input.shape[0]:
        raise _err(f"grid_sample: expected input [N, C, H, W] and grid [N, Ho, Wo, 2] (5-D volumes are not "
                   f"supported), got {list(input.shape)} and {list(grid.shape)}")
    align = bool(align_corners)
    n, c, h, w = input.shape
    ho, wo = grid.shape[1], grid.shape[2]
    x = _source(grid[..., 0], w, padding_mode, align)  # [N, Ho, Wo]
    y = _source(grid[..., 1], h, padding_mode, align)
    flat = input.reshape(n, c, h * w)

    def tap(ix: Tensor, iy: Tensor) -> tuple[Tensor, Tensor]:
        """The pixels at integer-valued (ix, iy) [N, C, Ho, Wo] (0 outside) and the inside mask."""
        inside = (ix >= 0) & (ix <= w - 1) & (iy >= 0) & (iy <= h - 1)
        at = (iy.clamp(0.0, float(h - 1)) * w + ix.clamp(0.0, float(w - 1))).to(i64)
        picked = flat.gather(2, at.reshape(n, 1, ho * wo).expand(n, c, ho * wo)).reshape(n, c, ho, wo)
        return where(inside.unsqueeze(1), picked, 0.0), inside

    if mode == "nearest":
        return tap(x.round(), y.round())[0]
    x0, y0 = x.floor(), y.floor()
    fx, fy = (x - x0).unsqueeze(1), (y - y0).unsqueeze(1)  # the fractions carry the grid's gradient
    out = None
    for dx, wx in ((0, 1 - fx), (1, fx)):
        for dy, wy in ((0, 1 - fy), (1, fy)):
            term = tap(x0 + dx, y0 + dy)[0] * (wx * wy)
            out = term if out is None else out + term
    return out


@policy("")  # autocast: on none of PyTorch's lists: its inputs' dtype
def affine_grid(theta: Tensor, size, align_corners: bool | None = None) -> Tensor:
    """The sampling grid [N, H, W, 2] of the affine maps theta [N, 2, 3] for an output of size [N, C, H,
    W]: each output pixel's normalized (x, y, 1) times theta^T (what grid_sample then reads)."""
    size = [int(s) for s in size]
    if len(size) != 4:
        raise _err(f"affine_grid: size must be [N, C, H, W] (5-D volumes are not supported), got {size}")
    n, _, h, w = size
    if theta.ndim != 3 or tuple(theta.shape) != (n, 2, 3):
        raise _err(f"affine_grid: theta must be [N, 2, 3] = {[n, 2, 3]} for size {size}, got {list(theta.shape)}")

    def axis(k: int) -> Tensor:
        steps = linspace(-1.0, 1.0, k, dtype=theta.dtype) if k > 1 else linspace(0.0, 0.0, 1, dtype=theta.dtype)
        return steps if align_corners or k <= 1 else steps * ((k - 1) / k)

    xs, ys = axis(w), axis(h)
    base = stack([xs.reshape(1, w).expand(h, w), ys.reshape(h, 1).expand(h, w), ones(h, w, dtype=theta.dtype)], -1)
    return (base.reshape(1, h * w, 3) @ theta.transpose(1, 2)).reshape(n, h, w, 2)
