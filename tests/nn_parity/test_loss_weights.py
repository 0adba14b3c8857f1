"""The elementwise weight of F.l1_loss, F.mse_loss and F.huber_loss against torch in f64 (each reduction;
l1 and mse divide their mean by the summed weights, huber takes the mean of the products): values and
gradients of the input and of the weight, eager and compiled; a weight of another shape than the input
raises torch's ValueError."""

from __future__ import annotations

import pytest
import torch

import flame
from tests.nn_parity.common import Fixed, check, rng

X, T = rng(7).standard_normal((3, 4)), rng(8).standard_normal((3, 4)) * 2
W = rng(9).uniform(0.2, 2.0, (3, 4))
LOSSES = {"l1": ("l1_loss", {}), "mse": ("mse_loss", {}), "huber": ("huber_loss", {"delta": 0.7})}


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("name", list(LOSSES))
def test_weighted_losses_match_torch(name, reduction, compiled):
    fn, kw = LOSSES[name]

    def call(m, x, t, w):
        lib = flame if isinstance(x, flame.Tensor) else torch
        return getattr(lib.nn.functional, fn)(m(x), t, reduction=reduction, weight=w, **kw)

    check(lambda lib: lib.nn.Identity(), call, [X, Fixed(T), W], compiled)


@pytest.mark.parametrize("compiled", [False, True])
def test_a_broadcast_target_with_a_weight(compiled):
    def call(m, x, t, w):
        lib = flame if isinstance(x, flame.Tensor) else torch
        return lib.nn.functional.mse_loss(m(x), t, weight=w)

    with pytest.warns(UserWarning):
        check(lambda lib: lib.nn.Identity(), call, [X[:1], Fixed(T), W[:1]], compiled)


@pytest.mark.parametrize("name", list(LOSSES))
def test_a_weight_of_another_shape_raises(name):
    fn, _ = LOSSES[name]
    for lib in (torch, flame):
        with pytest.raises(ValueError, match="Weights and input must have the same size"):
            getattr(lib.nn.functional, fn)(lib.tensor(X), lib.tensor(T), weight=lib.tensor(W[0]))
