"""Fractional max pooling (PyTorch's fractional_max_pool2d/3d, Graham 2014): one window of kernel_size per
output element, at pseudo-random starts drawn per (batch, channel) plane from a sample u in [0, 1) per
axis (PyTorch's generate_intervals, in the input's dtype):

    alpha = (input - pool) / (output - 1)
    start[i] = floor((i + u) * alpha) - floor(u * alpha),   start[output - 1] = input - pool

The starts are tensors (the samples come from flame's RNG, or from `_random_samples`), so each axis's
windows are gathered (gather's gradient sums back into the input) and each window's first maximum in
row-major order (the last NaN: PyTorch's scan, val > max or isnan) is picked; with return_indices, its
flat position in the input plane. The samples' axes are PyTorch's: for 2-D, u[..., 0] spaces the width
and u[..., 1] the height; for 3-D, u[..., 0], [1], [2] space time, height and width."""

from __future__ import annotations

import numpy as np

from flame.errors import ShapeError
from flame.frontend.context import user_location
from flame.frontend.creation import arange, rand, zeros
from flame.frontend.dispatch import apply
from flame.frontend.pooling import _first_max_at
from flame.frontend.spatial import ntuple
from flame.frontend.tensor import Tensor
from flame.frontend.views import new_tensor
from flame.ir.dtypes import i64

__all__ = ["fractional_max_pool2d", "fractional_max_pool3d"]

_AXIS_NAMES = {2: ("height", "width"), 3: ("time", "height", "width")}


class FractionalPoolError(ShapeError, RuntimeError):
    """A fractional max pooling whose sizes or random samples do not fit its input (PyTorch raises
    RuntimeError)."""


def _raise(msg: str) -> None:
    raise FractionalPoolError(f"{msg}\n  at {user_location()}")


def _output_size(name: str, x: Tensor, d: int, output_size, output_ratio) -> tuple[int, ...]:
    if output_size is None and output_ratio is None:
        raise ValueError(f"{name} requires specifying either an output_size or an output_ratio")
    if output_size is not None:
        return ntuple(output_size, d, "output_size", name)
    if d == 2 and not isinstance(output_ratio, (int, float)) and len(output_ratio) > 2:
        raise ValueError(f"{name} requires output_ratio to either be a single Int or tuple of Ints.")
    ratio = (output_ratio,) * d if isinstance(output_ratio, (int, float)) else tuple(output_ratio)
    ratio = ratio * d if len(ratio) == 1 else ratio
    return tuple(int(n * r) for n, r in zip(x.shape[x.ndim - d:], ratio))


def _starts(u: Tensor, n: int, o: int, k: int) -> Tensor:
    """PyTorch's generate_intervals for one axis: [N, C, o] int64 window starts from u [N, C]."""
    last = arange(o, dtype=i64) == o - 1
    if o == 1:
        return zeros(*u.shape, 1, dtype=i64) + (n - k)
    np_dt = u.dtype.np_dtype
    alpha = float(np_dt.type(n - k) / np_dt.type(o - 1))  # rounded in the input's dtype, as PyTorch's scalar_t
    uu = u.unsqueeze(-1)
    i = arange(o, dtype=u.dtype)
    s = ((i + uu) * alpha).floor() - (uu * alpha).floor()
    return apply("where", last, zeros((), dtype=i64) + (n - k), s.to(i64))


def _gather_windows(x: Tensor, idx: list[Tensor], out, k) -> Tensor:
    """x [N, C, *S] read at each axis's window elements idx[a] ([N, C, o_a, k_a]): [N, C, *out, prod(k)],
    the window's elements in row-major order."""
    d, y = len(idx), x
    for a in range(d):
        dim = 2 + 2 * a  # the axes before a are already split into (o, k)
        flat = idx[a].reshape(*idx[a].shape[:2], *([1] * (dim - 2)), out[a] * k[a], *([1] * (y.ndim - dim - 1)))
        shape = list(y.shape)
        shape[dim] = out[a] * k[a]
        y = y.gather(dim, flat.broadcast_to(tuple(shape)))
        y = y.reshape(*y.shape[:dim], out[a], k[a], *y.shape[dim + 1:])
    perm = [0, 1, *range(2, 2 + 2 * d, 2), *range(3, 3 + 2 * d, 2)]
    return y.permute(*perm).reshape(*y.shape[:2], *out, int(np.prod(k)))


def _plane_positions(idx: list[Tensor], sizes, out, k) -> Tensor:
    """The flat input-plane position of every window element, shaped as _gather_windows' result."""
    d = len(idx)
    pos = None
    for a in range(d):
        stride = int(np.prod(sizes[a + 1:], dtype=np.int64))
        shape = [*idx[a].shape[:2]] + [1] * (2 * d)
        shape[2 + 2 * a], shape[3 + 2 * a] = out[a], k[a]
        term = idx[a].reshape(*shape) * stride
        pos = term if pos is None else pos + term
    perm = [0, 1, *range(2, 2 + 2 * d, 2), *range(3, 3 + 2 * d, 2)]
    full = tuple(pos.shape[:2]) + tuple(v for a in range(d) for v in (out[a], k[a]))
    return pos.broadcast_to(full).permute(*perm).reshape(*full[:2], *out, int(np.prod(k)))


def _samples(name: str, x: Tensor, d: int, samples) -> Tensor:
    """PyTorch's samples [N, C, d] (drawn from flame's RNG when not given), checked, in x's dtype."""
    n, c = x.shape[0], x.shape[1]
    if samples is None:
        return rand(n, c, d, dtype=x.dtype)
    samples = samples if isinstance(samples, Tensor) else Tensor(np.asarray(samples))
    if samples.ndim != 3:
        _raise(f"{name}: expected _random_samples of 3 dims [N, C, {d}], got {list(samples.shape)}")
    if samples.shape[2] != d:
        _raise(f"Expect _random_samples.size(2) equals to {d}; got {samples.shape[2]}.")
    if samples.shape[0] < n:
        _raise("Expect _random_samples.size(0) no less then input batch size.")
    if samples.shape[1] != c:
        _raise("Expect _random_samples.size(1) equals to input channel size.")
    return samples[:n].detach().to(x.dtype)


def _fractional(d: int, input: Tensor, kernel_size, output_size, output_ratio, return_indices,  # noqa: A002
                _random_samples):
    name = f"fractional_max_pool{d}d"
    out = _output_size(name, input, d, output_size, output_ratio)
    k = ntuple(kernel_size, d, "kernel_size", name)
    if input.ndim not in (d + 1, d + 2):
        _raise(f"{name}(): Expected {d + 1}D or {d + 2}D tensor, but got: {list(input.shape)}")
    unbatched = input.ndim == d + 1
    x = input.unsqueeze(0) if unbatched else input
    sizes = tuple(x.shape[2:])
    where = f"{name}()" if d == 2 else f"{name}_out()"
    for axis, n, o, kk in zip(_AXIS_NAMES[d], sizes, out, k):
        if o + kk - 1 > n:
            _raise(f"{where}: pool {axis} {kk} too large relative to input {axis} {n}")
    u = _samples(name, x, d, _random_samples)
    if 0 in out or 0 in x.shape[:2]:
        y = zeros(*x.shape[:2], *out, dtype=x.dtype)
        ys = (y, zeros(*y.shape, dtype=i64))
    else:
        order = (1, 0) if d == 2 else (0, 1, 2)  # which sample spaces each axis (PyTorch's)
        idx = [_starts(u[:, :, order[a]], sizes[a], out[a], k[a]).unsqueeze(-1) + arange(k[a], dtype=i64)
               for a in range(d)]
        windows = _gather_windows(x, idx, out, k)
        at = _first_max_at(windows, windows.ndim - 1)
        y = windows.take_along_dim(at, -1).squeeze(-1)
        ys = (y, _plane_positions(idx, sizes, out, k).take_along_dim(at, -1).squeeze(-1)) if return_indices else (y,)
    ys = tuple(t.squeeze(0) for t in ys) if unbatched else ys
    return ys if return_indices else ys[0]


def fractional_max_pool2d(input, kernel_size, output_size=None, output_ratio=None, return_indices=False,  # noqa: A002
                          _random_samples=None):
    """2-D fractional max pooling over [N, C, H, W] or [C, H, W]: output_size, or output_ratio of the input
    size; `_random_samples` [N, C, 2] fixes the windows (else drawn from flame's RNG)."""
    return _fractional(2, input, kernel_size, output_size, output_ratio, return_indices, _random_samples)


def fractional_max_pool3d(input, kernel_size, output_size=None, output_ratio=None, return_indices=False,  # noqa: A002
                          _random_samples=None):
    """3-D fractional max pooling over [N, C, T, H, W] or [C, T, H, W] (`_random_samples` [N, C, 3])."""
    return _fractional(3, input, kernel_size, output_size, output_ratio, return_indices, _random_samples)


for _name in __all__:  # PyTorch's poolings make new tensors, never views of the input (views.new_tensor)
    globals()[_name] = new_tensor(globals()[_name])
