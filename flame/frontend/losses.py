"""The losses of flame.nn.functional beyond cross_entropy and mse_loss (nll_loss, binary_cross_entropy,
binary_cross_entropy_with_logits, l1_loss, smooth_l1_loss), plus one_hot and pad, each written over
primitives as PyTorch defines them. Eager calls check label ranges and probabilities as PyTorch does;
inside @flame.compile those values are not known and are not checked."""

from __future__ import annotations

import numpy as np

from flame.errors import ArgumentRangeError, DTypeError, IndexValueError, ShapeError, TraceError
from flame.frontend import opmath, pointwise_formulas, torch_formulas
from flame.frontend.autocast import cpu_lists, is_autocast_enabled, policy
from flame.frontend.context import user_location
from flame.frontend.creation import arange
from flame.frontend.dispatch import apply
from flame.frontend.functional import (
    _loss_reduce,
    cross_entropy_labels,
    log_softmax,
    no_weight_grad,
    warn_if_broadcast,
    weighted_loss_reduce,
)
from flame.frontend.functional import no_legacy_reduction as _no_legacy
from flame.frontend.norms import kernel_dtypes
from flame.frontend.promotion import bool_as_number, broadcast_promoted
from flame.frontend.tensor import Tensor
from flame.frontend.tensor_core import where
from flame.frontend.torch_saves import saves
from flame.frontend.views import new_tensor
from flame.ir.dtypes import boolean, i64, u8

__all__ = [
    "binary_cross_entropy",
    "binary_cross_entropy_with_logits",
    "cross_entropy",
    "l1_loss",
    "nll_loss",
    "one_hot",
    "pad",
    "smooth_l1_loss",
]


def _where(cond: Tensor, a, b) -> Tensor:
    return where(cond, a, b)


def _same_shape(name: str, input: Tensor, target: Tensor) -> None:  # noqa: A002
    if tuple(input.shape) != tuple(target.shape):
        raise ShapeError(
            f"{name}: target size {list(target.shape)} differs from input size {list(input.shape)} "
            f"(PyTorch raises here too; reshape one of them)\n  at {user_location()}"
        )


def one_hot(input: Tensor, num_classes: int = -1) -> Tensor:  # noqa: A002
    """[..., num_classes] int64 with a 1 at each label (torch.nn.functional.one_hot). num_classes=-1
    means max + 1, which needs the values: eager only."""
    tensor = input
    if tensor.dtype != i64:  # torch's words: it takes no other integer dtype either
        raise DTypeError(f"one_hot is only applicable to index tensor of type LongTensor (got {tensor.dtype}, as in "
                         f"PyTorch; convert it with .long())\n  at {user_location()}")
    if num_classes < 0 and tensor.numel() == 0:
        raise IndexValueError(f"one_hot: Can not infer total number of classes from empty tensor (as in PyTorch; "
                              f"pass num_classes)\n  at {user_location()}")
    if tensor._value is None and tensor.numel():
        vals = tensor.numpy()
        if vals.min() < 0 or (num_classes >= 0 and vals.max() >= num_classes):
            raise IndexValueError(
                f"one_hot: class values must be in [0, num_classes={num_classes}), got "
                f"{int(vals.min())}..{int(vals.max())}\n  at {user_location()}"
            )
        if num_classes < 0:
            num_classes = int(vals.max()) + 1
    elif num_classes < 0:
        if tensor._value is not None:
            raise TraceError(
                f"one_hot inside @flame.compile needs num_classes (the result's width depends on the "
                f"values)\n  at {user_location()}"
            )
        num_classes = 0
    return (tensor.unsqueeze(-1) == arange(num_classes, dtype=tensor.dtype)).to(i64)


def class_index_dtypes(name: str, input: Tensor, target: Tensor, weight: Tensor | None = None,  # noqa: A002
                       byte: bool = False) -> None:
    """PyTorch's dtype checks of a loss over integer class indices: the target int64 (or uint8 where
    `byte`: nll_loss and cross_entropy of [C] or [N, C] input) and the class weights in input's dtype;
    a DTypeError in PyTorch's words otherwise (it converts neither)."""
    if not (target.dtype == i64 or byte and target.dtype == u8):
        wanted = "Long or Byte" if byte else "Long"
        raise DTypeError(f"{name}: expected target dtype to be {wanted}, but got {target.dtype} (as in PyTorch; "
                         f"target.long())\n  at {user_location()}")
    if weight is not None and weight.dtype != input.dtype:
        raise DTypeError(f"{name}: expected scalar type {input.dtype} but found {weight.dtype} for weight (as in "
                         f"PyTorch; weight.to(input.dtype))\n  at {user_location()}")


def _check_targets(name: str, target: Tensor, n_classes: int, ignore_index: int) -> None:
    if target._value is not None or not target.numel():
        return
    t = target.numpy()
    bad = (t != ignore_index) & ((t < 0) | (t >= n_classes))
    if bad.any():
        raise IndexValueError(
            f"{name}: target {int(t[bad].flat[0])} is out of bounds for {n_classes} classes\n  at {user_location()}"
        )


@policy("f32")  # autocast: on PyTorch's float32 list
def nll_loss(
    input: Tensor,
    target: Tensor,
    weight: Tensor | None = None,
    size_average=None,  # noqa: A002
    ignore_index: int = -100,
    reduce=None,
    reduction: str = "mean",
) -> Tensor:
    """-input[n, target[n]] (times weight[target[n]]), for log-probabilities input [N, C] (or [C], or
    [N, C, d1, ...] with target [N, d1, ...]); the mean divides by the summed weights of the targets
    that are not ignore_index."""
    _no_legacy("nll_loss", size_average, reduce)
    if target.dtype.is_float:
        raise ShapeError(
            f"nll_loss: target must hold integer class indices, got {target.dtype}\n  at {user_location()}"
        )
    batched = input.ndim >= 2
    want = (input.shape[0], *input.shape[2:]) if batched else ()
    if input.ndim == 0 or tuple(target.shape) != want:
        raise ShapeError(
            f"nll_loss: input {list(input.shape)} needs target {list(want)}, got {list(target.shape)}"
            f"\n  at {user_location()}"
        )
    class_index_dtypes("nll_loss", input, target, weight, byte=input.ndim <= 2)
    no_weight_grad("nll_loss2d_forward" if input.ndim > 2 else "nll_loss_forward", weight)
    n_classes = input.shape[1] if batched else input.shape[0]
    if weight is not None and weight.numel() != n_classes:  # PyTorch's check and words
        raise ShapeError(
            f"nll_loss: weight tensor should be defined either for all {n_classes} classes or no classes but got "
            f"weight tensor of shape: {list(weight.shape)}\n  at {user_location()}"
        )
    weight = weight.reshape(-1) if weight is not None and weight.ndim != 1 else weight
    _check_targets("nll_loss", target, n_classes, ignore_index)
    x = input.permute(0, *range(2, input.ndim), 1) if batched else input  # classes last
    valid = target != ignore_index
    safe = _where(valid, target.to(i64), 0)
    picked = x.gather(-1, safe.unsqueeze(-1)).squeeze(-1)
    w = (
        _where(valid, 1.0, 0.0).to(input.dtype)
        if weight is None
        else _where(valid, apply("index_select", weight, safe.reshape(-1), axis=0).reshape(safe.shape), 0.0)
    )
    loss = -picked * w
    if reduction == "mean":
        return _weighted_mean(loss, w)
    return _loss_reduce(loss, reduction)


def _weighted_mean(loss: Tensor, w: Tensor) -> Tensor:
    """loss.sum() / w.sum(), as PyTorch's: NaN when every target is ignored (0 / 0), with a zero
    gradient then (not 0 * inf)."""
    total = w.sum()
    none = total == 0
    return loss.sum() / _where(none, 1.0, total) + _where(none, float("nan"), 0.0).to(loss.dtype)


@policy("f32")  # autocast: runs in f32, as on PyTorch's list
def cross_entropy(
    input: Tensor,
    target: Tensor,
    weight: Tensor | None = None,
    size_average=None,  # noqa: A002
    ignore_index: int | None = -100,
    reduce=None,
    reduction: str = "mean",
    label_smoothing: float = 0.0,
) -> Tensor:
    """torch.nn.functional.cross_entropy: logits [N, C] (or [C], or [N, C, d1, ...]) against class
    indices [N] (or [N, d1, ...]; ignore_index, PyTorch's -100 when not given, adds nothing and is left
    out of the mean) or class probabilities of input's shape; weight [C] scales each class (the mean
    divides by the summed weights of the targets); label_smoothing (at most 1; as PyTorch, a negative one
    is no smoothing) mixes in the uniform distribution."""
    _no_legacy("cross_entropy", size_average, reduce)
    if label_smoothing > 1.0:
        raise ArgumentRangeError(f"label_smoothing must be between 0.0 and 1.0. Got: {label_smoothing}"
                                 f"\n  at {user_location()}")
    label_smoothing = max(float(label_smoothing), 0.0)
    if target.dtype.is_float and ignore_index is not None and ignore_index >= 0:
        raise ArgumentRangeError(f"ignore_index is not supported for floating point target (ignore_index="
                                 f"{ignore_index}; PyTorch accepts only a negative one there)\n  at {user_location()}")
    if not target.dtype.is_float:
        class_index_dtypes("cross_entropy", input, target, weight, byte=input.ndim <= 2)
    if weight is None and input.ndim == 2 and not target.dtype.is_float:
        return cross_entropy_labels(input, target, reduction, label_smoothing, ignore_index)
    cdim = 1 if input.ndim >= 2 else 0
    n_classes = input.shape[cdim] if input.ndim else 0
    if weight is not None and (weight.ndim != 1 or weight.shape[0] != n_classes):
        raise ShapeError(
            f"cross_entropy: weight must hold one value per class ({n_classes}), got "
            f"{list(weight.shape)}\n  at {user_location()}"
        )
    w = None if weight is None else weight.reshape(*[n_classes if d == cdim else 1 for d in range(input.ndim)])
    logp = log_softmax(input, cdim)
    if target.dtype.is_float:  # class probabilities
        if tuple(target.shape) != tuple(input.shape):
            raise ShapeError(
                f"cross_entropy: a {target.dtype} target holds class probabilities, which must have the input's "
                f"shape {list(input.shape)}, got {list(target.shape)}; class indices must be an integer (int64) "
                f"tensor (expected target dtype to be Long, but got {target.dtype}: target.long())"
                f"\n  at {user_location()}"
            )
        t = target * (1 - label_smoothing) + label_smoothing / n_classes if label_smoothing else target
        loss = -(logp * t if w is None else logp * t * w).sum(cdim)
        return loss.sum() / (input.numel() // n_classes) if reduction == "mean" else _loss_reduce(loss, reduction)
    ignore = -100 if ignore_index is None else ignore_index
    nll = nll_loss(logp, target, weight, ignore_index=ignore, reduction=reduction)
    if not label_smoothing:
        return nll
    keep = target != ignore
    smooth = _where(keep, -(logp if w is None else logp * w).sum(cdim), 0.0)
    if reduction == "mean":
        picked = (
            keep.to(logp.dtype)
            if weight is None
            else _where(
                keep,
                apply("index_select", weight, _where(keep, target.to(i64), 0).reshape(-1), axis=0).reshape(
                    target.shape
                ),
                0.0,
            )
        )
        smooth = smooth.sum() / picked.sum()
    else:
        smooth = _loss_reduce(smooth, reduction)
    return nll * (1 - label_smoothing) + smooth * (label_smoothing / n_classes)


_BCE_UNSAFE = (  # PyTorch's words: binary_cross_entropy is on its CUDA autocast's banned list
    "torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are unsafe to autocast.\n"
    "Many models use a sigmoid layer right before the binary cross entropy layer.\n"
    "In this case, combine the two layers using torch.nn.functional.binary_cross_entropy_with_logits\n"
    "or torch.nn.BCEWithLogitsLoss.  binary_cross_entropy_with_logits and BCEWithLogits are\n"
    "safe to autocast."
)


def binary_cross_entropy(
    input: Tensor,
    target: Tensor,
    weight: Tensor | None = None,  # noqa: A002
    size_average=None,
    reduce=None,
    reduction: str = "mean",
) -> Tensor:
    """-(t log x + (1 - t) log(1 - x)) for probabilities x, each log clamped at -100 as in PyTorch; the
    gradients PyTorch's: (x - t) / max((1 - x) x, 1e-12) for x (0, not NaN, where x is 0 or 1 and t
    equals it) and -logit(x) for t."""
    _no_legacy("binary_cross_entropy", size_average, reduce)
    if is_autocast_enabled() and not cpu_lists():  # torch's CUDA autocast refuses it
        raise RuntimeError(_BCE_UNSAFE + f"\n  at {user_location()}")
    return _binary_cross_entropy(input, target, weight, reduction)


@policy("", cpu="f32")  # autocast: on PyTorch's CPU float32 list (its CUDA autocast refuses the op)
@saves("input", "target", "weight", name="binary_cross_entropy", vjp=pointwise_formulas.binary_cross_entropy)
def _binary_cross_entropy(input: Tensor, target: Tensor, weight: Tensor | None, reduction: str) -> Tensor:  # noqa: A002
    _same_shape("binary_cross_entropy", input, target)
    if target.dtype != input.dtype:  # torch's kernel converts neither (long labels included)
        raise DTypeError(f"binary_cross_entropy: Found dtype {target.dtype} but expected {input.dtype} for the target "
                         f"(as in PyTorch; target.to(input.dtype))\n  at {user_location()}")
    for name, t in (("input", input), ("target", target)):  # torch's kernel checks both (NaN fails too)
        if t._value is None and t.numel():
            x = t.numpy()
            if not ((x >= 0) & (x <= 1)).all():
                raise ValueError(
                    f"binary_cross_entropy: all elements of {name} should be between 0 and 1\n  at {user_location()}"
                )
    # PyTorch's kernel's form and order (its signs of zero too)
    loss = (target - 1) * (-input).log1p().clamp(min=-100.0) - target * input.log().clamp(min=-100.0)
    loss = _bce_gradients(loss, input, target)
    return _loss_reduce(loss * weight if weight is not None else loss, reduction)


_BCE_EPSILON = float(np.float32(1e-12))  # PyTorch's EPSILON, a float constant: 9.99999996e-13 in every dtype


def _bce_gradients(loss: Tensor, x: Tensor, t: Tensor) -> Tensor:
    """loss (binary_cross_entropy's, unreduced) with PyTorch's gradients, in its kernels' order and
    dtype: grad * (x - t) / max((1 - x) x, 1e-12) for x (0, not NaN, where x is 0 or 1 and t equals
    it) and -logit(x) * grad for t. A form whose VJP computes exactly that: (x / den) * (x - t) with
    den and x - t constants gives (grad * (x - t)) / den."""
    forms = []
    if opmath.float_gradient(x):
        den = ((1 - x) * x).clamp(min=_BCE_EPSILON)
        forms.append((x / den.detach()) * (x - t).detach())
    if opmath.float_gradient(t):
        forms.append(t * (-x.logit()).detach())
    if not forms:
        return loss
    return apply("straight_through", forms[0] if len(forms) == 1 else forms[0] + forms[1], loss.detach())


@policy("f32")  # autocast: on PyTorch's float32 list
@saves("input", "target", "weight", "pos_weight", vjp=torch_formulas.binary_cross_entropy_with_logits)
def binary_cross_entropy_with_logits(
    input: Tensor,
    target: Tensor,
    weight: Tensor | None = None,  # noqa: A002
    size_average=None,
    reduce=None,
    reduction: str = "mean",
    pos_weight: Tensor | None = None,
) -> Tensor:
    """binary_cross_entropy(sigmoid(input), target) computed stably from the logits (PyTorch's formula:
    (1 - t) x + w_pos (log(exp(-m) + exp(-x - m)) + m) with m = max(-x, 0), exact gradient everywhere)."""
    _no_legacy("binary_cross_entropy_with_logits", size_average, reduce)
    _same_shape("binary_cross_entropy_with_logits", input, target)
    for name, t in (("input", input), ("target", target)):  # torch computes in them: integer ones raise
        if not t.dtype.is_float:
            raise DTypeError(f"binary_cross_entropy_with_logits: the {name} must be a floating tensor, got {t.dtype} "
                             f"(PyTorch raises too; {name}.float())\n  at {user_location()}")
    m = (-input).clamp(min=0.0).detach()  # a shift the value does not depend on (nor its gradient)
    softplus_neg = ((-m).exp() + (-input - m).exp()).log() + m  # log(1 + exp(-x))
    scaled = softplus_neg * ((pos_weight - 1) * target + 1) if pos_weight is not None else softplus_neg
    loss = _bce_logits_gradients((1 - target) * input + scaled, input, target, pos_weight, softplus_neg)
    loss = loss.to(target.dtype)  # torch's: computed into (1 - target), so in the target's dtype
    return _loss_reduce((loss * weight).to(loss.dtype) if weight is not None else loss, reduction)


def _bce_logits_gradients(loss: Tensor, x: Tensor, t: Tensor, pw: Tensor | None, softplus_neg: Tensor) -> Tensor:
    """loss (binary_cross_entropy_with_logits's, unreduced) with PyTorch's gradients: sigmoid(x) - t for x
    ((1 + (pw - 1) t) sigmoid(x) - pw t with pos_weight), -x for t (log_sigmoid(-x) - pw log_sigmoid(x):
    (pw - 1) softplus(-x) - x); autodiff of the stable value gives NaN at x = -inf."""
    forms = []
    if opmath.float_gradient(x):
        s = x.sigmoid()
        d = s - t if pw is None else ((pw - 1) * t + 1) * s - pw * t
        forms.append(x * d.detach())
    if opmath.float_gradient(t):
        forms.append(t * (-x if pw is None else (pw - 1) * softplus_neg - x).detach())
    if not forms:
        return loss
    return apply("straight_through", forms[0] if len(forms) == 1 else forms[0] + forms[1], loss.detach())


@policy("f32")  # autocast: on PyTorch's float32 list
def l1_loss(
    input: Tensor,
    target: Tensor,
    size_average=None,
    reduce=None,  # noqa: A002
    reduction: str = "mean",
    weight: Tensor | None = None,
) -> Tensor:
    """|input - target|, reduced; weight (the input's shape) scales each element, the mean then being the
    weighted sum over the summed weights, as PyTorch's."""
    _no_legacy("l1_loss", size_average, reduce)
    warn_if_broadcast("l1_loss", input, target)  # PyTorch warns and broadcasts
    input, target = broadcast_promoted(input, target)
    return weighted_loss_reduce((input - target).abs(), weight, input, reduction, True)


@policy("f32")  # autocast: on PyTorch's float32 list
@saves("input", "target", vjp=torch_formulas.smooth_l1_loss)
def smooth_l1_loss(
    input: Tensor,
    target: Tensor,
    size_average=None,
    reduce=None,  # noqa: A002
    reduction: str = "mean",
    beta: float = 1.0,
) -> Tensor:
    """0.5 d^2 / beta where d = |input - target| < beta, else d - 0.5 beta (the Huber loss / beta)."""
    _no_legacy("smooth_l1_loss", size_average, reduce)
    if beta < 0:
        raise ArgumentRangeError(f"smooth_l1_loss does not support negative values for beta. (got {beta})"
                                 f"\n  at {user_location()}")
    warn_if_broadcast("smooth_l1_loss", input, target)  # PyTorch warns and broadcasts
    input, target = bool_as_number(*broadcast_promoted(input, target))
    d = (input - target).abs()
    if beta != 0:  # torch's beta == 0 is l1_loss, whose integer refusal is mean()'s
        kernel_dtypes("smooth_l1_loss", "smooth_l1_cpu", d)
    if beta == 0:
        return _loss_reduce(d, reduction)
    near = _where(d >= beta, beta, d)  # squared in place of d: an infinite d's gradient stays finite, a NaN's NaN
    return _loss_reduce(_where(d < beta, near * near * (0.5 / beta), d - 0.5 * beta), reduction)


@new_tensor
def pad(input: Tensor, pad, mode: str = "constant", value: float | None = None) -> Tensor:  # noqa: A002
    """torch.nn.functional.pad: `pad` holds (left, right) pairs starting from the LAST dimension
    (pad=(1, 2) pads the last dim by 1 before and 2 after; (1, 1, 2, 2) also the one before it).
    mode "constant" (value, default 0), "reflect" (mirror without repeating the edge; pads < size),
    "replicate" (repeat the edge), "circular" (wrap around; pads <= size); negative pads crop."""
    pad = [int(p) for p in pad]
    if len(pad) % 2 or len(pad) // 2 > input.ndim:
        raise ShapeError(
            f"pad: {list(pad)} must hold (left, right) pairs for at most {input.ndim} dimensions"
            f"\n  at {user_location()}"
        )
    pairs = {input.ndim - 1 - i: (pad[2 * i], pad[2 * i + 1]) for i in range(len(pad) // 2)}
    if mode == "constant":
        x = input
        for d, (lo, hi) in pairs.items():  # negative pads crop first
            n = x.shape[d]
            x = x.narrow(d, max(-lo, 0), n - max(-lo, 0) - max(-hi, 0)) if lo < 0 or hi < 0 else x
        spec = [(max(pairs.get(d, (0, 0))[0], 0), max(pairs.get(d, (0, 0))[1], 0)) for d in range(x.ndim)]
        return apply("pad", x, pads=spec, value=0 if value is None else value) if any(a or b for a, b in spec) else x
    if mode not in ("reflect", "replicate", "circular"):
        raise ShapeError(
            f"pad: mode {mode!r} is not one of 'constant', 'reflect', 'replicate', 'circular'\n  at {user_location()}"
        )
    if value:
        raise ShapeError(f"pad: value={value} only applies to mode='constant'\n  at {user_location()}")
    if not (len(pad) <= 6 and input.ndim in (len(pad) // 2 + 1, len(pad) // 2 + 2)):
        raise NotImplementedError(  # PyTorch's first line
            f"Padding size {len(pad)} is not supported for {input.ndim}D input tensor.\n{mode} pads 1 to 3 "
            f"trailing dims of a batched or unbatched input: {len(pad)} pads need a {len(pad) // 2 + 1}D or "
            f"{len(pad) // 2 + 2}D input\n  at {user_location()}"
        )
    if mode != "circular" and input.dtype == boolean:  # torch's reflection/replication kernels: no bool
        raise DTypeError(f'pad: "{"reflection" if mode == "reflect" else "replication"}_pad{len(pad) // 2}d" not '
                         f"implemented for 'Bool' (as in PyTorch)\n  at {user_location()}")
    listed = mode == "replicate" or mode == "reflect" and len(pad) < 6
    return (_edge_pad_f32_on_cpu if listed else _edge_pad)(input, pairs, mode)


def _edge_pad(x: Tensor, pairs: dict, mode: str) -> Tensor:
    """x reflect-, replicate- or circular-padded, pairs[d] = (lo, hi) for each padded dim d."""
    for d, (lo, hi) in pairs.items():
        x = _pad_axis(x, d, mode, lo, hi)
    return x


# autocast: reflection_pad1d/2d and replication_pad1d/2d/3d are on PyTorch's CPU float32 list (reflection_pad3d
# is not), on none of its CUDA lists
_edge_pad_f32_on_cpu = policy("", cpu="f32")(_edge_pad)


def _pad_axis(x: Tensor, d: int, mode: str, lo: int, hi: int) -> Tensor:
    """One axis of a reflect, replicate or circular pad; a negative pad crops. As PyTorch: reflect and
    replicate read the uncropped input (an output of at least one element), circular wraps around what
    the crop keeps (positive pads at most that size)."""
    n = x.shape[d]
    kept = n - max(-lo, 0) - max(-hi, 0)
    limit = n - 1 if mode == "reflect" else n if mode == "circular" else None
    if n == 0 or limit is not None and max(lo, hi) > limit:
        raise ShapeError(
            f"pad: {mode} padding ({lo}, {hi}) of dimension {d} (size {n}) must be at most {limit}"
            f"\n  at {user_location()}" if n else
            f"pad: {mode} padding of dimension {d} needs a non-empty input\n  at {user_location()}"
        )
    if mode != "circular" and n + lo + hi < 1 or mode == "circular" and (kept < 0 or max(lo, hi, 0) > kept):
        raise ShapeError(
            f"pad: {mode} padding ({lo}, {hi}) of dimension {d} (size {n}) leaves "
            + (f"{n + lo + hi} elements (at least 1 needed)" if mode != "circular" else
               f"{max(kept, 0)} elements to wrap around, fewer than the padding")
            + f"\n  at {user_location()}"
        )
    if mode == "circular":
        x = x.narrow(d, max(-lo, 0), kept) if kept < n else x
        if max(lo, 0) or max(hi, 0):
            x = apply("index_select", x, arange(-max(lo, 0), kept + max(hi, 0)) % kept, axis=d)
        return x
    return apply("index_select", x, _source_positions(mode, n, lo, hi), axis=d) if lo or hi else x


def _source_positions(mode: str, n: int, lo: int, hi: int) -> Tensor:
    """For each padded position j in [-lo, n + hi): the input position it copies."""
    j = arange(-lo, n + hi)
    if mode == "replicate":
        return j.clamp(0, n - 1)
    if mode == "circular":
        return j % n
    return (n - 1) - ((n - 1) - j.abs()).abs()  # reflect: mirror at 0 and at n - 1
