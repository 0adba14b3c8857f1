"""A leaf made inside a compiled function (`x.detach().requires_grad_()`, a clone given requires_grad,
`flame.zeros(n, requires_grad=True)`) gets its .grad from backward() as it does eagerly and as in
torch (it was left None: a silent wrong answer)."""

import warnings

import numpy as np
import pytest
import torch

import flame

X = np.arange(6, dtype=np.float32).reshape(2, 3) - 2.0
W = np.array([0.5, -1.0, 2.0], np.float32)


def _detached(lib, x, w):
    x = x.detach().requires_grad_()
    ((x * w).sin().sum()).backward()
    return x.grad


def _cloned(lib, x, w):
    x = x.clone().requires_grad_(True)
    y = (x * x * w).sum()
    y.backward()
    (x * 3.0).sum().backward()  # a second backward accumulates into the same .grad
    return x.grad


def _created(lib, x, w):
    b = lib.zeros(3, requires_grad=True)
    ((x + b) * w).pow(2).sum().backward()
    return b.grad


def _flame(fn, compiled):
    body = (lambda x, w: fn(flame, x, w))
    run = flame.compile(body) if compiled else body
    return run(flame.tensor(X), flame.tensor(W)).numpy()


@pytest.mark.parametrize("fn", [_detached, _cloned, _created])
@pytest.mark.parametrize("compiled", [False, True])
def test_grad_of_a_leaf_made_in_the_body(fn, compiled):
    want = fn(torch, torch.tensor(X), torch.tensor(W)).numpy()
    np.testing.assert_allclose(_flame(fn, compiled), want, rtol=1e-6, atol=1e-6)


def test_a_second_call_gets_its_own_gradient():
    step = flame.compile(lambda x, w: _detached(flame, x, w))
    for k in (1.0, 2.0):
        got = step(flame.tensor(X * k), flame.tensor(W)).numpy()
        np.testing.assert_allclose(got, np.cos(X * k * W) * W, rtol=1e-5, atol=1e-6)


def test_a_computed_tensor_stays_no_leaf():
    """requires_grad_() on a tensor that already requires grad (computed from one that does) leaves it
    a non-leaf: its .grad stays None, as torch's does."""
    w = flame.tensor(W, requires_grad=True)

    @flame.compile
    def step(x):
        y = (x * w).requires_grad_()
        y.sum().backward()
        return w.grad, y.grad

    wg, yg = step(flame.tensor(X))
    assert yg is None
    np.testing.assert_allclose(wg.numpy(), X.sum(0), rtol=1e-6)


MADE = {  # torch's creation functions that take requires_grad, as flame spells them
    "full": lambda lib: lib.full((3,), 0.5, requires_grad=True),
    "arange": lambda lib: lib.arange(3.0, requires_grad=True),
    "linspace": lambda lib: lib.linspace(-1, 1, 3, requires_grad=True),
    "logspace": lambda lib: lib.logspace(0, 1, 3, requires_grad=True),
    "eye": lambda lib: lib.eye(3, requires_grad=True),
}


@pytest.mark.parametrize("name", sorted(MADE))
@pytest.mark.parametrize("compiled", [False, True])
def test_creation_functions_take_requires_grad(name, compiled):
    def body(lib, x):
        b = MADE[name](lib)
        ((x @ b if b.ndim == 2 else x * b) * x).sum().backward()
        return b.grad

    want = body(torch, torch.tensor(X)).numpy()
    run = (lambda x: body(flame, x))
    got = (flame.compile(run) if compiled else run)(flame.tensor(X)).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_an_integer_range_cannot_require_grad():
    with pytest.raises(flame.errors.GradDTypeError, match="floating point"):
        flame.arange(3, requires_grad=True)


@pytest.mark.parametrize("compiled", [False, True])
def test_a_tensor_written_with_a_gradient_history_is_no_leaf(compiled):
    """A buffer made in the body that takes a value with a gradient history (an index write) requires
    grad through that history: it is no leaf, its .grad stays None, and the history's leaf gets the
    gradient, as in torch."""
    w = flame.tensor(W, requires_grad=True)

    def body(x):
        buf = flame.zeros(2)
        buf[0] = (w * x[0]).sum()
        buf[1] = (w * x[1]).pow(2).sum()
        buf.sum().backward()
        return w.grad, buf.grad

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # reading a non-leaf's .grad warns, as in torch
        wg, bg = (flame.compile(body) if compiled else body)(flame.tensor(X))
    assert bg is None
    np.testing.assert_allclose(wg.numpy(), X[0] + 2 * X[1] * X[1] * W, rtol=1e-6)


@pytest.mark.parametrize("compiled", [False, True])
def test_a_gradient_with_a_history_is_no_leaf(compiled):
    """A gradient penalty: the gradient made with create_graph=True requires grad through its history,
    so backward() through it fills the parameter's .grad and leaves the gradient's own None."""
    def body(lib, w, x):
        (g,) = lib.autograd.grad((w * x).pow(3).sum(), w, create_graph=True)
        (g * g).sum().backward()
        return w.grad, g.grad

    tw = torch.tensor(W, requires_grad=True)
    want, tg = body(torch, tw, torch.tensor(X))
    w = flame.tensor(W, requires_grad=True)
    run = (lambda x: body(flame, w, x))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # reading a non-leaf's .grad warns, as in torch
        got, g = (flame.compile(run) if compiled else run)(flame.tensor(X))
    assert tg is None and g is None
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5)
