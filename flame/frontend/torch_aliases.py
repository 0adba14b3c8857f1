"""torch's top-level spellings of functions flame has under another name or in nn.functional
(torch.conv2d, torch.layer_norm, torch.dropout, torch.embedding, torch.divide, torch.greater ...), with
torch's top-level parameters: the order and names of the aten schema (torch.batch_norm takes weight and
bias before the running statistics, torch.embedding takes the weight first, torch.dropout's flag is
`train`), the losses' `reduction` as torch's int (0 none, 1 mean, 2 sum; omitted, it is 0 in torch,
whose stubs say 1: torch.kl_div(a, b) is elementwise). Each forwards to the one
implementation; flame/__init__.py re-exports them (Tensor's methods of torch's other names, x.divide,
x.greater ..., are methods.TENSOR_ALIASES)."""

from __future__ import annotations

import warnings

from flame.frontend import activations as _act
from flame.frontend import activations_inplace as _inplace
from flame.frontend import functional as _functional
from flame.frontend import losses as _losses
from flame.frontend import margin_losses as _margin
from flame.frontend import norms as _norms
from flame.frontend import pooling as _pooling
from flame.frontend.conv import (  # noqa: F401  (the package root's names: torch's signatures)
    conv1d,
    conv2d,
    conv3d,
    conv_transpose1d,
    conv_transpose2d,
    conv_transpose3d,
)
from flame.frontend.creation import Generator, as_tensor, empty, ones
from flame.frontend.creation import tensor as _tensor
from flame.frontend.losses import pad as _pad
from flame.frontend.more_math import trapezoid
from flame.frontend.ops import cat, div, ge, gt, le, lt, mul, ne, sub, vstack
from flame.frontend.resample import channel_shuffle, pixel_shuffle, pixel_unshuffle  # noqa: F401
from flame.frontend.tensor import Tensor

divide, multiply, subtract, greater, greater_equal, less, less_equal, not_equal = div, mul, sub, gt, ge, lt, le, ne
row_stack, concatenate = vstack, cat
cosine_similarity, pairwise_distance, prelu, hardshrink, bilinear = (
    _act.cosine_similarity, _act.pairwise_distance, _act.prelu, _act.hardshrink, _act.bilinear)
adaptive_avg_pool1d, avg_pool1d, rms_norm = _pooling.adaptive_avg_pool1d, _pooling.avg_pool1d, _functional.rms_norm
relu_, selu_, celu_, rrelu_, threshold_ = _inplace.relu_, _inplace.selu_, _inplace.celu_, _inplace.rrelu_, \
    _inplace.threshold_

_REDUCTIONS = ("none", "mean", "sum")


def _reduction(op: str, reduction) -> str:
    """torch's top-level losses take the reduction as an int (at::Reduction: 0 none, 1 mean, 2 sum)."""
    if isinstance(reduction, str) or reduction not in (0, 1, 2):
        raise TypeError(f"{op}(): argument 'reduction' must be int (0 none, 1 mean, 2 sum), not {reduction!r}")
    return _REDUCTIONS[reduction]


def fill(input: Tensor, value) -> Tensor:  # noqa: A002
    """A tensor of input's shape and dtype holding value (a number or a 0-d tensor), as torch.fill."""
    return input.clone().fill_(value)


def detach(input: Tensor) -> Tensor:  # noqa: A002
    """input.detach(), as torch.detach."""
    return input.detach()


def trapz(y: Tensor, x: Tensor | None = None, *, dx: float | None = None, dim: int = -1) -> Tensor:
    """torch.trapz, the older name of torch.trapezoid."""
    return trapezoid(y, x, dx=dx, dim=dim)


def layer_norm(input: Tensor, normalized_shape, weight: Tensor | None = None, bias: Tensor | None = None,  # noqa: A002
               eps: float = 1e-5, cudnn_enable: bool = True) -> Tensor:
    """F.layer_norm with torch.layer_norm's parameters (cudnn_enable is accepted and changes nothing)."""
    return _functional.layer_norm(input, normalized_shape, weight, bias, eps)


def group_norm(input: Tensor, num_groups: int, weight: Tensor | None = None, bias: Tensor | None = None,  # noqa: A002
               eps: float = 1e-5, cudnn_enabled: bool = True) -> Tensor:
    """torch.group_norm: F.group_norm's normalisation with its parameters, without its check of the sizes."""
    return _norms.normalized_groups(input, num_groups, weight, bias, eps)


def batch_norm(input: Tensor, weight: Tensor | None, bias: Tensor | None, running_mean: Tensor | None,  # noqa: A002
               running_var: Tensor | None, training: bool, momentum: float, eps: float,
               cudnn_enabled: bool) -> Tensor:
    """F.batch_norm with torch.batch_norm's parameters (weight and bias first, every one required)."""
    return _norms.batch_norm(input, running_mean, running_var, weight, bias, training, momentum, eps)


def instance_norm(input: Tensor, weight: Tensor | None, bias: Tensor | None, running_mean: Tensor | None,  # noqa: A002
                  running_var: Tensor | None, use_input_stats: bool, momentum: float, eps: float,
                  cudnn_enabled: bool) -> Tensor:
    """F.instance_norm with torch.instance_norm's parameters (weight and bias first, every one required)."""
    return _norms.instance_norm(input, running_mean, running_var, weight, bias, use_input_stats, momentum, eps)


def dropout(input: Tensor, p: float, train: bool) -> Tensor:  # noqa: A002
    """F.dropout(input, p, train), as torch.dropout."""
    return _inplace.dropout(input, p, train)


def dropout_(input: Tensor, p: float, train: bool) -> Tensor:  # noqa: A002
    return _inplace.dropout(input, p, train, inplace=True)


def alpha_dropout(input: Tensor, p: float, train: bool) -> Tensor:  # noqa: A002
    """F.alpha_dropout(input, p, train), as torch.alpha_dropout."""
    return _inplace.alpha_dropout(input, p, train)


def alpha_dropout_(input: Tensor, p: float, train: bool) -> Tensor:  # noqa: A002
    return _inplace.alpha_dropout(input, p, train, inplace=True)


def feature_alpha_dropout(input: Tensor, p: float, train: bool) -> Tensor:  # noqa: A002
    """F.feature_alpha_dropout(input, p, train), as torch.feature_alpha_dropout."""
    return _inplace.feature_alpha_dropout(input, p, train)


def feature_alpha_dropout_(input: Tensor, p: float, train: bool) -> Tensor:  # noqa: A002
    return _inplace.feature_alpha_dropout(input, p, train, inplace=True)


def feature_dropout(input: Tensor, p: float, train: bool) -> Tensor:  # noqa: A002
    """Whole channels (dim 1, for every sample) zeroed with probability p, the rest scaled by 1 / (1 - p),
    when train, as torch.feature_dropout (the computation of F.dropout2d for any rank of 2 or more)."""
    if not train or p == 0:
        return input
    return input * _inplace.dropout(ones(*input.shape[:2], *(1,) * (input.ndim - 2), dtype=input.dtype), p)


def feature_dropout_(input: Tensor, p: float, train: bool) -> Tensor:  # noqa: A002
    return _inplace.into(input, train, lambda x: feature_dropout(x, p, train), "feature_dropout")


def selu(input: Tensor) -> Tensor:  # noqa: A002
    return _inplace.selu(input)


def celu(input: Tensor, alpha: float = 1.0) -> Tensor:  # noqa: A002
    return _inplace.celu(input, alpha)


def threshold(input: Tensor, threshold: float, value: float) -> Tensor:  # noqa: A002
    return _inplace.threshold(input, threshold, value)


def rrelu(input: Tensor, lower: float = 1.0 / 8, upper: float = 1.0 / 3, training: bool = False,  # noqa: A002
          generator: Generator | None = None) -> Tensor:
    """F.rrelu, as torch.rrelu (its generator may be given by position)."""
    return _inplace.rrelu(input, lower, upper, training, generator=generator)


def embedding(weight: Tensor, indices: Tensor, padding_idx: int = -1, scale_grad_by_freq: bool = False,
              sparse: bool = False) -> Tensor:
    """F.embedding(indices, weight), as torch.embedding: the weight first, and a negative padding_idx means
    none (F.embedding has already wrapped a negative one when it reaches torch.embedding)."""
    return _functional.embedding(indices, weight, None if padding_idx < 0 else padding_idx,
                                 scale_grad_by_freq=scale_grad_by_freq, sparse=sparse)


def constant_pad_nd(input: Tensor, pad, value: float = 0) -> Tensor:  # noqa: A002
    """F.pad(input, pad, value=value), as torch.constant_pad_nd."""
    return _pad(input, pad, value=value)


def _max_pool(fn, input, kernel_size, stride, padding, dilation, ceil_mode):  # noqa: A002
    return fn(input, kernel_size, stride if stride else None, padding, dilation, ceil_mode)  # torch's [] = kernel


def max_pool1d(input: Tensor, kernel_size, stride=(), padding=0, dilation=1, ceil_mode: bool = False) -> Tensor:  # noqa: A002
    return _max_pool(_pooling.max_pool1d, input, kernel_size, stride, padding, dilation, ceil_mode)


def max_pool2d(input: Tensor, kernel_size, stride=(), padding=0, dilation=1, ceil_mode: bool = False) -> Tensor:  # noqa: A002
    return _max_pool(_pooling.max_pool2d, input, kernel_size, stride, padding, dilation, ceil_mode)


def max_pool3d(input: Tensor, kernel_size, stride=(), padding=0, dilation=1, ceil_mode: bool = False) -> Tensor:  # noqa: A002
    return _max_pool(_pooling.max_pool3d, input, kernel_size, stride, padding, dilation, ceil_mode)


def max_pool1d_with_indices(input: Tensor, kernel_size, stride=(), padding=0, dilation=1,  # noqa: A002
                            ceil_mode: bool = False) -> tuple[Tensor, Tensor]:
    return _pooling.max_pool1d(input, kernel_size, stride if stride else None, padding, dilation, ceil_mode,
                               return_indices=True)


def adaptive_max_pool1d(input: Tensor, output_size) -> tuple[Tensor, Tensor]:  # noqa: A002
    """F.adaptive_max_pool1d with its indices, as torch.adaptive_max_pool1d (which always returns both)."""
    return _pooling.adaptive_max_pool1d(input, output_size, return_indices=True)


def kl_div(input: Tensor, target: Tensor, reduction: int = 0, *, log_target: bool = False) -> Tensor:  # noqa: A002
    """F.kl_div as torch.kl_div: reduction 1 averages over every element, without F.kl_div's warning; omitted,
    no reduction (torch's behaviour)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return _act.kl_div(input, target, reduction=_reduction("kl_div", reduction), log_target=log_target)


def binary_cross_entropy_with_logits(input: Tensor, target: Tensor, weight: Tensor | None = None,  # noqa: A002
                                     pos_weight: Tensor | None = None, reduction: int = 0) -> Tensor:
    return _losses.binary_cross_entropy_with_logits(
        input, target, weight, reduction=_reduction("binary_cross_entropy_with_logits", reduction),
        pos_weight=pos_weight)


def margin_ranking_loss(input1: Tensor, input2: Tensor, target: Tensor, margin: float = 0.0,
                        reduction: int = 0) -> Tensor:
    return _margin.margin_ranking_loss(input1, input2, target, margin,
                                       reduction=_reduction("margin_ranking_loss", reduction))


def triplet_margin_loss(anchor: Tensor, positive: Tensor, negative: Tensor, margin: float = 1.0, p: float = 2.0,
                        eps: float = 1e-6, swap: bool = False, reduction: int = 0) -> Tensor:
    return _margin.triplet_margin_loss(anchor, positive, negative, margin, p, eps, swap,
                                       reduction=_reduction("triplet_margin_loss", reduction))


def cosine_embedding_loss(input1: Tensor, input2: Tensor, target: Tensor, margin: float = 0.0,
                          reduction: int = 0) -> Tensor:
    return _margin.cosine_embedding_loss(input1, input2, target, margin,
                                         reduction=_reduction("cosine_embedding_loss", reduction))


def hinge_embedding_loss(input: Tensor, target: Tensor, margin: float = 1.0, reduction: int = 0) -> Tensor:  # noqa: A002
    return _margin.hinge_embedding_loss(input, target, margin,
                                        reduction=_reduction("hinge_embedding_loss", reduction))


def poisson_nll_loss(input: Tensor, target: Tensor, log_input: bool, full: bool, eps: float,  # noqa: A002
                     reduction: int) -> Tensor:
    """F.poisson_nll_loss with torch.poisson_nll_loss's parameters (every one required)."""
    return _margin.poisson_nll_loss(input, target, log_input, full, eps=eps,
                                    reduction=_reduction("poisson_nll_loss", reduction))


def asarray(obj, *, dtype=None, device=None, copy: bool | None = None, requires_grad: bool = False) -> Tensor:
    """obj as a tensor, as torch.asarray: shared with a tensor obj where dtype and device allow, unless
    copy=True (flame.as_tensor's rule; copy=False is accepted)."""
    out = _tensor(obj, dtype=dtype, device=device) if copy else as_tensor(obj, dtype, device)
    return out.requires_grad_(requires_grad) if requires_grad else out


def empty_strided(size, stride, *, dtype=None, layout=None, device=None, requires_grad: bool = False,
                  pin_memory: bool = False) -> Tensor:
    """An uninitialised tensor of size, as torch.empty_strided; flame's tensors are row-major, so the
    strides are accepted and not kept."""
    return empty(*size, dtype=dtype, device=device, requires_grad=requires_grad)
