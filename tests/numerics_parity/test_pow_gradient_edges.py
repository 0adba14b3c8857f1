"""pow's gradients where the real derivative is degenerate, against torch's pow_backward in f64, eagerly and
inside @flame.compile: a zero exponent gives a zero gradient for the base (0 ** 0 too); the exponent's
gradient is 0 at a zero base with an exponent >= 0, -inf or inf at a zero base with a negative one, and NaN at
a negative base (no real logarithm: torch's NaN, never a silent 0); a Python number as base or exponent too."""

import numpy as np
import pytest

from tests.tensor_parity.common import gradients

BASES = np.array([-2.0, -0.5, 0.0, 0.0, 0.0, 1.5, 2.0, 0.0], np.float64)
EXPONENTS = np.array([2.0, 0.5, 2.0, 0.0, -1.0, -0.5, 0.0, 1.0], np.float64)
W = np.linspace(0.5, 2.0, BASES.size)

CASES = {
    "base": (lambda L, x: ((x ** L.tensor(EXPONENTS)) * L.tensor(W)).sum(), BASES),
    "exponent": (lambda L, y: ((L.tensor(BASES) ** y) * L.tensor(W)).sum(), EXPONENTS),
    "number base -2": (lambda L, y: ((-2.0) ** y * L.tensor(W)).sum(), EXPONENTS),
    "number base 0": (lambda L, y: (0.0**y * L.tensor(W)).sum(), EXPONENTS),
    "number base 0.3": (lambda L, y: (0.3**y * L.tensor(W)).sum(), EXPONENTS),
    "exponent 0": (lambda L, x: (x**0.0 * L.tensor(W)).sum(), BASES),
    "exponent -1": (lambda L, x: (x**-1.0 * L.tensor(W)).sum(), BASES),
    "exponent 0.5": (lambda L, x: (x**0.5 * L.tensor(W)).sum(), BASES),
}


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("name", CASES)
def test_pow_gradient_at_degenerate_points(name, compiled):
    f, at = CASES[name]
    got, want = gradients(f, at, compiled)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=f"NaNs of {name}: {got} vs torch {want}")
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=0, err_msg=name)
