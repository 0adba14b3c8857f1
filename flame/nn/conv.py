"""The convolutional layers of flame.nn (PyTorch names, arguments, parameter layouts and initialisation,
so a torch state_dict loads): Conv1d/2d/3d, ConvTranspose1d/2d/3d, pooling and MaxUnpool, Upsample (and
UpsamplingNearest2d / UpsamplingBilinear2d) and GroupNorm, each a thin Module over flame.frontend's conv,
pooling, resample and norms; and the Lazy convolutions, which take their input size from their first call
(flame/nn/lazy.py). The batch norms are in flame/nn/batchnorm.py."""

from __future__ import annotations

import math
from typing import Any

from flame.errors import ShapeError
from flame.frontend import conv as C
from flame.frontend import fractional_pool as FP
from flame.frontend import norms as N
from flame.frontend import pooling as P
from flame.frontend import resample as R
from flame.frontend.context import user_location
from flame.frontend.creation import Generator, zeros
from flame.frontend.default_dtype import float_dtype
from flame.frontend.losses import pad
from flame.frontend.spatial import ntuple
from flame.frontend.tensor import Tensor
from flame.nn.layers import _register_affine, _reset_affine, _reset_kaiming
from flame.nn.lazy import LazyModuleMixin
from flame.nn.module import Module
from flame.nn.parameter import Parameter, is_lazy

__all__ = ["AdaptiveAvgPool1d", "AdaptiveAvgPool2d", "AdaptiveAvgPool3d", "AdaptiveMaxPool1d", "AdaptiveMaxPool2d",
           "AdaptiveMaxPool3d", "Fold", "Unfold", "AvgPool1d", "AvgPool2d", "AvgPool3d",
           "Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d",
           "ConvTranspose2d", "ConvTranspose3d", "FractionalMaxPool2d", "FractionalMaxPool3d", "GroupNorm",
           "LazyConv1d", "LazyConv2d", "LazyConv3d", "LazyConvTranspose1d", "LazyConvTranspose2d",
           "LazyConvTranspose3d", "MaxPool1d", "MaxPool2d", "MaxPool3d", "MaxUnpool1d", "MaxUnpool2d",
           "MaxUnpool3d", "Upsample",
           "UpsamplingNearest2d", "UpsamplingBilinear2d"]


class _ConvNd(Module):
    """The shared part of the convolutions: weight (and bias) initialised as PyTorch's _ConvNd
    (kaiming_uniform(a=sqrt(5)), bias U(-1/sqrt(fan_in), 1/sqrt(fan_in)))."""

    d = 2
    transposed = False

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0, dilation=1,
                 groups: int = 1, bias: bool = True, padding_mode: str = "zeros", device: Any = None,
                 dtype: Any = None, *, generator: Generator | None = None, output_padding=0):
        super().__init__()
        name = type(self).__name__
        if groups < 1 or in_channels % groups or out_channels % groups:
            raise ShapeError(f"{name}: groups={groups} must divide in_channels={in_channels} and "
                             f"out_channels={out_channels}")
        if padding_mode not in ("zeros", "reflect", "replicate", "circular"):
            raise ValueError(f"{name}: padding_mode must be one of 'zeros', 'reflect', 'replicate', 'circular', "
                             f"got {padding_mode!r}")
        if isinstance(padding, str):
            if padding not in ("same", "valid"):
                raise ValueError(f"Invalid padding string {padding!r}, should be one of {{'valid', 'same'}}")
            if padding == "same" and any(s != 1 for s in ntuple(stride, self.d, "stride", name)):
                raise ValueError("padding='same' is not supported for strided convolutions")
        if padding_mode != "zeros" and self.transposed:
            raise ValueError(f"{name}: only 'zeros' padding_mode is supported for {name} (as PyTorch's)")
        d = self.d
        self.in_channels, self.out_channels, self.groups = in_channels, out_channels, groups
        self.kernel_size = ntuple(kernel_size, d, "kernel_size", name)
        self.stride, self.dilation = ntuple(stride, d, "stride", name), ntuple(dilation, d, "dilation", name)
        self.padding = padding if isinstance(padding, str) else ntuple(padding, d, "padding", name)
        self.output_padding = ntuple(output_padding, d, "output_padding", name)
        self.padding_mode = padding_mode
        dt = float_dtype(dtype)
        shape = ((in_channels, out_channels // groups) if self.transposed else
                 (out_channels, in_channels // groups)) + self.kernel_size
        self.weight = Parameter(zeros(*shape, dtype=dt))
        self.register_parameter("bias", Parameter(zeros(out_channels, dtype=dt)) if bias else None)
        self.reset_parameters(generator)
        self._place(device)

    def reset_parameters(self, generator: Generator | None = None) -> None:
        _reset_kaiming(self, self.weight.shape[1] * math.prod(self.kernel_size), generator)

    def extra_repr(self) -> str:
        s = f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, stride={self.stride}"
        if self.padding != (0,) * self.d:
            s += f", padding={self.padding}"
        if self.dilation != (1,) * self.d:
            s += f", dilation={self.dilation}"
        if self.output_padding != (0,) * self.d:
            s += f", output_padding={self.output_padding}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        s += "" if self.bias is not None else ", bias=False"
        return s + ("" if self.padding_mode == "zeros" else f", padding_mode={self.padding_mode}")


class _Conv(_ConvNd):
    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1, groups=1,
                 bias=True, padding_mode="zeros", device=None, dtype=None, *, generator=None):
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias,
                         padding_mode, device, dtype, generator=generator)

    def forward(self, x: Tensor) -> Tensor:
        if self.padding_mode == "zeros":
            return C._conv(self.d, x, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups)
        # PyTorch's: pad with the mode first (last dim first, as F.pad), then convolve without padding
        pairs = C._conv_padding(type(self).__name__, self.padding, self.kernel_size, self.stride, self.dilation,
                                self.d)
        flat = [p for lo_hi in reversed(pairs) for p in lo_hi]
        return C._conv(self.d, pad(x, flat, self.padding_mode), self.weight, self.bias, self.stride, 0,
                       self.dilation, self.groups)


class Conv1d(_Conv):
    """y = conv1d(x, weight) + bias; weight [out_channels, in_channels/groups, k]."""

    d = 1


class Conv2d(_Conv):
    """y = conv2d(x, weight) + bias; weight [out_channels, in_channels/groups, kh, kw]; padding an int, a
    pair, "valid" or "same"."""

    d = 2


class Conv3d(_Conv):
    d = 3


class _ConvTranspose(_ConvNd):
    transposed = True

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, output_padding=0, groups=1,
                 bias=True, dilation=1, padding_mode="zeros", device=None, dtype=None, *, generator=None):
        if isinstance(padding, str):
            raise ShapeError(f"{type(self).__name__}: padding must be an int or a tuple, got {padding!r}")
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias,
                         padding_mode, device, dtype, generator=generator, output_padding=output_padding)

    def forward(self, x: Tensor, output_size=None) -> Tensor:
        out_pad = self.output_padding
        if output_size is not None:  # PyTorch's choice of output_padding for a requested size
            want = tuple(output_size)
            lead = 2 if x.ndim == self.d + 2 else 1  # the batch and channel dimensions (channel alone unbatched)
            if len(want) == lead + self.d:
                want = want[lead:]
            if len(want) != self.d:
                raise ShapeError(f"ConvTranspose{self.d}D: for {x.ndim}D input, output_size must have {self.d} "
                                 f"or {lead + self.d} elements (got {len(want)})\n  at {user_location()}")
            least = [(n - 1) * s - 2 * p + dl * (k - 1) + 1 for n, s, p, dl, k in
                     zip(x.shape[-self.d:], self.stride, self.padding, self.dilation, self.kernel_size)]
            most = [m + s - 1 for m, s in zip(least, self.stride)]
            if any(not m <= w <= top for w, m, top in zip(want, least, most)):
                raise ShapeError(f"{type(self).__name__}: requested an output size of {list(want)}, but valid sizes "
                                 f"range from {least} to {most} (for an input of {list(x.shape[-self.d:])})"
                                 f"\n  at {user_location()}")
            out_pad = tuple(w - m for w, m in zip(want, least))
        return C._conv_transpose(self.d, x, self.weight, self.bias, self.stride, self.padding, out_pad,
                                 self.groups, self.dilation)


class ConvTranspose1d(_ConvTranspose):
    d = 1


class ConvTranspose2d(_ConvTranspose):
    """The transposed convolution (conv2d's data gradient); weight [in_channels, out_channels/groups,
    kh, kw] as PyTorch's."""

    d = 2


class ConvTranspose3d(_ConvTranspose):
    d = 3


class _MaxPool(Module):
    d = 2

    def __init__(self, kernel_size, stride=None, padding=0, dilation=1, return_indices=False, ceil_mode=False):
        super().__init__()
        self.kernel_size, self.stride, self.padding, self.dilation = kernel_size, stride, padding, dilation
        self.return_indices, self.ceil_mode = return_indices, ceil_mode

    def forward(self, x: Tensor) -> Tensor:
        return P._max_pool(self.d, x, self.kernel_size, self.stride, self.padding, self.dilation, self.ceil_mode,
                           self.return_indices)

    def extra_repr(self) -> str:
        return (f"kernel_size={self.kernel_size}, stride={self.stride or self.kernel_size}, padding={self.padding}, "
                f"dilation={self.dilation}, ceil_mode={self.ceil_mode}")


class MaxPool1d(_MaxPool):
    d = 1


class MaxPool2d(_MaxPool):
    d = 2


class MaxPool3d(_MaxPool):
    d = 3


class _FractionalMaxPool(Module):
    """F.fractional_max_poolNd as a layer (PyTorch's arguments; `_random_samples`, a buffer, fixes the
    windows, else each call draws them from flame's RNG)."""

    d = 2

    def __init__(self, kernel_size, output_size=None, output_ratio=None, return_indices: bool = False,
                 _random_samples=None):
        super().__init__()
        name = type(self).__name__
        self.kernel_size = ntuple(kernel_size, self.d, "kernel_size", name)
        self.return_indices = return_indices
        self.register_buffer("_random_samples", _random_samples)
        self.output_size = ntuple(output_size, self.d, "output_size", name) if output_size is not None else None
        self.output_ratio = None
        if output_ratio is not None:
            r = (output_ratio,) * self.d if isinstance(output_ratio, (int, float)) else tuple(output_ratio)
            self.output_ratio = r * self.d if len(r) == 1 else r
        if output_size is None and output_ratio is None:
            raise ValueError(f"{name} requires specifying either an output size, or a pooling ratio")
        if output_size is not None and output_ratio is not None:
            raise ValueError("only one of output_size and output_ratio may be specified")
        if self.output_ratio is not None and not all(0 < r < 1 for r in self.output_ratio):
            raise ValueError(f"output_ratio must be between 0 and 1 (got {output_ratio})")

    def forward(self, x: Tensor):
        return FP._fractional(self.d, x, self.kernel_size, self.output_size, self.output_ratio,
                              self.return_indices, self._random_samples)


class FractionalMaxPool2d(_FractionalMaxPool):
    d = 2


class FractionalMaxPool3d(_FractionalMaxPool):
    d = 3


class _MaxUnpool(Module):
    """The partial inverse of MaxPoolNd: forward(input, indices, output_size=None) puts each value at its
    index in a zero output (F.max_unpoolNd)."""

    d = 2

    def __init__(self, kernel_size, stride=None, padding=0):
        super().__init__()

        def tup(v):  # PyTorch keeps the sizes as d-tuples (its _single, _pair, _triple)
            return (v,) * self.d if isinstance(v, int) else tuple(v)

        self.kernel_size = tup(kernel_size)
        self.stride, self.padding = tup(stride if stride is not None else kernel_size), tup(padding)

    def forward(self, input: Tensor, indices: Tensor, output_size=None) -> Tensor:  # noqa: A002
        return P._max_unpool(self.d, input, indices, self.kernel_size, self.stride, self.padding, output_size)

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class MaxUnpool1d(_MaxUnpool):
    d = 1


class MaxUnpool2d(_MaxUnpool):
    d = 2


class MaxUnpool3d(_MaxUnpool):
    d = 3


class _AvgPool(Module):
    d = 2

    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
                 divisor_override=None):
        super().__init__()
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding
        self.ceil_mode, self.count_include_pad, self.divisor_override = ceil_mode, count_include_pad, divisor_override

    def forward(self, x: Tensor) -> Tensor:
        return P._avg_pool(self.d, x, self.kernel_size, self.stride, self.padding, self.ceil_mode,
                           self.count_include_pad, self.divisor_override)

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride or self.kernel_size}, padding={self.padding}"


class AvgPool1d(_AvgPool):
    d = 1

    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True):
        one = lambda v: tuple(v) if isinstance(v, (tuple, list)) else (v,)  # noqa: E731  (torch's _single)
        super().__init__(one(kernel_size), one(kernel_size if stride is None else stride), one(padding), ceil_mode,
                         count_include_pad)


class AvgPool2d(_AvgPool):
    d = 2


class AvgPool3d(_AvgPool):
    d = 3


class _LPPool(Module):
    d = 2

    def __init__(self, norm_type: float, kernel_size, stride=None, ceil_mode: bool = False):
        super().__init__()
        self.norm_type, self.kernel_size, self.stride, self.ceil_mode = norm_type, kernel_size, stride, ceil_mode

    def forward(self, x: Tensor) -> Tensor:
        return P._lp_pool(self.d, x, self.norm_type, self.kernel_size, self.stride, self.ceil_mode)

    def extra_repr(self) -> str:
        return f"norm_type={self.norm_type}, kernel_size={self.kernel_size}, stride={self.stride}, " \
               f"ceil_mode={self.ceil_mode}"


class LPPool1d(_LPPool):
    d = 1


class LPPool2d(_LPPool):
    d = 2


class LPPool3d(_LPPool):
    d = 3


class _AdaptivePool(Module):
    d, kind = 2, "avg"

    def __init__(self, output_size, return_indices: bool = False):
        super().__init__()
        self.output_size, self.return_indices = output_size, return_indices

    def forward(self, x: Tensor) -> Tensor:
        return P._adaptive(self.kind, self.d, x, self.output_size, self.return_indices)

    def extra_repr(self) -> str:
        return f"output_size={self.output_size}"


class _AdaptiveAvgPool(_AdaptivePool):
    def __init__(self, output_size):
        super().__init__(output_size)


class AdaptiveAvgPool1d(_AdaptiveAvgPool):
    d = 1


class AdaptiveAvgPool2d(_AdaptiveAvgPool):
    d = 2


class AdaptiveAvgPool3d(_AdaptiveAvgPool):
    d = 3


class AdaptiveMaxPool1d(_AdaptivePool):
    d, kind = 1, "max"


class AdaptiveMaxPool2d(_AdaptivePool):
    d, kind = 2, "max"


class AdaptiveMaxPool3d(_AdaptivePool):
    d, kind = 3, "max"


class Unfold(Module):
    """F.unfold as a layer: sliding blocks as columns."""

    def __init__(self, kernel_size, dilation=1, padding=0, stride=1):
        super().__init__()
        self.kernel_size, self.dilation, self.padding, self.stride = kernel_size, dilation, padding, stride

    def forward(self, x: Tensor) -> Tensor:
        return R.unfold(x, self.kernel_size, self.dilation, self.padding, self.stride)

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, dilation={self.dilation}, padding={self.padding}, stride={self.stride}"


class Fold(Module):
    """F.fold as a layer: columns summed back into an image."""

    def __init__(self, output_size, kernel_size, dilation=1, padding=0, stride=1):
        super().__init__()
        self.output_size, self.kernel_size = output_size, kernel_size
        self.dilation, self.padding, self.stride = dilation, padding, stride

    def forward(self, x: Tensor) -> Tensor:
        return R.fold(x, self.output_size, self.kernel_size, self.dilation, self.padding, self.stride)

    def extra_repr(self) -> str:
        return (f"output_size={self.output_size}, kernel_size={self.kernel_size}, dilation={self.dilation}, "
                f"padding={self.padding}, stride={self.stride}")


class Upsample(Module):
    """F.interpolate as a layer (mode nearest, linear, bilinear, bicubic or trilinear)."""

    def __init__(self, size=None, scale_factor=None, mode: str = "nearest", align_corners: bool | None = None,
                 recompute_scale_factor: bool | None = None):
        super().__init__()
        if isinstance(scale_factor, tuple):  # stored as floats, as torch's
            scale_factor = tuple(float(f) for f in scale_factor)
        elif scale_factor:
            scale_factor = float(scale_factor)
        self.size, self.scale_factor, self.mode = size, scale_factor, mode
        self.align_corners, self.recompute_scale_factor = align_corners, recompute_scale_factor

    def forward(self, x: Tensor) -> Tensor:
        return R.interpolate(x, self.size, self.scale_factor, self.mode, self.align_corners,
                             self.recompute_scale_factor)

    def extra_repr(self) -> str:
        what = f"scale_factor={self.scale_factor!r}" if self.scale_factor is not None else f"size={self.size!r}"
        return f"{what}, mode={self.mode!r}"


class UpsamplingNearest2d(Upsample):
    """Upsample(size, scale_factor, mode='nearest'), as torch.nn.UpsamplingNearest2d."""

    def __init__(self, size=None, scale_factor=None):
        super().__init__(size, scale_factor, mode="nearest")


class UpsamplingBilinear2d(Upsample):
    """Upsample(size, scale_factor, mode='bilinear', align_corners=True), as torch.nn.UpsamplingBilinear2d."""

    def __init__(self, size=None, scale_factor=None):
        super().__init__(size, scale_factor, mode="bilinear", align_corners=True)


class GroupNorm(Module):
    """Normalise groups of num_channels/num_groups channels; weight ones, bias zeros (affine)."""

    def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5, affine: bool = True,
                 device: Any = None, dtype: Any = None, *, bias: bool = True):
        super().__init__()
        if num_groups < 1 or num_channels % num_groups:
            raise ShapeError(f"GroupNorm: num_groups={num_groups} must divide num_channels={num_channels}")
        self.num_groups, self.num_channels, self.eps, self.affine = num_groups, num_channels, eps, affine
        _register_affine(self, (num_channels,), float_dtype(dtype), affine, bias)
        self._place(device)

    def forward(self, x: Tensor) -> Tensor:
        if x.ndim < 2 or x.shape[1] != self.num_channels:
            raise ShapeError(f"GroupNorm: expected an input with {self.num_channels} channels [N, C, ...], got "
                             f"{list(x.shape)}")
        return N.group_norm(x, self.num_groups, self.weight, self.bias, self.eps)

    def reset_parameters(self) -> None:
        """weight ones, bias zeros, as torch's."""
        _reset_affine(self)

    def extra_repr(self) -> str:
        return (f"{self.num_groups}, {self.num_channels}, eps={self.eps}, affine={self.affine}, "
                f"bias={self.bias is not None}")


class _LazyConvMixin(LazyModuleMixin):
    """The lazy convolutions: in_channels is the first input's channel dim (dim 1, or dim 0 unbatched);
    weight and bias are placeholders until then, initialised as the eager layer's at that call."""

    def _lazy_init(self, out_channels: int, bias: bool, dtype: Any) -> None:
        self.out_channels = out_channels
        self._lazy_weight_and_bias(bias, float_dtype(dtype))

    def reset_parameters(self, generator: Generator | None = None) -> None:
        if not self.has_uninitialized_params() and self.in_channels != 0:
            super().reset_parameters(generator)

    def initialize_parameters(self, input: Tensor, *args, **kwargs) -> None:  # noqa: A002
        if not self.has_uninitialized_params():
            return
        d = self.d
        if input.ndim not in (d + 1, d + 2):
            raise ShapeError(f"Expected {d + 1}D (unbatched) or {d + 2}D (batched) input to "
                             f"{type(self).__name__}, but got input of size: {list(input.shape)}")
        self.in_channels = input.shape[1] if input.ndim == d + 2 else input.shape[0]
        if self.in_channels % self.groups != 0:
            raise ValueError("in_channels must be divisible by groups")
        g = self.groups
        shape = (self.in_channels, self.out_channels // g) if self.transposed else (self.out_channels,
                                                                                   self.in_channels // g)
        self.weight.materialize(shape + self.kernel_size)
        if self.bias is not None:
            self.bias.materialize((self.out_channels,))
        self.reset_parameters()

    def _sizes_from_parameters(self) -> None:
        if not is_lazy(self.weight):
            self.in_channels = self.weight.shape[0] if self.transposed else self.weight.shape[1] * self.groups


class _LazyConv(_LazyConvMixin, _Conv):
    def __init__(self, out_channels: int, kernel_size, stride=1, padding=0, dilation=1, groups: int = 1,
                 bias: bool = True, padding_mode: str = "zeros", device: Any = None, dtype: Any = None):
        super().__init__(0, 0, kernel_size, stride, padding, dilation, groups, False, padding_mode, device, dtype)
        self._lazy_init(out_channels, bias, dtype)


class LazyConv1d(_LazyConv):
    d, cls_to_become = 1, Conv1d


class LazyConv2d(_LazyConv):
    """Conv2d whose in_channels is its first input's (torch.nn.LazyConv2d); then it is a Conv2d."""

    d, cls_to_become = 2, Conv2d


class LazyConv3d(_LazyConv):
    d, cls_to_become = 3, Conv3d


class _LazyConvTranspose(_LazyConvMixin, _ConvTranspose):
    def __init__(self, out_channels: int, kernel_size, stride=1, padding=0, output_padding=0, groups: int = 1,
                 bias: bool = True, dilation=1, padding_mode: str = "zeros", device: Any = None, dtype: Any = None):
        super().__init__(0, 0, kernel_size, stride, padding, output_padding, groups, False, dilation, padding_mode,
                         device, dtype)
        self._lazy_init(out_channels, bias, dtype)


class LazyConvTranspose1d(_LazyConvTranspose):
    d, cls_to_become = 1, ConvTranspose1d


class LazyConvTranspose2d(_LazyConvTranspose):
    d, cls_to_become = 2, ConvTranspose2d


class LazyConvTranspose3d(_LazyConvTranspose):
    d, cls_to_become = 3, ConvTranspose3d
