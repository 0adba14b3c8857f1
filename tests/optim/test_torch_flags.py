"""torch.optim's keyword flags on every flame optimizer (maximize honoured against torch's; foreach,
fused and capturable accepted; differentiable=True refused), and torch.optim.SGD's state_dicts
(without a step counter, or empty before the first step) loading into flame's SGD."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import flame
import flame.nn as nn

NAMES = ["SGD", "Adam", "AdamW", "Adamax", "NAdam", "RAdam", "RMSprop", "Adagrad", "Adadelta", "ASGD", "Rprop",
         "Adafactor"]


@pytest.mark.parametrize("mode", ["eager", "compiled"])
@pytest.mark.parametrize("name", NAMES)
def test_maximize_matches_pytorch(name, mode):
    kw = dict(lr=0.05, maximize=True, foreach=False)
    if name == "SGD":
        kw["momentum"] = 0.9
    a = np.random.default_rng(3).standard_normal(5).astype(np.float32)
    p, tp = nn.Parameter(flame.tensor(a.copy())), torch.nn.Parameter(torch.tensor(a.copy()))
    opt, topt = getattr(flame.optim, name)([p], **kw), getattr(torch.optim, name)([tp], **kw)
    step = flame.compile(opt.step) if mode == "compiled" else opt.step
    for k in range(4):
        g = np.random.default_rng(k).standard_normal(5).astype(np.float32)
        p.grad, tp.grad = flame.tensor(g), torch.tensor(g)
        step()
        topt.step()
    np.testing.assert_allclose(p.numpy(), tp.detach().numpy(), rtol=1e-5, atol=1e-6)
    assert opt.param_groups[0]["maximize"] is True


def test_flags_are_accepted_kept_and_checked():
    p = nn.Parameter(flame.ones(2))
    opt = flame.optim.AdamW([p], fused=True, foreach=False, capturable=True)
    assert {k: opt.param_groups[0][k] for k in ("fused", "foreach", "capturable", "differentiable", "maximize")} == \
        {"fused": True, "foreach": False, "capturable": True, "differentiable": False, "maximize": False}
    for name in ("Adam", "AdamW", "SGD", "Adagrad"):  # torch: "`fused` and `foreach` cannot be `True` together."
        with pytest.raises(RuntimeError, match="`fused` and `foreach` cannot be `True` together"):
            getattr(torch.optim, name)([torch.nn.Parameter(torch.ones(2))], lr=0.1, fused=True, foreach=True)
        with pytest.raises(RuntimeError, match=f"{name}: `fused` and `foreach` cannot be `True` together"):
            getattr(flame.optim, name)([p], lr=0.1, fused=True, foreach=True)
    with pytest.raises(NotImplementedError, match="RMSprop: differentiable=True"):
        flame.optim.RMSprop([p], differentiable=True)
    with pytest.raises(TypeError, match="SGD\\(\\) got an unexpected keyword argument 'nesterovv'"):
        flame.optim.SGD([p], nesterovv=True)
    with pytest.raises(TypeError, match="Rprop\\(\\) got an unexpected keyword argument 'weight_decay'"):
        flame.optim.Rprop([p], weight_decay=0.1)


@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_a_pytorch_sgd_state_dict_loads(momentum):
    """Before any step (torch keeps no state) and after two (a momentum_buffer, no step counter): the
    loaded flame SGD then steps as torch's."""
    for steps in (0, 2):
        a = np.random.default_rng(1).standard_normal(4).astype(np.float32)
        tp = torch.nn.Parameter(torch.tensor(a))
        topt = torch.optim.SGD([tp], lr=0.1, momentum=momentum, nesterov=momentum > 0)
        for k in range(steps):
            tp.grad = torch.tensor(np.random.default_rng(10 + k).standard_normal(4).astype(np.float32))
            topt.step()
        p = nn.Parameter(flame.tensor(tp.detach().numpy().copy()))
        opt = flame.optim.SGD([p], lr=0.1, momentum=momentum, nesterov=momentum > 0)
        sd = topt.state_dict()
        opt.load_state_dict({"state": {i: {k: v.numpy() for k, v in st.items()} for i, st in sd["state"].items()},
                             "param_groups": sd["param_groups"]})
        for k in range(2):
            g = np.random.default_rng(20 + k).standard_normal(4).astype(np.float32)
            p.grad, tp.grad = flame.tensor(g), torch.tensor(g)
            opt.step()
            topt.step()
        np.testing.assert_allclose(p.numpy(), tp.detach().numpy(), rtol=1e-6, atol=1e-7)
    assert set(opt.state[p]) == (set() if momentum == 0 else {"momentum_buffer", "step"})


def test_sgd_momentum_set_after_steps_starts_its_buffer_from_the_gradient():
    """As torch.optim.SGD, a momentum set after steps without one starts the buffer from the gradient."""
    p, tp = nn.Parameter(flame.ones(2, dtype=flame.float64)), torch.nn.Parameter(torch.ones(2, dtype=torch.float64))
    opt, topt = flame.optim.SGD([p], lr=0.1), torch.optim.SGD([tp], lr=0.1)
    for k in range(4):
        if k == 2:
            opt.param_groups[0]["momentum"] = topt.param_groups[0]["momentum"] = 0.9
        g = np.array([1.0 + k, -0.5 * k])
        p.grad, tp.grad = flame.tensor(g), torch.tensor(g)
        opt.step()
        topt.step()
        np.testing.assert_allclose(p.numpy(), tp.detach().numpy(), rtol=1e-14)
