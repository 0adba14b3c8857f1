"""ctc_loss (torch.nn.functional.ctc_loss): the connectionist temporal classification loss, the forward
(alpha) recursion of Graves et al. in log space over the blank-extended targets, written over
primitives. The recursion unrolls over time (as the recurrent layers do), so a compiled step's graph
grows with the input length. Gradients are PyTorch's: its CTC backward returns, for the log-probabilities,
the true gradient plus exp(log_probs) at every time step within the input's length (a term that
log_softmax's backward cancels, so a model's gradients are the textbook ones), and NaN for a sample whose
loss is infinite unless zero_infinity."""

from __future__ import annotations

from flame.errors import IndexValueError, ShapeError, TraceError
from flame.frontend.context import user_location
from flame.frontend.creation import arange, full
from flame.frontend.tensor import Tensor
from flame.frontend.tensor_core import cat, where
from flame.ir.dtypes import i64

__all__ = ["ctc_loss"]

_NEG_INF = float("-inf")


def _lse(*terms: Tensor) -> Tensor:
    """log(sum(exp(terms))) elementwise, -inf where every term is -inf, with a zero (not NaN) gradient there."""
    m = terms[0]
    for t in terms[1:]:
        m = m.maximum(t)
    m = m.detach()
    shift = where(m == _NEG_INF, 0.0, m)
    total = sum((t - shift).exp() for t in terms)
    empty = total == 0
    return where(empty, _NEG_INF, shift + where(empty, 1.0, total).log())


def _lengths(name: str, lengths, batch: int) -> Tensor:
    t = (
        lengths
        if isinstance(lengths, Tensor)
        else Tensor([int(v) for v in lengths] if hasattr(lengths, "__len__") else [int(lengths)])
    )
    t = t.reshape(-1).to(i64)
    if t.shape[0] != batch:
        raise ShapeError(
            f"ctc_loss: {name} must hold one length per sample ({batch}), got {list(t.shape)}\n  at {user_location()}"
        )
    return t


def _padded_targets(targets: Tensor, target_lengths) -> Tensor:
    """[N, S] targets from the concatenated form (its lengths must be known: given as numbers, or a tensor
    outside a trace)."""
    if not isinstance(target_lengths, Tensor):
        lens = [int(v) for v in target_lengths] if hasattr(target_lengths, "__len__") else [int(target_lengths)]
    elif target_lengths._value is not None:
        raise TraceError(
            "ctc_loss: concatenated 1-D targets need the target lengths' values to split them, which a "
            "step being traced does not know; pass the targets padded to [N, S], or the lengths as a "
            f"list of ints\n  at {user_location()}"
        )
    else:
        lens = [int(v) for v in target_lengths.reshape(-1).numpy()]
    if sum(lens) != targets.shape[0]:
        raise ShapeError(
            f"ctc_loss: concatenated targets hold {targets.shape[0]} labels but target_lengths sum to "
            f"{sum(lens)}\n  at {user_location()}"
        )
    width, rows, at = max(lens + [1]), [], 0
    for n in lens:
        row = targets[at : at + n]
        rows.append(cat([row, full((width - n,), 0, dtype=targets.dtype)]) if n < width else row)
        at += n
    return cat([r.unsqueeze(0) for r in rows])


def _check(log_probs: Tensor, targets: Tensor, il: Tensor, tl: Tensor, blank: int) -> None:
    n_classes = log_probs.shape[-1]
    if not 0 <= blank < n_classes:
        raise IndexValueError(
            f"ctc_loss: blank must be in label range [0, {n_classes}), got blank={blank}\n  at {user_location()}"
        )
    for name, t, most in (("input_lengths", il, log_probs.shape[0]), ("target_lengths", tl, targets.shape[1])):
        if t._value is None and t.numel() and ((t.numpy() < 0) | (t.numpy() > most)).any():
            raise IndexValueError(
                f"ctc_loss: {name} must lie in [0, {most}], got {t.numpy().tolist()}\n  at {user_location()}"
            )
    if targets._value is None and targets.numel():
        v = targets.numpy()
        if ((v < 0) | (v >= n_classes)).any():
            raise IndexValueError(
                f"ctc_loss: targets must be class indices in [0, {n_classes}), got "
                f"{int(v[(v < 0) | (v >= n_classes)].flat[0])}\n  at {user_location()}"
            )


def _alpha_end(log_probs: Tensor, targets: Tensor, il: Tensor, tl: Tensor, blank: int) -> Tensor:
    """-log p(target | input) per sample, from the alpha recursion over the 2S+1 extended labels."""
    steps, batch, _ = log_probs.shape
    width = 2 * targets.shape[1] + 1
    s = arange(width)
    ext = where(s % 2 == 1, _extended(targets, width), blank)
    emit = log_probs.gather(2, ext.unsqueeze(0).expand(steps, batch, width))  # [T, N, 2S+1]
    prev2 = cat([full((batch, 2), -1, dtype=i64), ext[:, :-2]], 1)
    skip = (ext != blank) & (ext != prev2)
    ninf = full((batch, 1), _NEG_INF, dtype=log_probs.dtype)
    alpha = where(s < 2, emit[0], _NEG_INF)
    alpha = where((s == 1) & (tl.unsqueeze(1) == 0), _NEG_INF, alpha)
    none = il.unsqueeze(1) == 0  # no time step: only the empty path, before any label, with probability 1
    alpha = where(none & (s == 0), 0.0, where(none, _NEG_INF, alpha))
    for t in range(1, steps):
        a1 = cat([ninf, alpha[:, :-1]], 1)
        a2 = where(skip, cat([ninf, ninf, alpha[:, :-2]], 1), _NEG_INF)
        alpha = where(il.unsqueeze(1) > t, _lse(alpha, a1, a2) + emit[t], alpha)
    end = (2 * tl).unsqueeze(1)
    last = alpha.gather(1, end).squeeze(1)
    before = where(tl > 0, alpha.gather(1, (end - 1).clamp(min=0)).squeeze(1), _NEG_INF)
    return -_lse(last, before)


def _extended(targets: Tensor, width: int) -> Tensor:
    """[N, 2S+1] labels with blanks between (their positions filled with 0 here, replaced by the caller)."""
    idx = (arange(width) - 1).clamp(min=0) // 2
    return targets.to(i64).index_select(1, idx)


def ctc_loss(
    log_probs: Tensor,
    targets: Tensor,
    input_lengths,
    target_lengths,
    blank: int = 0,
    reduction: str = "mean",
    zero_infinity: bool = False,
) -> Tensor:
    """The CTC loss of log_probs [T, N, C] (or [T, C]) against targets padded to [N, S] or concatenated
    to [sum(target_lengths)]; input_lengths and target_lengths: tensors or sequences of ints. 'mean'
    divides each sample's loss by its target length (at least 1), then averages; zero_infinity
    replaces infinite losses (an input too short for its target) and their gradients by zero."""
    if reduction not in ("none", "mean", "sum"):
        raise ValueError(f"ctc_loss: {reduction!r} is not a valid value for reduction")
    unbatched = log_probs.ndim == 2
    if unbatched:
        log_probs, targets = log_probs.unsqueeze(1), targets.unsqueeze(0)
    if log_probs.ndim != 3:
        raise ShapeError(
            f"ctc_loss: log_probs must be [T, N, C] or [T, C], got {list(log_probs.shape)}\n  at {user_location()}"
        )
    batch = log_probs.shape[1]
    il, tl = _lengths("input_lengths", input_lengths, batch), _lengths("target_lengths", target_lengths, batch)
    if targets.ndim == 1 and not unbatched:
        targets = _padded_targets(targets, target_lengths)  # the numbers given: a list's tensor is traced
    if targets.ndim != 2 or targets.shape[0] != batch:
        raise ShapeError(
            f"ctc_loss: targets must be [N, S] (padded) or 1-D (concatenated) for {batch} samples, got "
            f"{list(targets.shape)}\n  at {user_location()}"
        )
    _check(log_probs, targets, il, tl, blank)
    loss = _alpha_end(log_probs, targets, il, tl, blank)
    within = (arange(log_probs.shape[0]).unsqueeze(1) < il).unsqueeze(2)  # [T, N, 1]
    mass = where(within, log_probs.exp(), 0.0).sum((0, 2))
    change = mass - mass.detach()  # 0, with the gradient exp(log_probs) within the input's length
    infinite = loss == float("inf")
    if zero_infinity:
        loss = where(infinite, 0.0, loss + change)
    else:  # PyTorch's gradient of an infinite loss is NaN (0 / 0): |change| is 0 with the gradient 0 / 0
        loss = loss + where(infinite, where(infinite, change * change, 1.0).sqrt(), change)
    if reduction == "mean":
        return (loss / tl.clamp(min=1).to(loss.dtype)).mean()
    if reduction == "sum":
        return loss.sum()
    return loss.squeeze(0) if unbatched else loss
