"""What a node saves is torch's: a write torch's version counter counts into a tensor torch's autograd node
saved (its result, or an input) raises torch's error at backward; a write into one it did not save leaves
torch's gradient, whatever flame's own ops read. Eager and inside @flame.compile (backward inside), against
torch in float64, for each tensor written and each requires_grad pattern."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import flame
import flame.nn.functional as FF


def _f(lib):
    return TF if lib is torch else FF


UNARY = {
    "expm1": lambda lib, x: x.expm1(),  # saves its result (flame computes from exp and x)
    "tan": lambda lib, x: x.tan(),
    "sinh": lambda lib, x: x.sinh(),  # saves self
    "cosh": lambda lib, x: x.cosh(),
    "exp2": lambda lib, x: x.exp2(),
    "erfinv": lambda lib, x: x.erfinv(),  # saves self (flame's VJP reads the result)
    "softmax": lambda lib, x: _f(lib).softmax(x, -1),
    "log_softmax": lambda lib, x: _f(lib).log_softmax(x, -1),
    "softmin": lambda lib, x: _f(lib).softmin(x, -1),
    "softplus": lambda lib, x: _f(lib).softplus(x),
    "hardshrink": lambda lib, x: _f(lib).hardshrink(x),
    "logsumexp": lambda lib, x: x.logsumexp(-1),
    "prod": lambda lib, x: x.prod(-1),
    "norm": lambda lib, x: x.norm(dim=-1),
    "std": lambda lib, x: x.std(-1),
    "layer_norm": lambda lib, x: _f(lib).layer_norm(x, (4,)),
    "exp": lambda lib, x: x.exp(),
    "pow 2.5": lambda lib, x: x.pow(2.5),
}
BINARY = {
    "hypot": lambda lib, a, b: lib.hypot(a, b),  # self / other when its gradient is asked, and the result
    "pow": lambda lib, a, b: a.pow(b),
    "div": lambda lib, a, b: a / b,
    "xlogy": lambda lib, a, b: lib.xlogy(a, b),
    "copysign": lambda lib, a, b: lib.copysign(a, b),
    "dist": lambda lib, a, b: lib.dist(a, b),
    "mse_loss": lambda lib, a, b: _f(lib).mse_loss(a, b),
    # with weight=, torch's functional multiplies the unreduced loss by the weight, whose mul saves it
    "huber_loss weight": lambda lib, a, b: _f(lib).huber_loss(a, lib.ones(3, 4, dtype=lib.float64) * 0.5,
                                                              weight=b, delta=0.3),
    "mse_loss weight": lambda lib, a, b: _f(lib).mse_loss(a, lib.ones(3, 4, dtype=lib.float64) * 0.5, weight=b),
    "kl_div": lambda lib, a, b: _f(lib).kl_div(a, b),
    "prelu": lambda lib, a, b: _f(lib).prelu(a, b[0, :1]),
}
PATTERNS = {1: [(True,)], 2: [(True, True), (True, False), (False, True)]}
CASES = [(name, fn, rg, w) for table in (UNARY, BINARY) for name, fn in table.items()
         for rg in PATTERNS[1 if table is UNARY else 2] for w in ["result", *range(len(rg))]]


def _data(lib, n):
    rng = np.random.default_rng(0)
    return [lib.tensor(rng.uniform(0.1, 0.9, (3, 4)), dtype=lib.float64) for _ in range(n)]


def _body(lib, fn, rg, target, leaves):
    ins = [t * 1 if g else t.clone() for t, g in zip(leaves, rg)]
    y = fn(lib, *ins)
    (y if target == "result" else ins[target]).mul_(2)
    y.sum().backward()


def _run(lib, fn, rg, target, compiled=False):
    leaves = [r.clone().requires_grad_(g) for r, g in zip(_data(lib, len(rg)), rg)]
    step = _body
    if compiled:
        step = flame.compile(lambda *xs: _body(lib, fn, rg, target, xs))
    try:
        step(*leaves) if compiled else step(lib, fn, rg, target, leaves)
    except RuntimeError as e:
        assert "modified by an inplace operation" in str(e)
        return None
    return [np.asarray(t.grad.tolist()) for t, g in zip(leaves, rg) if g]


def _check(want, got, rtol=1e-12):
    """torch's error (want None) or its gradients, from flame."""
    if want is None:
        assert got is None, "torch raises; flame gave gradients"
    else:
        assert got is not None, "flame raises where torch does not"
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=rtol, atol=1e-12)


@pytest.mark.parametrize("name,fn,rg,target", CASES,
                         ids=[f"{n}-{''.join('TF'[not g] for g in rg)}-{w}" for n, _, rg, w in CASES])
def test_eager(name, fn, rg, target):
    _check(_run(torch, fn, rg, target), _run(flame, fn, rg, target))


COMPILED = [c for c in CASES if c[0] in ("expm1", "tan", "erfinv", "softmax", "hypot", "pow", "mse_loss")]


@pytest.mark.parametrize("name,fn,rg,target", COMPILED,
                         ids=[f"{n}-{''.join('TF'[not g] for g in rg)}-{w}" for n, _, rg, w in COMPILED])
def test_compiled(name, fn, rg, target):
    _check(_run(torch, fn, rg, target), _run(flame, fn, rg, target, compiled=True))


def test_a_composite_inside_another_answers_for_the_outer_one():
    """sinh is computed from expm1, whose node saves its result; torch's sinh is one node saving its input."""
    for lib in (torch, flame):
        x = lib.tensor([0.3, 0.6], dtype=lib.float64, requires_grad=True)
        u = x * 1
        y = u.sinh()
        u.mul_(2)
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            y.sum().backward()
