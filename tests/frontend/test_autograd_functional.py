"""flame.autograd.functional against torch.autograd.functional in float64: vjp, jvp, jacobian, hessian, vhp,
hvp on one tensor and on tuples of tensors (results nested as torch's), create_graph=True results
differentiated again, zeros for an input the function does not use, and torch's errors (strict mode,
v's size, a non-scalar function given to hessian)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.autograd.functional as TF

import flame
import flame.autograd.functional as FF


def _rng(seed: int, *shape: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape)


def _t(a):
    return torch.tensor(a)


def _f(a):
    return flame.tensor(a, dtype=flame.f64)


def _same(got, want, what="") -> None:
    """got and want have the same nesting (tensor / tuple) and values."""
    if isinstance(want, tuple):
        assert isinstance(got, tuple) and len(got) == len(want), (what, got)
        for g, w in zip(got, want):
            _same(g, w, what)
        return
    assert isinstance(got, flame.Tensor), (what, got)
    assert tuple(got.shape) == tuple(want.shape), what
    np.testing.assert_allclose(got.numpy(), want.detach().numpy(), rtol=1e-11, atol=1e-13, err_msg=what)


def one(lib):
    return lambda x: x.tanh() * x.sum()


def two(lib):
    return lambda x, y: (x.sin() * x).sum() * y.exp().sum() + (x[:3] * y).pow(3).sum()


def pair_out(lib):
    return lambda x, y: (x * y.sum(), (x[:3] * y).exp())


X, Y, VX, VY = _rng(1, 4), _rng(2, 3), _rng(3, 4), _rng(4, 3)


@pytest.mark.parametrize("fn", ["vjp", "jvp"])
def test_vjp_and_jvp_match_torch(fn):
    ff, tf = getattr(FF, fn), getattr(TF, fn)
    _same(ff(one(flame), _f(X), _f(VX)), tf(one(torch), _t(X), _t(VX)), fn)
    v = (_rng(5, 4), _rng(6, 3)) if fn == "vjp" else (VX, VY)
    want = tf(pair_out(torch), (_t(X), _t(Y)), tuple(map(_t, v)))
    _same(ff(pair_out(flame), (_f(X), _f(Y)), tuple(map(_f, v))), want, fn)
    _same(ff(two(flame), (_f(X), _f(Y)), *(() if fn == "vjp" else ((_f(VX), _f(VY)),))),
          tf(two(torch), (_t(X), _t(Y)), *(() if fn == "vjp" else ((_t(VX), _t(VY)),))), fn)


def test_jacobian_matches_torch_for_each_nesting():
    _same(FF.jacobian(one(flame), _f(X)), TF.jacobian(one(torch), _t(X)))
    _same(FF.jacobian(two(flame), (_f(X), _f(Y))), TF.jacobian(two(torch), (_t(X), _t(Y))))
    _same(FF.jacobian(pair_out(flame), (_f(X), _f(Y))), TF.jacobian(pair_out(torch), (_t(X), _t(Y))))
    _same(FF.jacobian(one(flame), _f(X), vectorize=True), TF.jacobian(one(torch), _t(X), vectorize=True))
    # forward-mode: the same values, nested as reverse-mode's (torch's forward-mode gives lists there)
    fwd = {"vectorize": True, "strategy": "forward-mode"}
    _same(FF.jacobian(two(flame), (_f(X), _f(Y)), **fwd), TF.jacobian(two(torch), (_t(X), _t(Y))))
    _same(FF.hessian(two(flame), (_f(X), _f(Y)), vectorize=True, outer_jacobian_strategy="forward-mode"),
          TF.hessian(two(torch), (_t(X), _t(Y))))
    m = _rng(7, 2, 3)
    _same(FF.jacobian(lambda a: a @ a.T, _f(m)), TF.jacobian(lambda a: a @ a.T, _t(m)))


def test_hessian_vhp_hvp_match_torch():
    def sq(lib):
        return lambda x: one(lib)(x).pow(2).sum()

    _same(FF.hessian(sq(flame), _f(X)), TF.hessian(sq(torch), _t(X)))
    _same(FF.hessian(two(flame), (_f(X), _f(Y))), TF.hessian(two(torch), (_t(X), _t(Y))))
    for fn in ("vhp", "hvp"):
        ff, tf = getattr(FF, fn), getattr(TF, fn)
        _same(ff(sq(flame), _f(X), _f(VX)), tf(sq(torch), _t(X), _t(VX)), fn)
        _same(ff(two(flame), (_f(X), _f(Y)), (_f(VX), _f(VY))), tf(two(torch), (_t(X), _t(Y)), (_t(VX), _t(VY))), fn)


def test_results_are_detached_unless_create_graph_and_then_differentiable():
    out, g = FF.vjp(one(flame), _f(X), _f(VX))
    assert not out.requires_grad and not g.requires_grad
    tx, fx = torch.tensor(X, requires_grad=True), flame.tensor(X, dtype=flame.f64, requires_grad=True)
    for fn in ("vjp", "jvp", "hvp", "vhp"):
        f = (lambda lib: lambda x: one(lib)(x).pow(2).sum()) if fn in ("hvp", "vhp") else one
        _, tg = getattr(TF, fn)(f(torch), tx, _t(VX), create_graph=True)
        _, g = getattr(FF, fn)(f(flame), fx, _f(VX), create_graph=True)
        assert g.requires_grad
        _same(flame.autograd.grad(g.pow(2).sum(), fx)[0], torch.autograd.grad(tg.pow(2).sum(), tx)[0], fn)
    tj = TF.jacobian(one(torch), tx, create_graph=True)
    j = FF.jacobian(one(flame), fx, create_graph=True)
    _same(flame.autograd.grad(j.sum(), fx)[0], torch.autograd.grad(tj.sum(), tx)[0])


def test_an_unused_input_gets_zeros_and_strict_mode_raises_as_torch():
    def f(lib):
        return lambda x, y: x * 2

    _same(FF.jacobian(f(flame), (_f(X), _f(Y))), TF.jacobian(f(torch), (_t(X), _t(Y))))
    _same(FF.vjp(f(flame), (_f(X), _f(Y)), _f(VX)), TF.vjp(f(torch), (_t(X), _t(Y)), _t(VX)))
    _same(FF.jvp(lambda x: x * 2, _f(X), _f(VX)), TF.jvp(lambda x: x * 2, _t(X), _t(VX)))
    with pytest.raises(RuntimeError, match="Output 0 of the user-provided function is independent of input 1"):
        FF.jacobian(f(flame), (_f(X), _f(Y)), strict=True)
    with pytest.raises(RuntimeError, match="independent of input 1. This is not allowed in strict mode"):
        FF.vjp(f(flame), (_f(X), _f(Y)), _f(VX), strict=True)
    with pytest.raises(RuntimeError, match="Output 0 of the user-provided function does not require gradients"):
        FF.vjp(lambda x: flame.ones(3, dtype=flame.f64), _f(X), _f(Y), strict=True)


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda lib, m: m.vjp(lambda x: x * 2, lib(X)), "The vector v can only be None if the user-provided function"),
        (lambda lib, m: m.jvp(lambda x: x * 2, lib(X), lib(Y)), r"v has invalid size: should be"),
        (lambda lib, m: m.jvp(lambda x, y: x, (lib(X), lib(Y)), (lib(X),)), "v is a tuple of invalid length"),
        (lambda lib, m: m.hessian(lambda x: x * 2, lib(X)), "should contain a single element"),
        (lambda lib, m: m.hvp(lambda x: (x.sum(), x.sum()), lib(X), lib(X)), "should return a single Tensor"),
        (lambda lib, m: m.jacobian(lambda x: x, lib(X), strategy="sideways"), "Expected strategy to be either"),
        (lambda lib, m: m.jacobian(lambda x: x, lib(X), strategy="forward-mode"), "only implemented for `vectorize"),
    ],
)
def test_errors_as_torch(call, message):
    for lib, m in ((_t, TF), (_f, FF)):
        with pytest.raises((RuntimeError, AssertionError, NotImplementedError), match=message):
            call(lib, m)
    with pytest.raises(TypeError, match="must be either a Tensor or a tuple of Tensors but the given inputs"):
        FF.vjp(lambda x: x, [_f(X)])


@pytest.mark.parametrize("fn", ["vjp", "jvp", "vhp", "hvp", "jacobian", "hessian"])
def test_inside_compile_as_eagerly(fn):
    def sq(lib):
        return lambda x: one(lib)(x).pow(2).sum()

    f = one if fn in ("vjp", "jvp", "jacobian") else sq
    if fn in ("jacobian", "hessian"):
        got = flame.compile(lambda x: getattr(FF, fn)(f(flame), x))(_f(X))
        want = getattr(TF, fn)(f(torch), _t(X))
    else:
        got = flame.compile(lambda x, v: getattr(FF, fn)(f(flame), x, v)[1])(_f(X), _f(VX))
        want = getattr(TF, fn)(f(torch), _t(X), _t(VX))[1]
    _same(got, want, fn)
