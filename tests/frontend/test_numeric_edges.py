"""Numeric edge cases agree with PyTorch, eager and compiled (issue 14 item 7)."""

import numpy as np
import pytest
import torch

import flame
import flame.nn.functional as F

INF = float("inf")
I32_MIN = np.iinfo(np.int32).min

CASES = {
    "logsumexp all -inf": (lambda x: F.logsumexp(x, 0), lambda x: torch.logsumexp(x, 0), [-INF, -INF]),
    "logsumexp with +inf": (lambda x: F.logsumexp(x, 0), lambda x: torch.logsumexp(x, 0), [INF, 1.0]),
    "log_softmax with -inf": (lambda x: x.log_softmax(0), lambda x: x.log_softmax(0), [-INF, 0.0]),
    "clone of -0.0": (lambda x: x.clone(), lambda x: x.clone(), [-0.0, 0.0]),
    "var of one element": (lambda x: x.var(), lambda x: x.var(), [3.0]),
    "argmin at INT_MIN": (lambda x: x.argmin(), lambda x: x.argmin(), np.array([I32_MIN, 0, 5], np.int32)),
    "min index at INT_MIN": (lambda x: x.min(0).indices, lambda x: x.min(0).indices,
                             np.array([4, I32_MIN], np.int32)),
    "int32 sum": (lambda x: x.sum(), lambda x: x.sum(), np.array([2**31 - 1, 1], np.int32)),
}


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("name", CASES)
def test_numeric_edge_matches_torch(name, compiled):
    f, g, data = CASES[name]
    data = np.asarray(data, np.float32) if isinstance(data, list) else data
    got = (flame.compile(f) if compiled else f)(flame.tensor(data))
    want = g(torch.from_numpy(data.copy()))
    assert got.numpy().dtype == want.numpy().dtype
    np.testing.assert_array_equal(got.numpy(), want.numpy())
    signed = ~np.isnan(want.numpy().astype(np.float64))  # a NaN's sign bit is not part of the result
    np.testing.assert_array_equal(np.signbit(got.numpy())[signed], np.signbit(want.numpy())[signed])


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("name", ["maximum", "minimum"])
def test_maximum_minimum_gradient_at_nan_and_ties(name, compiled):
    """torch's gradient: to the operand picked, half to each of a tie, and to both where a NaN leaves
    neither picked."""
    x, y = np.array([np.nan, 1, 2, 3, np.nan], np.float32), np.array([1, np.nan, 2, 1, np.nan], np.float32)
    c = np.array([1.0, 2.0, 3.0, 4.0, 5.0], np.float32)
    tx, ty = (torch.tensor(a, requires_grad=True) for a in (x, y))
    (getattr(torch, name)(tx, ty) * torch.tensor(c)).sum().backward()
    fx, fy = (flame.tensor(a, requires_grad=True) for a in (x, y))

    def step(a, b):
        out = getattr(flame, name)(a, b)
        (out * flame.tensor(c)).sum().backward()
        return out

    (flame.compile(step) if compiled else step)(fx, fy)
    np.testing.assert_array_equal(fx.grad.numpy(), tx.grad.numpy())
    np.testing.assert_array_equal(fy.grad.numpy(), ty.grad.numpy())
