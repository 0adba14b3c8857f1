"""Indexing with no element against torch: advanced indexing with an empty index, or a non-empty index
into a zero-size dim (shapes, values, gradients), eagerly and inside @flame.compile."""

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
