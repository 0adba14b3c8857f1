"""A compiled model evaluated under no_grad before it trains (a sanity check or a validation pass at
step 0), then trained with backward() and the optimizer outside the compiled call: the parameters follow
torch's eager training, step by step (the no_grad trace made no result that requires grad; it no longer
serves the calls with gradients on, which trace again). Evaluation calls in between keep giving plain
values equal to torch's."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import flame
from tests.training_idioms.common import assert_same_params, batches, twin


def _mlp(lib):
    nn = lib.nn
    return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))


@pytest.mark.parametrize("how", ["flame.compile", "Module.compile"])
def test_no_grad_first_call_then_training_as_torch(how):
    theirs, mine = twin(_mlp)
    if how == "Module.compile":
        mine.compile()
        model = mine
    else:
        model = flame.compile(mine)
    scale = {lib: lib.nn.Parameter(lib.ones(1, dtype=lib.float64)) for lib in (torch, flame)}  # trained beside
    opts = {
        torch: torch.optim.SGD([*theirs.parameters(), scale[torch]], lr=0.1, momentum=0.9),
        flame: flame.optim.SGD([*mine.parameters(), scale[flame]], lr=0.1, momentum=0.9),
    }
    data = batches(5, (6, 4))
    for step, (x, y) in enumerate(data):
        for lib, m in ((torch, theirs), (flame, model)):
            with lib.no_grad(), warnings.catch_warnings():
                warnings.simplefilter("ignore", flame.RecompileWarning)
                seen = m(lib.tensor(x))  # evaluation before (and between) the steps
            assert not seen.requires_grad
            opts[lib].zero_grad()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", flame.RecompileWarning)
                out = m(lib.tensor(x))
            loss = ((out * scale[lib] - lib.tensor(y)) ** 2).mean()
            loss.backward()
            opts[lib].step()
        assert_same_params(mine, theirs, what=f"step {step}")
        np.testing.assert_allclose(scale[flame].detach().numpy(), scale[torch].detach().numpy(), rtol=1e-12)
