"""nn.RNN, nn.LSTM and nn.GRU against PyTorch's on the arguments torch's checks or takes in more than one
form: the sizes' types and ranges (the same exception types) and LSTM's (h_0, c_0) given as a list
(the same outputs and gradients), eagerly and compiled."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import flame
import flame.nn as nn


def _raised(make):
    try:
        make()
    except Exception as e:  # noqa: BLE001 - the oracle's exception type is what is compared
        return e
    return None


@pytest.mark.parametrize("cls", ["RNN", "LSTM", "GRU"])
@pytest.mark.parametrize("args", [(0, 3), (-1, 3), (2.0, 3), (3, 2.0), (3, 0), (3, 3, 0)])
def test_size_arguments_raise_as_torch(cls, args):
    theirs = _raised(lambda: getattr(torch.nn, cls)(*args))
    assert theirs is not None
    with pytest.raises(type(theirs)) as mine:
        getattr(nn, cls)(*args)
    assert str(theirs) in str(mine.value)


@pytest.mark.parametrize("mode", ["eager", "compiled"])
@pytest.mark.parametrize("unbatched", [False, True])
def test_lstm_takes_its_initial_state_as_a_list(mode, unbatched):
    torch.manual_seed(0)
    theirs = torch.nn.LSTM(3, 4, num_layers=2)
    mine = nn.LSTM(3, 4, num_layers=2)
    mine.load_state_dict({k: flame.tensor(v.numpy()) for k, v in theirs.state_dict().items()})
    rng = np.random.default_rng(0)
    shapes = [(5, 3), (2, 4), (2, 4)] if unbatched else [(5, 2, 3), (2, 2, 4), (2, 2, 4)]
    arrays = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    ts = [torch.tensor(a, requires_grad=True) for a in arrays]
    out, (h, c) = theirs(ts[0], [ts[1], ts[2]])
    (out.sum() + 2 * h.sum() + 3 * c.sum()).backward()

    def body(x, h0, c0):
        y, (hn, cn) = mine(x, [h0, c0])
        (y.sum() + 2 * hn.sum() + 3 * cn.sum()).backward()
        return y, hn, cn

    xs = [flame.tensor(a, requires_grad=True) for a in arrays]
    got = body(*xs) if mode == "eager" else flame.compile(body)(*xs)
    for g, t in zip(got, (out, h, c)):
        np.testing.assert_allclose(g.numpy(), t.detach().numpy(), rtol=1e-5, atol=1e-5)
    for x, t in zip(xs, ts):
        np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), rtol=1e-5, atol=1e-5)
