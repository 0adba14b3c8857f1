"""NaN bounds against torch, eagerly and inside @flame.compile: clamp with a NaN min or max (a number or an
element of a bound tensor) gives NaN there, with no gradient to x or the bounds, as torch's clamp."""

import numpy as np
import pytest

from tests.tensor_parity.common import check, gradients

X = np.array([-7.0, 0.0, 2.0, 9.0, np.nan], np.float32)
LO = np.array([0.0, 1.0, np.nan, 5.0, 0.0], np.float32)
HI = np.array([-1.0, 2.0, 3.0, np.nan, 1.0], np.float32)
NAN = float("nan")

CASES = {
    "clamp with a NaN number": (lambda L, x: (x.clamp(min=NAN), x.clamp(max=NAN), x.clamp(0.0, NAN)), X),
    "clamp_min and clamp_max NaN": (lambda L, x: (L.clamp_min(x, NAN), x.clamp_max(NAN)), X),
    "clamp with NaN in bound tensors": (
        lambda L, x, lo, hi: (x.clamp(lo, hi), x.clamp(min=lo), x.clamp(max=hi)),
        X,
        LO,
        HI,
    ),
    "clamp_ with a NaN bound": (lambda L, x, lo: x.clamp_(lo), X, LO),
    "clamp of f16 with a NaN bound": (lambda L, x, lo: x.half().clamp(lo.half()), X, LO),
}


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("name", CASES)
def test_nan_bounds(name, compiled):
    f, *args = CASES[name]
    check(f, *args, compiled=compiled)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_clamp_gradient_at_nan_bounds(compiled):
    got, want = gradients(
        lambda L, x: (x.clamp(min=NAN) + x.clamp(max=L.tensor(HI))).sum(), X.astype(np.float64), compiled
    )
    np.testing.assert_array_equal(got, want)
