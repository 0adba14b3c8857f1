"""Optimizers given model.named_parameters(), as torch.optim takes them (torch 2.6 and later): the
names kept in each group's 'param_names' and in state_dict(), the same training as torch's (eagerly and
compiled), a torch state_dict with names loaded, and torch's errors for groups half named."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

import flame
from tests.training_idioms.common import assert_same_params, batches, mse_step, to_lib, twin


def _mlp(lib):
    return lib.nn.Sequential(lib.nn.Linear(4, 6), lib.nn.Tanh(), lib.nn.Linear(6, 2))


def _groups(model):
    named = list(model.named_parameters())
    return [{"params": [(n, p) for n, p in named if n.endswith("weight")], "weight_decay": 0.1},
            {"params": [(n, p) for n, p in named if n.endswith("bias")], "weight_decay": 0.0}]


@pytest.mark.parametrize("compiled", [False, True])
def test_named_parameters_train_as_torchs(compiled):
    theirs, mine = twin(_mlp)
    topt, opt = torch.optim.AdamW(_groups(theirs), lr=0.05), flame.optim.AdamW(_groups(mine), lr=0.05)
    assert [g["param_names"] for g in opt.param_groups] == [g["param_names"] for g in topt.param_groups]

    tstep, step = mse_step(torch, theirs, topt, compiled), mse_step(flame, mine, opt, compiled)
    data = batches(6, (5, 4))
    for x, y in data[:3]:
        tstep(*to_lib(torch, x, y))
        step(*to_lib(flame, x, y))
    saved = topt.state_dict()
    assert [g["param_names"] for g in opt.state_dict()["param_groups"]] == [g["param_names"] for g in
                                                                            saved["param_groups"]]
    mine_saved = {"state": {k: {n: flame.tensor(v.numpy()) for n, v in st.items()} for k, st in saved["state"].items()},
                  "param_groups": copy.deepcopy(saved["param_groups"])}
    opt.load_state_dict(mine_saved)
    for x, y in data[3:]:
        tstep(*to_lib(torch, x, y))
        step(*to_lib(flame, x, y))
    assert_same_params(mine, theirs, what="named")
    np.testing.assert_allclose(opt.state[mine[0].weight]["exp_avg"].numpy(),
                               topt.state[theirs[0].weight]["exp_avg"].numpy(), rtol=1e-10)


@pytest.mark.parametrize("lib", [torch, flame])
def test_half_named_groups_raise_as_torchs(lib):
    m = lib.nn.Linear(2, 1)
    with pytest.raises(ValueError, match="all optimizer params should be with/without names"):
        lib.optim.SGD([("weight", m.weight), m.bias], lr=0.1)
    opt = lib.optim.SGD(m.named_parameters(), lr=0.1)
    with pytest.raises(ValueError, match="cannot add param group without names to the optimizer"):
        opt.add_param_group({"params": [lib.ones(1, requires_grad=True)]})
