"""An optimizer's eager step computes what its compiled step computes: hyperparameters are read in the
update's compute dtype either way, so Adam's 1 - beta2 and its bias correction 1 - beta2 ** step round
alike and cancel (eagerly the first was a double and the second an f32 power: the effective rate was off
by ~1e-5 for the first thousands of steps, 20 times torch's distance from compiled flame)."""

import numpy as np
import pytest
import torch

import flame

STEPS = 60


def _torch_run(name, kw):
    p = torch.nn.Parameter(torch.ones(3))
    opt = getattr(torch.optim, name)([p], **kw)
    out = []
    for _ in range(STEPS):
        opt.zero_grad()
        (p * p * torch.tensor([1.0, 2.0, 3.0])).sum().backward()
        opt.step()
        out.append(p.detach().numpy().copy())
    return np.array(out)


def _flame_run(name, kw, compiled):
    p = flame.nn.Parameter(flame.ones(3))
    opt = getattr(flame.optim, name)([p], **kw)

    def step():
        opt.zero_grad()
        (p * p * flame.tensor([1.0, 2.0, 3.0])).sum().backward()
        opt.step()

    run = flame.compile(step) if compiled else step
    out = []
    for _ in range(STEPS):
        run()
        out.append(p.detach().numpy().copy())
    return np.array(out)


@pytest.mark.parametrize("name, kw", [("Adam", {"lr": 0.01}), ("AdamW", {"lr": 0.01, "betas": (0.8, 0.997)}),
                                      ("Adam", {"lr": 0.01, "amsgrad": True})])
def test_eager_steps_equal_compiled_steps_and_follow_torch(name, kw):
    eager, compiled = _flame_run(name, kw, False), _flame_run(name, kw, True)
    np.testing.assert_array_equal(eager, compiled)
    np.testing.assert_allclose(eager, _torch_run(name, kw), rtol=0, atol=4e-7)
