"""Sampling an image or a volume at given points: torch.nn.functional.grid_sample (bilinear, nearest
or bicubic on 4-D input; trilinear ("bilinear") or nearest on 5-D input; padding zeros, border or
reflection, align_corners either way) and affine_grid, the grids of a 2-D or 3-D affine map (spatial
transformers, warping an image by a flow). Both are written over primitives: the sample is a gather
of the neighbouring pixels (voxels) weighted by the point's fractional position, so the gradient
reaches the image through the gather and the grid through the weights, as PyTorch's."""

from __future__ import annotations

import math

from flame.errors import DTypeError, ShapeError
from flame.frontend.autocast import policy
from flame.frontend.context import user_location
from flame.frontend.creation import linspace, ones
from flame.frontend.norms import kernel_dtypes, torch_dtype_name
from flame.frontend.ops import stack, where
from flame.frontend.tensor import Tensor
from flame.frontend.tensor_core import full
from flame.ir.dtypes import boolean, i64

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


def _padded(x: Tensor, size: int, padding_mode: str, align_corners: bool) -> Tensor:
    """PyTorch's compute_coordinates: pixel coordinate x reflected (reflection) and clipped to the
    pixels (border, reflection); with zeros, x as it is. The gradient passes strictly inside only
    (PyTorch's clip_coordinates: a point on the edge has none)."""
    if padding_mode == "reflection":
        x = _reflect(x, 0, 2 * (size - 1)) if align_corners else _reflect(x, -1, 2 * size - 1)
    if padding_mode in ("border", "reflection"):
        inside = (x > 0) & (x < size - 1)
        x = where(inside, x, x.clamp(0.0, float(size - 1)).detach())
    return x


_CUBIC_A = -0.75  # PyTorch's grid_sample cubic convolution parameter


def _cubic_weights(t: Tensor) -> list[Tensor]:
    """Keys' cubic convolution weights of the four taps floor(x) - 1 .. floor(x) + 2 at fraction t, as
    PyTorch's get_cubic_upsample_coefficients."""
    a = _CUBIC_A

    def near(v):  # |v| <= 1
        return ((a + 2) * v - (a + 3)) * v * v + 1

    def far(v):  # 1 < |v| < 2
        return ((a * v - 5 * a) * v + 8 * a) * v - 4 * a

    return [far(t + 1), near(t), near(1 - t), far(2 - t)]


@policy("promote", cpu="f32")  # autocast: on PyTorch's CUDA promote list (the widest input), its CPU float32 list
def grid_sample(input: Tensor, grid: Tensor, mode: str = "bilinear", padding_mode: str = "zeros",  # noqa: A002
                align_corners: bool | None = None) -> Tensor:
    """input [N, C, H, W] sampled at grid [N, Ho, Wo, 2] ((x, y) in [-1, 1], x along W): [N, C, Ho, Wo];
    or input [N, C, D, H, W] at grid [N, Do, Ho, Wo, 3] ((x, y, z), z along D): [N, C, Do, Ho, Wo].
    mode "bilinear" (trilinear on volumes), "nearest" (halves to even, as PyTorch) or "bicubic" (4-D
    only; PyTorch's cubic convolution, A = -0.75, each of the 16 taps padded on its own); padding_mode
    "zeros" (points outside read 0), "border" (the edge pixel) or "reflection"; align_corners default
    False."""
    if mode not in ("bilinear", "nearest", "bicubic"):
        raise ValueError(f"nn.functional.grid_sample(): expected mode to be 'bilinear', 'nearest' or 'bicubic', "
                         f"but got: '{mode}'")
    if padding_mode not in ("zeros", "border", "reflection"):
        raise ValueError(f"nn.functional.grid_sample(): expected padding_mode to be 'zeros', 'border', or "
                         f"'reflection', but got: '{padding_mode}'")
    d = input.ndim - 2
    if d not in (2, 3) or grid.ndim != input.ndim or grid.shape[-1] != d or grid.shape[0] != input.shape[0]:
        raise _err(f"grid_sample: expected input [N, C, H, W] and grid [N, Ho, Wo, 2], or input [N, C, D, H, W] "
                   f"and grid [N, Do, Ho, Wo, 3], got {list(input.shape)} and {list(grid.shape)}")
    if mode == "bicubic" and d != 2:
        raise _err(f"grid_sampler(): bicubic interpolation only supports 4D input, got {list(input.shape)}")
    if grid.dtype != input.dtype:
        raise DTypeError(f"grid_sample: expected scalar type {torch_dtype_name(input.dtype)} but found "
                         f"{torch_dtype_name(grid.dtype)} (grid must have input's dtype, as in PyTorch)\n"
                         f"  at {user_location()}")
    kernel_dtypes("grid_sample", "grid_sampler_2d_cpu_kernel_impl" if d == 2 else "grid_sampler3d_cpu", input)
    align = bool(align_corners)
    n, c = input.shape[:2]
    sizes = tuple(input.shape[2:])[::-1]  # along the grid's coordinates: (W, H) or (W, H, D)
    strides = [math.prod(sizes[:k]) for k in range(d)]
    out = tuple(grid.shape[1:-1])
    m = math.prod(out)
    flat = input.reshape(n, c, math.prod(sizes))

    def tap(at: list[Tensor]) -> Tensor:
        """The pixels at the integer-valued coordinates `at` [N, *out] (x, y[, z]): [N, C, *out], 0 outside."""
        inside, index = None, None
        for v, size, stride in zip(at, sizes, strides):
            ok = (v >= 0) & (v <= size - 1)
            inside = ok if inside is None else inside & ok
            term = v.clamp(0.0, float(size - 1)) * stride if stride > 1 else v.clamp(0.0, float(size - 1))
            index = term if index is None else index + term
        picked = flat.gather(2, index.to(i64).reshape(n, 1, m).expand(n, c, m)).reshape(n, c, *out)
        return where(inside.unsqueeze(1), picked, 0.0)

    if mode == "bicubic":  # taps around the unpadded point, each padded on its own (PyTorch's get_value_bounded)
        pos = [_unnormalize(grid[..., k], sizes[k], align) for k in range(2)]
        base = [p.floor().detach() for p in pos]
        weights = [_cubic_weights((p - b).unsqueeze(1)) for p, b in zip(pos, base)]
        taps = [[_padded(b + (i - 1), size, padding_mode, align).detach() for i in range(4)]
                for b, size in zip(base, sizes)]
        result = None
        for j in range(4):
            row = None
            for i in range(4):
                term = tap([taps[0][i], taps[1][j]]) * weights[0][i]
                row = term if row is None else row + term
            result = row * weights[1][j] if result is None else result + row * weights[1][j]
        return result
    pos = [_padded(_unnormalize(grid[..., k], sizes[k], align), sizes[k], padding_mode, align) for k in range(d)]
    if mode == "nearest":  # the grid stays in the graph with PyTorch's zero gradient (round's), not none
        rounded = [p.round() for p in pos]
        return where(full((), True, dtype=boolean), tap(rounded), rounded[0].unsqueeze(1))
    lows = [p.floor() for p in pos]
    fracs = [(p - low).unsqueeze(1) for p, low in zip(pos, lows)]  # the fractions carry the grid's gradient
    result = None
    for corner in range(2 ** d):
        bits = [(corner >> k) & 1 for k in range(d)]
        weight = None
        for b, f in zip(bits, fracs):
            w = f if b else 1 - f
            weight = w if weight is None else weight * w
        term = tap([low + b for low, b in zip(lows, bits)]) * weight
        result = term if result is None else result + term
    return result


# autocast: on none of PyTorch's CUDA lists; on CPU a bmm of the base grid and theta, on its CPU lower-precision list
@policy("", cpu="lower")
def affine_grid(theta: Tensor, size, align_corners: bool | None = None) -> Tensor:
    """The sampling grid of the affine maps theta for an output of `size`: theta [N, 2, 3] and size [N, C, H,
    W] give [N, H, W, 2], theta [N, 3, 4] and size [N, C, D, H, W] give [N, D, H, W, 3]; each output
    pixel's normalized (x, y[, z], 1) times theta^T (what grid_sample then reads)."""
    if not theta.dtype.is_float:
        raise ValueError(f"affine_grid: Expected theta to have floating point type, but got {theta.dtype}")
    size = [int(s) for s in size]
    if len(size) not in (4, 5):
        raise _err(f"affine_grid only supports 4D and 5D sizes, for 2D and 3D affine transforms, respectively. "
                   f"Got size {size}.")
    d = len(size) - 2
    n, spatial = size[0], size[2:]
    if theta.ndim != 3 or tuple(theta.shape) != (n, d, d + 1):
        raise _err(f"affine_grid: theta must be [N, {d}, {d + 1}] = {[n, d, d + 1]} for size {size}, got "
                   f"{list(theta.shape)}")

    def axis(k: int) -> Tensor:
        steps = linspace(-1.0, 1.0, k, dtype=theta.dtype) if k > 1 else linspace(0.0, 0.0, 1, dtype=theta.dtype)
        return steps if align_corners or k <= 1 else steps * ((k - 1) / k)

    cols = []
    for k in range(d):  # x runs along the last dim, y the one before, z the first
        dim = d - 1 - k
        shape = [1] * d
        shape[dim] = spatial[dim]
        cols.append(axis(spatial[dim]).reshape(*shape).expand(*spatial))
    base = stack([*cols, ones(*spatial, dtype=theta.dtype)], -1)
    points = math.prod(spatial)
    return (base.reshape(1, points, d + 1) @ theta.transpose(1, 2)).reshape(n, *spatial, d)
