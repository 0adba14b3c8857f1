"""div with a rounding_mode has torch's gradient, eagerly and inside @flame.compile: zeros to both
operands (its result requires grad, as torch's), also where the divisor is 0 or NaN (the gradient of
trunc(a / b) through the division gave NaN there; floor's result had no gradient at all)."""

import numpy as np
import pytest
import torch

import flame
from tests.tensor_parity.common import check_gradients

A = np.array([1.0, -3.0, 7.5, 0.0, -2.0, np.inf, 4.0], np.float64)
B = np.array([0.0, 2.0, -0.0, 0.0, np.nan, 3.0, -np.inf], np.float64)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("mode", ["trunc", "floor"])
def test_rounded_division_gradient_is_zero(mode, compiled):
    check_gradients(f"div {mode} d a", lambda L, a: L.div(a, L.tensor(B), rounding_mode=mode).sum(), A, compiled)
    check_gradients(f"div {mode} d b", lambda L, b: L.div(L.tensor(A), b, rounding_mode=mode).sum(), B, compiled)
    check_gradients(f"div {mode} by a number", lambda L, a: L.div(a, 0.0, rounding_mode=mode).sum(), A, compiled)


@pytest.mark.parametrize("mode", ["trunc", "floor"])
def test_rounded_division_result_requires_grad(mode):
    for lib in (torch, flame):
        a = lib.tensor([5.0, -5.0], requires_grad=True)
        assert lib.div(a, 2.0, rounding_mode=mode).requires_grad
        assert not lib.div(a.detach(), 2.0, rounding_mode=mode).requires_grad
