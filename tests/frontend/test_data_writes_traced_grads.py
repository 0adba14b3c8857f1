"""Writes through .data (frontend/data_writes.py) with every traced backward: flame.autograd.grad and
flame.grad inside @flame.compile read the written storage as torch.autograd.grad and torch.func.grad do,
as a traced backward() does; a compiled forward at a size its dynamic-size template instantiates keeps
that for the backward run outside. Against torch in float64."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import flame
from tests.frontend.test_untracked_writes import DATA_WRITES

X, W = np.array([1.0, 2.0, 3.0]), np.array([0.5, -1.0, 2.0])


def _torch_grad(body):
    x, w = (torch.tensor(a, requires_grad=True) for a in (X, W))
    return [g.numpy() for g in torch.autograd.grad(body(torch, x, w), [x, w])]


@pytest.mark.parametrize("body", DATA_WRITES, ids=lambda f: f.__name__.strip("_"))
def test_autograd_grad_inside_compile_reads_the_written_storage(body):
    @flame.compile
    def step(x, w):
        return flame.autograd.grad(body(flame, x, w), [x, w])

    got = step(*(flame.tensor(a, dtype=flame.float64, requires_grad=True) for a in (X, W)))
    for g, want in zip(got, _torch_grad(body)):
        np.testing.assert_allclose(g.numpy(), want, rtol=1e-12)


def _exp_scaled(lib, x):
    y = (x * 0.5).exp()  # exp's backward reads its result
    y.data.mul_(3)
    return (y * x).sum()


def _saved_input_shifted(lib, x):
    h = x * 1.5
    y = h * x  # mul's backward reads h
    h.data.add_(5)
    return y.sum()


@pytest.mark.parametrize("body", [_exp_scaled, _saved_input_shifted], ids=lambda f: f.__name__.strip("_"))
@pytest.mark.parametrize("where", ["eager", "compiled"])
def test_flame_grad_reads_the_written_storage_as_torch_func_grad(body, where):
    want = torch.func.grad(lambda x: body(torch, x))(torch.tensor(X)).numpy()
    g = flame.grad(lambda x: body(flame, x))
    run = g if where == "eager" else flame.compile(g)
    np.testing.assert_allclose(run(flame.tensor(X, dtype=flame.float64)).numpy(), want, rtol=1e-12)
    _, got = flame.value_and_grad(lambda x: body(flame, x))(flame.tensor(X, dtype=flame.float64))
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-12)


def _scaled_row(lib, x):
    y = (x.sum(0) * 0.1).exp()  # of a fixed size: the dynamic batch dim is x's
    y.data.mul_(2)
    return (y * x).sum(0)


def test_a_size_instantiated_from_a_dynamic_template_keeps_the_data_write_for_the_backward():
    f = flame.compile(lambda x: _scaled_row(flame, x))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (the recompile warnings of the sizes before the template)
        for n in (3, 4, 5, 6):
            xv = np.linspace(-0.5, 0.5, n * 3).reshape(n, 3)
            xt = torch.tensor(xv, requires_grad=True)
            _scaled_row(torch, xt).sum().backward()
            xf = flame.tensor(xv, requires_grad=True)
            f(xf).sum().backward()
            np.testing.assert_allclose(xf.grad.numpy(), xt.grad.numpy(), rtol=1e-12, err_msg=f"batch {n}")
    assert f.stats().instantiations >= 1
