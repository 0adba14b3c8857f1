"""The in-place forms of elu, celu, selu, leaky_relu and rrelu (not training), whose torch node saves the
result rather than the input (EluBackward1, LeakyReluBackward1) and computes the gradient from it: a later
write torch's version counter counts into the tensor raises torch's error at backward, a write through .data
changes the gradient, and with no write the gradient is the result's formula (celu_'s with 1 / alpha in
float). Their neighbours whose nodes save nothing of the result are held the same way. Eagerly, inside
@flame.compile and outside it on the compiled result; against torch in float64."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import flame
from tests.frontend.backward_ways import WAYS, grad_or_none, same_as_torch

X = np.random.default_rng(0).uniform(-0.9, 0.9, (4, 6))
W = np.linspace(-1, 1, 24).reshape(4, 6)


def _f(lib):
    return torch.nn.functional if lib is torch else flame.nn.functional


ACTIVATIONS = {
    "elu_": lambda lib, y: _f(lib).elu_(y, 0.8),
    "elu inplace=True": lambda lib, y: _f(lib).elu(y, inplace=True),
    "celu_": lambda lib, y: _f(lib).celu_(y, 0.7),
    "selu_": lambda lib, y: _f(lib).selu_(y),
    "leaky_relu_": lambda lib, y: _f(lib).leaky_relu_(y, 0.1),
    "leaky_relu inplace=True": lambda lib, y: _f(lib).leaky_relu(y, 0.2, inplace=True),
    "rrelu_ evaluating": lambda lib, y: _f(lib).rrelu_(y),
    "nn.ELU(inplace=True)": lambda lib, y: lib.nn.ELU(inplace=True)(y),
    "hardtanh_": lambda lib, y: _f(lib).hardtanh_(y, -0.3, 0.6),
    "relu_": lambda lib, y: _f(lib).relu_(y),
}


def _no_grad_add(lib, y):
    with lib.no_grad():
        y.add_(0.1)


AFTER = {
    "mul_": lambda lib, y: y.mul_(2),
    "add_ under no_grad": _no_grad_add,
    "a row through .data": lambda lib, y: y.data[1:3].mul_(1.5),
    "nothing": lambda lib, y: None,
}


@pytest.mark.parametrize("way", WAYS)
@pytest.mark.parametrize("after", list(AFTER))
@pytest.mark.parametrize("activation", list(ACTIVATIONS))
def test_an_in_place_activation_saves_its_result_as_torchs(activation, after, way):
    def body(lib, x):
        y = x * 1
        ACTIVATIONS[activation](lib, y)
        AFTER[after](lib, y)
        return (y * lib.tensor(W, dtype=lib.float64)).sum()

    want = grad_or_none(torch, body, "eager", torch.tensor(X, requires_grad=True), "")
    got = grad_or_none(
        flame,
        body,
        way,
        flame.tensor(X, dtype=flame.float64, requires_grad=True),
        "test_inplace_activations_like_torch.py",
    )
    same_as_torch(got, want, rtol=1e-12)


@pytest.mark.parametrize("activation", ["elu_", "celu_", "selu_", "leaky_relu_"])
def test_torch_refuses_a_write_after_these(activation):
    """The oracle: torch's node of these saved the result, which mul_ changes."""

    def body(lib, x):
        y = x * 1
        ACTIVATIONS[activation](lib, y)
        y.mul_(2)
        return y.sum()

    assert grad_or_none(torch, body, "eager", torch.tensor(X, requires_grad=True), "") is None
