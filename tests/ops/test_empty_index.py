"""Indexing with no element against torch: advanced indexing with an empty index, or a non-empty index
into a zero-size dim (shapes, values, gradients), and scatter / scatter_add / index_put / x[idx] = v
with an empty index, whose src keeps a gradient path (zeros of its shape, present as in torch, not
missing), eagerly and inside @flame.compile."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import flame
from tests.ops.test_everyday_ops import MODES, check, randn

EMPTY = np.zeros((0,), np.int64)

# (name, fn(t, i) the same for flame and torch, x's shape, the index)
READS = [
    ("rows of an empty tensor", lambda t, i: t[i], (0, 3), EMPTY),
    ("no row of a tensor", lambda t, i: t[i], (4, 3), EMPTY),
    ("no column of a zero-width tensor", lambda t, i: t[:, i], (4, 0), EMPTY),
    ("columns of a zero-height tensor", lambda t, i: t[:, i], (0, 3), np.array([0, -1])),
    ("two empty indices", lambda t, i: t[i, i], (4, 3), EMPTY),
    ("two empty indices apart", lambda t, i: t[i, :, i], (2, 0, 3), EMPTY),
    ("an empty 2-d index", lambda t, i: t[i], (4, 3), np.zeros((2, 0), np.int64)),
    ("an empty index and an int", lambda t, i: t[i, 1], (4, 3), EMPTY),
    ("an empty index after an ellipsis", lambda t, i: t[..., i], (2, 4, 3), EMPTY),
    ("an empty index broadcast with one", lambda t, i: t[i.reshape(0, 1), i[:0] + 1], (4, 3), EMPTY),
    ("an empty slice and an index", lambda t, i: t[1:1, i], (4, 3), np.array([0, 2])),
    ("a 2-d index into zero rows", lambda t, i: t[:, i, None], (0, 3), np.array([[0], [1]])),
    ("an empty list", lambda t, i: t[[]], (4, 3), EMPTY),
    ("empty lists on two dims", lambda t, i: t[[], []], (4, 3), EMPTY),
]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("k", range(len(READS)), ids=[r[0] for r in READS])
def test_advanced_index_with_no_element(k, mode):
    _, fn, shape, idx = READS[k]
    check(fn, fn, randn(*shape), idx, mode=mode)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("k", range(len(READS)), ids=[r[0] for r in READS])
def test_empty_read_alone_calls_backward(k, mode):
    """A loss over the empty result alone has x in its graph: x.grad is zeros of x's shape, as in torch."""
    _, fn, shape, idx = READS[k]
    tx = torch.tensor(randn(*shape), requires_grad=True)
    fn(tx, torch.tensor(idx)).sum().backward()
    x = flame.tensor(randn(*shape), requires_grad=True)

    def body(t, i):
        fn(t, i).sum().backward()
        return t * 1

    body(x, flame.tensor(idx)) if mode == "eager" else flame.compile(body)(x, flame.tensor(idx))
    assert x.grad is not None
    np.testing.assert_array_equal(x.grad.numpy(), tx.grad.numpy())


def _writes(lib):
    """(name, fn(x, i, src)) writing src into x at no position (i is empty)."""

    def setitem(x, i, v):
        y = x * 1
        y[i] = v
        return y

    return [
        ("scatter", lambda x, i, s: x.scatter(0, i.reshape(0, 1).expand(0, 3), s)),
        ("scatter_add", lambda x, i, s: x.scatter_add(0, i.reshape(0, 1).expand(0, 3), s)),
        ("index_put", lambda x, i, s: x.index_put((i,), s)),
        ("index_put accumulate", lambda x, i, s: x.index_put((i,), s, accumulate=True)),
        ("index_add", lambda x, i, s: x.index_add(0, i, s)),
        ("index_copy", lambda x, i, s: x.index_copy(0, i, s)),
        ("setitem", setitem),
    ]


SRC = {"index_put": [(0, 3), (3,), (1, 3)], "index_put accumulate": [(0, 3), (1, 3)], "setitem": [(0, 3), (3,)]}


def _write_cases():
    return [(k, s) for k, (name, _) in enumerate(_writes(torch)) for s in SRC.get(name, [(0, 3)])]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("k,src", _write_cases(), ids=[f"{_writes(torch)[k][0]}-{s}" for k, s in _write_cases()])
def test_write_with_an_empty_index_keeps_src_in_the_graph(k, src, mode):
    """x unchanged (-0.0, inf and NaN too); x's gradient passes through, src's is zeros of its shape."""
    name, tfn = _writes(torch)[k]
    _, fn = _writes(flame)[k]
    x0 = randn(4, 3)
    x0[0] = [-0.0, np.inf, np.nan]
    s0, ct = randn(*src, key=1), randn(4, 3, key=2)
    tx, ts = torch.tensor(x0, requires_grad=True), torch.tensor(s0, requires_grad=True)
    want = tfn(tx, torch.tensor(EMPTY), ts)
    (want * torch.tensor(ct)).sum().backward()
    x, s = flame.tensor(x0, requires_grad=True), flame.tensor(s0, requires_grad=True)

    def body(x, i, s):
        y = fn(x, i, s)
        (y * flame.tensor(ct)).sum().backward()
        return y

    got = body(x, flame.tensor(EMPTY), s) if mode == "eager" else flame.compile(body)(x, flame.tensor(EMPTY), s)
    np.testing.assert_array_equal(got.numpy(), want.detach().numpy())
    np.testing.assert_array_equal(np.signbit(got.numpy()), np.signbit(want.detach().numpy()))
    np.testing.assert_array_equal(x.grad.numpy(), tx.grad.numpy())
    assert ts.grad is not None and s.grad is not None, f"{name}: src has no gradient"
    assert s.grad.shape == tuple(ts.grad.shape)
    np.testing.assert_array_equal(s.grad.numpy(), ts.grad.numpy())
