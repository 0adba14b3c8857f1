"""nonzero, argwhere, count_nonzero, unique, bincount and histc against torch on the CPU (function and
method forms), their errors, and the TraceError of the value-dependent ones inside @flame.compile."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import flame
from flame.errors import ShapeError, TraceError


def _same(got, want):
    if isinstance(want, tuple):
        assert isinstance(got, tuple) and len(got) == len(want)
        for g, w in zip(got, want):
            _same(g, w)
        return
    g, w = got.numpy(), want.numpy()
    assert g.shape == w.shape, (g.shape, w.shape)
    np.testing.assert_array_equal(g, w)


X = np.array([[0, 2, 0, 5], [1, 0, 0, 3], [0, 0, 7, 0]], np.float32)


@pytest.mark.parametrize("x", [X, X[0], np.float32(3.0), np.float32(0.0), np.zeros((2, 0), np.float32)],
                         ids=["2d", "1d", "scalar", "zero", "empty"])
def test_nonzero_argwhere_count_nonzero(x):
    a, t = flame.tensor(x), torch.tensor(x)
    _same(flame.nonzero(a), torch.nonzero(t))
    _same(a.nonzero(as_tuple=True), t.nonzero(as_tuple=True))
    _same(flame.argwhere(a), torch.argwhere(t))
    _same(flame.count_nonzero(a), torch.count_nonzero(t))
    if a.ndim:
        _same(a.count_nonzero(0), t.count_nonzero(0))


def test_count_nonzero_works_compiled():
    f = flame.compile(lambda a: flame.count_nonzero(a, 1) + a.count_nonzero())
    _same(f(flame.tensor(X)), torch.count_nonzero(torch.tensor(X), 1) + torch.count_nonzero(torch.tensor(X)))


@pytest.mark.parametrize("dim", [None, 0, 1])
def test_unique(dim):
    x = np.array([[2, 1, 2], [2, 1, 2], [0, 5, 1]], np.int64)
    a, t = flame.tensor(x), torch.tensor(x)
    _same(flame.unique(a, dim=dim), torch.unique(t, dim=dim))
    _same(a.unique(return_inverse=True, return_counts=True, dim=dim),
          t.unique(return_inverse=True, return_counts=True, dim=dim))
    _same(flame.unique(a, sorted=False, return_counts=True, dim=dim), torch.unique(t, return_counts=True, dim=dim))
    f = flame.tensor(np.array([3.0, 1.0, 3.0, -2.0], np.float32))
    u = flame.unique(f)
    assert u.dtype == flame.float32
    np.testing.assert_array_equal(u.numpy(), [-2.0, 1.0, 3.0])


def test_bincount_and_histc():
    x = np.array([1, 3, 3, 0, 7], np.int64)
    w = np.array([0.5, 1.0, 2.0, 1.0, 0.25], np.float32)
    a, t = flame.tensor(x), torch.tensor(x)
    _same(flame.bincount(a), torch.bincount(t))
    _same(a.bincount(minlength=10), t.bincount(minlength=10))
    got = flame.bincount(a, flame.tensor(w))
    assert got.dtype == flame.float32
    _same(got, torch.bincount(t, torch.tensor(w)))
    _same(flame.bincount(flame.tensor(np.zeros(0, np.int64))), torch.bincount(torch.zeros(0, dtype=torch.int64)))
    v = np.array([1.0, 2.0, 1.0, 4.0, -3.0, 0.5, 9.0], np.float32)
    for kw in ({}, dict(bins=4, min=0, max=4), dict(bins=3), dict(bins=5, min=-3, max=9)):
        _same(flame.histc(flame.tensor(v), **kw), torch.histc(torch.tensor(v), **kw))
    _same(flame.tensor(v).histc(bins=2), torch.tensor(v).histc(bins=2))


def test_errors():
    with pytest.raises(ShapeError, match="bincount: expected a 1-D tensor of integers"):
        flame.bincount(flame.tensor([1.0, 2.0]))
    with pytest.raises(ValueError, match="bincount: the input must be non-negative"):
        flame.bincount(flame.tensor(np.array([1, -1])))
    with pytest.raises(ShapeError, match="bincount: weights \\[3\\] must have the input's shape \\[2\\]"):
        flame.bincount(flame.tensor(np.array([1, 2])), flame.ones(3))
    with pytest.raises(ShapeError, match="histc: expected a floating-point tensor"):
        flame.histc(flame.tensor(np.array([1, 2])))
    with pytest.raises(ValueError, match="min <= max"):
        flame.histc(flame.ones(3), bins=3, min=2, max=1)
    for name, call in (("nonzero", flame.nonzero), ("unique", flame.unique), ("histc", flame.histc),
                       ("bincount", lambda a: flame.bincount(a.long()))):
        with pytest.raises(TraceError, match=f"(?s){name}: its result's shape depends on the values.*"
                                             f"test_data_dependent"):
            flame.compile(call)(flame.ones(4))
