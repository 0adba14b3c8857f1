"""The modules of the margin, embedding and likelihood losses in flame.frontend.margin_losses, of
the CTC loss (flame.frontend.ctc) and of linear_cross_entropy, with PyTorch's names and constructor arguments."""

from __future__ import annotations

import math
from collections.abc import Callable

from flame.errors import ArgumentRangeError
from flame.frontend import margin_losses as M
from flame.frontend.ctc import ctc_loss
from flame.frontend.functional import no_legacy_reduction
from flame.frontend.linear_cross_entropy import linear_cross_entropy
from flame.frontend.tensor import Tensor
from flame.nn.activations import PairwiseDistance
from flame.nn.layers import Linear
from flame.nn.loss_base import _Loss, _WeightedLoss

__all__ = ["CTCLoss", "CosineEmbeddingLoss", "GaussianNLLLoss", "HingeEmbeddingLoss", "LinearCrossEntropyLoss",
           "MarginRankingLoss", "MultiLabelMarginLoss", "MultiLabelSoftMarginLoss", "MultiMarginLoss", "PoissonNLLLoss",
           "SoftMarginLoss", "TripletMarginLoss", "TripletMarginWithDistanceLoss"]


class MarginRankingLoss(_Loss):
    def __init__(self, margin: float = 0.0, size_average=None, reduce=None, reduction: str = "mean"):
        super().__init__()
        no_legacy_reduction("MarginRankingLoss", size_average, reduce)
        self.margin, self.reduction = margin, reduction

    def forward(self, input1: Tensor, input2: Tensor, target: Tensor) -> Tensor:
        return M.margin_ranking_loss(input1, input2, target, self.margin, reduction=self.reduction)


class HingeEmbeddingLoss(_Loss):
    def __init__(self, margin: float = 1.0, size_average=None, reduce=None, reduction: str = "mean"):
        super().__init__()
        no_legacy_reduction("HingeEmbeddingLoss", size_average, reduce)
        self.margin, self.reduction = margin, reduction

    def forward(self, input: Tensor, target: Tensor) -> Tensor:  # noqa: A002
        return M.hinge_embedding_loss(input, target, self.margin, reduction=self.reduction)


class SoftMarginLoss(_Loss):
    def __init__(self, size_average=None, reduce=None, reduction: str = "mean"):
        super().__init__()
        no_legacy_reduction("SoftMarginLoss", size_average, reduce)
        self.reduction = reduction

    def forward(self, input: Tensor, target: Tensor) -> Tensor:  # noqa: A002
        return M.soft_margin_loss(input, target, reduction=self.reduction)


class MultiLabelSoftMarginLoss(_WeightedLoss):
    def __init__(self, weight: Tensor | None = None, size_average=None, reduce=None, reduction: str = "mean"):
        super().__init__()
        no_legacy_reduction("MultiLabelSoftMarginLoss", size_average, reduce)
        self.reduction = reduction
        self.register_buffer("weight", weight)

    def forward(self, input: Tensor, target: Tensor) -> Tensor:  # noqa: A002
        return M.multilabel_soft_margin_loss(input, target, self.weight, reduction=self.reduction)


class CosineEmbeddingLoss(_Loss):
    def __init__(self, margin: float = 0.0, size_average=None, reduce=None, reduction: str = "mean"):
        super().__init__()
        no_legacy_reduction("CosineEmbeddingLoss", size_average, reduce)
        self.margin, self.reduction = margin, reduction

    def forward(self, input1: Tensor, input2: Tensor, target: Tensor) -> Tensor:
        return M.cosine_embedding_loss(input1, input2, target, self.margin, reduction=self.reduction)


class TripletMarginLoss(_Loss):
    def __init__(self, margin: float = 1.0, p: float = 2.0, eps: float = 1e-6, swap: bool = False,
                 size_average=None, reduce=None, reduction: str = "mean"):
        super().__init__()
        no_legacy_reduction("TripletMarginLoss", size_average, reduce)
        self.margin, self.p, self.eps, self.swap, self.reduction = margin, p, eps, swap, reduction

    def forward(self, anchor: Tensor, positive: Tensor, negative: Tensor) -> Tensor:
        return M.triplet_margin_loss(anchor, positive, negative, self.margin, self.p, self.eps, self.swap,
                                     reduction=self.reduction)


class MultiMarginLoss(_WeightedLoss):
    def __init__(self, p: int = 1, margin: float = 1.0, weight: Tensor | None = None, size_average=None,
                 reduce=None, reduction: str = "mean"):
        super().__init__()
        no_legacy_reduction("MultiMarginLoss", size_average, reduce)
        if p not in (1, 2):
            raise ValueError(f"MultiMarginLoss: only p == 1 and p == 2 are supported, got {p}")
        self.p, self.margin, self.reduction = p, margin, reduction
        self.register_buffer("weight", weight)

    def forward(self, input: Tensor, target: Tensor) -> Tensor:  # noqa: A002
        return M.multi_margin_loss(input, target, self.p, self.margin, self.weight, reduction=self.reduction)


class PoissonNLLLoss(_Loss):
    def __init__(self, log_input: bool = True, full: bool = False, size_average=None, eps: float = 1e-8,
                 reduce=None, reduction: str = "mean"):
        super().__init__()
        no_legacy_reduction("PoissonNLLLoss", size_average, reduce)
        self.log_input, self.full, self.eps, self.reduction = log_input, full, eps, reduction

    def forward(self, log_input: Tensor, target: Tensor) -> Tensor:
        return M.poisson_nll_loss(log_input, target, self.log_input, self.full, eps=self.eps, reduction=self.reduction)


class GaussianNLLLoss(_Loss):
    def __init__(self, *, full: bool = False, eps: float = 1e-6, reduction: str = "mean"):
        super().__init__()
        self.full, self.eps, self.reduction = full, eps, reduction

    def forward(self, input: Tensor, target: Tensor, var: Tensor | float) -> Tensor:  # noqa: A002
        return M.gaussian_nll_loss(input, target, var, self.full, self.eps, self.reduction)


class TripletMarginWithDistanceLoss(_Loss):
    def __init__(self, *, distance_function: Callable[[Tensor, Tensor], Tensor] | None = None, margin: float = 1.0,
                 swap: bool = False, reduction: str = "mean"):
        super().__init__()
        if margin <= 0:
            raise ValueError(f"TripletMarginWithDistanceLoss: expected margin to be greater than 0, got {margin} "
                             f"instead")
        # torch's default is a PairwiseDistance submodule (so it prints, and moves with the loss)
        self.distance_function = distance_function if distance_function is not None else PairwiseDistance()
        self.margin, self.swap, self.reduction = margin, swap, reduction

    def forward(self, anchor: Tensor, positive: Tensor, negative: Tensor) -> Tensor:
        return M.triplet_margin_with_distance_loss(anchor, positive, negative, distance_function=self.distance_function,
                                                   margin=self.margin, swap=self.swap, reduction=self.reduction)


class MultiLabelMarginLoss(_Loss):
    def __init__(self, size_average=None, reduce=None, reduction: str = "mean"):
        super().__init__()
        no_legacy_reduction("MultiLabelMarginLoss", size_average, reduce)
        self.reduction = reduction

    def forward(self, input: Tensor, target: Tensor) -> Tensor:  # noqa: A002
        return M.multilabel_margin_loss(input, target, reduction=self.reduction)


class CTCLoss(_Loss):
    def __init__(self, blank: int = 0, reduction: str = "mean", zero_infinity: bool = False):
        super().__init__()
        self.blank, self.reduction, self.zero_infinity = blank, reduction, zero_infinity

    def forward(self, log_probs: Tensor, targets: Tensor, input_lengths, target_lengths) -> Tensor:
        return ctc_loss(log_probs, targets, input_lengths, target_lengths, self.blank, self.reduction,
                        self.zero_infinity)


class LinearCrossEntropyLoss(_Loss):
    """torch.nn.LinearCrossEntropyLoss: F.linear_cross_entropy with its own Linear of in_features to
    num_classes * prod(out_features) outputs (its weight and bias stored flat, in self.linear, as torch's,
    and shaped [num_classes, *out_features, in_features] for each call); weight [num_classes] a buffer."""

    def __init__(self, in_features: int, num_classes: int, *, out_features: tuple[int, ...] = (), bias: bool = False,
                 device=None, dtype=None, reduction: str = "mean", weight: Tensor | None = None,
                 ignore_index: int | None = None, label_smoothing: float = 0.0, options=None):
        if weight is not None and tuple(weight.shape) != (num_classes,):
            raise ArgumentRangeError(f"expected weight shape to be {(num_classes,)}, got {tuple(weight.shape)}")
        if not 0.0 <= label_smoothing <= 1.0:
            raise ArgumentRangeError(f"expected label_smoothing to be in range [0, 1], got {label_smoothing}")
        super().__init__()
        self.register_buffer("weight", weight)  # in state_dict, as torch's
        self.reduction, self.num_classes, self.out_features = reduction, num_classes, tuple(out_features)
        self.ignore_index, self.label_smoothing, self.options = ignore_index, label_smoothing, options
        self.linear = Linear(in_features, math.prod(out_features, start=num_classes), bias=bias, device=device,
                             dtype=dtype)

    def forward(self, input: Tensor, target: Tensor) -> Tensor:  # noqa: A002
        shape = (self.num_classes, *self.out_features)
        bias = None if self.linear.bias is None else self.linear.bias.reshape(shape)
        return linear_cross_entropy(input, self.linear.weight.reshape(*shape, self.linear.in_features), target,
                                    linear_bias=bias, weight=self.weight, reduction=self.reduction,
                                    ignore_index=self.ignore_index, label_smoothing=self.label_smoothing,
                                    options=self.options)

    def extra_repr(self) -> str:
        return (f"in_features={self.linear.in_features}, num_classes={self.num_classes}, "
                f"out_features={self.out_features}, bias={self.linear.bias is not None}, "
                f"reduction={self.reduction}, ignore_index={self.ignore_index}, "
                f"label_smoothing={self.label_smoothing}, options={self.options}")
