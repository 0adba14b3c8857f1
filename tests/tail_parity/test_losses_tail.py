"""The losses of nn.functional against torch in f64, at their less travelled options: nll_loss and
cross_entropy with class weights, ignore_index and label smoothing (class indices and probabilities,
[N, C] and [N, C, d]), kl_div's log_target, the triplet, margin and embedding losses, CTC; values and
gradients, eager and compiled, every reduction."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import flame
from tests.tail_parity.common import Fixed, check_fn, raises_like, rng

R = rng(2)
LOGITS = R.standard_normal((6, 4))
LOGITS_K = R.standard_normal((3, 4, 5))
LOGP = LOGITS - np.log(np.exp(LOGITS).sum(1, keepdims=True))
Y = np.array([0, 3, 1, 3, 2, 1])
Y_IGN = np.array([0, -100, 1, 3, 2, -100])
Y_K = np.array([[0, 3, 1, 2, 2], [1, 1, 0, 3, 2], [3, 2, 0, 0, 1]])
Y_K_IGN = np.where(R.random((3, 5)) < 0.3, 2, Y_K)  # ignore_index=2 in the K-dim cases
WEIGHT = np.array([0.3, 1.7, 0.9, 2.5])
PROBS = np.exp(R.standard_normal((6, 4)))
PROBS /= PROBS.sum(1, keepdims=True)
PROBS_K = np.exp(R.standard_normal((3, 4, 5)))
PROBS_K /= PROBS_K.sum(1, keepdims=True)
A, P, N = (R.standard_normal((5, 3)) for _ in range(3))
S1, S2 = R.standard_normal(5), R.standard_normal(5)
SIGN = np.array([1.0, -1.0, 1.0, -1.0, -1.0])
MULTI = (R.random((6, 4)) > 0.5).astype(np.float64)
ML_TARGET = np.array([[3, 0, -1, 1], [1, -1, 0, 0], [0, 1, 2, 3], [-1, 0, 0, 0], [2, -1, 3, 1], [0, 2, -1, 1]])

F = lambda lib: lib.nn.functional  # noqa: E731

CASES = {
    "nll": (lambda L, x, y, r: F(L).nll_loss(x, y, reduction=r), [LOGP, Fixed(Y)]),
    "nll_weight_ignore": (
        lambda L, x, y, w, r: F(L).nll_loss(x, y, weight=w, reduction=r),
        [LOGP, Fixed(Y_IGN), Fixed(WEIGHT)],
    ),
    "nll_weight_ignore_index_class": (
        lambda L, x, y, w, r: F(L).nll_loss(x, y, weight=w, ignore_index=3, reduction=r),
        [LOGP, Fixed(Y), Fixed(WEIGHT)],
    ),
    "nll_kdim_weight_ignore": (
        lambda L, x, y, w, r: F(L).nll_loss(F(L).log_softmax(x, 1), y, weight=w, ignore_index=2, reduction=r),
        [LOGITS_K, Fixed(Y_K_IGN), Fixed(WEIGHT)],
    ),
    "nll_unbatched": (lambda L, x, y, r: F(L).nll_loss(x, y, reduction=r), [LOGP[0], Fixed(np.array(2))]),
    "ce_weight_ignore": (
        lambda L, x, y, w, r: F(L).cross_entropy(x, y, weight=w, reduction=r),
        [LOGITS, Fixed(Y_IGN), Fixed(WEIGHT)],
    ),
    "ce_ignore_smoothing": (
        lambda L, x, y, r: F(L).cross_entropy(x, y, ignore_index=-100, reduction=r, label_smoothing=0.2),
        [LOGITS, Fixed(Y_IGN)],
    ),
    "ce_weight_ignore_smoothing": (
        lambda L, x, y, w, r: F(L).cross_entropy(x, y, weight=w, ignore_index=3, reduction=r, label_smoothing=0.15),
        [LOGITS, Fixed(Y), Fixed(WEIGHT)],
    ),
    "ce_kdim_weight_ignore_smoothing": (
        lambda L, x, y, w, r: F(L).cross_entropy(x, y, weight=w, ignore_index=2, reduction=r, label_smoothing=0.3),
        [LOGITS_K, Fixed(Y_K_IGN), Fixed(WEIGHT)],
    ),
    "ce_kdim_ignore_smoothing": (
        lambda L, x, y, r: F(L).cross_entropy(x, y, ignore_index=2, reduction=r, label_smoothing=0.3),
        [LOGITS_K, Fixed(Y_K_IGN)],
    ),
    "ce_probs": (lambda L, x, t, r: F(L).cross_entropy(x, t, reduction=r), [LOGITS, PROBS]),
    "ce_probs_weight_smoothing": (
        lambda L, x, t, w, r: F(L).cross_entropy(x, t, weight=w, reduction=r, label_smoothing=0.25),
        [LOGITS, PROBS, WEIGHT],
    ),
    "ce_probs_kdim_smoothing": (
        lambda L, x, t, w, r: F(L).cross_entropy(x, t, weight=w, reduction=r, label_smoothing=0.1),
        [LOGITS_K, PROBS_K, Fixed(WEIGHT)],
    ),
    "ce_probs_unbatched": (
        lambda L, x, t, r: F(L).cross_entropy(x, t, reduction=r, label_smoothing=0.1),
        [LOGITS[0], PROBS[0]],
    ),
    "kl_div": (lambda L, x, t, r: F(L).kl_div(x, t, reduction=r), [LOGP, PROBS]),
    "kl_div_log_target": (lambda L, x, t, r: F(L).kl_div(x, t, reduction=r, log_target=True), [LOGP, np.log(PROBS)]),
    "kl_div_zero_target": (
        lambda L, x, t, r: F(L).kl_div(x, t, reduction=r),
        [LOGP, Fixed(np.where(PROBS > 0.3, PROBS, 0.0))],
    ),
    "triplet": (lambda L, a, p, n, r: F(L).triplet_margin_loss(a, p, n, reduction=r), [A, P, N]),
    "triplet_swap_p1": (
        lambda L, a, p, n, r: F(L).triplet_margin_loss(a, p, n, margin=2.0, p=1, swap=True, reduction=r),
        [A, P, N],
    ),
    "triplet_p3_unbatched": (
        lambda L, a, p, n, r: F(L).triplet_margin_loss(a, p, n, margin=0.5, p=3, eps=1e-3, reduction=r),
        [A[0], P[0], N[0]],
    ),
    "triplet_distance_default": (
        lambda L, a, p, n, r: F(L).triplet_margin_with_distance_loss(a, p, n, reduction=r),
        [A, P, N],
    ),
    "triplet_distance_cosine_swap": (
        lambda L, a, p, n, r: F(L).triplet_margin_with_distance_loss(
            a,
            p,
            n,
            distance_function=lambda x, y: 1.0 - F(L).cosine_similarity(x, y),
            margin=0.3,
            swap=True,
            reduction=r,
        ),
        [A, P, N],
    ),
    "margin_ranking": (
        lambda L, a, b, y, r: F(L).margin_ranking_loss(a, b, y, margin=0.2, reduction=r),
        [S1, S2, Fixed(SIGN)],
    ),
    "hinge_embedding": (
        lambda L, a, y, r: F(L).hinge_embedding_loss(a, y, margin=0.7, reduction=r),
        [S1, Fixed(SIGN)],
    ),
    "soft_margin": (lambda L, a, y, r: F(L).soft_margin_loss(a, y, reduction=r), [S1, Fixed(SIGN)]),
    "multilabel_soft_margin_weight": (
        lambda L, x, y, w, r: F(L).multilabel_soft_margin_loss(x, y, weight=w, reduction=r),
        [LOGITS, Fixed(MULTI), WEIGHT],
    ),
    "multilabel_margin": (
        lambda L, x, y, r: F(L).multilabel_margin_loss(x, y, reduction=r),
        [LOGITS, Fixed(ML_TARGET)],
    ),
    "multilabel_margin_unbatched": (
        lambda L, x, y, r: F(L).multilabel_margin_loss(x, y, reduction=r),
        [LOGITS[0], Fixed(ML_TARGET[0])],
    ),
    "cosine_embedding": (
        lambda L, a, b, y, r: F(L).cosine_embedding_loss(a, b, y, margin=0.1, reduction=r),
        [A, P, Fixed(SIGN)],
    ),
    "multi_margin_p2_weight": (
        lambda L, x, y, w, r: F(L).multi_margin_loss(x, y, p=2, margin=0.6, weight=w, reduction=r),
        [LOGITS, Fixed(Y), Fixed(WEIGHT)],
    ),
}

REDUCTIONS = ["none", "mean", "sum"]


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("name", list(CASES))
def test_loss(name, reduction, compiled):
    fn, arrays = CASES[name]
    check_fn(lambda L, *a: fn(L, *a, reduction), arrays, compiled)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("log_target", [False, True])
def test_kl_div_batchmean(log_target, compiled):
    t = np.log(PROBS) if log_target else PROBS
    fn = lambda L, x, t: F(L).kl_div(x, t, reduction="batchmean", log_target=log_target)
    check_fn(fn, [LOGP, t], compiled)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("loss", ["nll_loss", "cross_entropy"])
def test_mean_of_all_ignored_is_nan(loss, compiled):
    """Every target ignored: the weighted mean is 0 / 0, NaN in torch."""
    fn = lambda L, x, y: getattr(F(L), loss)(x, y, ignore_index=1)
    check_fn(fn, [LOGP[:2], Fixed(np.array([1, 1]))], compiled)


# ---- CTC -------------------------------------------------------------------------------------------------------

CTC_T, CTC_N, CTC_C = 12, 3, 5
CTC_LOGP = R.standard_normal((CTC_T, CTC_N, CTC_C))
CTC_TARGETS = np.array([[1, 2, 2, 4], [3, 1, 0, 0], [4, 4, 4, 0]])
CTC_IN_LENS = np.array([12, 9, 10])
CTC_TGT_LENS = np.array([4, 2, 3])


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("layout", ["padded", "concatenated"])
def test_ctc_loss(layout, reduction, compiled):
    targets = CTC_TARGETS if layout == "padded" else np.concatenate([r[:n] for r, n in zip(CTC_TARGETS, CTC_TGT_LENS)])

    def fn(L, x, y, il, tl):
        return F(L).ctc_loss(F(L).log_softmax(x, -1), y, il, tl, reduction=reduction)

    arrays = [CTC_LOGP, Fixed(targets), Fixed(CTC_IN_LENS), Fixed(CTC_TGT_LENS)]
    if layout == "concatenated" and compiled:  # splitting the targets needs the lengths' values
        with pytest.raises(flame.TraceError, match="target lengths"):
            check_fn(fn, arrays, compiled)
        return
    check_fn(fn, arrays, compiled)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_ctc_loss_of_log_probs_leaf(compiled):
    """The gradient with respect to log-probabilities given directly (no log_softmax): torch's."""
    lp = np.log(np.exp(CTC_LOGP) / np.exp(CTC_LOGP).sum(-1, keepdims=True))
    fn = lambda L, x, y, il, tl: F(L).ctc_loss(x, y, il, tl, reduction="sum")
    check_fn(fn, [lp, Fixed(CTC_TARGETS), Fixed(CTC_IN_LENS), Fixed(CTC_TGT_LENS)], compiled)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("zero_infinity", [False, True])
def test_ctc_loss_infeasible_blank(zero_infinity, compiled):
    """An input too short for its target (inf loss, or 0 with zero_infinity) and a blank other than 0;
    an unbatched call."""
    targets = np.array([[1, 1, 1, 2], [2, 3, 0, 0], [1, 3, 3, 1]])

    def fn(L, x, y, il, tl):
        lp = F(L).log_softmax(x, -1)
        a = F(L).ctc_loss(lp, y, il, tl, blank=4, reduction="none", zero_infinity=zero_infinity)
        b = F(L).ctc_loss(lp[:, 1], y[1, :2], il[1], tl[1], blank=4, zero_infinity=zero_infinity)
        return a, b

    check_fn(fn, [CTC_LOGP, Fixed(targets), Fixed(np.array([5, 12, 7])), Fixed(np.array([4, 2, 4]))], compiled)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("layout", ["padded", "concatenated"])
def test_ctc_loss_int_lengths(layout, compiled):
    """Lengths as Python lists of ints (torch accepts tuples/lists); concatenated targets split by them
    inside @flame.compile too, where the lengths' numbers are known while tracing."""
    targets = CTC_TARGETS if layout == "padded" else np.concatenate([r[:n] for r, n in zip(CTC_TARGETS, CTC_TGT_LENS)])
    check_fn(
        lambda L, x, y: F(L).ctc_loss(F(L).log_softmax(x, -1), y, [12, 9, 10], (4, 2, 3), reduction="sum"),
        [CTC_LOGP, Fixed(targets)],
        compiled=compiled,
    )


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("zero_infinity", [False, True])
def test_ctc_loss_zero_input_length(reduction, zero_infinity, compiled):
    """A sample with no time steps: the empty target has probability 1 (loss 0), another none (inf, or 0
    with zero_infinity), and neither takes a gradient; the other samples as usual."""
    targets = np.array([[1, 2], [1, 0], [3, 3]])
    fn = lambda L, x, y, il, tl: F(L).ctc_loss(F(L).log_softmax(x, -1), y, il, tl, reduction=reduction,
                                              zero_infinity=zero_infinity)
    check_fn(fn, [CTC_LOGP[:, :3], Fixed(targets), Fixed(np.array([0, 0, 6])), Fixed(np.array([1, 0, 2]))], compiled)


def test_ctc_loss_errors():
    lp = np.log(np.full((4, 2, 3), 1 / 3))
    raises_like(
        lambda L, x, y: F(L).ctc_loss(x, y, [4, 4], [2, 2], blank=3),
        [lp, Fixed(np.array([[1, 2], [1, 1]]))],
        compiled=False,
        match="blank",
    )


# ---- gumbel_softmax: shapes, dtypes and the hard sample's semantics ---------------------------------------------


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("dtype", ["f32", "f64"])
@pytest.mark.parametrize("dim", [-1, 0, 1])
def test_gumbel_softmax_semantics(dim, dtype, compiled):
    logits = R.standard_normal((3, 4, 5))
    tl = torch.tensor(logits).to(torch.float32 if dtype == "f32" else torch.float64)
    soft_t = torch.nn.functional.gumbel_softmax(tl, tau=0.5, dim=dim)

    def step(x):
        soft = flame.nn.functional.gumbel_softmax(x, tau=0.5, dim=dim)
        hard = flame.nn.functional.gumbel_softmax(x, tau=0.5, hard=True, dim=dim)
        (hard * flame.arange(5, dtype=x.dtype)).sum().backward()
        return soft, hard

    x = flame.tensor(logits).to(getattr(flame, "float32" if dtype == "f32" else "float64")).detach()
    x.requires_grad_(True)
    soft, hard = (flame.compile(step) if compiled else step)(x)
    assert str(soft.dtype) == dtype and str(hard.dtype) == dtype
    assert tuple(soft.shape) == tuple(hard.shape) == tuple(soft_t.shape)
    np.testing.assert_allclose(soft.numpy().sum(dim), 1.0, rtol=1e-5)
    h = hard.numpy()
    assert set(np.unique(h)) <= {0.0, 1.0} and (h.sum(dim) == 1).all()
    assert x.grad is not None and tuple(x.grad.shape) == logits.shape
    assert np.isfinite(x.grad.numpy()).all() and np.abs(x.grad.numpy()).sum() > 0


# ---- a class weight that requires grad ---------------------------------------------------------------------

WEIGHT_GRAD = {  # torch's kernels do not differentiate with respect to weight: it raises at the call
    "nll": (lambda L, x, y, w: F(L).nll_loss(x, y, weight=w), [LOGP, Fixed(Y)], "nll_loss_forward"),
    "nll_k": (
        lambda L, x, y, w: F(L).nll_loss(x, y, weight=w, reduction="sum"),
        [LOGITS_K, Fixed(Y_K)],
        "nll_loss2d_forward",
    ),
    "cross_entropy": (lambda L, x, y, w: F(L).cross_entropy(x, y, weight=w), [LOGITS, Fixed(Y)], "nll_loss_forward"),
    "cross_entropy_smoothed": (
        lambda L, x, y, w: F(L).cross_entropy(x, y, weight=w, label_smoothing=0.2, reduction="none"),
        [LOGITS, Fixed(Y)],
        "nll_loss_forward",
    ),
    "multi_margin": (
        lambda L, x, y, w: F(L).multi_margin_loss(x, y, weight=w),
        [LOGITS, Fixed(Y)],
        "multi_margin_loss",
    ),
}


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("name", list(WEIGHT_GRAD))
def test_a_class_weight_that_requires_grad_is_refused_as_torch(name, compiled):
    """torch raises a RuntimeError naming its kernel; flame raises one too (a flame error, with the user's
    line) where it would otherwise give the weight a gradient."""
    fn, arrays, kernel = WEIGHT_GRAD[name]
    err = raises_like(
        fn,
        [*arrays, WEIGHT],
        compiled,
        match=f"The function '{kernel}' is not differentiable with respect to argument 'weight'",
    )
    assert isinstance(err, RuntimeError) and isinstance(err, flame.FlameError)
    assert "test_losses_tail.py" in str(err)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_a_soft_margin_target_that_requires_grad_is_refused_as_torch(compiled):
    """torch's soft_margin_loss kernel has no gradient for its target: a target that requires grad raises."""
    signs = np.sign(R.standard_normal(LOGITS.shape))
    err = raises_like(lambda L, x, t: F(L).soft_margin_loss(x, t), [LOGITS, signs], compiled,
                      match="The function 'soft_margin_loss' is not differentiable with respect to argument 'target'")
    assert isinstance(err, RuntimeError) and "test_losses_tail.py" in str(err)
    with torch.no_grad(), flame.no_grad():  # accepted where no gradient is recorded, as torch's
        want = F(torch).soft_margin_loss(torch.tensor(LOGITS), torch.tensor(signs, requires_grad=True))
        got = F(flame).soft_margin_loss(flame.tensor(LOGITS), flame.tensor(signs, requires_grad=True))
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-12)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_a_class_weight_that_requires_grad_is_differentiated_against_probabilities(compiled):
    """cross_entropy against class probabilities is written over differentiable ops in torch: the weight
    takes a gradient there."""
    fn = lambda L, x, t, w: F(L).cross_entropy(x, t, weight=w)  # noqa: E731
    check_fn(fn, [LOGITS, PROBS, WEIGHT], compiled)


@pytest.mark.parametrize("loss", ["nll_loss", "multi_margin_loss"])
def test_a_class_weight_that_requires_grad_is_accepted_under_no_grad(loss):
    x, y, w = LOGP, Y, WEIGHT
    with torch.no_grad():
        want = getattr(F(torch), loss)(torch.tensor(x), torch.tensor(y), weight=torch.tensor(w, requires_grad=True))
    with flame.no_grad():
        got = getattr(F(flame), loss)(flame.tensor(x), flame.tensor(y), weight=flame.tensor(w, requires_grad=True))
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-12)
