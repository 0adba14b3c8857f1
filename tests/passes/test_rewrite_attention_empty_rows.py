"""Hand-written attention whose mask takes every key out of some query's row: the softmax PyTorch computes
gives NaN there (exp(-inf - -inf)), and so does the scaled_dot_product_attention op rewrite_attention makes
of it, in the value and in the gradients (NaN in all of v's, and for an additive mask in q's row, all of k's
and the mask's row), while torch's SDPA itself gives 0 (tests/nn/test_attention.py)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import flame
import flame.nn.functional as F

B, H, L, S, E = 2, 2, 4, 3, 5
SDPA = "scaled_dot_product_attention"


def _masked(lib, kind, s, m):
    if kind == "additive":
        return s + m
    if kind == "where-keep":
        return lib.where(m, s, float("-inf"))
    if kind == "where-drop":
        return lib.where(~m, float("-inf"), s)
    return s.masked_fill(~m, float("-inf"))


def _attention(lib, kind, softmax):
    def f(q, k, v, m):
        return softmax(_masked(lib, kind, q @ k.transpose(-2, -1) * E**-0.5, m), -1) @ v
    return f


def _data(kind):
    rng = np.random.default_rng(3)
    q, k, v = (rng.standard_normal((B, H, n, E)) for n in (L, S, S))
    keep = rng.random((H, L, S)) < 0.7
    keep[..., 0] = True
    keep[1, 2] = False  # every key of query 2 in head 1 masked out
    mask = np.where(keep, 0.0, -np.inf) + rng.standard_normal((H, L, S)) if kind == "additive" else keep
    cot = rng.standard_normal((B, H, L, E))
    return q, k, v, mask, cot


def _torch(kind, q, k, v, mask, cot):
    ts = [torch.tensor(x, requires_grad=True) for x in (q, k, v)]
    m = torch.tensor(mask, requires_grad=kind == "additive")
    y = _attention(torch, kind, torch.softmax)(*ts, m)
    (y * torch.tensor(cot)).sum().backward()
    return [y.detach().numpy()] + [t.grad.numpy() for t in (*ts, *([m] if kind == "additive" else []))]


KINDS = ["additive", "where-keep", "where-drop", "masked_fill"]


@pytest.mark.parametrize("kind", KINDS)
def test_values_and_gradients_are_nan_where_the_softmax_is(kind):
    q, k, v, mask, cot = _data(kind)
    want = _torch(kind, q, k, v, mask, cot)
    assert np.isnan(want[0][:, 1, 2]).all() and not np.isnan(want[0][:, 0]).any()
    c = flame.tensor(cot)
    fn = _attention(flame, kind, F.softmax)
    n = 4 if kind == "additive" else 3

    def step(q, k, v, m):
        grads = flame.grad(lambda *a: (fn(*a) * c).sum(), tuple(range(n)))(q, k, v, m)
        return (fn(q, k, v, m), *grads)

    args = [flame.tensor(x) for x in (q, k, v, mask)]
    compiled = flame.compile(step)
    assert SDPA in [o.name for o in compiled.optimized(*args).ops]
    for got, w, what in zip(compiled(*args), want, ("out", "dq", "dk", "dv", "dmask")):
        np.testing.assert_allclose(got.numpy(), w, rtol=1e-10, atol=1e-10, err_msg=what)


@pytest.mark.parametrize("kind", KINDS)
def test_forward_only_is_nan_where_the_softmax_is(kind):
    q, k, v, mask, cot = _data(kind)
    fn = flame.compile(_attention(flame, kind, F.softmax))
    args = [flame.tensor(x) for x in (q, k, v, mask)]
    assert SDPA in [o.name for o in fn.optimized(*args).ops]
    np.testing.assert_allclose(fn(*args).numpy(), _torch(kind, q, k, v, mask, cot)[0], rtol=1e-10, atol=1e-10)

