"""binary_cross_entropy_with_logits has PyTorch's gradients, eagerly and inside @flame.compile, also at
infinite logits: sigmoid(x) - target to the logits (with pos_weight: (1 + (pw - 1) * t) * sigmoid(x) - pw *
t), -x (with pos_weight: log_sigmoid(-x) - pw * log_sigmoid(x)) to the target; autodiff of the stable
value formula gave NaN at x = -inf."""

import numpy as np
import pytest

from tests.tensor_parity.common import check_gradients

X = np.array([-np.inf, -40.0, -1.0, 0.0, 0.5, 3.0, 40.0, np.inf], np.float64)
T = np.array([0.0, 0.0, 0.25, 1.0, 0.5, 0.0, 1.0, 1.0], np.float64)
W = np.arange(1.0, X.size + 1)


def _loss(L, x, t, pos_weight, reduction):
    pw = None if pos_weight is None else L.tensor(pos_weight, dtype=x.dtype)
    out = L.nn.functional.binary_cross_entropy_with_logits(x, t, pos_weight=pw, reduction=reduction)
    return (out * L.tensor(W)).sum() if reduction == "none" else out


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("pos_weight", [None, 2.5])
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_gradients_at_infinite_logits(reduction, pos_weight, compiled):
    check_gradients("d logits", lambda L, x: _loss(L, x, L.tensor(T), pos_weight, reduction), X, compiled)
    finite = X[1:-1]
    check_gradients("d target", lambda L, t: _loss(L, L.tensor(finite), t, pos_weight, reduction)
                    if reduction != "none" else (L.nn.functional.binary_cross_entropy_with_logits(
                        L.tensor(finite), t, reduction="none") * L.tensor(W[1:-1])).sum(), T[1:-1], compiled)
