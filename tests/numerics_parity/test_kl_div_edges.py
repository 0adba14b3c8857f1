"""kl_div at the edges of its domain against torch, eagerly and inside @flame.compile: torch computes
xlogy(target, target) - target * input, so a zero target at an infinite input gives NaN (0 * inf) and a
negative target NaN (log of a negative number), not 0; its gradients are torch's."""

import numpy as np
import pytest

from tests.tensor_parity.common import check, check_gradients

INPUT = np.array([-np.inf, np.inf, -1.0, -1.0, -2.0, 0.5, np.nan, -1.0], np.float64)
TARGET = np.array([0.0, 0.0, 0.0, -0.5, 0.25, 1.0, 0.0, np.nan], np.float64)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("log_target", [False, True])
def test_kl_div_at_infinite_inputs_and_negative_targets(dtype, log_target, compiled):
    x, t = INPUT.astype(dtype), TARGET.astype(dtype)
    check(lambda L, x, t: L.nn.functional.kl_div(x, t, reduction="none", log_target=log_target), x, t,
          compiled=compiled)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_kl_div_gradients(compiled):
    t = np.array([0.0, 0.25, 1.0, 2.0], np.float64)
    x = np.array([-1.0, -2.0, 0.5, 3.0], np.float64)
    check_gradients("kl_div d input", lambda L, x: L.nn.functional.kl_div(
        x, L.tensor(t), reduction="sum").mul(L.tensor([1.0, 2.0, 3.0, 4.0], dtype=x.dtype)).sum(), x, compiled)
    check_gradients("kl_div d target", lambda L, t: L.nn.functional.kl_div(
        L.tensor(x), t, reduction="none").mul(L.tensor([1.0, 2.0, 3.0, 4.0], dtype=t.dtype)).sum(), t, compiled)
