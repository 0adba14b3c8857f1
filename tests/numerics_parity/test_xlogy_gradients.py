"""xlogy's gradients at self = 0 against torch, eagerly and inside @flame.compile: PyTorch's xlogy_backward
gives self log(other), 0 where self is 0 and other <= 0 (not NaN, which 0 times log's infinite gradient
gives), and other self / other (NaN at 0 / 0)."""

import numpy as np
import pytest

from tests.tensor_parity.common import check_gradients

SELF = np.array([0.0, 0.0, 0.0, 0.0, 1.0, 2.0, 0.0], np.float64)
OTHER = np.array([0.0, 1.0, -1.0, np.inf, 0.0, 3.0, 0.5], np.float64)
WEIGHTS = np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0], np.float64)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_xlogy_gradient_to_self(compiled):
    check_gradients("xlogy d self", lambda L, x: (L.xlogy(x, L.tensor(OTHER)) * L.tensor(WEIGHTS)).sum(), SELF,
                    compiled)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_xlogy_gradient_to_other(compiled):
    check_gradients("xlogy d other", lambda L, y: (L.xlogy(L.tensor(SELF), y) * L.tensor(WEIGHTS)).sum(), OTHER,
                    compiled)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_xlogy_of_one_tensor_with_itself(compiled):
    check_gradients("xlogy(t, t)", lambda L, t: (L.xlogy(t, t) * L.tensor(WEIGHTS)).sum(), np.abs(OTHER), compiled)
