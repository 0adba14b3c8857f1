"""cross_entropy with labels outside [0, C): ignore_index (-100) as PyTorch, others raise (issue 14 item 6)."""

import numpy as np
import pytest
import torch

import flame
import flame.nn.functional as F

LOGITS = np.array([[0.5, -1.0, 2.0], [1.0, 0.0, -0.5], [0.1, 0.2, 0.3]], np.float32)


def _flame(target, reduction, compiled, ignore_index=None):
    x = flame.tensor(LOGITS, requires_grad=True)
    t = flame.tensor(np.array(target, np.int64))

    def loss_of(x, t):
        loss = F.cross_entropy(x, t, reduction=reduction, ignore_index=ignore_index)
        return loss if reduction != "none" else loss.sum()

    if compiled:
        @flame.compile
        def step(x, t):
            loss = loss_of(x, t)
            loss.backward()
            return loss

        loss = step(x, t)
    else:
        loss = loss_of(x, t)
        loss.backward()
    return loss.item(), x.grad.numpy()


def _torch(target, reduction):
    x = torch.tensor(LOGITS, requires_grad=True)
    loss = torch.nn.functional.cross_entropy(x, torch.tensor(target), reduction=reduction)
    loss = loss if reduction != "none" else loss.sum()
    loss.backward()
    return loss.item(), x.grad.numpy()


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_ignore_index_matches_torch(reduction, compiled):
    target = [-100, 0, 2]
    # traced labels are unknown: the compiled step masks them when ignore_index is given
    got = _flame(target, reduction, compiled, -100 if compiled else None)
    want = _torch(target, reduction)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("target", [[-1, 0, 1], [0, 3, 1]])
def test_out_of_range_label_raises_eagerly(target):
    x = flame.tensor(LOGITS, requires_grad=True)
    with pytest.raises(IndexError, match="out of bounds"):
        F.cross_entropy(x, flame.tensor(np.array(target, np.int64)))


def test_out_of_range_label_gives_nan_when_traced():
    loss, _ = _flame([-1, 0, 1], "mean", compiled=True, ignore_index=-100)
    assert np.isnan(loss)
