"""A view taken before a write through `.data` shares the written storage, so torch's node that saved the
view reads the new values at backward (`x @ y.T`, F.linear's w.t(), `y[0]`, `y.reshape`, `y.expand`...,
then `y.data.add_(1)`): flame's VJPs read the view taken again from the tensor as it is then
(frontend/data_writes.py), eagerly and inside @flame.compile, with the backward inside the compiled
function or outside it. A view of a copy (y.clone().T, y * 1) keeps the old values. Against torch in
float64."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as torch_F

import flame

X = np.array([[1.0, 2.0, 3.0], [0.5, -1.0, 2.0]])
Y = np.array([[0.3, -0.7, 1.1], [2.0, 0.4, -0.5]])


def _functional(lib):
    return torch_F if lib is torch else flame.nn.functional


def _set(t, v):
    t[0, 1] = v


def _leaf(y):
    return y


def _made(y):  # a tensor with a gradient history: the write leaves its node's values behind
    return y * 1.5


# name -> (the tensor written, made from the leaf y; (lib, x, it) -> the output; the write into it)
PROGRAMS = {
    "x @ y.T, data.add_": (_leaf, lambda lib, x, y: x @ y.T, lambda y: y.data.add_(1)),
    "x * y.T.T, data.mul_": (_leaf, lambda lib, x, y: x * y.T.T, lambda y: y.data.mul_(3)),
    "F.linear(x, w), data.copy_": (_leaf, lambda lib, x, y: _functional(lib).linear(x, y),
                                   lambda y: y.data.copy_(y.data * 2 + 1)),
    "x * y[0], data.add_": (_leaf, lambda lib, x, y: x * y[0], lambda y: y.data.add_(1)),
    "x * y.reshape, data.mul_": (_leaf, lambda lib, x, y: x.reshape(3, 2) * y.reshape(3, 2), lambda y: y.data.mul_(3)),
    "x * y[:1].expand, data.add_": (_leaf, lambda lib, x, y: x * y[:1].expand(2, 3), lambda y: y.data.add_(1)),
    "x @ y.permute, data[0, 1] = v": (_leaf, lambda lib, x, y: x @ y.permute(1, 0), lambda y: _set(y.data, 5.0)),
    "x * y.unsqueeze(0), data.add_": (_leaf, lambda lib, x, y: x.unsqueeze(0) * y.unsqueeze(0),
                                      lambda y: y.data.add_(1)),
    "x * y.T.T, data[0, 1] = v": (_leaf, lambda lib, x, y: x * y.T.T, lambda y: _set(y.data, -2.0)),
    "x @ y.detach().T, data.add_": (_leaf, lambda lib, x, y: x @ y.detach().T, lambda y: y.data.add_(1)),
    "h: x @ h.T, data.add_": (_made, lambda lib, x, h: x @ h.T, lambda h: h.data.add_(1)),
    "h: x * h[1], data.mul_": (_made, lambda lib, x, h: x * h[1], lambda h: h.data.mul_(3)),
    "h: F.linear(x, h), data[0, 1] = v": (_made, lambda lib, x, h: _functional(lib).linear(x, h),
                                          lambda h: _set(h.data, 4.0)),
    "copy: x * h.exp().T.T, data.add_": (_made, lambda lib, x, h: x * h.exp().T.T, lambda h: h.data.add_(1)),
    "copy: x @ y.clone().T, data.add_": (_leaf, lambda lib, x, y: x @ y.clone().T, lambda y: y.data.add_(1)),
    "copy: x * (y * 1).T.T, data.mul_": (_leaf, lambda lib, x, y: x * (y * 1).T.T, lambda y: y.data.mul_(3)),
}


def _grads(lib, name: str, mode: str):
    """(x.grad, y.grad) of the program's loss; mode: eager, or the body compiled with the backward inside
    or outside it."""
    made, forward, write = PROGRAMS[name]
    x = lib.tensor(X, dtype=lib.float64, requires_grad=True)
    y = lib.tensor(Y, dtype=lib.float64, requires_grad=True)

    def body(x, y):
        it = made(y)
        out = forward(lib, x, it)
        loss = out.sum() + (out * out).sum()
        write(it)
        if mode == "inside":
            loss.backward()
        return loss

    if mode == "eager":
        body(x, y).backward()
    else:
        loss = flame.compile(body)(x, y)
        if mode == "outside":
            loss.backward()
    return [np.zeros(X.shape) if t.grad is None else np.asarray(t.grad.tolist()) for t in (x, y)]


@pytest.mark.parametrize("mode", ["eager", "inside", "outside"])
@pytest.mark.parametrize("name", list(PROGRAMS))
def test_a_view_taken_before_a_data_write_reads_the_new_values(name, mode):
    want = _grads(torch, name, "eager")
    for got, w in zip(_grads(flame, name, mode), want):
        np.testing.assert_allclose(got, w, rtol=1e-12, atol=1e-12)


def test_the_table_reads_values_the_write_changed():
    """Every view program's gradient with respect to x differs from the one with the old values."""
    for name, (made, forward, _) in PROGRAMS.items():
        if name.startswith("copy"):
            continue
        x = torch.tensor(X, requires_grad=True)
        out = forward(torch, x, made(torch.tensor(Y, requires_grad=True)))
        (out.sum() + (out * out).sum()).backward()
        assert not np.allclose(x.grad.numpy(), _grads(torch, name, "eager")[0]), name
