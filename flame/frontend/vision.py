"""The convolutional half of flame.nn.functional (PyTorch names and semantics): convolutions and
transposed convolutions (the conv ops of flame/ir/ops/conv.py, bias as a broadcast add), pooling,
interpolation and the batch/group normalisations, written over primitives so the compiler fuses them.

How each is built:
- convNd: one `conv` op; "same" padding is resolved here (asymmetric for even kernels, as PyTorch);
  conv_transposeNd: one `conv_grad_input` op (its data gradient) with the output shape implied by
  output_padding.
- max_poolNd: a chain over the kernel offsets of strided slices of the (-inf padded) input,
  m = where(s > m or s is NaN, s, m): one fused kernel forward, and the gradient goes to the first
  maximum of each window in row-major order, as PyTorch's.
- avg_poolNd: a window reshaped out and averaged when kernel == stride tiles the input; otherwise a
  depthwise convolution with a ones kernel, times the reciprocal window size (count_include_pad,
  ceil_mode and divisor_override give the divisor, a constant).
- adaptive_avg_poolNd: reshape + mean when the output divides the input, else one matmul per axis with
  the averaging matrix (PyTorch's windows [floor(i*S/O), ceil((i+1)*S/O))).
- interpolate: nearest by broadcasting (integer factors) or index_select; (bi/tri)linear by one matmul
  per axis with the interpolation matrix (align_corners as PyTorch).
- group_norm: statistics over the trailing dims of an [N, G, C/G, *S] view (one row kernel);
  batch_norm: statistics over every dim but the channels, running statistics updated in place."""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from flame.errors import FlameError, ShapeError
from flame.frontend.context import no_grad, user_location
from flame.frontend.creation import ones, zeros
from flame.frontend.dispatch import apply
from flame.frontend.functional import dropout
from flame.frontend.losses import pad
from flame.frontend.ops import cat, stack
from flame.frontend.tensor import Tensor
from flame.frontend.tensor_core import full

__all__ = ["adaptive_avg_pool1d", "adaptive_avg_pool2d", "adaptive_avg_pool3d", "adaptive_max_pool1d",
           "adaptive_max_pool2d", "adaptive_max_pool3d", "avg_pool1d", "avg_pool2d", "fold", "unfold",
           "avg_pool3d", "batch_norm", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
           "conv_transpose3d", "dropout1d", "dropout2d", "dropout3d", "group_norm", "instance_norm", "interpolate",
           "max_pool1d", "max_pool2d", "max_pool3d", "pixel_shuffle", "pixel_unshuffle"]


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


def _call(name: str, op: str, *inputs, **attrs) -> Tensor:
    """apply() with the user's function named in front of the op's own message."""
    try:
        return apply(op, *inputs, **attrs)
    except FlameError as e:
        raise type(e)(f"{name}: {e}") from None


def _channel_view(t: Tensor, d: int) -> Tensor:
    """A per-channel vector [C] as [C, 1, ...] broadcasting over d spatial dims."""
    return t.reshape(t.shape[0], *([1] * d))


# ---- convolutions --------------------------------------------------------------------------------

def _conv_padding(name, padding, k, stride, dilation, d) -> tuple[tuple[int, int], ...]:
    if isinstance(padding, str):
        if padding == "valid":
            return ((0, 0),) * d
        if padding != "same":
            raise _err(f"{name}: padding must be 'same', 'valid', an int or {d} ints, got {padding!r}")
        if any(s != 1 for s in stride):
            raise _err(f"{name}: padding='same' is not supported for strided convolutions (stride={list(stride)})")
        total = [dl * (kk - 1) for kk, dl in zip(k, dilation)]
        return tuple((t // 2, t - t // 2) for t in total)  # the extra one at the end, as PyTorch
    return tuple((p, p) for p in ntuple(padding, d, "padding", name))


def _check_weight_channels(name: str, weight: Tensor, outputs: int, groups) -> None:
    """PyTorch's refusal of a weight with no output channels (fewer than groups along dim 0, or an
    empty second dim for a transposed convolution's [C_in, C_out/groups, ...])."""
    if weight.shape[0] < int(groups) or outputs < 1:
        raise _err(f"{name}: given groups={int(groups)}, expected the weight to have at least {int(groups)} "
                   f"output channel(s), got weight of size {list(weight.shape)}")


def _conv(d: int, x: Tensor, weight: Tensor, bias, stride, padding, dilation, groups) -> Tensor:
    name = f"conv{d}d"
    x, unbatched = _batched(name, x, d)
    if weight.ndim != d + 2:
        raise _err(f"{name}: the weight must be [C_out, C_in/groups, {', '.join('k' * d)}], got "
                   f"{weight.dtype}{list(weight.shape)}")
    _check_weight_channels(name, weight, weight.shape[0], groups)
    stride, dilation = ntuple(stride, d, "stride", name), ntuple(dilation, d, "dilation", name)
    pads = _conv_padding(name, padding, weight.shape[2:], stride, dilation, d)
    y = _call(name, "conv", x, weight, stride=stride, padding=pads, dilation=dilation, groups=int(groups))
    if bias is not None:
        if tuple(bias.shape) != (weight.shape[0],):
            raise _err(f"{name}: bias must be [{weight.shape[0]}] (one per output channel), got {list(bias.shape)}")
        y = y + _channel_view(bias, d)
    return y.squeeze(0) if unbatched else y


def conv1d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride=1, padding=0, dilation=1,  # noqa: A002
           groups: int = 1) -> Tensor:
    """1-D convolution (cross-correlation) of [N, C_in, L] with weight [C_out, C_in/groups, k]."""
    return _conv(1, input, weight, bias, stride, padding, dilation, groups)


def conv2d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride=1, padding=0, dilation=1,  # noqa: A002
           groups: int = 1) -> Tensor:
    """2-D convolution of [N, C_in, H, W] with weight [C_out, C_in/groups, kh, kw]; padding an int, a
    pair, "valid" or "same" (stride 1)."""
    return _conv(2, input, weight, bias, stride, padding, dilation, groups)


def conv3d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride=1, padding=0, dilation=1,  # noqa: A002
           groups: int = 1) -> Tensor:
    """3-D convolution of [N, C_in, D, H, W] with weight [C_out, C_in/groups, kd, kh, kw]."""
    return _conv(3, input, weight, bias, stride, padding, dilation, groups)


def _conv_transpose(d, x, weight, bias, stride, padding, output_padding, groups, dilation) -> Tensor:
    name = f"conv_transpose{d}d"
    x, unbatched = _batched(name, x, d)
    if weight.ndim != d + 2:
        raise _err(f"{name}: the weight must be [C_in, C_out/groups, {', '.join('k' * d)}], got "
                   f"{weight.dtype}{list(weight.shape)}")
    _check_weight_channels(name, weight, weight.shape[1], groups)
    stride, dilation = ntuple(stride, d, "stride", name), ntuple(dilation, d, "dilation", name)
    pad, out_pad = ntuple(padding, d, "padding", name), ntuple(output_padding, d, "output_padding", name)
    if x.shape[1] != weight.shape[0]:
        raise _err(f"{name}: the input has {x.shape[1]} channels but the weight {list(weight.shape)} expects "
                   f"{weight.shape[0]} (weight is [C_in, C_out/groups, ...])")
    for op, s, dl in zip(out_pad, stride, dilation):
        if not 0 <= op < max(s, dl):
            raise _err(f"{name}: output_padding {list(out_pad)} must be smaller than either stride {list(stride)} "
                       f"or dilation {list(dilation)}")
    size = [(n - 1) * s - 2 * p + dl * (k - 1) + op + 1
            for n, s, p, dl, k, op in zip(x.shape[2:], stride, pad, dilation, weight.shape[2:], out_pad)]
    if min(size) < (0 if x.shape[0] == 0 else 1):  # PyTorch: an empty batch may have an empty output
        raise _err(f"{name}: the output size {size} is not positive (input {list(x.shape)}, padding {list(pad)})")
    cout = weight.shape[1] * int(groups)
    if bias is not None and tuple(bias.shape) != (cout,):
        raise _err(f"{name}: bias must be [{cout}] (one per output channel), got {list(bias.shape)}")
    if x.shape[0] == 0 and (0 in size or 0 in x.shape[2:]):  # PyTorch: an empty batch's output, any size
        parts = [t.reshape(-1)[:0].to(x.dtype) for t in (x, weight, bias) if t is not None]
        return sum(parts[1:], parts[0]).reshape(0, cout, *size)  # in the operands' graph: zero gradients
    pads, extra = _transpose_padding(pad, out_pad, stride)
    shape = (x.shape[0], cout, *(n - e for n, e in zip(size, extra)))
    y = _call(name, "conv_grad_input", x, weight, stride=stride, padding=pads, dilation=dilation,
              groups=int(groups), input_shape=shape)
    if any(extra):
        y = _pad_spatial(y, [(0, e) for e in extra], 0.0)
    if bias is not None:
        y = y + _channel_view(bias, d)
    return y.squeeze(0) if unbatched else y


def _transpose_padding(pad, out_pad, stride) -> tuple[list[tuple[int, int]], list[int]]:
    """The data gradient's [lo, hi] padding per spatial dim and the zeros appended after it, for a transposed
    convolution's padding p and output_padding op. op < stride: (p, p), none appended (the convolution of the
    padded output has the input's length, the floor of its division absorbs op). op >= stride (allowed when
    the dilation exceeds it): the output's last op positions lie beyond every window of a (p, p) padding's
    convolution, so the high padding shrinks by op (p >= op) or, where p < op, to 0 with op - p zeros
    appended: the positions no input element reaches, as in PyTorch."""
    pads, extra = [], []
    for p, op, s in zip(pad, out_pad, stride):
        hi = p if op < s else max(p - op, 0)
        pads.append((p, hi))
        extra.append(0 if op < s else max(op - p, 0))
    return pads, extra


def conv_transpose1d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1,  # noqa: A002
                     dilation=1) -> Tensor:
    """The transposed 1-D convolution (the data gradient of conv1d), weight [C_in, C_out/groups, k]."""
    return _conv_transpose(1, input, weight, bias, stride, padding, output_padding, groups, dilation)


def conv_transpose2d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1,  # noqa: A002
                     dilation=1) -> Tensor:
    """The transposed 2-D convolution, weight [C_in, C_out/groups, kh, kw]; output size
    (H - 1) * stride - 2 * padding + dilation * (k - 1) + output_padding + 1."""
    return _conv_transpose(2, input, weight, bias, stride, padding, output_padding, groups, dilation)


def conv_transpose3d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1,  # noqa: A002
                     dilation=1) -> Tensor:
    """The transposed 3-D convolution, weight [C_in, C_out/groups, kd, kh, kw]."""
    return _conv_transpose(3, input, weight, bias, stride, padding, output_padding, groups, dilation)


# ---- pooling -------------------------------------------------------------------------------------

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


def _pad_spatial(x: Tensor, pads, value) -> Tensor:
    if not any(lo or hi for lo, hi in pads):
        return x
    return apply("pad", x, pads=[(0, 0), (0, 0)] + [tuple(p) for p in pads], value=value)


def _right_pads(x, k, s, p, dl, out):
    """[lo, hi] per spatial dim: the padding, with hi grown where ceil_mode's last window needs it."""
    return [(pp, max(pp, (o - 1) * ss + dd * (kk - 1) + 1 - n - pp))
            for n, kk, ss, pp, dd, o in zip(x.shape[2:], k, s, p, dl, out)]


def _max_pool(d, x, kernel_size, stride, padding, dilation, ceil_mode, return_indices):
    name = f"max_pool{d}d"
    if return_indices:
        raise NotImplementedError(f"{name}: return_indices=True is not supported\n  at {user_location()}")
    x, unbatched = _batched(name, x, d)
    if not x.dtype.is_float:
        raise _err(f"{name}: expected a floating-point input, got {x.dtype}")
    k, s, p, dl, out = _pool_sizes(name, x, d, kernel_size, stride, padding, dilation, ceil_mode)
    xp = _pad_spatial(x, _right_pads(x, k, s, p, dl, out), float("-inf"))
    m = None
    for off in np.ndindex(*k):
        w = _window(xp, [o * dd for o, dd in zip(off, dl)], s, out)
        # strictly greater: a tie keeps the earlier element (PyTorch's argmax), and a NaN wins
        m = w if m is None else apply("where", (w > m) | (w != w), w, m)
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
    return _max_pool(3, input, kernel_size, stride, padding, dilation, ceil_mode, return_indices)


def _divisor(n, k, s, p, o, include_pad) -> np.ndarray:
    """Per output position of one axis: the count PyTorch divides by (windows clipped to the padded
    input; with count_include_pad=False also to the input)."""
    start = np.arange(o) * s - p
    end = np.minimum(start + k, n + p)
    if include_pad:
        return (end - start).astype(np.float64)
    return (np.minimum(end, n) - np.maximum(start, 0)).astype(np.float64)


def _tiles(x: Tensor, k, out) -> Tensor:
    """[N, C, O1, k1, O2, k2, ...]: the windows of a kernel == stride pooling that tiles x, as a view."""
    return x.reshape(*x.shape[:2], *[v for pair in zip(out, k) for v in pair])


def _avg_pool(d, x, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override):
    name = f"avg_pool{d}d"
    x, unbatched = _batched(name, x, d)
    if not x.dtype.is_float:
        raise _err(f"{name}: expected a floating-point input, got {x.dtype}")
    k, s, p, _, out = _pool_sizes(name, x, d, kernel_size, stride, padding, 1, ceil_mode)
    if d == 3 and any(n < kk for n, kk in zip(x.shape[2:], k)):  # PyTorch checks this for avg_pool3d only
        raise _err(f"{name}: the input {list(x.shape[2:])} is smaller than the kernel {list(k)}")
    if k == s and not any(p) and all(o * kk == n for o, kk, n in zip(out, k, x.shape[2:])):
        y = _tiles(x, k, out).sum(tuple(range(3, 3 + 2 * d, 2)))  # non-overlapping tiles: one reduction
    else:
        ones = full((x.shape[1], 1, *k), 1.0, x.dtype)
        y = apply("conv", x, ones, stride=s, padding=_right_pads(x, k, s, p, [1] * d, out), dilation=[1] * d,
                  groups=x.shape[1])
    if divisor_override is not None and divisor_override == 0:  # PyTorch: "divisor must be not zero"
        raise _err(f"{name}: divisor must be not zero, got divisor_override={divisor_override!r}")
    if divisor_override:
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
    return _avg_pool(3, input, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)


# ---- per-axis linear maps (adaptive pooling, linear interpolation) -------------------------------

def _along(x: Tensor, axis: int, m: np.ndarray) -> Tensor:
    """x with spatial axis `axis` mapped by the constant matrix m [out, in] (one matmul)."""
    mt = Tensor(np.ascontiguousarray(m.T).astype(x.dtype.np_dtype), x.dtype)
    last = x.ndim - 1
    if axis == last:
        return x @ mt
    perm = list(range(x.ndim))
    perm[axis], perm[last] = last, axis
    return (x.permute(*perm) @ mt).permute(*perm)


@lru_cache(maxsize=256)
def _adaptive_matrix(n: int, o: int) -> np.ndarray:
    m = np.zeros((o, n))
    for i in range(o):
        lo, hi = (i * n) // o, -(-((i + 1) * n) // o)
        m[i, lo:hi] = 1.0 / (hi - lo)
    return m


def _adaptive(kind: str, d: int, x: Tensor, output_size, return_indices: bool = False) -> Tensor:
    """Adaptive average or max pooling ("avg", "max") over PyTorch's windows [floor(i*S/O),
    ceil((i+1)*S/O)) per axis: reshaped tiles where every axis divides evenly, else axis by axis (a
    constant matrix for the mean, a gather of each window for the max)."""
    name = f"adaptive_{kind}_pool{d}d"
    if return_indices:
        raise NotImplementedError(f"{name}: return_indices=True is not supported\n  at {user_location()}")
    x, unbatched = _batched(name, x, d)
    sizes = (output_size,) * d if isinstance(output_size, int) or output_size is None else tuple(output_size)
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
        return y.squeeze(0) if unbatched else y
    if all(n % o == 0 for n, o in zip(x.shape[2:], out)):
        k = [n // o for n, o in zip(x.shape[2:], out)]
        axes = tuple(range(3, 3 + 2 * d, 2))
        tiles = _tiles(x, k, out) if any(kk > 1 for kk in k) else None
        y = x if tiles is None else tiles.mean(axes) if kind == "avg" else tiles.amax(axes)
    else:
        y = x
        for i, (n, o) in enumerate(zip(x.shape[2:], out)):
            if n != o:
                y = _along(y, 2 + i, _adaptive_matrix(n, o)) if kind == "avg" else _max_along(y, 2 + i, n, o)
    return y.squeeze(0) if unbatched else y


def adaptive_avg_pool1d(input, output_size) -> Tensor:  # noqa: A002
    return _adaptive("avg", 1, input, output_size)


def adaptive_avg_pool2d(input, output_size) -> Tensor:  # noqa: A002
    """The mean over PyTorch's adaptive windows [floor(i*S/O), ceil((i+1)*S/O)) per axis; an output
    size of None keeps that axis."""
    return _adaptive("avg", 2, input, output_size)


def adaptive_avg_pool3d(input, output_size) -> Tensor:  # noqa: A002
    return _adaptive("avg", 3, input, output_size)


def _max_along(x: Tensor, axis: int, n: int, o: int) -> Tensor:
    """The maximum over PyTorch's adaptive windows of one axis: each window's elements gathered into a
    row of K (the widest window; a shorter one repeats its last element, which leaves its maximum and,
    the gather summing its gradient back, the gradient as it was), then amax over the row."""
    lo = [(i * n) // o for i in range(o)]
    hi = [-(-((i + 1) * n) // o) for i in range(o)]
    k = max(h - lw for lw, h in zip(lo, hi))
    idx = np.array([[min(lw + j, h - 1) for j in range(k)] for lw, h in zip(lo, hi)], np.int64)
    g = x.index_select(axis, Tensor(idx.reshape(-1)))
    return g.reshape(*x.shape[:axis], o, k, *x.shape[axis + 1:]).amax(axis + 1)


def adaptive_max_pool1d(input, output_size, return_indices: bool = False) -> Tensor:  # noqa: A002
    return _adaptive("max", 1, input, output_size, return_indices)


def adaptive_max_pool2d(input, output_size, return_indices: bool = False) -> Tensor:  # noqa: A002
    """The maximum over PyTorch's adaptive windows [floor(i*S/O), ceil((i+1)*S/O)) per axis (an output
    size of None keeps that axis): adaptive_max_pool2d(x, 1) is global max pooling."""
    return _adaptive("max", 2, input, output_size, return_indices)


def adaptive_max_pool3d(input, output_size, return_indices: bool = False) -> Tensor:  # noqa: A002
    return _adaptive("max", 3, input, output_size, return_indices)


# ---- sliding windows as columns: unfold (im2col) and fold (its adjoint) ----------------------------

def _window_args(name: str, kernel_size, dilation, padding, stride) -> tuple[tuple[int, int], ...]:
    return tuple(ntuple(v, 2, what, name) for v, what in
                 ((kernel_size, "kernel_size"), (dilation, "dilation"), (padding, "padding"), (stride, "stride")))


def _blocks(name: str, size: tuple[int, int], k, dil, pad, st) -> tuple[int, int]:
    out = tuple((n + 2 * p - dl * (kk - 1) - 1) // s + 1 for n, kk, dl, p, s in zip(size, k, dil, pad, st))
    if min(out) < 1:
        raise _err(f"{name}: a {list(k)} kernel (dilation {list(dil)}, padding {list(pad)}) does not fit the "
                   f"input's spatial size {list(size)}")
    return out


def unfold(input: Tensor, kernel_size, dilation=1, padding=0, stride=1) -> Tensor:  # noqa: A002
    """The sliding [kh, kw] blocks of [N, C, H, W] (or [C, H, W]) as columns: [N, C * kh * kw, L] with L
    the blocks in row-major order and the rows channel-major, as torch.nn.functional.unfold."""
    x, unbatched = _batched("unfold", input, 2)
    k, dil, pad_, st = _window_args("unfold", kernel_size, dilation, padding, stride)
    oh, ow = _blocks("unfold", tuple(x.shape[2:]), k, dil, pad_, st)
    xp = pad(x, (pad_[1], pad_[1], pad_[0], pad_[0])) if any(pad_) else x
    cols = [xp[:, :, i * dil[0]: i * dil[0] + st[0] * (oh - 1) + 1: st[0],
               j * dil[1]: j * dil[1] + st[1] * (ow - 1) + 1: st[1]]
            for i in range(k[0]) for j in range(k[1])]
    y = stack(cols, 2).reshape(x.shape[0], x.shape[1] * k[0] * k[1], oh * ow)
    return y.squeeze(0) if unbatched else y


def fold(input: Tensor, output_size, kernel_size, dilation=1, padding=0, stride=1) -> Tensor:  # noqa: A002
    """unfold's adjoint: the columns [N, C * kh * kw, L] (or [C * kh * kw, L]) summed back into
    [N, C, H, W] at the positions their blocks came from (overlaps add), as torch.nn.functional.fold."""
    if input.ndim not in (2, 3):
        raise _err(f"fold: expected a 2-D (unbatched) or 3-D (batched) input, got {input.dtype}{list(input.shape)}")
    x, unbatched = (input.unsqueeze(0), True) if input.ndim == 2 else (input, False)
    size = ntuple(output_size, 2, "output_size", "fold")
    k, dil, pad_, st = _window_args("fold", kernel_size, dilation, padding, stride)
    oh, ow = _blocks("fold", size, k, dil, pad_, st)
    n, rows, length = x.shape
    if rows % (k[0] * k[1]) or length != oh * ow:
        raise _err(f"fold: input {list(input.shape)} needs C * {k[0] * k[1]} rows and {oh * ow} columns (the "
                   f"blocks of {list(size)} for these kernel, dilation, padding and stride)")
    c = rows // (k[0] * k[1])
    cols = x.reshape(n, c, k[0] * k[1], oh, ow)
    hp, wp = size[0] + 2 * pad_[0], size[1] + 2 * pad_[1]
    acc = None
    for i in range(k[0]):
        for j in range(k[1]):
            part = _spread(cols[:, :, i * k[1] + j], st, (i * dil[0], j * dil[1]), (hp, wp))
            acc = part if acc is None else acc + part
    y = acc[:, :, pad_[0]: pad_[0] + size[0], pad_[1]: pad_[1] + size[1]]
    return y.squeeze(0) if unbatched else y


def _spread(p: Tensor, stride: tuple[int, int], at: tuple[int, int], size: tuple[int, int]) -> Tensor:
    """[N, C, oh, ow] placed into zeros [N, C, *size], element (y, x) at at + stride * (y, x): zeros
    interleaved along each axis (a concatenation and a reshape), then padded (or cropped) into place."""
    n, c, oh, ow = p.shape
    if stride[0] > 1:
        gap = zeros(n, c, oh, stride[0] - 1, ow, dtype=p.dtype)
        p = cat([p.unsqueeze(3), gap], 3).reshape(n, c, oh * stride[0], ow)
    if stride[1] > 1:
        h = p.shape[2]
        gap = zeros(n, c, h, ow, stride[1] - 1, dtype=p.dtype)
        p = cat([p.unsqueeze(4), gap], 4).reshape(n, c, h, ow * stride[1])
    return pad(p, (at[1], size[1] - at[1] - p.shape[3], at[0], size[0] - at[0] - p.shape[2]))


# ---- interpolation -------------------------------------------------------------------------------

_LINEAR = {"linear": 1, "bilinear": 2, "trilinear": 3}


def _source(o: int, n: int, scale: float, align_corners: bool) -> np.ndarray:
    """PyTorch's area_pixel_compute_source_index for every output position of one axis."""
    i = np.arange(o, dtype=np.float64)
    if align_corners:
        return i * ((n - 1) / (o - 1) if o > 1 else 0.0)
    return np.maximum((i + 0.5) * scale - 0.5, 0.0)


@lru_cache(maxsize=256)
def _linear_matrix(n: int, o: int, scale: float, align_corners: bool) -> np.ndarray:
    src = _source(o, n, scale, align_corners)
    i0 = np.minimum(np.floor(src).astype(np.int64), n - 1)
    i1 = np.minimum(i0 + 1, n - 1)
    lam = src - i0
    m = np.zeros((o, n))
    np.add.at(m, (np.arange(o), i0), 1.0 - lam)
    np.add.at(m, (np.arange(o), i1), lam)
    return m


def interpolate(input: Tensor, size=None, scale_factor=None, mode: str = "nearest",  # noqa: A002
                align_corners: bool | None = None, recompute_scale_factor: bool | None = None) -> Tensor:
    """Resize the spatial dims of [N, C, *S] (1 to 3 of them): mode "nearest" (PyTorch's floor rule)
    or "linear" / "bilinear" / "trilinear" (align_corners as PyTorch; default False)."""
    x, d = input, input.ndim - 2
    if not 1 <= d <= 3:
        raise _err(f"interpolate: expected a 3-D to 5-D input [N, C, *spatial], got {list(x.shape)}")
    if mode not in ("nearest", *_LINEAR):
        raise _err(f"interpolate: mode {mode!r} is not supported (nearest, linear, bilinear, trilinear)")
    if mode in _LINEAR and _LINEAR[mode] != d:
        raise _err(f"interpolate: mode {mode!r} expects a {_LINEAR[mode] + 2}-D input, got {x.ndim}-D")
    if mode == "nearest" and align_corners is not None:
        raise _err("interpolate: align_corners applies only to the linear modes")
    if (size is None) == (scale_factor is None):
        raise _err("interpolate: give exactly one of size and scale_factor")
    spatial = x.shape[2:]
    out, scales = _resize(spatial, size, scale_factor, recompute_scale_factor)
    if mode == "nearest":
        return _nearest(x, out, scales)
    y = x
    for i, (n, o, sc) in enumerate(zip(spatial, out, scales)):
        if n != o or align_corners:
            y = _along(y, 2 + i, _linear_matrix(n, o, sc, bool(align_corners)))
    return y


def _resize(spatial, size, scale_factor, recompute_scale_factor) -> tuple[tuple[int, ...], list[float]]:
    """interpolate's output size and per-axis source step (input / output) from size or scale_factor;
    as PyTorch, a non-finite scale_factor and an output size below 1 are refused."""
    d = len(spatial)
    if size is not None:
        out = ntuple(size, d, "size", "interpolate")
    else:
        f = [float(v) for v in ((scale_factor,) * d if isinstance(scale_factor, (int, float)) else scale_factor)]
        if len(f) != d:
            raise _err(f"interpolate: scale_factor must be a number or {d} numbers, got {scale_factor!r}")
        if not all(math.isfinite(ff) for ff in f):
            raise _err(f"interpolate: scale_factor must be finite, got {scale_factor!r}")
        out = tuple(int(math.floor(n * ff)) for n, ff in zip(spatial, f))
    if min(out) < 1:
        raise _err(f"interpolate: the output size {list(out)} must be positive (input size {list(spatial)})")
    if size is not None:
        return out, [n / o for n, o in zip(spatial, out)]
    return out, [n / o if recompute_scale_factor else 1.0 / ff for n, o, ff in zip(spatial, out, f)]


def _nearest(x: Tensor, out, scales) -> Tensor:
    """src = min(floor(o * scale), n - 1) per axis: a broadcast for integer upscaling, else a gather."""
    spatial = x.shape[2:]
    idx = [np.minimum(np.floor(np.arange(o) * sc).astype(np.int64), n - 1) for n, o, sc in zip(spatial, out, scales)]
    factors = [o // n if o % n == 0 else 0 for n, o in zip(spatial, out)]
    if all(f and np.array_equal(ix, np.arange(o) // f) for f, ix, o in zip(factors, idx, out)):
        lead = list(x.shape[:2])
        inter = lead + [v for n in spatial for v in (n, 1)]
        wide = lead + [v for n, f in zip(spatial, factors) for v in (n, f)]
        return x.reshape(*inter).broadcast_to(wide).reshape(*lead, *out)
    y = x
    for i, ix in enumerate(idx):
        if not np.array_equal(ix, np.arange(spatial[i])):
            y = apply("index_select", y, Tensor(ix), axis=2 + i)
    return y


# ---- normalisation -------------------------------------------------------------------------------

def group_norm(input: Tensor, num_groups: int, weight: Tensor | None = None, bias: Tensor | None = None,  # noqa: A002
               eps: float = 1e-5) -> Tensor:
    """Normalise each group of C/num_groups channels of [N, C, *S] over its channels and positions
    (biased variance), then scale and shift per channel."""
    x = input
    if x.ndim < 2 or x.shape[1] % num_groups:
        raise _err(f"group_norm: num_groups={num_groups} must divide the channels of an [N, C, ...] input, got "
                   f"{list(x.shape)}")
    n, c, spatial = x.shape[0], x.shape[1], x.shape[2:]
    g = x.reshape(n, num_groups, c // num_groups, *spatial)
    dims = tuple(range(2, g.ndim))
    mu = g.mean(dims, keepdim=True)
    dev = g - mu
    y = dev * ((dev * dev).mean(dims, keepdim=True) + eps).rsqrt()
    per_channel = (num_groups, c // num_groups) + (1,) * len(spatial)
    if weight is not None:
        y = y * weight.reshape(*per_channel)
    if bias is not None:
        y = y + bias.reshape(*per_channel)
    return y.reshape(*x.shape)


def batch_norm(input: Tensor, running_mean: Tensor | None, running_var: Tensor | None,  # noqa: A002
               weight: Tensor | None = None, bias: Tensor | None = None, training: bool = False,
               momentum: float | Tensor = 0.1, eps: float = 1e-5) -> Tensor:
    """Normalise [N, C, *S] per channel. training: with the batch's statistics (biased variance),
    updating running_mean / running_var in place (if given) as (1 - momentum) * running + momentum *
    batch (the unbiased variance); else with the running statistics."""
    x = input
    if x.ndim < 2:
        raise _err(f"batch_norm: expected an [N, C, ...] input, got {list(x.shape)}")
    c, spatial = x.shape[1], x.ndim - 2
    for what, t in (("running_mean", running_mean), ("running_var", running_var), ("weight", weight),
                    ("bias", bias)):
        if t is not None and tuple(t.shape) != (c,):
            raise _err(f"batch_norm: {what} must be [{c}] (one per channel), got {list(t.shape)}")
    dims = (0, *range(2, x.ndim))
    count = x.numel() // c if c else 0
    per_channel = (c, *[1] * spatial)
    if training:
        if x.numel() == 0:  # PyTorch: an empty output, the running statistics untouched
            return _affine(x, weight, bias, per_channel)
        if count <= 1:
            raise _err(f"batch_norm: expected more than 1 value per channel when training, got input "
                       f"{list(x.shape)}")
        return _batch_norm_train(x, running_mean, running_var, weight, bias, momentum, eps, dims, count, per_channel)
    if running_mean is None or running_var is None:
        raise _err("batch_norm: evaluation without batch statistics needs running_mean and running_var")
    y = (x - running_mean.reshape(*per_channel)) * (running_var.reshape(*per_channel) + eps).rsqrt()
    return _affine(y, weight, bias, per_channel)


def _affine(y: Tensor, weight: Tensor | None, bias: Tensor | None, per_channel) -> Tensor:
    """y * weight + bias per channel (either may be absent)."""
    if weight is not None:
        y = y * weight.reshape(*per_channel)
    return y + bias.reshape(*per_channel) if bias is not None else y


def _batch_norm_train(x, running_mean, running_var, weight, bias, momentum, eps, dims, count, per_channel) -> Tensor:
    """Training-mode batch_norm with two-pass statistics, as PyTorch's: the per-channel mean, then the
    mean of (x - m)^2 with m = mean.detach() (E[x^2] - E[x]^2 in f32 cancels to noise once |mean| is
    a few thousand standard deviations; the centred form stays accurate whatever the mean). The
    variance's gradient through m is an exact zero (the deviations sum to zero), so detaching m costs
    nothing and keeps the backward to autodiff's two centred column sums over (dy, x): y = (x - m) *
    scale + shift with per-channel scale = w * rstd and shift = b + (m - mean) * scale (= b: the term
    is an exact per-channel zero that carries mean's gradient), whose backward needs only sum(dy)
    (dshift, and through it dmean = -scale * dshift) and sum(dy * (x - m)) (dscale). The sums stay
    centred as PyTorch's: the scale-and-shift form x * scale + shift would need sum(dy * x) - mean *
    sum(dy), whose cancellation a convolution's weight gradient after a pooled loss amplifies by the
    per-channel count (tests/nn/test_batch_norm_large_count.py).
    Statistics and the normalisation are f32 for f32/f16/bf16 inputs (PyTorch's accumulate type)."""
    acc = x.float() if x.dtype.is_float and x.dtype.itemsize < 4 else x
    mean = acc.sum(dims, keepdim=True) / count
    m = mean.detach()
    dev = acc - m
    var = (dev * dev).sum(dims, keepdim=True) / count
    scale = (var + eps).rsqrt()
    if weight is not None:
        scale = scale * weight.reshape(*per_channel).to(acc.dtype)
    shift = (m - mean) * scale
    if bias is not None:
        shift = shift + bias.reshape(*per_channel).to(acc.dtype)
    if running_mean is not None and running_var is not None:
        _update_running(running_mean, running_var, mean, var, momentum, count)
    return (dev * scale + shift).to(x.dtype)


def _update_running(running_mean, running_var, mu, var, momentum, count) -> None:
    """running = (1 - momentum) * running + momentum * batch, in place (an aliased state output when
    traced); the variance is the unbiased one, as PyTorch's."""
    c = running_mean.shape[0]
    with no_grad():
        m = momentum.to(running_mean.dtype) if isinstance(momentum, Tensor) else float(momentum)
        batch_mean = mu.detach().reshape(c).to(running_mean.dtype)
        batch_var = (var.detach().reshape(c) * (count / (count - 1))).to(running_var.dtype)
        running_mean.copy_(running_mean * (1 - m) + batch_mean * m)
        running_var.copy_(running_var * (1 - m) + batch_var * m)


def instance_norm(input: Tensor, running_mean: Tensor | None = None, running_var: Tensor | None = None,  # noqa: A002
                  weight: Tensor | None = None, bias: Tensor | None = None, use_input_stats: bool = True,
                  momentum: float = 0.1, eps: float = 1e-5) -> Tensor:
    """Normalise each channel of each sample of [N, C, *S] over its positions (biased variance), then
    scale and shift per channel: group_norm with one group per channel. With running_mean and
    running_var (InstanceNorm's track_running_stats), they move in place toward the batch's average of
    the per-sample statistics (the variance unbiased over the positions), as PyTorch's; with
    use_input_stats=False the running statistics normalise instead (evaluation)."""
    if input.ndim < 3:
        raise _err(f"instance_norm: expected an [N, C, ...] input with positions, got {list(input.shape)}")
    if (running_mean is None) != (running_var is None):
        raise _err("instance_norm: give both running_mean and running_var, or neither")
    if not use_input_stats:
        if running_mean is None:
            raise _err("instance_norm: use_input_stats=False needs running_mean and running_var")
        return batch_norm(input, running_mean, running_var, weight, bias, False, eps=eps)
    if running_mean is not None:
        positions = input.numel() // (input.shape[0] * input.shape[1])
        if positions <= 1:
            raise _err(f"instance_norm: expected more than 1 position per channel, got input {list(input.shape)}")
        acc = input.float() if input.dtype.is_float and input.dtype.itemsize < 4 else input
        dims = tuple(range(2, input.ndim))
        mean = acc.mean(dims, keepdim=True)  # [N, C, 1, ...]: two passes, as batch_norm's statistics
        dev = acc - mean
        var = (dev * dev).mean(dims)
        _update_running(running_mean, running_var, mean.reshape(*mean.shape[:2]).mean(0), var.mean(0), momentum,
                        positions)
    return group_norm(input, input.shape[1], weight, bias, eps)


def pixel_shuffle(input: Tensor, upscale_factor: int) -> Tensor:  # noqa: A002
    """[..., C * r * r, H, W] -> [..., C, H * r, W * r], as torch.nn.functional.pixel_shuffle."""
    r = int(upscale_factor)
    *batch, c, h, w = input.shape
    if c % (r * r):
        raise _err(f"pixel_shuffle: channels {c} must be divisible by upscale_factor**2 = {r * r}")
    k = len(batch)
    x = input.reshape(*batch, c // (r * r), r, r, h, w)
    x = x.permute(*range(k), k, k + 3, k + 1, k + 4, k + 2)
    return x.reshape(*batch, c // (r * r), h * r, w * r)


def pixel_unshuffle(input: Tensor, downscale_factor: int) -> Tensor:  # noqa: A002
    """[..., C, H * r, W * r] -> [..., C * r * r, H, W]: pixel_shuffle's inverse."""
    r = int(downscale_factor)
    *batch, c, h, w = input.shape
    if h % r or w % r:
        raise _err(f"pixel_unshuffle: height {h} and width {w} must be divisible by downscale_factor {r}")
    k = len(batch)
    x = input.reshape(*batch, c, h // r, r, w // r, r)
    x = x.permute(*range(k), k, k + 2, k + 4, k + 1, k + 3)
    return x.reshape(*batch, c * r * r, h // r, w // r)


def _channel_dropout(name: str, ranks: tuple[int, ...], input: Tensor, p: float, training: bool,  # noqa: A002
                     generator) -> Tensor:
    """Whole channels zeroed with probability p (the rest scaled by 1 / (1 - p)): dropout of a mask
    of one value per (sample, channel), broadcast over the positions."""
    if input.ndim not in ranks:
        raise _err(f"{name}: expected a {' or '.join(f'{r}-D' for r in ranks)} input, got {list(input.shape)}")
    if not training or p == 0.0:
        return input
    spatial = ranks[-1] - 2  # the positions' dims: a mask of one value per (sample, channel) over them
    keep = dropout(ones(*input.shape[:input.ndim - spatial], *([1] * spatial), dtype=input.dtype), p, True,
                   generator)
    return input * keep


def dropout1d(input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False,  # noqa: A002
              generator=None) -> Tensor:
    """Channel dropout of [N, C, L] (or [C, L])."""
    return _channel_dropout("dropout1d", (2, 3), input, p, training, generator)


def dropout2d(input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False,  # noqa: A002
              generator=None) -> Tensor:
    """Channel dropout of [N, C, H, W] (or [C, H, W])."""
    return _channel_dropout("dropout2d", (3, 4), input, p, training, generator)


def dropout3d(input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False,  # noqa: A002
              generator=None) -> Tensor:
    """Channel dropout of [N, C, D, H, W] (or [C, D, H, W])."""
    return _channel_dropout("dropout3d", (4, 5), input, p, training, generator)
