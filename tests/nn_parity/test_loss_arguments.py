"""Loss arguments at the edges of what torch accepts: a negative label_smoothing is no smoothing (values and
gradients against torch in f64, eager and compiled); label_smoothing above 1, ignore_index with class
probabilities, a negative smooth_l1 beta, a huber delta that is not positive and an nll_loss weight of
the wrong length raise torch's RuntimeError at the user's line; class indices that are not int64 (uint8
where torch takes it), class weights of another dtype than the input's, a binary_cross_entropy target of
another dtype and integer operands of binary_cross_entropy_with_logits or kl_div raise, eager and compiled."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import flame
from tests.nn_parity.common import check, rng

X = rng(5).standard_normal((4, 3))
X3 = rng(6).standard_normal((2, 3, 4))
LABELS = np.array([0, 2, 1, 2])
PROBS = np.exp(X3) / np.exp(X3).sum(1, keepdims=True)
W = np.array([0.5, 2.0, 1.5])

SMOOTHING = {
    "labels": (lambda L, x: L.nn.functional.cross_entropy(x, L.tensor(LABELS), label_smoothing=-0.2), X),
    "labels weighted": (lambda L, x: L.nn.functional.cross_entropy(x, L.tensor(LABELS), weight=L.tensor(W),
                                                                  label_smoothing=-0.2), X),
    "probabilities": (lambda L, x: L.nn.functional.cross_entropy(x, L.tensor(PROBS), label_smoothing=-0.3), X3),
}


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("name", list(SMOOTHING))
def test_a_negative_label_smoothing_is_none(name, compiled):
    fn, x = SMOOTHING[name]
    check(lambda lib: lib.nn.Identity(), lambda m, x: fn(flame if isinstance(x, flame.Tensor) else torch, m(x)),
          [x], compiled)


REFUSED = {
    "label_smoothing above 1": lambda L: L.nn.functional.cross_entropy(L.tensor(X), L.tensor(LABELS),
                                                                       label_smoothing=1.5),
    "ignore_index with probabilities": lambda L: L.nn.functional.cross_entropy(L.tensor(X3), L.tensor(PROBS),
                                                                               ignore_index=1),
    "negative beta": lambda L: L.nn.functional.smooth_l1_loss(L.tensor(X), L.tensor(X), beta=-0.5),
    "zero delta": lambda L: L.nn.functional.huber_loss(L.tensor(X), L.tensor(X), delta=0.0),
    "nll weight length": lambda L: L.nn.functional.nll_loss(L.tensor(X), L.tensor(LABELS),
                                                            weight=L.tensor(np.ones(4))),
}


@pytest.mark.parametrize("name", list(REFUSED))
def test_torch_refuses_and_so_does_flame(name):
    with pytest.raises(RuntimeError) as theirs:
        REFUSED[name](torch)
    with pytest.raises(RuntimeError, match=r"(.|\n)*test_loss_arguments") as mine:
        REFUSED[name](flame)
    words = str(theirs.value).split(".")[0].split(":")[0]
    assert words in str(mine.value), (str(theirs.value), str(mine.value))


def _labels(L, dtype):
    return L.tensor(LABELS.astype(dtype))


WRONG_DTYPES = {  # torch converts neither class indices nor class weights: it raises
    "int32 labels": lambda L, x: L.nn.functional.cross_entropy(x, _labels(L, np.int32)),
    "int8 labels, weighted": lambda L, x: L.nn.functional.cross_entropy(x, _labels(L, np.int8),
                                                                        weight=L.tensor(W).to(x.dtype)),
    "uint8 labels, 3-d input": lambda L, x: L.nn.functional.cross_entropy(x.reshape(4, 3, 1),
                                                                          _labels(L, np.uint8).reshape(4, 1)),
    "nll int32 labels": lambda L, x: L.nn.functional.nll_loss(x, _labels(L, np.int32)),
    "f64 weight, f32 input": lambda L, x: L.nn.functional.cross_entropy(x, _labels(L, np.int64), weight=L.tensor(W)),
    "f64 weight, smoothed": lambda L, x: L.nn.functional.cross_entropy(x, _labels(L, np.int64), weight=L.tensor(W),
                                                                       label_smoothing=0.1),
    "nll f64 weight": lambda L, x: L.nn.functional.nll_loss(x, _labels(L, np.int64), weight=L.tensor(W)),
    "multi_margin int32": lambda L, x: L.nn.functional.multi_margin_loss(x, _labels(L, np.int32)),
    "multi_margin uint8": lambda L, x: L.nn.functional.multi_margin_loss(x, _labels(L, np.uint8)),
    "multi_margin f64 weight": lambda L, x: L.nn.functional.multi_margin_loss(x, _labels(L, np.int64),
                                                                              weight=L.tensor(W)),
    "multilabel_margin int32": lambda L, x: L.nn.functional.multilabel_margin_loss(
        x, L.tensor(np.array([[2, -1, 0]] * 4, np.int32))),
    "bce int64 target": lambda L, x: L.nn.functional.binary_cross_entropy(x.sigmoid(), (x > 0).long()),
    "bce f64 target, f32 input": lambda L, x: L.nn.functional.binary_cross_entropy(x.sigmoid(), x.sigmoid().double()),
    "bce with logits int64 target": lambda L, x: L.nn.functional.binary_cross_entropy_with_logits(x, (x > 0).long()),
    "bce with logits bool target": lambda L, x: L.nn.functional.binary_cross_entropy_with_logits(x, x > 0),
    "kl_div int64 target": lambda L, x: L.nn.functional.kl_div(x, (x > 0).long(), reduction="batchmean"),
    "kl_div int64 input": lambda L, x: L.nn.functional.kl_div((x > 0).long(), x, reduction="batchmean"),
}


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("name", list(WRONG_DTYPES))
def test_wrong_index_or_weight_dtypes_raise(name, compiled):
    x32 = X.astype(np.float32)
    with pytest.raises(RuntimeError):
        WRONG_DTYPES[name](torch, torch.tensor(x32))
    fn = flame.compile(WRONG_DTYPES[name]) if compiled else WRONG_DTYPES[name]
    with pytest.raises(flame.DTypeError, match=r"(.|\n)*test_loss_arguments"):
        fn(flame, flame.tensor(x32))


@pytest.mark.parametrize("fn", ["cross_entropy", "nll_loss"])
def test_uint8_labels_are_class_indices(fn):
    """uint8 labels of [N, C] input count as int64 ones, as torch's."""
    want = getattr(torch.nn.functional, fn)(torch.tensor(X), torch.tensor(LABELS.astype(np.uint8)))
    got = getattr(flame.nn.functional, fn)(flame.tensor(X), flame.tensor(LABELS.astype(np.uint8)))
    np.testing.assert_allclose(got.item(), want.item(), rtol=1e-12)


RESULT_DTYPE = {  # torch computes these into one operand's tensor: the result takes that operand's dtype
    "huber_loss": lambda L, x, t: L.nn.functional.huber_loss(x, t, reduction="none"),
    "soft_margin_loss": lambda L, x, t: L.nn.functional.soft_margin_loss(x, t, reduction="none"),
    "binary_cross_entropy_with_logits": lambda L, x, t: L.nn.functional.binary_cross_entropy_with_logits(
        x, t, reduction="none"),
    "binary_cross_entropy_with_logits weighted": lambda L, x, t: L.nn.functional.binary_cross_entropy_with_logits(
        x, t, weight=L.tensor(W, dtype=L.float64), reduction="mean"),
}


@pytest.mark.parametrize("name", sorted(RESULT_DTYPE))
@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_losses_of_mixed_float_operands_take_torchs_result_dtype(name, compiled):
    """huber_loss and soft_margin_loss in the input's dtype, binary_cross_entropy_with_logits in the
    target's, as torch's (flame promoted the operands: bf16 input and f32 target gave f32); the values are
    torch's within the narrower operand's rounding."""
    fn = RESULT_DTYPE[name]
    x, t = rng(7).standard_normal((4, 3)), (rng(8).random((4, 3)) > 0.5) * 2.0 - 1.0
    if "logits" in name:
        t = (t + 1) / 2
    for a, b in (("bfloat16", "float32"), ("float32", "bfloat16"), ("float16", "float64"), ("float64", "float32")):
        want = fn(torch, torch.tensor(x).to(getattr(torch, a)), torch.tensor(t).to(getattr(torch, b)))
        run = (lambda p, q: fn(flame, p, q)) if not compiled else flame.compile(lambda p, q: fn(flame, p, q))
        got = run(flame.tensor(x).to(getattr(flame, a)), flame.tensor(t).to(getattr(flame, b)))
        assert got.dtype == getattr(flame, str(want.dtype).split(".")[-1]), (a, b)
        tol = 2e-2 if "16" in a + b else 1e-6  # torch rounds some intermediates to the narrower operand's dtype
        np.testing.assert_allclose(got.double().numpy(), want.double().numpy(), rtol=tol, atol=tol)
