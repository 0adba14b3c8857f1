"""copysign has PyTorch's gradients, eagerly and inside @flame.compile: to input, the cotangent times
result / input (0 where input is 0; NaN where input is infinite or NaN), to other zeros (its result
requires grad through other alone, as torch's)."""

import numpy as np
import pytest

from tests.tensor_parity.common import check_gradients

_V = np.array([-np.inf, -2.0, -0.0, 0.0, 0.5, 3.0, np.inf, np.nan], np.float64)
A, B = (g.ravel() for g in np.meshgrid(_V, _V))
W = np.arange(1.0, A.size + 1)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_copysign_gradients(compiled):
    check_gradients("d input", lambda L, a: (L.copysign(a, L.tensor(B)) * L.tensor(W)).sum(), A, compiled)
    check_gradients("d other", lambda L, b: (L.copysign(L.tensor(A), b) * L.tensor(W)).sum(), B, compiled)
    check_gradients("by a number", lambda L, a: (L.copysign(a, -1.5) * L.tensor(W)).sum(), A, compiled)
