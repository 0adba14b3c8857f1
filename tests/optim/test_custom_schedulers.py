"""Schedulers users write themselves, subclassing LRScheduler or its older name _LRScheduler as torch
tutorials do: the same rates as the same class written against torch, step for step, and a compiled
training step that follows them."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import flame
from tests.training_idioms.common import mse_step


def _warmup_class(module, base: str):
    class Warmup(getattr(module, base)):
        def __init__(self, optimizer, warmup: int, last_epoch: int = -1):
            self.warmup = warmup
            super().__init__(optimizer, last_epoch)

        def get_lr(self):
            scale = min(1.0, (self.last_epoch + 1) / self.warmup) * 0.95 ** max(0, self.last_epoch - self.warmup)
            return [base_lr * scale for base_lr in self.base_lrs]

    return Warmup


@pytest.mark.parametrize("base", ["LRScheduler", "_LRScheduler"])
@pytest.mark.parametrize("compiled", [False, True])
def test_a_custom_scheduler_trains_as_torchs(base, compiled):
    torch.manual_seed(0)
    theirs = torch.nn.Linear(3, 2).double()
    mine = flame.nn.Linear(3, 2).double()
    mine.load_state_dict({k: flame.tensor(v.detach().numpy()) for k, v in theirs.state_dict().items()})
    topt = torch.optim.SGD(theirs.parameters(), lr=0.2, momentum=0.9)
    opt = flame.optim.SGD(mine.parameters(), lr=0.2, momentum=0.9)
    tsched = _warmup_class(torch.optim.lr_scheduler, base)(topt, warmup=4)
    sched = _warmup_class(flame.optim.lr_scheduler, base)(opt, warmup=4)
    assert isinstance(sched, flame.optim.lr_scheduler.LRScheduler)

    tstep, step = mse_step(torch, theirs, topt, False), mse_step(flame, mine, opt, compiled)
    r = np.random.default_rng(0)
    for i in range(10):
        x, y = r.standard_normal((5, 3)), r.standard_normal((5, 2))
        assert sched.get_last_lr() == tsched.get_last_lr(), i
        np.testing.assert_allclose(step(flame.tensor(x), flame.tensor(y)).numpy(),
                                   tstep(torch.tensor(x), torch.tensor(y)).detach().numpy(), rtol=1e-12)
        sched.step()
        tsched.step()
    np.testing.assert_allclose(mine.weight.numpy(), theirs.weight.detach().numpy(), rtol=1e-10)
