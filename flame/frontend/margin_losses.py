"""The margin, embedding and likelihood losses of torch.nn.functional (margin_ranking_loss,
hinge_embedding_loss, soft_margin_loss, multilabel_soft_margin_loss, cosine_embedding_loss,
triplet_margin_loss, triplet_margin_with_distance_loss, multi_margin_loss, multilabel_margin_loss,
poisson_nll_loss, gaussian_nll_loss) and gumbel_softmax, each
written over primitives as PyTorch defines it, with PyTorch's arguments, defaults and shape checks."""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable

from flame.errors import IndexValueError, ShapeError
from flame.frontend import creation
from flame.frontend.activations import logsigmoid, pairwise_distance
from flame.frontend.autocast import policy
from flame.frontend.context import user_location
from flame.frontend.creation import arange, rand_like
from flame.frontend.functional import _loss_reduce, no_legacy_reduction, no_weight_grad, softmax
from flame.frontend.losses import _where, class_index_dtypes, one_hot
from flame.frontend.tensor import Tensor

__all__ = ["cosine_embedding_loss", "gaussian_nll_loss", "gumbel_softmax", "hinge_embedding_loss",
           "margin_ranking_loss", "multi_margin_loss", "multilabel_margin_loss", "multilabel_soft_margin_loss",
           "poisson_nll_loss", "soft_margin_loss", "triplet_margin_loss", "triplet_margin_with_distance_loss"]


def _shapes_match(name: str, **tensors: Tensor) -> None:
    shapes = {k: tuple(t.shape) for k, t in tensors.items()}
    if len(set(shapes.values())) > 1:
        said = ", ".join(f"{k} {list(s)}" for k, s in shapes.items())
        raise ShapeError(f"{name}: {said} must have the same shape\n  at {user_location()}")


@policy("f32")  # autocast: on PyTorch's float32 list
def margin_ranking_loss(input1: Tensor, input2: Tensor, target: Tensor, margin: float = 0.0, size_average=None,
                        reduce=None, reduction: str = "mean") -> Tensor:
    """max(0, -target (input1 - input2) + margin), target +1 where input1 should rank higher, -1 else."""
    no_legacy_reduction("margin_ranking_loss", size_average, reduce)
    _shapes_match("margin_ranking_loss", input1=input1, input2=input2, target=target)
    return _loss_reduce((-target * (input1 - input2) + margin).clamp(min=0.0), reduction)


@policy("f32")  # autocast: on PyTorch's float32 list
def hinge_embedding_loss(input: Tensor, target: Tensor, margin: float = 1.0, size_average=None,  # noqa: A002
                         reduce=None, reduction: str = "mean") -> Tensor:
    """input where target is 1, max(0, margin - input) where it is -1 (PyTorch's sum of both masks)."""
    no_legacy_reduction("hinge_embedding_loss", size_average, reduce)
    _shapes_match("hinge_embedding_loss", input=input, target=target)
    loss = _where(target != 1, (margin - input).clamp(min=0.0), 0.0) + _where(target != -1, input, 0.0)
    return _loss_reduce(loss, reduction)


@policy("f32")  # autocast: on PyTorch's float32 list
def soft_margin_loss(input: Tensor, target: Tensor, size_average=None, reduce=None,  # noqa: A002
                     reduction: str = "mean") -> Tensor:
    """log(1 + exp(-target input)), target +1 or -1."""
    no_legacy_reduction("soft_margin_loss", size_average, reduce)
    _shapes_match("soft_margin_loss", input=input, target=target)
    no_weight_grad("soft_margin_loss", target, "target")  # torch's kernel has no target gradient
    return _loss_reduce((-logsigmoid(target * input)).to(input.dtype), reduction)  # torch's: in input's dtype


def multilabel_soft_margin_loss(input: Tensor, target: Tensor, weight: Tensor | None = None,  # noqa: A002
                                size_average=None, reduce=None, reduction: str = "mean") -> Tensor:
    """-(t log sigmoid(x) + (1 - t) log sigmoid(-x)) (times weight), averaged over the classes (the last
    dim), then reduced over the samples."""
    no_legacy_reduction("multilabel_soft_margin_loss", size_average, reduce)
    _shapes_match("multilabel_soft_margin_loss", input=input, target=target)
    loss = -(target * logsigmoid(input) + (1 - target) * logsigmoid(-input))
    if weight is not None:
        loss = loss * weight
    return _loss_reduce(loss.sum(-1) / input.shape[-1], reduction)


@policy("f32")  # autocast: on PyTorch's float32 list
def cosine_embedding_loss(input1: Tensor, input2: Tensor, target: Tensor, margin: float = 0.0, size_average=None,
                          reduce=None, reduction: str = "mean") -> Tensor:
    """1 - cos(x1, x2) where target is 1, max(0, cos(x1, x2) - margin) where it is -1; cos over the last
    dim, each squared norm plus 1e-12 as in PyTorch. Inputs [N, D] with target [N], or [D] with []."""
    no_legacy_reduction("cosine_embedding_loss", size_average, reduce)
    if input1.ndim not in (1, 2) or tuple(input1.shape) != tuple(input2.shape) or \
            tuple(target.shape) != tuple(input1.shape[:-1]):
        raise ShapeError(f"cosine_embedding_loss: expected inputs [N, D] and target [N] (or [D] and []), got "
                         f"{list(input1.shape)}, {list(input2.shape)} and {list(target.shape)}\n  at {user_location()}")
    dot = (input1 * input2).sum(-1)
    cos = dot / (((input1 * input1).sum(-1) + 1e-12) * ((input2 * input2).sum(-1) + 1e-12)).sqrt()
    loss = _where(target == 1, 1 - cos, 0.0) + _where(target == -1, (cos - margin).clamp(min=0.0), 0.0)
    return _loss_reduce(loss, reduction)


@policy("f32")  # autocast: on PyTorch's float32 list
def triplet_margin_loss(anchor: Tensor, positive: Tensor, negative: Tensor, margin: float = 1.0, p: float = 2.0,
                        eps: float = 1e-6, swap: bool = False, size_average=None, reduce=None,
                        reduction: str = "mean") -> Tensor:
    """max(d(a, p) - d(a, n) + margin, 0) with d the p-norm pairwise distance (eps added to the
    difference); swap: d(a, n) becomes min(d(a, n), d(p, n))."""
    no_legacy_reduction("triplet_margin_loss", size_average, reduce)
    if not anchor.ndim == positive.ndim == negative.ndim or anchor.ndim not in (1, 2):
        raise ShapeError(f"triplet_margin_loss: anchor, positive and negative must all be [N, D] or [D], got "
                         f"{list(anchor.shape)}, {list(positive.shape)} and {list(negative.shape)}"
                         f"\n  at {user_location()}")
    d_pos = pairwise_distance(anchor, positive, p, eps)
    d_neg = pairwise_distance(anchor, negative, p, eps)
    if swap:
        d_neg = d_neg.minimum(pairwise_distance(positive, negative, p, eps))
    return _loss_reduce((d_pos - d_neg + margin).clamp(min=0.0), reduction)


def triplet_margin_with_distance_loss(anchor: Tensor, positive: Tensor, negative: Tensor, *,
                                      distance_function: Callable[[Tensor, Tensor], Tensor] | None = None,
                                      margin: float = 1.0, swap: bool = False, reduction: str = "mean") -> Tensor:
    """max(d(a, p) - d(a, n) + margin, 0) with d = distance_function (pairwise_distance when None);
    swap: d(a, n) becomes min(d(a, n), d(p, n)). margin must be positive, as PyTorch's."""
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"triplet_margin_with_distance_loss: {reduction!r} is not a valid value for reduction")
    if margin <= 0:
        raise ValueError(f"triplet_margin_with_distance_loss: margin must be greater than 0, got {margin}"
                         f"\n  at {user_location()}")
    if not anchor.ndim == positive.ndim == negative.ndim:
        raise ShapeError(f"triplet_margin_with_distance_loss: the anchor, positive, and negative tensors are expected "
                         f"to have the same number of dimensions, but got: anchor {anchor.ndim}D, positive "
                         f"{positive.ndim}D, and negative {negative.ndim}D inputs\n  at {user_location()}")
    dist = pairwise_distance if distance_function is None else distance_function
    d_pos, d_neg = dist(anchor, positive), dist(anchor, negative)
    if swap:
        d_neg = d_neg.minimum(dist(positive, negative))
    return _loss_reduce((margin + d_pos - d_neg).clamp(min=0.0), reduction)


@policy("f32")  # autocast: on PyTorch's float32 list
def multilabel_margin_loss(input: Tensor, target: Tensor, size_average=None, reduce=None,  # noqa: A002
                           reduction: str = "mean") -> Tensor:
    """Per sample: sum over its target classes j and the other classes i of max(0, 1 - (x[j] - x[i])), over
    the number of classes. target holds class indices of input's shape, [N, C] or [C]; its first -1 ends
    a sample's list (what follows is ignored), as PyTorch's."""
    no_legacy_reduction("multilabel_margin_loss", size_average, reduce)
    if input.ndim not in (1, 2) or tuple(target.shape) != tuple(input.shape) or target.dtype.is_float:
        raise ShapeError(f"multilabel_margin_loss: expected input [N, C] and an integer target of its shape (or [C] "
                         f"and [C]), got {list(input.shape)} and {target.dtype}{list(target.shape)}"
                         f"\n  at {user_location()}")
    class_index_dtypes("multilabel_margin_loss", input, target)
    n_classes = input.shape[-1]
    _check_multilabel(target, n_classes)
    positions = arange(n_classes)
    first_end = _where(target == -1, positions, n_classes).amin(-1, keepdim=True)
    listed = positions < first_end  # [.., j]: the j-th entry is a target
    labels = _where(listed, target, 0)
    is_target = ((labels.unsqueeze(-1) == positions) & listed.unsqueeze(-1)).any(-2)  # [.., i]
    x_j = input.gather(-1, labels).unsqueeze(-1)  # [.., j, 1]
    hinge = (1.0 - x_j + input.unsqueeze(-2)).clamp(min=0.0)  # [.., j, i]
    keep = listed.unsqueeze(-1) & ~is_target.unsqueeze(-2)
    return _loss_reduce(_where(keep, hinge, 0.0).sum((-2, -1)) / n_classes, reduction)


def _check_multilabel(target: Tensor, n_classes: int) -> None:
    if target._value is not None or not target.numel():
        return
    t = target.numpy()
    if ((t < -1) | (t >= n_classes)).any():
        bad = t[(t < -1) | (t >= n_classes)].flat[0]
        raise IndexValueError(f"multilabel_margin_loss: target {int(bad)} is out of range for {n_classes} classes "
                              f"(a class index, or -1 to end the list)\n  at {user_location()}")


@policy("f32")  # autocast: on PyTorch's float32 list
def multi_margin_loss(input: Tensor, target: Tensor, p: int = 1, margin: float = 1.0,  # noqa: A002
                      weight: Tensor | None = None, size_average=None, reduce=None, reduction: str = "mean") -> Tensor:
    """Per sample: sum over classes i != y of max(0, margin - x[y] + x[i])^p (times weight[y]), over the
    number of classes. input [N, C] with target [N] class indices, or [C] with []."""
    no_legacy_reduction("multi_margin_loss", size_average, reduce)
    if p not in (1, 2):
        raise ValueError(f"multi_margin_loss: only p == 1 and p == 2 are supported, got {p}")
    if input.ndim not in (1, 2) or tuple(target.shape) != tuple(input.shape[:-1]) or target.dtype.is_float:
        raise ShapeError(f"multi_margin_loss: expected input [N, C] and integer target [N] (or [C] and []), got "
                         f"{list(input.shape)} and {target.dtype}{list(target.shape)}\n  at {user_location()}")
    class_index_dtypes("multi_margin_loss", input, target, weight)
    no_weight_grad("multi_margin_loss", weight)
    n_classes = input.shape[-1]
    hot = one_hot(target, n_classes).to(input.dtype)
    picked = (input * hot).sum(-1, keepdim=True)
    z = (margin - picked + input).relu()  # no gradient where the margin is exactly met (torch's z > 0)
    z = z * z if p == 2 else z
    if weight is not None:
        z = z * (hot * weight).sum(-1, keepdim=True)
    return _loss_reduce((z * (1 - hot)).sum(-1) / n_classes, reduction)


@policy("f32")  # autocast: on PyTorch's float32 list
def poisson_nll_loss(input: Tensor, target: Tensor, log_input: bool = True, full: bool = False,  # noqa: A002
                     size_average=None, eps: float = 1e-8, reduce=None, reduction: str = "mean") -> Tensor:
    """exp(input) - target input (log_input), else input - target log(input + eps); full adds
    Stirling's approximation of log(target!) where target > 1."""
    no_legacy_reduction("poisson_nll_loss", size_average, reduce)
    loss = input.exp() - target * input if log_input else input - target * (input + eps).log()
    if full:
        safe = _where(target > 1, target, 1.0)
        stirling = safe * safe.log() - safe + 0.5 * (2 * math.pi * safe).log()
        loss = loss + _where(target > 1, stirling, 0.0)
    return _loss_reduce(loss, reduction)


def gaussian_nll_loss(input: Tensor, target: Tensor, var: Tensor | float, full: bool = False,  # noqa: A002
                      eps: float = 1e-6, reduction: str = "mean") -> Tensor:
    """0.5 (log var + (input - target)^2 / var) (+ 0.5 log(2 pi) with full); var clamped at eps for the
    value only (the gradient passes as if unclamped, as PyTorch's in-place clamp under no_grad). var:
    the input's shape, or without its last dim, or with a last dim of 1 (one variance per sample)."""
    if not isinstance(var, Tensor):
        if var < 0:
            raise ValueError(f"gaussian_nll_loss: var has negative entry/entries\n  at {user_location()}")
        var = creation.full_like(input, float(var))
    elif var._value is None and var.numel() and bool((var.numpy() < 0).any()):
        raise ValueError(f"gaussian_nll_loss: var has negative entry/entries\n  at {user_location()}")
    if tuple(var.shape) != tuple(input.shape):
        if tuple(input.shape[:-1]) == tuple(var.shape):
            var = var.unsqueeze(-1)  # one variance per sample
        elif not (input.ndim == var.ndim and sum(v for i, v in zip(input.shape, var.shape) if i != v) == 1):
            raise ShapeError(f"gaussian_nll_loss: var {list(var.shape)} fits neither input {list(input.shape)}, nor "
                             f"its shape without its last dim, nor it with one dim of 1\n  at {user_location()}")
    if reduction not in ("none", "mean", "sum"):
        raise ValueError(f"gaussian_nll_loss: {reduction!r} is not a valid value for reduction")
    var = var + (var.clamp(min=eps) - var).detach()
    loss = 0.5 * (var.log() + (input - target) ** 2 / var)
    if full:
        loss = loss + 0.5 * math.log(2 * math.pi)
    return _loss_reduce(loss, reduction)


def gumbel_softmax(logits: Tensor, tau: float = 1.0, hard: bool = False, eps: float = 1e-10,
                   dim: int = -1) -> Tensor:
    """softmax((logits + g) / tau) with g Gumbel(0, 1) noise (-log(-log u), u uniform); hard: the one-hot
    of its argmax in the forward, the soft sample's gradient in the backward (straight through). eps is
    torch's deprecated argument, unused there too (it warns when it is not the default)."""
    if eps != 1e-10:
        warnings.warn("gumbel_softmax: `eps` parameter is deprecated and has no effect.", UserWarning, stacklevel=2)
    u = rand_like(logits).clamp(min=1e-20, max=1.0 - 1e-7)
    y = softmax((logits - (-u.log()).log()) / tau, dim)
    if not hard:
        return y
    d = dim % logits.ndim
    positions = arange(logits.shape[d]).reshape([logits.shape[d] if k == d else 1 for k in range(logits.ndim)])
    hot = (positions == y.argmax(d, keepdim=True)).to(y.dtype)
    return hot - y.detach() + y
