"""torch.nn.functional.linear_cross_entropy: cross_entropy(linear(input, linear_weight, linear_bias),
target), with torch's checks of the shapes, its K-dimensional form (linear_weight [C, d1, ..., dK, in]
gives logits [N, C, d1, ..., dK]) and its ignore_index default. torch's `options` pick a chunked
evaluation that never holds the whole logits tensor; flame computes the reference composition for
every options (the same values; the fusion and memory passes decide what is held)."""

from __future__ import annotations

import math

from flame.errors import ArgumentRangeError, ShapeError
from flame.frontend.context import user_location
from flame.frontend.functional import linear
from flame.frontend.losses import cross_entropy
from flame.frontend.tensor import Tensor

__all__ = ["linear_cross_entropy"]


def linear_cross_entropy(input: Tensor, linear_weight: Tensor, target: Tensor, *,  # noqa: A002
                         linear_bias: Tensor | None = None, weight: Tensor | None = None, reduction: str = "mean",
                         ignore_index: int | None = None, label_smoothing: float = 0.0, options=None) -> Tensor:
    """The cross entropy of input [in] or [N, in], transformed by linear_weight [C, d1, ..., dK, in] (and
    linear_bias [C, d1, ..., dK]), against target (class indices, or probabilities of the logits'
    shape), as torch's: weight, reduction, ignore_index (-100 when not given, and refused with
    probabilities) and label_smoothing as cross_entropy's."""
    where = f"\n  at {user_location()}"
    if not 1 <= input.ndim <= 2:
        raise ShapeError(f"expected input with dimensionality 1 or 2, got {input.ndim}{where}")
    if linear_weight.ndim < 2:
        raise ShapeError(f"expected linear_weight with dimensionality at least 2, got {linear_weight.ndim}{where}")
    batches, in_features = input.shape[:-1], input.shape[-1]
    if in_features != linear_weight.shape[-1]:
        raise ShapeError(f"expected equal input and linear_weight last dimensions (in_features), got "
                         f"{in_features} and {linear_weight.shape[-1]}, respectively{where}")
    classes, out_features = linear_weight.shape[0], tuple(linear_weight.shape[1:-1])
    if linear_bias is not None and tuple(linear_bias.shape) != (classes, *out_features):
        raise ShapeError(f"expected linear_bias shape {(classes, *out_features)}, got "
                         f"{tuple(linear_bias.shape)}{where}")
    if out_features and not batches:
        raise ShapeError(f"K-dimensional loss defined by linear_weight shape {tuple(linear_weight.shape)} requires "
                         f"batched input, (N, {in_features}), got unbatched input with shape "
                         f"{tuple(input.shape)}{where}")
    logits_shape = (*batches, classes, *out_features)
    if tuple(target.shape) == logits_shape and ignore_index is not None:
        raise ArgumentRangeError(f"ignore_index cannot be specified when target contains probabilities{where}")
    outputs = math.prod(out_features, start=classes)
    logits = linear(input, linear_weight.reshape(outputs, in_features),
                    None if linear_bias is None else linear_bias.reshape(outputs))
    return cross_entropy(logits.reshape(logits_shape), target, weight=weight, reduction=reduction,
                         ignore_index=-100 if ignore_index is None else ignore_index,
                         label_smoothing=label_smoothing)
