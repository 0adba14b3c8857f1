"""NumPy's keyword names `axis` / `keepdims`, which PyTorch's argument parser takes for `dim` / `keepdim`
in every torch function and Tensor method (`torch.cumprod(alphas, axis=0)` in diffusion schedules,
`x.mean(axis=1, keepdims=True)`): the same values and gradients as torch, eager and compiled."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import flame

CASES = [
    ("x.sum(axis=0)", lambda lib, x: x.sum(axis=0)),
    ("lib.sum(x, axis=1, keepdims=True)", lambda lib, x: lib.sum(x, axis=1, keepdims=True)),
    ("x.mean(axis=1, keepdims=True)", lambda lib, x: x.mean(axis=1, keepdims=True)),
    ("lib.cumprod(x, axis=0)", lambda lib, x: lib.cumprod(x, axis=0)),
    ("x.cumsum(axis=1)", lambda lib, x: x.cumsum(axis=1)),
    ("x.softmax(axis=0)", lambda lib, x: x.softmax(axis=0)),
    ("lib.softmax(x, axis=1)", lambda lib, x: lib.softmax(x, axis=1)),
    ("lib.log_softmax(x, axis=1)", lambda lib, x: lib.log_softmax(x, axis=1)),
    ("lib.max(x, axis=0).values", lambda lib, x: lib.max(x, axis=0).values),
    ("x.amax(axis=1)", lambda lib, x: x.amax(axis=1)),
    ("x.logsumexp(axis=0)", lambda lib, x: x.logsumexp(axis=0)),
    ("x.std(axis=0)", lambda lib, x: x.std(axis=0)),
    ("x.var(axis=1, keepdims=True)", lambda lib, x: x.var(axis=1, keepdims=True)),
    ("x.prod(axis=1)", lambda lib, x: x.prod(axis=1)),
    ("lib.cat([x, x], axis=0)", lambda lib, x: lib.cat([x, x], axis=0)),
    ("lib.stack([x, x], axis=1)", lambda lib, x: lib.stack([x, x], axis=1)),
    ("x.unsqueeze(axis=0)", lambda lib, x: x.unsqueeze(axis=0)),
]


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("name,fn", CASES, ids=[c[0] for c in CASES])
def test_axis_and_keepdims_as_torch(name, fn, compiled):
    a = np.random.default_rng(0).uniform(0.5, 1.5, (3, 4))
    tx = torch.tensor(a, requires_grad=True)
    want = fn(torch, tx)
    want.sum().backward()

    def f(x):
        out = fn(flame, x)
        out.sum().backward()
        return out

    x = flame.tensor(a, requires_grad=True)
    got = (flame.compile(f) if compiled else f)(x)
    assert tuple(got.shape) == tuple(want.shape)
    np.testing.assert_allclose(got.numpy(), want.detach().numpy(), rtol=1e-12)
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-12, atol=1e-15)  # softmax: sums to 0


def test_both_spellings_of_one_argument_is_a_type_error_as_torch():
    with pytest.raises(TypeError):
        torch.ones(2).sum(dim=0, axis=0)
    with pytest.raises(TypeError, match="multiple values for argument 'dim'"):
        flame.ones(2).sum(dim=0, axis=0)
    with pytest.raises(TypeError):
        flame.ones(2).flip(axis=0)  # flip's argument is `dims`, as torch's (which refuses axis too)
    with pytest.raises(TypeError):
        torch.ones(2).flip(axis=0)
