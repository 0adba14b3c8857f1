"""mode (flame.* and Tensor.*) against torch: the most frequent value along a dim (the smallest of values as
frequent), its index (the last place it occurs: PyTorch's CPU result for lines of up to 16 elements), keepdim,
0-d, integer and bool inputs; the gradient to the picked element in f64, eagerly and inside @flame.compile;
torch's errors and its result type's fields."""

import numpy as np
import pytest
import torch

import flame
from tests.tensor_parity.common import check, gradients

RNG = np.random.default_rng(0)
X = RNG.integers(-2, 3, (5, 7, 6)).astype(np.float64)  # many ties, lines of up to 16 elements


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("dim,keepdim", [(-1, False), (0, True), (1, False), (2, True)])
def test_values_and_indices_match_torch(dim, keepdim, compiled):
    check(lambda L, x: L.mode(x, dim, keepdim), X, compiled=compiled)
    check(lambda L, x: x.mode(dim=dim, keepdim=keepdim), X.astype(np.int64), compiled=compiled)
    check(lambda L, x: x.mode(dim), X > 0, compiled=compiled)
    check(lambda L, x: x.mode(), RNG.standard_normal((3, 9)), compiled=compiled)  # every value once: the smallest


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_zero_dim_one_element_and_empty_lines(compiled):
    check(lambda L, x: L.mode(x), np.array(2.5), compiled=compiled)
    check(lambda L, x: L.mode(x, 0, True), np.array(2.5), compiled=compiled)
    check(lambda L, x: L.mode(x, 1), np.ones((3, 1)), compiled=compiled)
    check(lambda L, x: L.mode(x, 1), np.zeros((0, 3)), compiled=compiled)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_the_gradient_goes_to_the_picked_element(compiled):
    w = RNG.standard_normal((5, 6))
    got, want = gradients(lambda L, x: (L.mode(x, 1).values * L.tensor(w)).sum(), X, compiled)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=0)


def test_the_result_is_a_named_tuple():
    r = flame.tensor(X).mode(0)
    assert type(r).__name__ == "mode" and r._fields == ("values", "indices")
    values, indices = r
    assert values is r.values and indices is r.indices


@pytest.mark.parametrize("call", [
    lambda L: L.mode(L.tensor(np.zeros((0, 3))), 0),
    lambda L: L.mode(L.tensor(X), 3),
])
def test_refuses_what_torch_refuses(call):
    with pytest.raises((RuntimeError, IndexError)):
        call(torch)
    with pytest.raises(flame.FlameError):
        call(flame)
