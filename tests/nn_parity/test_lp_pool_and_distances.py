"""lp_pool1d/2d/3d (and nn.LPPool*d), dist (flame.dist, Tensor.dist) and pdist (flame.pdist,
nn.functional.pdist) against torch in f64: values and gradients, eagerly and inside @flame.compile, with
ceil_mode and strides, p of 1, 1.5, 2, 3 and inf (lp_pool's -inf too), and pdist over two equal rows (a
zero distance, whose gradient is torch's 0)."""

import numpy as np
import pytest

import flame
from tests.nn_parity.common import check_weighted

X = np.random.default_rng(0).standard_normal((2, 3, 7, 6))
R = np.random.default_rng(1).standard_normal((5, 4))
R[3] = R[1]

CASES = {
    "lp_pool2d": (lambda L, x: L.nn.functional.lp_pool2d(x, 2, 2), X),
    "lp_pool2d p3 stride ceil": (lambda L, x: L.nn.functional.lp_pool2d(x, 3.0, (3, 2), stride=2, ceil_mode=True), X),
    "lp_pool1d": (lambda L, x: L.nn.functional.lp_pool1d(x[0], 1.5, 3, stride=2), np.abs(X)),
    "lp_pool3d": (lambda L, x: L.nn.functional.lp_pool3d(x, 2, 2), X),
    "LPPool2d": (lambda L, x: L.nn.LPPool2d(2, 3, stride=1)(x), X),
    "LPPool1d": (lambda L, x: L.nn.LPPool1d(2, 2)(x[0]), X),
    # an infinite norm_type is max pooling of |x| (-inf: the smallest |x|), not x ** inf's mean
    "lp_pool1d inf ceil": (lambda L, x: L.nn.functional.lp_pool1d(x[0], float("inf"), 2, ceil_mode=True), X),
    "lp_pool2d -inf": (lambda L, x: L.nn.functional.lp_pool2d(x, float("-inf"), (2, 3), stride=1), X),
    "LPPool3d inf": (lambda L, x: L.nn.LPPool3d(float("inf"), 2)(x), X),
    "dist": (lambda L, x: L.dist(x, x.flip(0)), R),
    "dist p1 broadcast": (lambda L, x: L.dist(x, x[1], 1), R),
    "Tensor.dist inf": (lambda L, x: x.dist(x.flip(1), float("inf")), R),
    "pdist": (lambda L, x: L.nn.functional.pdist(x), R),
    "pdist p1": (lambda L, x: L.pdist(x, 1), R),
    "pdist inf": (lambda L, x: L.nn.functional.pdist(x, float("inf")), R),
}


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("name", CASES)
def test_matches_torch(name, compiled):
    fn, x = CASES[name]
    check_weighted(fn, x, compiled)


def test_pdist_wants_a_matrix():
    with pytest.raises(flame.ShapeError, match=r"pdist(.|\n)*test_lp_pool_and_distances"):
        flame.pdist(flame.ones(2, 3, 4))
