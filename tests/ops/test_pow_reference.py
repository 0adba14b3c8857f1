"""The reference pow is IEEE pow (C's powf, what the GPU computes) whatever the exponent's shape.
Regression: NumPy computes an exponent 0.5 that is a scalar or a broadcast operand as sqrt, so
pow(-inf, 0.5) was NaN (IEEE: inf) and pow(-0.0, 0.5) was -0.0 once simplification had turned a
full-shape exponent into a scalar: the pass changed the program's NaNs (found by the random-graph
property test)."""

from __future__ import annotations

import numpy as np
import pytest

from flame.ir import REGISTRY

X = np.array([-np.inf, -0.0, 0.0, 4.0, np.inf, np.nan, -2.0], np.float32)


@pytest.mark.parametrize("y", [np.float32(0.5), np.full(7, 0.5, np.float32), np.broadcast_to(np.float32(0.5), (7,))])
def test_pow_half_is_ieee_pow_for_every_exponent_shape(y):
    with np.errstate(invalid="ignore"):
        got = REGISTRY["pow"].ref(X, y)
    want = np.array([np.inf, 0.0, 0.0, 2.0, np.inf, np.nan, np.nan], np.float32)  # C99 powf(x, 0.5)
    real = ~np.isnan(want)
    np.testing.assert_array_equal(np.signbit(got[real]), np.signbit(want[real]))  # pow(-0.0, 0.5) is +0.0
    np.testing.assert_array_equal(got, want)


def test_pow_of_a_scalar_keeps_its_shape():
    assert REGISTRY["pow"].ref(np.float32(-np.inf), np.float32(0.5)).shape == ()
