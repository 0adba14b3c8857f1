"""logaddexp, logaddexp2 and hypot have PyTorch's gradients in every floating dtype, eagerly and inside
@flame.compile, also at infinities and NaNs: logaddexp's grad / (1 + exp(other - self)) is NaN where an
operand is NaN or both are -inf, hypot's grad * self / result is 0 beside an infinite operand (autodiff of
the overflow-safe forward gave finite values at NaNs and NaN beside infinities)."""

import numpy as np
import pytest

from tests.tensor_parity.common import check_gradients

_V = np.array([-np.inf, -2.0, -0.5, -0.0, 0.0, 1.0, 3.0, np.inf, np.nan], np.float64)
A, B = (g.ravel() for g in np.meshgrid(_V, _V))
W = np.arange(1.0, A.size + 1)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("op", ["logaddexp", "logaddexp2", "hypot"])
def test_gradients_at_infinities_and_nans(op, compiled):
    check_gradients(f"{op} d input", lambda L, a: (getattr(L, op)(a, L.tensor(B)) * L.tensor(W)).sum(), A,
                    compiled)
    check_gradients(f"{op} d other", lambda L, b: (getattr(L, op)(L.tensor(A), b) * L.tensor(W)).sum(), B,
                    compiled)
