"""Resampling and rearranging the spatial dims, in flame.nn.functional (PyTorch names and semantics),
written over primitives:
- interpolate: nearest by broadcasting (integer factors) or index_select; (bi/tri)linear axis by axis,
  each output two neighbours gathered and weighted as PyTorch's kernels (align_corners as PyTorch);
  bicubic the same with four neighbours (clamped to the border) and Keys' cubic convolution weights
  (a = -0.75), as PyTorch's; antialias=True (bilinear, bicubic) PyTorch's separable antialiased
  filters: per output, the triangle (or Keys' cubic, a = -0.5) filter stretched by the downscale
  factor over the input positions it covers, its weights normalised to sum to one.
- pixel_shuffle / pixel_unshuffle, channel_shuffle: a reshape, a permutation of the dims and a reshape.
- local_response_norm: PyTorch's formula, an average pool of the squares along the (padded) channels.
- unfold (im2col): the strided slices of the kernel offsets stacked into columns; fold, its adjoint:
  each offset's columns interleaved with zeros, padded into place and summed."""

from __future__ import annotations

import math
import warnings
from functools import lru_cache

import numpy as np

from flame.errors import ArgumentError
from flame.frontend.autocast import policy
from flame.frontend.context import user_location
from flame.frontend.creation import zeros
from flame.frontend.dispatch import apply
from flame.frontend.losses import pad
from flame.frontend.norms import kernel_dtypes, widened
from flame.frontend.pooling import _adaptive, avg_pool2d, avg_pool3d
from flame.frontend.spatial import _batched, _err, ntuple
from flame.frontend.tensor import Tensor
from flame.frontend.tensor_core import cat, stack, where
from flame.frontend.views import new_tensor
from flame.ir.dtypes import boolean, u8

__all__ = ["channel_shuffle", "fold", "interpolate", "local_response_norm", "pixel_shuffle", "pixel_unshuffle",
           "unfold", "upsample", "upsample_bilinear", "upsample_nearest"]


# ---- interpolation -------------------------------------------------------------------------------

_LINEAR = {"linear": 1, "bilinear": 2, "trilinear": 3}


@lru_cache(maxsize=256)
def _linear_taps(n: int, o: int, scale: float, align_corners: bool, wide: bool):
    """(i0, i1, lam) of one axis, as PyTorch's linear kernels: output j is (1 - lam) x[i0] + lam x[i1], the
    source positions computed in f32 (f64 for a `wide`, f64, input), as PyTorch's opmath type."""
    ft = np.float64 if wide else np.float32
    i = np.arange(o, dtype=ft)
    if align_corners:
        src = i * (ft(n - 1) / ft(o - 1) if o > 1 else ft(0.0))
    else:
        src = np.maximum((i + ft(0.5)) * ft(scale) - ft(0.5), ft(0.0))
    i0 = np.minimum(np.floor(src).astype(np.int64), n - 1)
    return i0, np.minimum(i0 + 1, n - 1), src - i0.astype(ft)


def _linear_along(x: Tensor, axis: int, taps) -> Tensor:
    """x with axis `axis` interpolated from two neighbours per output, weighted, as PyTorch's kernels
    compute it (an f16/bf16 input in f32, rounded once): a non-finite input reaches only the outputs that
    read it (a product by a dense matrix would give NaN wherever a zero weight meets an inf)."""
    i0, i1, lam = taps
    xs = widened(x)
    shape = [1] * x.ndim
    shape[axis] = len(lam)

    def weight(w):
        return Tensor(np.asarray(w).reshape(shape).astype(xs.dtype.np_dtype), xs.dtype)

    y = xs.index_select(axis, Tensor(i0)) * weight(1.0 - lam) + xs.index_select(axis, Tensor(i1)) * weight(lam)
    return y.to(x.dtype)


_CUBIC_A = -0.75  # PyTorch's (and OpenCV's) cubic convolution parameter


@lru_cache(maxsize=256)
def _cubic_taps(n: int, o: int, scale: float, align_corners: bool, wide: bool):
    """(the 4 source indices, the 4 weights) of one axis, as PyTorch's bicubic kernels: the source
    position unclamped (align_corners=False: (j + 0.5) * scale - 0.5), its floor the second tap, the
    taps clamped to [0, n) and the weights Keys' cubic convolution of the fraction (clamped to [0, 1]),
    computed in f32 (f64 for a `wide` input), PyTorch's opmath type."""
    ft = np.float64 if wide else np.float32
    j = np.arange(o, dtype=ft)
    if align_corners:
        src = j * (ft(n - 1) / ft(o - 1) if o > 1 else ft(0.0))
    else:
        src = (j + ft(0.5)) * ft(scale) - ft(0.5)
    i = np.minimum(np.floor(src).astype(np.int64), n - 1)
    t = np.clip(src - i.astype(ft), ft(0), ft(1))
    a = ft(_CUBIC_A)

    def near(x):  # |x| <= 1
        return ((a + ft(2)) * x - (a + ft(3))) * x * x + ft(1)

    def far(x):  # 1 < |x| < 2
        return ((a * x - ft(5) * a) * x + ft(8) * a) * x - ft(4) * a

    weights = (far(t + ft(1)), near(t), near(ft(1) - t), far(ft(2) - t))
    return tuple(np.clip(i - 1 + k, 0, n - 1) for k in range(4)), weights


def _cubic_along(x: Tensor, axis: int, taps) -> Tensor:
    """x (already in its compute dtype) with axis `axis` interpolated from four neighbours per output."""
    idx, weights = taps
    shape = [1] * x.ndim
    shape[axis] = len(weights[0])
    y = None
    for i, w in zip(idx, weights):
        term = x.index_select(axis, Tensor(i)) * Tensor(np.asarray(w).reshape(shape).astype(x.dtype.np_dtype), x.dtype)
        y = term if y is None else y + term
    return y


_AA_CUBIC_A = -0.5  # PyTorch's antialiased bicubic (PIL's) cubic convolution parameter


def _aa_filter(mode: str, x: np.ndarray) -> np.ndarray:
    """PyTorch's antialiasing filters (in x's dtype): the triangle (bilinear) or Keys' cubic with a = -0.5
    (bicubic)."""
    ft = x.dtype.type
    x = np.abs(x)
    one, two, zero = ft(1), ft(2), ft(0)
    if mode == "bilinear":
        return np.where(x < one, one - x, zero)
    a = ft(_AA_CUBIC_A)
    near = ((a + two) * x - (a + ft(3))) * x * x + one
    far = ((a * x - ft(5) * a) * x + ft(8) * a) * x - ft(4) * a
    return np.where(x < one, near, np.where(x < two, far, zero))


@lru_cache(maxsize=256)
def _aa_taps(n: int, o: int, scale: float, align_corners: bool, mode: str, wide: bool):
    """(indices [o, K], weights [o, K], used [o, K]) of one axis, as PyTorch's _compute_weights_aa: output
    j centred at scale * (j + 0.5) reads the inputs within the filter's support (interp_size / 2, times
    the scale when shrinking), weighted by the filter at (input + 0.5 - centre) / max(scale, 1) and
    normalised; the taps past each output's span are unused (weight 0, never read). Computed in f32
    (f64 for a `wide` input) where PyTorch's kernel computes in its scalar type, so the spans agree."""
    ft = np.float64 if wide else np.float32
    if align_corners:
        sc = ft(ft(n - 1) / ft(o - 1)) if o > 1 else ft(0)
    else:
        sc = ft(scale)
    half = 1.0 if mode == "bilinear" else 2.0
    support = ft(half * np.float64(sc)) if sc >= 1 else ft(half)
    k = int(math.ceil(support)) * 2 + 1
    centre = (np.float64(sc) * (np.arange(o) + 0.5)).astype(ft)
    lo = np.maximum(np.trunc((centre - support).astype(np.float64) + 0.5).astype(np.int64), 0)
    size = np.clip(np.minimum(np.trunc((centre + support).astype(np.float64) + 0.5).astype(np.int64), n) - lo, 0, k)
    j = np.arange(k)
    used = j[None, :] < size[:, None]
    inv = np.float64(ft(1.0 / np.float64(sc))) if sc >= 1 else 1.0
    at = (((j[None, :] + lo[:, None]).astype(ft) - centre[:, None]).astype(np.float64) + 0.5) * inv
    w = np.where(used, _aa_filter(mode, at.astype(ft)), ft(0))
    total = np.zeros(o, ft)
    for c in range(k):  # summed in order, as PyTorch's loop
        total = total + w[:, c]
    w = np.where(total[:, None] != 0, w / np.where(total != 0, total, ft(1))[:, None], w)
    return np.minimum(lo[:, None] + j[None, :], n - 1), w, used


def _aa_along(x: Tensor, axis: int, taps) -> Tensor:
    """x (already in its compute dtype) with axis `axis` resampled by the antialiased taps: each output
    the weighted sum of the inputs in its span (an input outside it is never read, so a non-finite
    one reaches only the outputs whose span holds it)."""
    idx, w, used = taps
    shape = [1] * x.ndim
    shape[axis] = idx.shape[0]
    y = None
    for k in range(idx.shape[1]):
        if not used[:, k].any():
            continue
        term = x.index_select(axis, Tensor(idx[:, k])) * Tensor(w[:, k].reshape(shape).astype(x.dtype.np_dtype),
                                                                 x.dtype)
        if not used[:, k].all():
            term = where(Tensor(used[:, k].reshape(shape)), term, 0.0)
        y = term if y is None else y + term
    return y


def _is_identity(n: int, taps) -> bool:
    """The taps give every output its own input (an axis kept at its size): nothing to resample."""
    idx, w, used = taps
    own = used & (idx == np.arange(idx.shape[0])[:, None])
    return idx.shape[0] == n and bool(np.all(np.where(own, w == 1.0, np.where(used, w == 0.0, True))))


def interpolate(input: Tensor, size=None, scale_factor=None, mode: str = "nearest",  # noqa: A002
                align_corners: bool | None = None, recompute_scale_factor: bool | None = None,
                antialias: bool = False) -> Tensor:
    """Resize the spatial dims of [N, C, *S] (1 to 3 of them): mode "nearest" (PyTorch's floor rule,
    its source positions computed in f32 as PyTorch's kernels), "nearest-exact" (the pixel centres'
    rule), "area" (adaptive average pooling to the output size), "linear" / "bilinear" / "trilinear"
    or "bicubic" (4-D input; align_corners as PyTorch; default False). antialias=True (bilinear and
    bicubic, 4-D input) resamples with PyTorch's antialiased filters."""
    x, d = input, input.ndim - 2
    if not 1 <= d <= 3:
        raise _err(f"interpolate: expected a 3-D to 5-D input [N, C, *spatial], got {list(x.shape)}")
    if mode not in ("nearest", "nearest-exact", "area", "bicubic", *_LINEAR):
        raise _err(f"interpolate: mode {mode!r} is not supported (nearest, nearest-exact, area, linear, bilinear, "
                   f"bicubic, trilinear)")
    if antialias and not (mode in ("bilinear", "bicubic") and x.ndim == 4):
        raise ValueError("interpolate: the anti-alias option is restricted to bilinear and bicubic modes and "
                         "requires a 4-D tensor as input")
    if mode in _LINEAR and _LINEAR[mode] != d:
        raise _err(f"interpolate: mode {mode!r} expects a {_LINEAR[mode] + 2}-D input, got {x.ndim}-D")
    if mode == "bicubic" and d != 2:
        raise _err(f"interpolate: mode 'bicubic' expects a 4-D input, got {x.ndim}-D")
    if mode not in _LINEAR and mode != "bicubic" and align_corners is not None:
        raise _err("interpolate: align_corners applies only to the linear modes")
    if (size is None) == (scale_factor is None):
        raise _err("interpolate: give exactly one of size and scale_factor")
    if (mode in _LINEAR or mode == "bicubic") and not x.dtype.is_float:
        # the weights would be cast to the integer dtype (every output 0); PyTorch's uint8 kernels round in
        # fixed point, pass by pass, which these float ones do not reproduce
        raise NotImplementedError(f"interpolate: mode {mode!r} is not implemented for an integer input ({x.dtype}) "
                                  f"in flame; convert it to a float dtype first (x.float())\n  at {user_location()}")
    if mode in ("nearest", "nearest-exact"):  # torch's CPU kernels: floating and uint8 inputs
        kernel = "upsample_nearest2d_channels_last" if d == 2 else "compute_indices_weights_nearest"
        kernel_dtypes("interpolate", kernel, x, also=(u8,))
    spatial = x.shape[2:]
    out, scales = _resize(spatial, size, scale_factor, recompute_scale_factor)
    if mode == "area":
        return _adaptive("avg", d, x, out)
    return _upsample(x, mode, out, scales, align_corners, antialias)


def upsample(input: Tensor, size=None, scale_factor=None, mode: str = "nearest",  # noqa: A002
             align_corners: bool | None = None) -> Tensor:
    """PyTorch's deprecated name of interpolate (it warns as PyTorch does)."""
    warnings.warn("`nn.functional.upsample` is deprecated. Use `nn.functional.interpolate` instead.", stacklevel=3)
    return interpolate(input, size, scale_factor, mode, align_corners)


def upsample_nearest(input: Tensor, size=None, scale_factor=None) -> Tensor:  # noqa: A002
    """PyTorch's deprecated interpolate(..., mode="nearest") (it warns as PyTorch does)."""
    warnings.warn("`nn.functional.upsample_nearest` is deprecated. Use `nn.functional.interpolate` instead.",
                  stacklevel=3)
    return interpolate(input, size, scale_factor, mode="nearest")


def upsample_bilinear(input: Tensor, size=None, scale_factor=None) -> Tensor:  # noqa: A002
    """PyTorch's deprecated interpolate(..., mode="bilinear", align_corners=True) (it warns as PyTorch does)."""
    warnings.warn("`nn.functional.upsample_bilinear` is deprecated. Use `nn.functional.interpolate` instead.",
                  stacklevel=3)
    return interpolate(input, size, scale_factor, mode="bilinear", align_corners=True)


# autocast: PyTorch's upsample_nearest* / upsample_*linear* / *_aa are on its CUDA float32 list (area is not); on none
# of its CPU lists
@policy("f32", cpu="")
def _upsample(x: Tensor, mode: str, out, scales, align_corners, antialias: bool = False) -> Tensor:
    if antialias:  # along the width first, then the height, as PyTorch's separable kernel
        y = widened(x)
        for axis in (3, 2):
            taps = _aa_taps(x.shape[axis], out[axis - 2], float(scales[axis - 2]), bool(align_corners), mode,
                            y.dtype.itemsize > 4)
            if not _is_identity(x.shape[axis], taps):
                y = _aa_along(y, axis, taps)
        return y.to(x.dtype)
    if mode == "bicubic":  # every output from all its taps, as PyTorch's (an inf reaches its neighbours as NaN)
        y = widened(x)
        for axis in (3, 2):  # along the width first, then the height, as PyTorch's kernel
            n, o, sc = x.shape[axis], out[axis - 2], scales[axis - 2]
            y = _cubic_along(y, axis, _cubic_taps(n, o, sc, bool(align_corners), y.dtype.itemsize > 4))
        return y.to(x.dtype)
    if mode not in _LINEAR:
        return _nearest(x, out, scales, exact=mode == "nearest-exact")
    y = x
    for i, (n, o, sc) in enumerate(zip(x.shape[2:], out, scales)):
        if n != o or align_corners:
            y = _linear_along(y, 2 + i, _linear_taps(n, o, sc, bool(align_corners), y.dtype.itemsize > 4))
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


def _nearest_source(n: int, o: int, scale: float, exact: bool) -> np.ndarray:
    """The input position of each output position along one axis, in f32 arithmetic as PyTorch's
    kernels (nearest: floor(o * scale); nearest-exact: floor((o + 0.5) * scale)), clamped to n - 1."""
    i = np.arange(o)
    sc = np.float32(scale)
    src = np.float32((i + 0.5) * np.float64(sc)) if exact else i.astype(np.float32) * sc
    return np.minimum(np.floor(src).astype(np.int64), n - 1)


def _nearest(x: Tensor, out, scales, exact: bool = False) -> Tensor:
    """Each axis' source positions: a broadcast for integer upscaling, else a gather."""
    spatial = x.shape[2:]
    idx = [_nearest_source(n, o, sc, exact) for n, o, sc in zip(spatial, out, scales)]
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


# ---- pixel (un)shuffle ---------------------------------------------------------------------------

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


# ---- sliding windows as columns: unfold (im2col) and fold (its adjoint) --------------------------

def _window_args(name: str, kernel_size, dilation, padding, stride) -> tuple[tuple[int, int], ...]:
    return tuple(ntuple(v, 2, what, name) for v, what in
                 ((kernel_size, "kernel_size"), (dilation, "dilation"), (padding, "padding"), (stride, "stride")))


def _blocks(name: str, size: tuple[int, int], k, dil, pad, st) -> tuple[int, int]:
    out = tuple((n + 2 * p - dl * (kk - 1) - 1) // s + 1 for n, kk, dl, p, s in zip(size, k, dil, pad, st))
    if min(out) < 1:
        raise _err(f"{name}: a {list(k)} kernel (dilation {list(dil)}, padding {list(pad)}) does not fit the "
                   f"input's spatial size {list(size)}")
    return out


@policy("")  # autocast: on none of PyTorch's lists: its inputs' dtype
def unfold(input: Tensor, kernel_size, dilation=1, padding=0, stride=1) -> Tensor:  # noqa: A002
    """The sliding [kh, kw] blocks of [N, C, H, W] (or [C, H, W]) as columns: [N, C * kh * kw, L] with L
    the blocks in row-major order and the rows channel-major, as torch.nn.functional.unfold."""
    x, unbatched = _batched("unfold", input, 2)
    kernel_dtypes("unfold", "im2col_out_cpu", x, also=(boolean,))
    k, dil, pad_, st = _window_args("unfold", kernel_size, dilation, padding, stride)
    oh, ow = _blocks("unfold", tuple(x.shape[2:]), k, dil, pad_, st)
    xp = pad(x, (pad_[1], pad_[1], pad_[0], pad_[0])) if any(pad_) else x
    cols = [xp[:, :, i * dil[0]: i * dil[0] + st[0] * (oh - 1) + 1: st[0],
               j * dil[1]: j * dil[1] + st[1] * (ow - 1) + 1: st[1]]
            for i in range(k[0]) for j in range(k[1])]
    y = stack(cols, 2).reshape(x.shape[0], x.shape[1] * k[0] * k[1], oh * ow)
    return y.squeeze(0) if unbatched else y


@policy("")  # autocast: on none of PyTorch's lists: its inputs' dtype
def fold(input: Tensor, output_size, kernel_size, dilation=1, padding=0, stride=1) -> Tensor:  # noqa: A002
    """unfold's adjoint: the columns [N, C * kh * kw, L] (or [C * kh * kw, L]) summed back into
    [N, C, H, W] at the positions their blocks came from (overlaps add), as torch.nn.functional.fold."""
    if input.ndim not in (2, 3):
        raise _err(f"fold: expected a 2-D (unbatched) or 3-D (batched) input, got {input.dtype}{list(input.shape)}")
    x, unbatched = (input.unsqueeze(0), True) if input.ndim == 2 else (input, False)
    kernel_dtypes("fold", "col2im_out_cpu", x, also=(boolean,))
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


# ---- channel_shuffle and local_response_norm: along the channel dim -------------------------------

def channel_shuffle(input: Tensor, groups: int) -> Tensor:  # noqa: A002
    """[N, C, *] -> [N, g, C/g, *] -> transposed to [N, C/g, g, *] -> [N, C, *] (g = groups), as
    torch.nn.functional.channel_shuffle: the input needs more than two dims, groups > 0 dividing C."""
    if input.ndim <= 2:
        raise _err(f"channel_shuffle expects input with > 2 dims, but got input with sizes {list(input.shape)}")
    g = int(groups)
    if g <= 0:
        raise ArgumentError(f"channel_shuffle: Number of groups to divide channels in must be positive. Value of "
                            f"groups:{g}\n  at {user_location()}")
    n, c, *rest = input.shape
    if c % g:
        raise _err(f"channel_shuffle: Number of channels must be divisible by groups. Got {c} channels and {g} groups.")
    return input.reshape(n, g, c // g, *rest).transpose(1, 2).reshape(n, c, *rest)


def local_response_norm(input: Tensor, size: int, alpha: float = 1e-4, beta: float = 0.75,  # noqa: A002
                        k: float = 1.0) -> Tensor:
    """x / (k + alpha * m) ** beta with m the mean of x**2 over a window of `size` channels (zero-padded by
    size // 2 before and (size - 1) // 2 after, divided by size), as torch.nn.functional.local_response_norm:
    an avg_pool2d over [N, 1, C, L] for a 3-D input, an avg_pool3d over [N, 1, C, D1, D2*...] above."""
    if input.ndim < 3:
        raise _err(f"local_response_norm: Expected 3D or higher dimensionality input (got {input.ndim} dimensions)")
    size = int(size)
    if size <= 0:
        raise ArgumentError(f"local_response_norm: size must be positive (the window's kernel size), got {size}"
                            f"\n  at {user_location()}")
    if input.numel() == 0:
        return input
    div = input * input
    if input.ndim == 3:
        div = pad(div.unsqueeze(1), (0, 0, size // 2, (size - 1) // 2))
        div = avg_pool2d(div, (size, 1), stride=1).squeeze(1)
    else:
        n, c, d = input.shape[:3]
        div = pad(div.reshape(n, 1, c, d, -1), (0, 0, 0, 0, size // 2, (size - 1) // 2))
        div = avg_pool3d(div, (size, 1, 1), stride=1).squeeze(1).reshape(*input.shape)
    return input / (div * alpha + k) ** beta


for _name in __all__:  # PyTorch's resamplings make new tensors, never views of the input (views.new_tensor)
    globals()[_name] = new_tensor(globals()[_name])
