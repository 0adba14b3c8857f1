"""Gradients of prod and cumprod against torch's prod_backward / cumprod_backward in f64, eagerly and inside
@flame.compile, on lines mixing zeros with infinities and NaN (where the product of the others is not
out / x and inf * 0 must not leak into terms torch leaves out), products whose running value overflows
before the end, lines of one element, and reductions over every element holding one zero or several."""

import numpy as np
import pytest

from tests.tensor_parity.common import check_gradients

SPECIAL = [0.0, 0.0, 2.0, -1.5, np.inf, -np.inf, np.nan, 3.0, 0.5]
HUGE = [2.0, -1.5, 0.5, 1e200, 1e150]  # overflowing in any order (torch multiplies in its own)
RNG = np.random.default_rng(0)
LINES = [RNG.choice(SPECIAL, (4, n)) for n in (1, 2, 3, 5, 7) for _ in range(3)]
LINES += [RNG.choice(HUGE, (3, n)) for n in (3, 6)]
LINES += [np.array([[np.inf, 2.0, 0.0, 3.0], [1.0, np.nan, 0.0, 0.0], [0.0, 2.0, -np.inf, 0.0]])]
WEIGHTS = RNG.standard_normal((4, 7))


def _w(L, x):
    return L.tensor(WEIGHTS[: x.shape[0], : x.shape[1]])


CASES = {
    "cumprod": lambda L, x: (x.cumprod(1) * _w(L, x)).sum(),
    "cumprod dim 0": lambda L, x: (x.cumprod(0) * _w(L, x)).sum(),
    "prod dim": lambda L, x: (x.prod(1) * _w(L, x)[:, 0]).sum(),
    "prod dim 0 keepdim": lambda L, x: (x.prod(0, keepdim=True) * _w(L, x)[:1]).sum(),
    "prod of everything": lambda L, x: x.prod(),
    "prod of a row": lambda L, x: x[1].prod() * 3,
}


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("case", CASES)
def test_product_gradients_match_torch(case, compiled):
    for x in LINES:
        check_gradients(f"{case} of {x.tolist()}", CASES[case], x, compiled)
