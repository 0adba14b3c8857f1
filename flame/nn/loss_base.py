"""The bases of flame.nn's loss modules, torch.nn.modules.loss's _Loss and _WeightedLoss: a custom loss
subclasses them (`class FocalLoss(nn.modules.loss._Loss)`) and reads self.reduction, and
isinstance(m, _Loss) tells a loss module as in torch."""

from __future__ import annotations

from flame.frontend.functional import no_legacy_reduction
from flame.frontend.tensor import Tensor
from flame.nn.module import Module


class _Loss(Module):
    """A loss module holding `reduction` ('mean', 'sum' or 'none'); torch's deprecated size_average / reduce
    are refused, as by every flame loss."""

    def __init__(self, size_average=None, reduce=None, reduction: str = "mean"):
        super().__init__()
        no_legacy_reduction(type(self).__name__, size_average, reduce)
        self.reduction = reduction


class _WeightedLoss(_Loss):
    """A loss module with a class weight, registered as a buffer (in state_dict, as torch's)."""

    def __init__(self, weight: Tensor | None = None, size_average=None, reduce=None, reduction: str = "mean"):
        super().__init__(size_average, reduce, reduction)
        self.register_buffer("weight", weight)
