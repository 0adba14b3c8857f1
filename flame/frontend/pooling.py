"""The pooling of flame.nn.functional (PyTorch names and semantics), written over primitives so the
compiler fuses it:
- max_poolNd: a chain over the kernel offsets of strided slices of the (-inf padded) input,
  m = where(s > m or s is NaN, s, m): one fused kernel forward, and the gradient goes to the element
  PyTorch's `indices` name: the first maximum of each window in row-major order (the last NaN; the
  window's first element inside the input where all are -inf, never the padding).
- avg_poolNd: a window reshaped out and averaged when kernel == stride tiles the input; otherwise a
  depthwise convolution with a ones kernel, times the reciprocal window size (count_include_pad,
  ceil_mode and divisor_override give the divisor, a constant).
- adaptive_avg_poolNd: reshape + mean when the output divides the input, else one matmul per axis with
  the averaging matrix (PyTorch's windows [floor(i*S/O), ceil((i+1)*S/O))); adaptive_max_poolNd:
  reshape, else each window of an axis gathered into a row, and the maximum of each row picked (argmax,
  take_along_dim) axis by axis from the last, so the gradient reaches the element PyTorch's indices name
  (and with return_indices the same picks read those indices from a tensor of positions).
- max_unpoolNd: max_pool's values scattered at its indices into a zero output plane."""

from __future__ import annotations

import numpy as np

from flame.errors import IndexValueError
from flame.frontend.autocast import policy
from flame.frontend.context import user_location
from flame.frontend.creation import tensor, zeros
from flame.frontend.dispatch import apply
from flame.frontend.norms import kernel_dtypes, widened
from flame.frontend.spatial import _batched, _err, _pad_spatial, ntuple
from flame.frontend.tensor import Tensor
from flame.frontend.tensor_core import full
from flame.frontend.views import new_tensor
from flame.ir.dtypes import i8, i16, i32, i64, u8

__all__ = ["adaptive_avg_pool1d", "adaptive_avg_pool2d", "adaptive_avg_pool3d", "adaptive_max_pool1d",
           "adaptive_max_pool2d", "adaptive_max_pool3d", "avg_pool1d", "avg_pool2d", "avg_pool3d", "lp_pool1d",
           "lp_pool2d", "lp_pool3d", "max_pool1d", "max_pool2d", "max_pool3d", "max_unpool1d", "max_unpool2d",
           "max_unpool3d", "max_pool1d_with_indices", "max_pool2d_with_indices", "max_pool3d_with_indices",
           "adaptive_max_pool1d_with_indices", "adaptive_max_pool2d_with_indices",
           "adaptive_max_pool3d_with_indices"]


def _pool_sizes(name, x, d, kernel_size, stride, padding, dilation, ceil_mode):
    """(kernel, stride, padding, dilation, output sizes) with PyTorch's checks and ceil_mode rule (the
    last window must start inside the input or its left padding)."""
    if 0 in x.shape[1:]:  # PyTorch pools an empty batch, but no empty channel or position dim
        raise _err(f"{name}: expected a {d + 1}-D or {d + 2}-D (batched) input whose dims other than the batch "
                   f"are non-empty, got {list(x.shape)}")
    k = ntuple(kernel_size, d, "kernel_size", name)
    s = k if stride is None or (not isinstance(stride, int) and len(stride) == 0) else ntuple(stride, d, "stride", name)
    p, dl = ntuple(padding, d, "padding", name), ntuple(dilation, d, "dilation", name)
    if min(k) < 1 or min(s) < 1 or min(dl) < 1 or min(p) < 0:
        raise _err(f"{name}: kernel_size, stride and dilation must be >= 1 and padding >= 0")
    if any(2 * pp > kk for pp, kk in zip(p, k)):
        raise _err(f"{name}: padding {list(p)} should be at most half of the kernel size {list(k)}")
    out = []
    for n, kk, ss, pp, dd in zip(x.shape[2:], k, s, p, dl):
        # PyTorch's rule: ceil_mode may keep a window that reaches past the input and its padding
        o = (n + 2 * pp - dd * (kk - 1) - 1 + (ss - 1 if ceil_mode else 0)) // ss + 1
        if ceil_mode and (o - 1) * ss >= n + pp:
            o -= 1
        if o < 1:
            raise _err(f"{name}: the kernel {list(k)} (dilation {list(dl)}) is larger than the padded input "
                       f"{list(x.shape[2:])} + 2 x {list(p)}")
        out.append(o)
    return k, s, p, dl, tuple(out)


def _window(x: Tensor, offset, stride, out) -> Tensor:
    """x[..., offset + stride * i] over the spatial dims, i < out (a strided view)."""
    d = len(out)
    starts = [0, 0] + list(offset)
    stops = list(x.shape[:2]) + [o + s * (n - 1) + 1 for o, s, n in zip(offset, stride, out)]
    return apply("slice", x, starts=starts, stops=stops, steps=[1, 1] + list(stride[:d]))


def _right_pads(x, k, s, p, dl, out):
    """[lo, hi] per spatial dim: the padding, with hi grown where ceil_mode's last window needs it."""
    return [(pp, max(pp, (o - 1) * ss + dd * (kk - 1) + 1 - n - pp))
            for n, kk, ss, pp, dd, o in zip(x.shape[2:], k, s, p, dl, out)]


def _first_inside(x, k, s, p, dl, out) -> list[np.ndarray]:
    """Per spatial dim, per output position: the kernel offset of its window's first element inside the
    input (0 where the window starts inside; later where it starts in the left padding)."""
    return [np.maximum(0, -(-(p_i - np.arange(o) * s_i) // d_i)) for s_i, p_i, d_i, o in zip(s, p, dl, out)]


def _along_dims(vectors: list[np.ndarray], combine) -> np.ndarray:
    """The outer combination (np.logical_and, np.add) of one vector per spatial dim, over the output grid."""
    d = len(vectors)
    out = None
    for i, v in enumerate(vectors):
        v = v.reshape([-1 if j == i else 1 for j in range(d)])
        out = v if out is None else combine(out, v)
    return out


def _max_pool(d, x, kernel_size, stride, padding, dilation, ceil_mode, return_indices):
    """max_poolNd: the chain of module docstring; with return_indices also PyTorch's indices (each
    maximum's flat position in its input plane), chosen by the same chain."""
    name = f"max_pool{d}d"
    x, unbatched = _batched(name, x, d)
    # torch's CPU kernels: integer inputs too (not bool), but max_pool1d's without indices floating only
    kernel_dtypes(name, "max_pool1d_impl" if d == 1 and not return_indices else "max_pool2d", x,
                  also=() if d == 1 and not return_indices else (i8, i16, i32, i64, u8))
    k, s, p, dl, out = _pool_sizes(name, x, d, kernel_size, stride, padding, dilation, ceil_mode)
    low = float("-inf") if x.dtype.is_float else int(np.iinfo(x.dtype.np_dtype).min)  # padding never picked
    xp = _pad_spatial(x, _right_pads(x, k, s, p, dl, out), low)
    first = _first_inside(x, k, s, p, dl, out) if any(p) else None
    plane = [int(np.prod(x.shape[3 + i:], dtype=np.int64)) for i in range(d)]
    m = idx = None
    for off in np.ndindex(*k):
        w = _window(xp, [o * dd for o, dd in zip(off, dl)], s, out)
        pos = None
        if return_indices:
            at = [(np.arange(o) * s_i + o_i * d_i - p_i) * n
                  for o, s_i, o_i, d_i, p_i, n in zip(out, s, off, dl, p, plane)]
            pos = tensor(_along_dims(at, np.add).astype(np.int64))
        if m is None:
            m, idx = w, pos
            continue
        # strictly greater: a tie keeps the earlier element, a NaN wins (PyTorch's scan); a window's first
        # element inside the input replaces the padding before it, whatever its value (an all -inf window)
        take = (w > m) | (w != w)
        if first is not None:
            inside = _along_dims([f == o_i for f, o_i in zip(first, off)], np.logical_and)
            if inside.any():
                take = take | tensor(inside)
        m = apply("where", take, w, m)
        if return_indices:
            idx = apply("where", take, pos, idx)
    if return_indices:
        idx = idx.broadcast_to(m.shape)
        return (m.squeeze(0), idx.squeeze(0)) if unbatched else (m, idx)
    return m.squeeze(0) if unbatched else m


def max_pool1d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,  # noqa: A002
               return_indices=False) -> Tensor:
    return _max_pool(1, input, kernel_size, stride, padding, dilation, ceil_mode, return_indices)


def max_pool2d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,  # noqa: A002
               return_indices=False) -> Tensor:
    """The maximum over each window (stride defaults to kernel_size; padding is -inf); the gradient goes
    to the first maximum of each window, as in PyTorch."""
    return _max_pool(2, input, kernel_size, stride, padding, dilation, ceil_mode, return_indices)


def max_pool3d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,  # noqa: A002
               return_indices=False) -> Tensor:
    pool = _max_pool if return_indices else _max_pool3d_f32_on_cpu  # (max_pool3d_with_indices is not listed)
    return pool(3, input, kernel_size, stride, padding, dilation, ceil_mode, return_indices)


def _divisor(n, k, s, p, o, include_pad) -> np.ndarray:
    """Per output position of one axis: the count PyTorch divides by (windows clipped to the padded
    input; with count_include_pad=False also to the input)."""
    start = np.arange(o) * s - p
    end = np.minimum(start + k, n + p)
    if include_pad:
        return (end - start).astype(np.float64)
    return (np.minimum(end, n) - np.maximum(start, 0)).astype(np.float64)


def _int_divisor(x: Tensor, k, s, p, out, include_pad, divisor_override) -> int | Tensor:
    """The integer count each window's sum is divided by: divisor_override, or the clipped window sizes."""
    if divisor_override:
        return int(divisor_override)
    div = np.ones((), np.int64)
    for n, kk, ss, pp, o in zip(x.shape[2:], k, s, p, out):
        div = np.multiply.outer(div, _divisor(n, kk, ss, pp, o, include_pad).astype(np.int64))
    return int(div.flat[0]) if np.all(div == div.flat[0]) else tensor(div)


def _tiles(x: Tensor, k, out) -> Tensor:
    """[N, C, O1, k1, O2, k2, ...]: the windows of a kernel == stride pooling that tiles x, as a view."""
    return x.reshape(*x.shape[:2], *[v for pair in zip(out, k) for v in pair])


@policy("")  # autocast: on none of PyTorch's lists: its inputs' dtype (avg_pool1d/2d/3d)
def _avg_pool(d, x, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override):
    name = f"avg_pool{d}d"
    x, unbatched = _batched(name, x, d)
    kernel_dtypes(name, "avg_pool3d_out_frame" if d == 3 else "avg_pool2d", x, also=(i64,))  # torch's CPU kernels
    k, s, p, _, out = _pool_sizes(name, x, d, kernel_size, stride, padding, 1, ceil_mode)
    if d == 3 and any(n < kk for n, kk in zip(x.shape[2:], k)):  # PyTorch checks this for avg_pool3d only
        raise _err(f"{name}: the input {list(x.shape[2:])} is smaller than the kernel {list(k)}")
    if k == s and not any(p) and all(o * kk == n for o, kk, n in zip(out, k, x.shape[2:])):
        y = _tiles(x, k, out).sum(tuple(range(3, 3 + 2 * d, 2)))  # non-overlapping tiles: one reduction
    elif not x.dtype.is_float:  # no integer convolution: the windows' sum over the kernel offsets
        xp = _pad_spatial(x, _right_pads(x, k, s, p, [1] * d, out), 0)
        y = None
        for off in np.ndindex(*k):
            w = _window(xp, off, s, out)
            y = w if y is None else y + w
    else:
        ones = full((x.shape[1], 1, *k), 1.0, x.dtype)
        y = apply("conv", x, ones, stride=s, padding=_right_pads(x, k, s, p, [1] * d, out), dilation=[1] * d,
                  groups=x.shape[1])
    if divisor_override is not None and divisor_override == 0:  # PyTorch: "divisor must be not zero"
        raise _err(f"{name}: divisor must be not zero, got divisor_override={divisor_override!r}")
    if not x.dtype.is_float:  # int64: the sum divided by the count, truncated (C++'s integer division)
        y = y.div(_int_divisor(x, k, s, p, out, count_include_pad, divisor_override), rounding_mode="trunc")
    elif divisor_override:
        y = y * (1.0 / divisor_override)
    else:
        per_axis = [_divisor(n, kk, ss, pp, o, count_include_pad)
                    for n, kk, ss, pp, o in zip(x.shape[2:], k, s, p, out)]
        div = per_axis[0]
        for a in per_axis[1:]:
            div = np.multiply.outer(div, a)
        if np.all(div == div.flat[0]):
            y = y * (1.0 / float(div.flat[0]))
        else:
            y = y * Tensor((1.0 / div).astype(x.dtype.np_dtype), x.dtype)
    return y.squeeze(0) if unbatched else y


def avg_pool1d(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True) -> Tensor:  # noqa: A002
    return _avg_pool(1, input, kernel_size, stride, padding, ceil_mode, count_include_pad, None)


def avg_pool2d(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,  # noqa: A002
               divisor_override=None) -> Tensor:
    """The mean over each window (zero padding; count_include_pad counts it in the divisor)."""
    return _avg_pool(2, input, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)


def avg_pool3d(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,  # noqa: A002
               divisor_override=None) -> Tensor:
    return _avg_pool3d_f32_on_cpu(3, input, kernel_size, stride, padding, ceil_mode, count_include_pad,
                                  divisor_override)


def _lp_pool(d: int, x: Tensor, norm_type: float, kernel_size, stride, ceil_mode: bool) -> Tensor:
    """PyTorch's power-average pooling: (sum over each window of x ** norm_type) ** (1 / norm_type), as
    the window's mean of x ** p times its size, negative means made 0 (sign * relu of the absolute). An
    infinite norm_type is the window's largest absolute value (-inf: minus its smallest), as PyTorch
    takes it by max pooling (x ** inf overflows the mean to inf or 0 and the 0th root makes every window 1)."""
    k = ntuple(kernel_size, d, "kernel_size", f"lp_pool{d}d")
    if isinstance(norm_type, (int, float)) and np.isinf(norm_type):
        sign = 1.0 if norm_type > 0 else -1.0
        return _max_pool(d, x.abs() * sign, kernel_size, stride, 0, 1, ceil_mode, False) * sign
    out = _avg_pool(d, x.pow(norm_type), kernel_size, stride, 0, ceil_mode, True, None)
    return (out.sign() * out.abs().relu()).mul(float(np.prod(k))).pow(1.0 / norm_type)


def lp_pool1d(input, norm_type: float, kernel_size, stride=None, ceil_mode: bool = False) -> Tensor:  # noqa: A002
    """The norm_type-norm of each window (torch.nn.functional.lp_pool1d)."""
    return _lp_pool(1, input, norm_type, kernel_size, stride, ceil_mode)


def lp_pool2d(input, norm_type: float, kernel_size, stride=None, ceil_mode: bool = False) -> Tensor:  # noqa: A002
    """The norm_type-norm of each window (torch.nn.functional.lp_pool2d)."""
    return _lp_pool(2, input, norm_type, kernel_size, stride, ceil_mode)


def lp_pool3d(input, norm_type: float, kernel_size, stride=None, ceil_mode: bool = False) -> Tensor:  # noqa: A002
    """The norm_type-norm of each window (torch.nn.functional.lp_pool3d)."""
    return _lp_pool(3, input, norm_type, kernel_size, stride, ceil_mode)



# ---- max unpooling -------------------------------------------------------------------------------

def _unpool_size(name, x, d, kernel_size, stride, padding, output_size) -> tuple[int, ...]:
    """The output's spatial sizes: (in - 1) * stride - 2 * padding + kernel, or output_size (its last d
    values), which PyTorch allows within one stride of that."""
    k = ntuple(kernel_size, d, "kernel_size", name)
    s = k if stride is None else ntuple(stride, d, "stride", name)
    p = ntuple(padding, d, "padding", name)
    default = tuple((n - 1) * ss - 2 * pp + kk for n, kk, ss, pp in zip(x.shape[-d:], k, s, p))
    if output_size is None:
        return default
    size = tuple(int(v) for v in output_size)
    if len(size) == d + 2:
        size = size[2:]
    if len(size) != d:
        raise _err(f"{name}: output_size should be a sequence containing {d} or {d + 2} elements, but it has "
                   f"a length of '{len(size)}'")
    for o, dflt, ss in zip(size, default, s):
        if not dflt - ss < o < dflt + ss:
            raise _err(f"{name}: invalid output_size {list(size)} (dim {len(size)} must be between "
                       f"{[a - b for a, b in zip(default, s)]} and {[a + b for a, b in zip(default, s)]})")
    return size


def _max_unpool(d, x, indices, kernel_size, stride, padding, output_size):
    """The partial inverse of max_poolNd: each value written at the position its index names in a zero
    plane of the output size (a scatter: an index named twice keeps one write, and each value's gradient
    is the output gradient at its index, as PyTorch's)."""
    name = f"max_unpool{d}d"
    if tuple(indices.shape) != tuple(x.shape):
        raise _err(f"{name}: Expected shape of indices to be same as that of the input tensor "
                   f"({list(x.shape)}) but got indices tensor with shape: {list(indices.shape)}")
    if indices.dtype != i64:
        raise _err(f"{name}: expected indices of dtype int64, got {indices.dtype}")
    kernel_dtypes(name, f"max_unpool{max(d, 2)}d", x)
    x, unbatched = _batched(name, x, d)
    indices = indices.unsqueeze(0) if unbatched else indices
    size = _unpool_size(name, x, d, kernel_size, stride, padding, output_size)
    count = int(np.prod(size, dtype=np.int64))
    if indices._value is None and indices.numel():  # eager: PyTorch's check (traced: the executors')
        a = indices.numpy()
        bad = (a < 0) | (a >= count)
        if bad.any():
            raise IndexValueError(f"{name}: Found an invalid max index: {int(a[bad].flat[0])} (output volumes are "
                                  f"of size {'x'.join(map(str, size))})\n  at {user_location()}")
    plane = zeros(*x.shape[:2], count, dtype=x.dtype)
    y = plane.scatter(2, indices.reshape(*x.shape[:2], -1), x.reshape(*x.shape[:2], -1))
    y = y.reshape(*x.shape[:2], *size)
    return y.squeeze(0) if unbatched else y


def max_unpool1d(input, indices, kernel_size, stride=None, padding=0, output_size=None) -> Tensor:  # noqa: A002
    """The partial inverse of max_pool1d: its values at its indices, zeros elsewhere."""
    return _max_unpool(1, input, indices, kernel_size, stride, padding, output_size)


def max_unpool2d(input, indices, kernel_size, stride=None, padding=0, output_size=None) -> Tensor:  # noqa: A002
    """The partial inverse of max_pool2d: its values at its indices (flat positions in each output
    plane), zeros elsewhere; output_size picks among the sizes max_pool2d maps to the input's."""
    return _max_unpool(2, input, indices, kernel_size, stride, padding, output_size)


def max_unpool3d(input, indices, kernel_size, stride=None, padding=0, output_size=None) -> Tensor:  # noqa: A002
    """The partial inverse of max_pool3d: its values at its indices, zeros elsewhere."""
    return _max_unpool(3, input, indices, kernel_size, stride, padding, output_size)


# ---- adaptive pooling ----------------------------------------------------------------------------

@policy("")  # autocast: on none of PyTorch's lists: its inputs' dtype (the adaptive pools)
def _adaptive(kind: str, d: int, x: Tensor, output_size, return_indices: bool = False) -> Tensor:
    """Adaptive average or max pooling ("avg", "max") over PyTorch's windows [floor(i*S/O),
    ceil((i+1)*S/O)) per axis: reshaped tiles where every axis divides evenly, else axis by axis (a
    gather of each window: its own elements summed for the mean, its first maximum for the max)."""
    name = f"adaptive_{kind}_pool{d}d"
    x, unbatched = _batched(name, x, d)
    kernel_dtypes(name, f"adaptive_{kind}_pool{max(d, 2)}d" + ("_cpu" if d == 3 else ""), x)
    sizes = (output_size,) * d if isinstance(output_size, int) or output_size is None else tuple(output_size)
    if d == 1 and None in sizes:  # torch's 1-D functions take ints only (its 2-D / 3-D keep a None dim's size)
        raise TypeError(f"{name}(): argument 'output_size' must be tuple of ints, but found element of type "
                        f"NoneType at pos 0")
    if len(sizes) != d:
        raise _err(f"{name}: output_size must be an int or {d} values, got {output_size!r}")
    out = tuple(n if o is None else int(o) for n, o in zip(x.shape[2:], sizes))
    if kind == "avg" and set(out) == {1}:  # PyTorch: the mean (of an empty dim too: NaN)
        y = x.mean(tuple(range(2, 2 + d)), keepdim=True)
        return y.squeeze(0) if unbatched else y
    if 0 in x.shape[1:]:
        raise _err(f"{name}: expected an input whose dims other than the batch are non-empty, got {list(x.shape)}")
    if min(out) < 0:
        raise _err(f"{name}: output_size {list(out)} must be >= 0")
    if 0 in out:  # PyTorch: an empty result
        y = zeros(*x.shape[:2], *out, dtype=x.dtype)
        ys = (y, zeros(*y.shape, dtype=i64)) if return_indices else (y,)
    elif return_indices:
        ys = _adaptive_max_with_indices(x, out)
    elif all(n % o == 0 for n, o in zip(x.shape[2:], out)):
        k = [n // o for n, o in zip(x.shape[2:], out)]
        axes = tuple(range(3, 3 + 2 * d, 2))
        tiles = _tiles(x, k, out) if any(kk > 1 for kk in k) else None
        if tiles is None:
            y = x
        elif kind == "avg":
            y = tiles.mean(axes)
        else:  # the last window axis first: the first maximum in row-major order, as PyTorch's scan
            y = tiles
            for a in reversed(axes):
                y = _first_max(y, a).squeeze(a)
        ys = (y,)
    else:
        y = x
        dims = [i for i, (n, o) in enumerate(zip(x.shape[2:], out)) if n != o]
        for i in dims if kind == "avg" else reversed(dims):
            n, o = x.shape[2 + i], out[i]
            y = _mean_along(y, 2 + i, n, o) if kind == "avg" else _max_along(y, 2 + i, n, o)
        ys = (y,)
    ys = tuple(t.squeeze(0) for t in ys) if unbatched else ys
    return ys if return_indices else ys[0]


def _adaptive_max_with_indices(x: Tensor, out: tuple[int, ...]) -> tuple[Tensor, Tensor]:
    """Adaptive max pooling and PyTorch's indices (each maximum's flat position in its input plane): axis
    by axis from the last, each window's first maximum (the last NaN) picked from the values and, at the
    same place, from the positions. Row-major order over the whole window picks the same element."""
    d = len(out)
    plane = np.arange(int(np.prod(x.shape[2:], dtype=np.int64)), dtype=np.int64).reshape(1, 1, *x.shape[2:])
    y, pos = x, Tensor(plane).broadcast_to(x.shape)
    for i in reversed(range(d)):
        n, o, axis = x.shape[2 + i], out[i], 2 + i
        if n == o:
            continue
        g, _ = _windows(y, axis, n, o)
        gp, _ = _windows(pos, axis, n, o)
        at = _first_max_at(g, axis + 1)
        y, pos = g.take_along_dim(at, axis + 1).squeeze(axis + 1), gp.take_along_dim(at, axis + 1).squeeze(axis + 1)
    return y, pos


def adaptive_avg_pool1d(input, output_size) -> Tensor:  # noqa: A002
    return _adaptive("avg", 1, input, output_size)


def adaptive_avg_pool2d(input, output_size) -> Tensor:  # noqa: A002
    """The mean over PyTorch's adaptive windows [floor(i*S/O), ceil((i+1)*S/O)) per axis; an output
    size of None keeps that axis."""
    return _adaptive("avg", 2, input, output_size)


def adaptive_avg_pool3d(input, output_size) -> Tensor:  # noqa: A002
    return _adaptive3d_f32_on_cpu("avg", 3, input, output_size)


# autocast: PyTorch's CPU float32 list holds max_pool3d (not max_pool3d_with_indices), avg_pool3d and the 3-d
# adaptive pools; none of its CUDA lists holds a pool
_f32_on_cpu = policy("", cpu="f32")
_max_pool3d_f32_on_cpu = _f32_on_cpu(_max_pool)
_avg_pool3d_f32_on_cpu = _f32_on_cpu(_avg_pool)
_adaptive3d_f32_on_cpu = _f32_on_cpu(_adaptive)


def _windows(x: Tensor, axis: int, n: int, o: int) -> tuple[Tensor, np.ndarray]:
    """PyTorch's adaptive windows of one axis, each window's elements gathered into a row of K (the widest
    window; a shorter one repeats its last element), at axis + 1; and which of the K are the window's
    own ([o, K] bools)."""
    lo = [(i * n) // o for i in range(o)]
    hi = [-(-((i + 1) * n) // o) for i in range(o)]
    k = max(h - lw for lw, h in zip(lo, hi))
    own = np.array([[lw + j < h for j in range(k)] for lw, h in zip(lo, hi)])
    idx = np.array([[min(lw + j, h - 1) for j in range(k)] for lw, h in zip(lo, hi)], np.int64)
    g = x.index_select(axis, Tensor(idx.reshape(-1)))
    return g.reshape(*x.shape[:axis], o, k, *x.shape[axis + 1:]), own


def _max_along(x: Tensor, axis: int, n: int, o: int) -> Tensor:
    """The maximum over PyTorch's adaptive windows of one axis: each row's first maximum (a repeated last
    element leaves the maximum and, the gather summing its gradient back, the gradient as it was)."""
    g, _ = _windows(x, axis, n, o)
    return _first_max(g, axis + 1).squeeze(axis + 1)


def _mean_along(x: Tensor, axis: int, n: int, o: int) -> Tensor:
    """The mean over PyTorch's adaptive windows of one axis: each window's own elements summed and divided
    by their count (f16/bf16 in f32, rounded once), so an inf or NaN reaches only the windows holding it."""
    g, own = _windows(widened(x), axis, n, o)
    shape = [1] * g.ndim
    shape[axis], shape[axis + 1] = own.shape
    keep = Tensor(own.reshape(shape))
    count = Tensor(own.sum(1).reshape(shape[: axis + 1] + shape[axis + 2:]).astype(g.dtype.np_dtype), g.dtype)
    y = apply("where", keep, g, zeros((), dtype=g.dtype)).sum(axis + 1) / count
    return y.to(x.dtype)


def _first_max(x: Tensor, axis: int) -> Tensor:
    """The maximum along axis (kept, of size 1) read at one element, which alone takes the gradient: the
    first maximum, or the last NaN where there is one (PyTorch's max pooling scan: val > max or isnan)."""
    return x.take_along_dim(_first_max_at(x, axis), axis)


def _first_max_at(x: Tensor, axis: int) -> Tensor:
    """Where _first_max reads along axis (kept, of size 1): the first maximum, or the last NaN."""
    nan = x != x
    last_nan = (x.shape[axis] - 1) - nan.flip(axis).to(i64).argmax(axis, keepdim=True)
    return apply("where", nan.any(axis, keepdim=True), last_nan, x.argmax(axis, keepdim=True))


def adaptive_max_pool1d(input, output_size, return_indices: bool = False) -> Tensor:  # noqa: A002
    return _adaptive("max", 1, input, output_size, return_indices)


def adaptive_max_pool2d(input, output_size, return_indices: bool = False) -> Tensor:  # noqa: A002
    """The maximum over PyTorch's adaptive windows [floor(i*S/O), ceil((i+1)*S/O)) per axis (an output
    size of None keeps that axis): adaptive_max_pool2d(x, 1) is global max pooling."""
    return _adaptive("max", 2, input, output_size, return_indices)


def adaptive_max_pool3d(input, output_size, return_indices: bool = False) -> Tensor:  # noqa: A002
    return _adaptive3d_f32_on_cpu("max", 3, input, output_size, return_indices)


def max_pool1d_with_indices(input, kernel_size, stride=None, padding=0, dilation=1,  # noqa: A002
                            ceil_mode=False, return_indices=False) -> tuple[Tensor, Tensor]:
    """max_pool1d(..., return_indices=True), as PyTorch's, whatever return_indices says."""
    return max_pool1d(input, kernel_size, stride, padding, dilation, ceil_mode, return_indices=True)


def max_pool2d_with_indices(input, kernel_size, stride=None, padding=0, dilation=1,  # noqa: A002
                            ceil_mode=False, return_indices=False) -> tuple[Tensor, Tensor]:
    """max_pool2d(..., return_indices=True), as PyTorch's, whatever return_indices says."""
    return max_pool2d(input, kernel_size, stride, padding, dilation, ceil_mode, return_indices=True)


def max_pool3d_with_indices(input, kernel_size, stride=None, padding=0, dilation=1,  # noqa: A002
                            ceil_mode=False, return_indices=False) -> tuple[Tensor, Tensor]:
    """max_pool3d(..., return_indices=True), as PyTorch's, whatever return_indices says."""
    return max_pool3d(input, kernel_size, stride, padding, dilation, ceil_mode, return_indices=True)


def adaptive_max_pool1d_with_indices(input, output_size, return_indices=False) -> tuple[Tensor, Tensor]:  # noqa: A002
    """adaptive_max_pool1d(..., return_indices=True), as PyTorch's, whatever return_indices says."""
    return _adaptive("max", 1, input, output_size, True)


def adaptive_max_pool2d_with_indices(input, output_size, return_indices=False) -> tuple[Tensor, Tensor]:  # noqa: A002
    """adaptive_max_pool2d(..., return_indices=True), as PyTorch's, whatever return_indices says."""
    return _adaptive("max", 2, input, output_size, True)


def adaptive_max_pool3d_with_indices(input, output_size, return_indices=False) -> tuple[Tensor, Tensor]:  # noqa: A002
    """adaptive_max_pool3d(..., return_indices=True), as PyTorch's, whatever return_indices says."""
    return _adaptive3d_f32_on_cpu("max", 3, input, output_size, True)


for _name in __all__:  # PyTorch's poolings make new tensors, never views of the input (views.new_tensor)
    globals()[_name] = new_tensor(globals()[_name])
