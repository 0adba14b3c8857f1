"""flame.autograd.grad inside @flame.compile gives gradients with a history only with create_graph=True,
as torch.autograd.grad: without it a gradient returned comes back with requires_grad False and no grad_fn,
and a loss reading one differentiates it as a constant. flame.grad's gradients are torch.func.grad's
(differentiable where the argument requires grad). Against torch in float64."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import flame

X = np.array([0.1, 0.5, -0.3])


def _grad_of_exp(lib, x, create: bool):
    (g,) = lib.autograd.grad(x.exp().sum(), [x], create_graph=create)
    return g


@pytest.mark.parametrize("create", [False, True], ids=["plain", "create_graph"])
def test_a_returned_gradient_has_a_history_only_with_create_graph(create):
    want = _grad_of_exp(torch, torch.tensor(X, requires_grad=True), create)
    got = flame.compile(lambda x: _grad_of_exp(flame, x, create))(flame.tensor(X, dtype=flame.float64,
                                                                              requires_grad=True))
    np.testing.assert_allclose(got.numpy(), want.detach().numpy(), rtol=1e-12)
    assert got.requires_grad == want.requires_grad
    assert (got.grad_fn is None) == (want.grad_fn is None)


def _loss_reading_a_gradient(lib, x):
    g = _grad_of_exp(lib, x, False)
    return (g * x).sum()  # g is a constant here: d/dx = g


@pytest.mark.parametrize("inside", [True, False], ids=["backward inside", "backward outside"])
def test_a_loss_reading_a_plain_gradient_differentiates_it_as_a_constant(inside):
    xt = torch.tensor(X, requires_grad=True)
    _loss_reading_a_gradient(torch, xt).backward()
    x = flame.tensor(X, dtype=flame.float64, requires_grad=True)
    if inside:
        flame.compile(lambda x: _loss_reading_a_gradient(flame, x).backward())(x)
    else:
        flame.compile(lambda x: _loss_reading_a_gradient(flame, x))(x).backward()
    np.testing.assert_allclose(x.grad.numpy(), xt.grad.numpy(), rtol=1e-12)


@pytest.mark.parametrize("requires_grad", [False, True])
def test_flame_grad_gives_torch_func_grads_flag(requires_grad):
    want = torch.func.grad(lambda x: x.exp().sum())(torch.tensor(X, requires_grad=requires_grad))
    got = flame.compile(flame.grad(lambda x: x.exp().sum()))(flame.tensor(X, dtype=flame.float64,
                                                                        requires_grad=requires_grad))
    np.testing.assert_allclose(got.numpy(), want.detach().numpy(), rtol=1e-12)
    assert got.requires_grad == want.requires_grad
