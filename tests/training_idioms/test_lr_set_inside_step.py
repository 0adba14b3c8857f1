"""A learning rate handed to the compiled step as a tensor and set into the optimizer's groups there
(`for g in opt.param_groups: g['lr'] = lr`), as a warm-up written inside the step does: torch's values at
every call, one trace, and the groups hold the last rate after each call."""

from __future__ import annotations

import pytest
import torch

import flame
from tests.training_idioms.common import assert_same_params, batches, maybe_compile, to_lib, twin


def _mlp(lib):
    return lib.nn.Sequential(lib.nn.Linear(4, 6), lib.nn.Tanh(), lib.nn.Linear(6, 2))


def _optimizer(lib, kind, model):
    if kind == "sgd":
        return lib.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=0.01)
    return lib.optim.AdamW(model.parameters(), lr=0.1, weight_decay=0.1)


@pytest.mark.parametrize("kind", ["sgd", "adamw"])
@pytest.mark.parametrize("compiled", [False, True])
def test_a_rate_argument_set_into_the_groups_in_the_step(kind, compiled):
    theirs, mine = twin(_mlp)
    topt, opt = _optimizer(torch, kind, theirs), _optimizer(flame, kind, mine)

    def step_of(lib, model, optimizer):
        @maybe_compile(lib, compiled)
        def step(x, y, lr):
            for g in optimizer.param_groups:
                g["lr"] = lr
            loss = ((model(x) - y) ** 2).mean()
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            return loss

        return step

    tstep, step = step_of(torch, theirs, topt), step_of(flame, mine, opt)
    for i, (x, y) in enumerate(batches(5, (5, 4))):
        lr = 0.1 * min(1.0, (i + 1) / 3)
        tstep(*to_lib(torch, x, y), torch.tensor(lr, dtype=torch.float64))
        step(*to_lib(flame, x, y), flame.tensor(lr, dtype=flame.float64))
        assert float(opt.param_groups[0]["lr"]) == pytest.approx(lr, rel=1e-15)
    assert_same_params(mine, theirs, what=kind)
    if compiled:
        assert step.stats().traces == 1
