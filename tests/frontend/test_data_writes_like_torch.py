"""Gradients after a write through `.data` (frontend/data_writes.py) against torch in float64: torch's
backward reads the storage as it is then for what its node saved, through its own formula, so flame's
VJP must read what torch's node saves (expm1's and tan's result, sinh's, cosh's and erfinv's input, hypot's inputs
and result) and compute as torch's does. A write into the result and one into each input, eager and
compiled."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import flame

RNG = np.random.default_rng(0)
A, B, C = RNG.uniform(0.2, 0.9, (3, 4)), RNG.uniform(0.3, 0.8, (3, 4)), RNG.uniform(-1, 1, (3, 4))

OPS = {  # name: (operand count, the op on lib's tensors)
    "exp": (1, lambda lib, x: x.exp()),
    "expm1": (1, lambda lib, x: x.expm1()),
    "tan": (1, lambda lib, x: x.tan()),
    "sinh": (1, lambda lib, x: x.sinh()),
    "cosh": (1, lambda lib, x: x.cosh()),
    "erfinv": (1, lambda lib, x: x.erfinv()),
    "tanh": (1, lambda lib, x: x.tanh()),
    "sqrt": (1, lambda lib, x: x.sqrt()),
    "hypot": (2, lambda lib, x, y: lib.hypot(x, y)),
    "atan2": (2, lambda lib, x, y: lib.atan2(x, y)),
    "div": (2, lambda lib, x, y: x / y),
}
CASES = [(name, where) for name, (n, _) in OPS.items() for where in ("result", *range(n))]


def _body(lib, name, where):
    fn = OPS[name][1]

    def run(*xs):
        y = fn(lib, *xs)
        if where == "result":
            y.data.mul_(1.5)
        else:
            xs[where].data.add_(0.05)
        return (y * lib.tensor(C, dtype=lib.float64)).sum()

    return run


def _operands(lib, name):
    return [lib.tensor(a.copy(), dtype=lib.float64, requires_grad=True) for a in (A, B)[: OPS[name][0]]]


@pytest.mark.parametrize("how", ["eager", "compiled"])
@pytest.mark.parametrize(("name", "where"), CASES, ids=[f"{n}-{w}" for n, w in CASES])
def test_gradient_after_a_data_write_is_torchs(name, where, how):
    xs = _operands(torch, name)
    want = torch.autograd.grad(_body(torch, name, where)(*xs), xs)
    run = _body(flame, name, where)

    def grads(*xs):
        return flame.autograd.grad(run(*xs), list(xs))

    got = (grads if how == "eager" else flame.compile(grads))(*_operands(flame, name))
    for g, w in zip(got, want):
        np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-12, atol=1e-12)
