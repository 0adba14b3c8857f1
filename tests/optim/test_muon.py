"""flame.optim.Muon against torch.optim.Muon, in f64 parameters: four steps of a two-layer model (a
wide and a tall matrix) give torch's parameters, eagerly and inside @flame.compile, with Nesterov or
plain momentum, both learning-rate adjustments, and weight decay; the state is torch's momentum_buffer;
the constructor's checks raise torch's ValueErrors with its messages."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import flame

R = np.random.default_rng(0)
W = [R.standard_normal((6, 4)), R.standard_normal((3, 5))]
X = R.standard_normal((8, 6))


def _train(lib, compiled: bool, **kw):
    ps = [lib.tensor(w, requires_grad=True) for w in W]
    opt = lib.optim.Muon(ps, lr=0.05, **kw)
    x = lib.tensor(X)

    def step():
        opt.zero_grad()
        y = (x @ ps[0]).tanh()[:, :3] @ ps[1]
        (y * y).sum().backward()
        opt.step()

    if compiled:
        step = flame.compile(step)
    for _ in range(4):
        step()
    bufs = [opt.state[p]["momentum_buffer"] for p in ps]
    as_np = (lambda t: t.detach().numpy()) if lib is torch else (lambda t: t.numpy())
    return [as_np(p) for p in ps] + [as_np(b) for b in bufs]


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("kw", [{}, {"nesterov": False}, {"adjust_lr_fn": "match_rms_adamw", "weight_decay": 0.0},
                                {"momentum": 0.5, "ns_steps": 3, "adjust_lr_fn": "original"}], ids=str)
def test_steps_as_torch(kw, compiled):
    want, got = _train(torch, False, **kw), _train(flame, compiled, **kw)
    assert not np.allclose(want[0], W[0])
    for a, b in zip(want, got):
        np.testing.assert_allclose(b, a, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("bad", [
    {"momentum": -0.1}, {"weight_decay": -1.0}, {"lr": -1.0}, {"adjust_lr_fn": "other"}, {"shape": (3,)},
], ids=str)
def test_constructor_errors_as_torch(bad):
    bad = dict(bad)
    shape = bad.pop("shape", (3, 2))
    messages = []
    for lib in (torch, flame):
        with pytest.raises(ValueError) as e:
            lib.optim.Muon([lib.zeros(*shape, requires_grad=True)], **bad)
        messages.append(str(e.value).split("\n")[0].replace("torch.Size(", "").replace(")", ""))
    assert messages[1] == messages[0]
