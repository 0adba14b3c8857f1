"""A model EMA kept the way detection codebases keep one (YOLOv5's ModelEMA): a deep copy of the model,
a Python update counter that ramps the decay up, and an in-place blend over the state_dict's floating
entries, updated at the end of each compiled training step. The averaged model equals torch's."""

from __future__ import annotations

import copy
import math
import warnings

import numpy as np
import pytest
import torch

import flame
from tests.training_idioms.common import assert_same_params, batches, maybe_compile, to_lib, twin


class _ModelEMA:
    def __init__(self, lib, model, decay=0.9, tau=3.0):
        self.lib, self.updates = lib, 0
        self.ema = copy.deepcopy(model).eval()
        self.decay = lambda x: decay * (1 - math.exp(-x / tau))
        for p in self.ema.parameters():
            p.requires_grad_(False)

    def update(self, model):
        with self.lib.no_grad():
            self.updates += 1
            d = self.decay(self.updates)
            msd = model.state_dict()
            for k, v in self.ema.state_dict().items():
                if v.dtype.is_floating_point:
                    v *= d
                    v += (1 - d) * msd[k].detach()


def _net(lib):
    return lib.nn.Sequential(lib.nn.Linear(4, 6), lib.nn.BatchNorm1d(6), lib.nn.ReLU(), lib.nn.Linear(6, 2))


@pytest.mark.parametrize("compiled", [False, True])
def test_model_ema_follows_torchs(compiled):
    theirs, mine = twin(_net)
    topt, opt = torch.optim.SGD(theirs.parameters(), lr=0.1), flame.optim.SGD(mine.parameters(), lr=0.1)
    tema, ema = _ModelEMA(torch, theirs), _ModelEMA(flame, mine)

    def step_of(lib, model, optimizer, averaged):
        @maybe_compile(lib, compiled)
        def step(x, y):
            loss = ((model(x) - y) ** 2).mean()
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            averaged.update(model)
            return loss

        return step

    tstep, step = step_of(torch, theirs, topt, tema), step_of(flame, mine, opt, ema)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", flame.RecompileWarning)  # the Python counter re-traces each call
        for x, y in batches(5, (6, 4)):
            tstep(*to_lib(torch, x, y))
            step(*to_lib(flame, x, y))
    assert ema.updates == tema.updates == 5
    assert_same_params(ema.ema, tema.ema, what="ema")
    x = batches(1, (3, 4), seed=1)[0][0]
    np.testing.assert_allclose(ema.ema(flame.tensor(x)).numpy(), tema.ema(torch.tensor(x)).numpy(), rtol=1e-10)
