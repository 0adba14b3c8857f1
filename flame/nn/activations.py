"""The modules of the activations, similarities and losses in flame.frontend.activations, and of
channel dropout, pixel (un)shuffle, padding and instance norm (flame.frontend's functional, resample,
losses.pad and norms): PyTorch's names and constructor arguments; with `inplace=True` the input holds
the result, as torch's."""

from __future__ import annotations

from typing import Any

import numpy as np

from flame.errors import AssertedArgumentError, ShapeError, UnsupportedError
from flame.frontend import activations as A
from flame.frontend import activations_inplace as FI
from flame.frontend import functional as F
from flame.frontend import losses as L
from flame.frontend import norms as N
from flame.frontend import resample as R
from flame.frontend.context import no_grad, user_location
from flame.frontend.creation import full, zeros
from flame.frontend.default_dtype import float_dtype
from flame.frontend.tensor import Tensor
from flame.nn import init
from flame.nn.batchnorm import _LazyNorm, _NormBase
from flame.nn.layers import _DropoutNd, _Elementwise, given_weight
from flame.nn.loss_base import _Loss
from flame.nn.module import Module
from flame.nn.parameter import Parameter

__all__ = ["CELU", "ELU", "GLU", "SELU", "Bilinear", "EmbeddingBag", "ConstantPad1d", "ConstantPad2d",
           "CosineSimilarity", "Dropout1d",
           "Dropout2d", "Dropout3d", "Hardsigmoid", "Hardswish", "Hardtanh", "HuberLoss", "InstanceNorm1d",
           "InstanceNorm2d", "InstanceNorm3d", "KLDivLoss", "LogSigmoid", "Mish", "PReLU", "PairwiseDistance",
           "PixelShuffle", "PixelUnshuffle", "ChannelShuffle", "LocalResponseNorm", "ReLU6", "ReflectionPad1d",
           "ReflectionPad2d", "ReplicationPad1d",
           "ReplicationPad2d", "ConstantPad3d", "ZeroPad3d", "ReflectionPad3d", "ReplicationPad3d",
           "CircularPad1d", "CircularPad2d", "CircularPad3d", "Softmin", "Softmax2d", "Softplus", "Softsign",
           "Threshold",
           "Unflatten", "ZeroPad1d", "ZeroPad2d",
           "Tanhshrink", "Softshrink", "Hardshrink", "RReLU"]


class Softplus(_Elementwise):
    fn = staticmethod(A.softplus)

    def __init__(self, beta: float = 1.0, threshold: float = 20.0):
        super().__init__(beta=beta, threshold=threshold)


class ELU(_Elementwise):
    fn = staticmethod(A.elu)
    in_place_form = staticmethod(FI.elu)

    def __init__(self, alpha: float = 1.0, inplace: bool = False):
        super().__init__(inplace, alpha=alpha)


class CELU(_Elementwise):
    fn = staticmethod(A.celu)
    in_place_form = staticmethod(FI.celu)

    def __init__(self, alpha: float = 1.0, inplace: bool = False):
        super().__init__(inplace, alpha=alpha)


class SELU(_Elementwise):
    fn = staticmethod(A.selu)
    in_place_form = staticmethod(FI.selu)

    def __init__(self, inplace: bool = False):
        super().__init__(inplace)


class Mish(_Elementwise):
    fn = staticmethod(A.mish)

    def __init__(self, inplace: bool = False):
        super().__init__(inplace)


class Hardtanh(_Elementwise):
    fn = staticmethod(A.hardtanh)

    def __init__(self, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False):
        if not max_val > min_val:
            raise AssertedArgumentError(f"max_val ({max_val}) must be greater than min_val ({min_val})")
        super().__init__(inplace, min_val=min_val, max_val=max_val)


class ReLU6(_Elementwise):
    fn = staticmethod(A.relu6)

    def __init__(self, inplace: bool = False):
        super().__init__(inplace)


class Hardsigmoid(_Elementwise):
    fn = staticmethod(A.hardsigmoid)

    def __init__(self, inplace: bool = False):
        super().__init__(inplace)

    def extra_repr(self) -> str:
        return ""  # torch's repr leaves inplace out here


class Hardswish(_Elementwise):
    fn = staticmethod(A.hardswish)

    def __init__(self, inplace: bool = False):
        super().__init__(inplace)

    def extra_repr(self) -> str:
        return ""  # torch's repr leaves inplace out here


class LogSigmoid(_Elementwise):
    fn = staticmethod(A.logsigmoid)


class Softsign(_Elementwise):
    fn = staticmethod(A.softsign)


class GLU(_Elementwise):
    fn = staticmethod(A.glu)

    def __init__(self, dim: int = -1):
        super().__init__(dim=dim)


class Softmin(_Elementwise):
    fn = staticmethod(A.softmin)

    def __init__(self, dim: int | None = None):
        super().__init__(dim=dim)


class Softmax2d(Module):
    """softmax over the channels (dim -3) at each spatial position of a [N, C, H, W] or [C, H, W] input;
    any other rank is a ShapeError (a ValueError, as PyTorch's)."""

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        if input.ndim not in (3, 4):
            raise ShapeError(f"Softmax2d: expected input to be 3D or 4D, got {input.ndim}D instead"
                             f"\n  at {user_location()}")
        return F.softmax(input, -3)


class Threshold(_Elementwise):
    fn = staticmethod(A.threshold)

    def __init__(self, threshold: float, value: float, inplace: bool = False):
        super().__init__(inplace, threshold=threshold, value=value)


class Tanhshrink(_Elementwise):
    fn = staticmethod(A.tanhshrink)


class _Shrink(_Elementwise):
    """softshrink / hardshrink with their threshold lambd (torch's repr: Softshrink(0.5))."""

    def __init__(self, lambd: float = 0.5):
        super().__init__(lambd=lambd)

    def extra_repr(self) -> str:
        return str(self.kwargs["lambd"])


class Softshrink(_Shrink):
    fn = staticmethod(A.softshrink)


class Hardshrink(_Shrink):
    fn = staticmethod(A.hardshrink)


class RReLU(Module):
    """Randomized leaky ReLU (F.rrelu): random negative slopes in [lower, upper] in training mode, their
    mean in eval mode."""

    def __init__(self, lower: float = 1.0 / 8, upper: float = 1.0 / 3, inplace: bool = False):
        super().__init__()
        self.lower, self.upper, self.inplace = lower, upper, inplace  # (lower > upper is refused when called)

    def forward(self, input):  # noqa: A002
        return FI.rrelu(input, self.lower, self.upper, self.training, self.inplace)

    def extra_repr(self) -> str:
        return f"lower={self.lower}, upper={self.upper}" + (", inplace=True" if self.inplace else "")


class PReLU(Module):
    """x where x >= 0, else a learned slope times x: one slope, or num_parameters (one per channel)."""

    def __init__(self, num_parameters: int = 1, init: float = 0.25, device: Any = None, dtype=None):
        super().__init__()
        self.num_parameters, self.init = num_parameters, init
        self.weight = Parameter(full((num_parameters,), init, dtype))
        self._place(device)

    def reset_parameters(self) -> None:
        """Every slope back to init, as torch's."""
        init.constant_(self.weight, self.init)

    def forward(self, x: Tensor) -> Tensor:
        return A.prelu(x, self.weight)

    def extra_repr(self) -> str:
        return f"num_parameters={self.num_parameters}"


class CosineSimilarity(Module):
    def __init__(self, dim: int = 1, eps: float = 1e-8):
        super().__init__()
        self.dim, self.eps = dim, eps

    def forward(self, x1: Tensor, x2: Tensor) -> Tensor:
        return A.cosine_similarity(x1, x2, self.dim, self.eps)


class PairwiseDistance(Module):
    def __init__(self, p: float = 2.0, eps: float = 1e-6, keepdim: bool = False):
        super().__init__()
        self.norm, self.eps, self.keepdim = p, eps, keepdim

    def forward(self, x1: Tensor, x2: Tensor) -> Tensor:
        return A.pairwise_distance(x1, x2, self.norm, self.eps, self.keepdim)


class HuberLoss(_Loss):
    def __init__(self, reduction: str = "mean", delta: float = 1.0):
        super().__init__()
        self.reduction, self.delta = reduction, delta

    def forward(self, input: Tensor, target: Tensor) -> Tensor:  # noqa: A002
        return A.huber_loss(input, target, self.reduction, self.delta)


class KLDivLoss(_Loss):
    def __init__(self, size_average=None, reduce=None, reduction: str = "mean", log_target: bool = False):
        super().__init__()
        F.no_legacy_reduction("KLDivLoss", size_average, reduce)
        self.reduction, self.log_target = reduction, log_target

    def forward(self, input: Tensor, target: Tensor) -> Tensor:  # noqa: A002
        return A.kl_div(input, target, reduction=self.reduction, log_target=self.log_target)


class Unflatten(Module):
    """Dimension dim split into sizes (one of them may be -1), as torch.nn.Unflatten."""

    def __init__(self, dim: int, unflattened_size):
        super().__init__()
        self.dim, self.unflattened_size = dim, tuple(unflattened_size)

    def forward(self, x: Tensor) -> Tensor:
        d = self.dim % x.ndim
        return x.reshape(*x.shape[:d], *self.unflattened_size, *x.shape[d + 1:])

    def extra_repr(self) -> str:
        return f"dim={self.dim}, unflattened_size={self.unflattened_size}"


class Dropout1d(_DropoutNd):
    fn = staticmethod(FI.dropout1d)


class Dropout2d(_DropoutNd):
    fn = staticmethod(FI.dropout2d)


class Dropout3d(_DropoutNd):
    fn = staticmethod(FI.dropout3d)


class AlphaDropout(_DropoutNd):
    """F.alpha_dropout in training mode (SELU's self-normalising dropout); identity in eval. With
    inplace=True the input holds the result, as torch's."""

    fn = staticmethod(FI.alpha_dropout)


class FeatureAlphaDropout(AlphaDropout):
    """F.feature_alpha_dropout in training mode (whole channels); identity in eval."""

    fn = staticmethod(FI.feature_alpha_dropout)


class PixelShuffle(_Elementwise):
    fn = staticmethod(R.pixel_shuffle)

    def __init__(self, upscale_factor: int):
        super().__init__(upscale_factor=upscale_factor)


class PixelUnshuffle(_Elementwise):
    fn = staticmethod(R.pixel_unshuffle)

    def __init__(self, downscale_factor: int):
        super().__init__(downscale_factor=downscale_factor)


class ChannelShuffle(Module):
    """F.channel_shuffle(x, groups): the channels [N, C, *] split into `groups` groups and interleaved."""

    def __init__(self, groups: int):
        super().__init__()
        self.groups = groups

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return R.channel_shuffle(input, self.groups)

    def extra_repr(self) -> str:
        return f"groups={self.groups}"


class LocalResponseNorm(Module):
    """F.local_response_norm: each channel divided by (k + alpha * the mean of the squares over `size`
    neighbouring channels) ** beta."""

    def __init__(self, size: int, alpha: float = 1e-4, beta: float = 0.75, k: float = 1.0):
        super().__init__()
        self.size, self.alpha, self.beta, self.k = size, alpha, beta, k

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return R.local_response_norm(input, self.size, self.alpha, self.beta, self.k)

    def extra_repr(self) -> str:
        return f"{self.size}, alpha={self.alpha}, beta={self.beta}, k={self.k}"


class _Pad(Module):
    """F.pad with a fixed mode over the last `dims` dims; padding an int (every side) or a tuple in
    PyTorch's order (left, right, top, bottom, ...)."""

    dims, mode = 2, "constant"
    names_value = False  # torch's ConstantPad prints `padding=..., value=...`; the others the padding alone

    def __init__(self, padding, value: float = 0.0):
        super().__init__()
        # a tuple is F.pad's, as in torch: (1, 2) given to a 2d module pads the last dim alone
        self.padding = (int(padding),) * (2 * self.dims) if isinstance(padding, int) else tuple(padding)
        self.value = value

    def forward(self, x: Tensor) -> Tensor:
        return L.pad(x, self.padding, self.mode, self.value if self.mode == "constant" else None)

    def extra_repr(self) -> str:
        return f"padding={self.padding}, value={self.value}" if self.names_value else f"{self.padding}"


class ConstantPad1d(_Pad):
    dims = 1
    names_value = True

    def __init__(self, padding, value: float):
        super().__init__(padding, value)


class ConstantPad2d(_Pad):
    names_value = True

    def __init__(self, padding, value: float):
        super().__init__(padding, value)


class ZeroPad1d(_Pad):
    dims = 1


class ZeroPad2d(_Pad):
    pass


class ReflectionPad1d(_Pad):
    dims, mode = 1, "reflect"


class ReflectionPad2d(_Pad):
    mode = "reflect"


class ReplicationPad1d(_Pad):
    dims, mode = 1, "replicate"


class ReplicationPad2d(_Pad):
    mode = "replicate"


class ConstantPad3d(_Pad):
    dims = 3
    names_value = True

    def __init__(self, padding, value: float):
        super().__init__(padding, value)


class ZeroPad3d(_Pad):
    dims = 3


class ReflectionPad3d(_Pad):
    dims, mode = 3, "reflect"


class ReplicationPad3d(_Pad):
    dims, mode = 3, "replicate"


class _CircularPad(_Pad):
    """F.pad(mode='circular'); the input is batched or not (rank dims + 1 or dims + 2), else a
    ValueError, as PyTorch's."""

    mode = "circular"

    def __init__(self, padding):
        super().__init__(padding)

    def forward(self, x: Tensor) -> Tensor:
        if x.ndim not in (self.dims + 1, self.dims + 2):
            raise ShapeError(f"{type(self).__name__}: expected {self.dims + 1}D or {self.dims + 2}D input "
                             f"(got {x.ndim}D input)\n  at {user_location()}")
        return super().forward(x)


class CircularPad1d(_CircularPad):
    dims = 1


class CircularPad2d(_CircularPad):
    dims = 2


class CircularPad3d(_CircularPad):
    dims = 3


class _InstanceNorm(_NormBase):
    """Per-sample, per-channel normalisation over the positions (F.instance_norm); affine=False and
    track_running_stats=False by default, as PyTorch. With track_running_stats, training updates the
    buffers running_mean, running_var (an aliased state output inside @flame.compile) and eval()
    normalises with them; num_batches_tracked is kept for PyTorch's state_dict names. momentum=None leaves
    the running statistics as they are (PyTorch passes momentum 0; it has no cumulative average here)."""

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1, affine: bool = False,
                 track_running_stats: bool = False, device: Any = None, dtype: Any = None, *, bias: bool = True):
        super().__init__(num_features, eps, momentum, affine, track_running_stats, device, dtype, bias=bias)

    def forward(self, x: Tensor) -> Tensor:
        if x.ndim == self.rank - 1:  # unbatched
            return self.forward(x.unsqueeze(0)).squeeze(0)
        if x.ndim != self.rank or x.shape[1] != self.num_features:
            raise ShapeError(f"{type(self).__name__}({self.num_features}): expected [N, {self.num_features}, ...] of "
                             f"rank {self.rank}, got {list(x.shape)}\n  at {user_location()}")
        return N.instance_norm(x, self.running_mean, self.running_var, self.weight, self.bias,
                               self.training or not self.track_running_stats,
                               0.0 if self.momentum is None else self.momentum, self.eps)


class InstanceNorm1d(_InstanceNorm):
    rank = 3


class InstanceNorm2d(_InstanceNorm):
    rank = 4


class InstanceNorm3d(_InstanceNorm):
    rank = 5


class _LazyInstanceNorm(_LazyNorm, _InstanceNorm):
    """InstanceNorm whose num_features is its first input's dim 1 (torch.nn.LazyInstanceNormNd); affine and
    track_running_stats default to True, as torch's lazy modules (the eager ones default to False)."""

    def _infer_parameters(self, args: tuple, kwargs: dict) -> None:
        if not self.has_uninitialized_params() and args and isinstance(args[0], Tensor) and args[0].ndim > 1:
            self.num_features = args[0].shape[1]  # nothing to materialise: the size its forward checks
        super()._infer_parameters(args, kwargs)


class LazyInstanceNorm1d(_LazyInstanceNorm):
    rank, cls_to_become = 3, InstanceNorm1d


class LazyInstanceNorm2d(_LazyInstanceNorm):
    rank, cls_to_become = 4, InstanceNorm2d


class LazyInstanceNorm3d(_LazyInstanceNorm):
    rank, cls_to_become = 5, InstanceNorm3d


class Bilinear(Module):
    """y = x1^T A x2 + b: weight [out_features, in1_features, in2_features], bias [out_features], both
    from U(-1/sqrt(in1_features), 1/sqrt(in1_features)), as PyTorch."""

    def __init__(self, in1_features: int, in2_features: int, out_features: int, bias: bool = True,
                 device: Any = None, dtype: Any = None, *, generator=None):
        super().__init__()
        self.in1_features, self.in2_features, self.out_features = in1_features, in2_features, out_features
        dt = float_dtype(dtype)
        self.weight = Parameter(zeros(out_features, in1_features, in2_features, dtype=dt))
        self.register_parameter("bias", Parameter(zeros(out_features, dtype=dt)) if bias else None)
        self.reset_parameters(generator)
        self._place(device)

    def reset_parameters(self, generator=None) -> None:
        """weight and bias drawn again from U(-1/sqrt(in1_features), 1/sqrt(in1_features)), as torch's."""
        bound = 1.0 / self.in1_features ** 0.5
        for p in self.parameters():
            init.uniform_(p, -bound, bound, generator)

    def forward(self, input1: Tensor, input2: Tensor) -> Tensor:
        return A.bilinear(input1, input2, self.weight, self.bias)

    def extra_repr(self) -> str:
        return (f"in1_features={self.in1_features}, in2_features={self.in2_features}, "
                f"out_features={self.out_features}, bias={self.bias is not None}")


class EmbeddingBag(Module):
    """A lookup table [num_embeddings, embedding_dim] (N(0, 1)) whose forward reduces each bag of
    entries by mode ("mean" by default, "sum", "max"): F.embedding_bag."""

    def __init__(self, num_embeddings: int, embedding_dim: int, max_norm=None, norm_type: float = 2.0,
                 scale_grad_by_freq: bool = False, mode: str = "mean", sparse: bool = False, _weight=None,
                 include_last_offset: bool = False, padding_idx: int | None = None, device: Any = None,
                 dtype: Any = None, *, generator=None):
        super().__init__()
        if sparse:
            raise UnsupportedError(
                f"EmbeddingBag: sparse gradients are not supported; use sparse=False (a dense gradient)"
                f"\n  at {user_location()}"
            )
        if max_norm is not None or scale_grad_by_freq:
            raise UnsupportedError(
                f"EmbeddingBag: max_norm and scale_grad_by_freq are not supported; use Embedding (which has both) "
                f"and reduce its rows\n  at {user_location()}"
            )
        self.num_embeddings, self.embedding_dim, self.mode = num_embeddings, embedding_dim, mode
        if padding_idx is not None and not -num_embeddings <= padding_idx < num_embeddings:
            raise AssertedArgumentError("padding_idx must be within num_embeddings")
        if padding_idx is not None and padding_idx < 0:
            padding_idx += num_embeddings
        self.include_last_offset, self.padding_idx = include_last_offset, padding_idx
        self.max_norm, self.norm_type = max_norm, norm_type
        self.scale_grad_by_freq, self.sparse = scale_grad_by_freq, sparse
        weight = given_weight(self, _weight, (num_embeddings, embedding_dim))
        self.weight = weight if weight is not None else \
            Parameter(zeros(num_embeddings, embedding_dim, dtype=float_dtype(dtype)))
        if weight is None:
            self.reset_parameters(generator)
        self._place(device)

    def reset_parameters(self, generator=None) -> None:
        """The table drawn again from N(0, 1), its padding_idx row zero, as torch's."""
        init.normal_(self.weight, generator=generator)
        if self.padding_idx is not None:
            with no_grad():
                self.weight.copy_(self.weight * Tensor((np.arange(self.num_embeddings) != self.padding_idx)
                                                       .astype(self.weight.dtype.np_dtype)[:, None]))

    @classmethod
    def from_pretrained(cls, embeddings: Tensor, freeze: bool = True, max_norm=None, norm_type: float = 2.0,
                        scale_grad_by_freq: bool = False, mode: str = "mean", sparse: bool = False,
                        include_last_offset: bool = False, padding_idx: int | None = None) -> EmbeddingBag:
        """An EmbeddingBag holding the 2-D `embeddings` as its table (requiring no grad with freeze), as torch's."""
        if embeddings.ndim != 2:
            raise AssertionError("Embeddings parameter is expected to be 2-dimensional")
        rows, cols = embeddings.shape
        bag = cls(rows, cols, max_norm=max_norm, norm_type=norm_type, scale_grad_by_freq=scale_grad_by_freq,
                  mode=mode, sparse=sparse, _weight=embeddings, include_last_offset=include_last_offset,
                  padding_idx=padding_idx)
        bag.weight.requires_grad_(not freeze)
        return bag

    def forward(self, input: Tensor, offsets: Tensor | None = None,  # noqa: A002
                per_sample_weights: Tensor | None = None) -> Tensor:
        return A.embedding_bag(input, self.weight, offsets, mode=self.mode, per_sample_weights=per_sample_weights,
                               include_last_offset=self.include_last_offset, padding_idx=self.padding_idx)

    def extra_repr(self) -> str:
        norm = "" if self.norm_type == 2 else f", norm_type={self.norm_type!r}"
        pad = "" if self.padding_idx is None else f", padding_idx={self.padding_idx!r}"
        return f"{self.num_embeddings}, {self.embedding_dim}{norm}, mode={self.mode!r}{pad}"
