"""Loss arguments at the edges of what torch accepts: a negative label_smoothing is no smoothing (values and
gradients against torch in f64, eager and compiled); label_smoothing above 1, ignore_index with class
probabilities, a negative smooth_l1 beta, a huber delta that is not positive and an nll_loss weight of
the wrong length raise torch's RuntimeError at the user's line."""

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
