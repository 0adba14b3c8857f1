"""BatchNorm inside activation checkpointing, against torch: torch's checkpoint recomputes the region in
the backward by running its forward again, so BatchNorm's running_mean, running_var and
num_batches_tracked move twice a training step; flame's agree over several SGD steps, reentrant or not,
through checkpoint_sequential, eagerly and compiled. Where torch runs no backward through the region
(no_grad, or a reentrant region whose inputs need no gradient) they move once, as in both."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import flame
from tests.training_idioms.common import assert_same_params, twin

NORMS = {
    "BatchNorm1d": lambda lib: lib.nn.BatchNorm1d(6),
    "BatchNorm1d cumulative": lambda lib: lib.nn.BatchNorm1d(6, momentum=None),
}


def _model(norm):
    return lambda lib: lib.nn.Sequential(
        lib.nn.Conv1d(3, 6, 3, padding=1), NORMS[norm](lib), lib.nn.ReLU(), lib.nn.Conv1d(6, 2, 1)
    )


def _checkpointed(lib, model, how):
    ck = torch.utils.checkpoint if lib is torch else flame.utils.checkpoint
    if how == "sequential":
        return lambda x: ck.checkpoint_sequential(model, 2, x, use_reentrant=False)
    reentrant = how == "reentrant"
    return lambda x: model[3](ck.checkpoint(model[:3], x, use_reentrant=reentrant))


def _train(lib, model, how, compiled, steps=3):
    opt = lib.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    forward = _checkpointed(lib, model, how)

    def step(x):
        opt.zero_grad()
        loss = forward(x).square().mean()
        loss.backward()
        opt.step()
        return loss

    if compiled:
        step = flame.compile(step)
    r = np.random.default_rng(4)
    for _ in range(steps):
        x = lib.tensor(r.standard_normal((5, 3, 7)))
        step(x.requires_grad_() if how == "reentrant" else x)


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("how", ["non-reentrant", "reentrant", "sequential"])
@pytest.mark.parametrize("norm", sorted(NORMS))
def test_statistics_move_twice_a_step_as_torch(norm, how, compiled):
    theirs, mine = twin(_model(norm))
    _train(torch, theirs, how, False)
    _train(flame, mine, how, compiled)
    assert_same_params(mine, theirs, what="parameters")
    for name, buf in theirs.named_buffers():
        np.testing.assert_allclose(dict(mine.named_buffers())[name].numpy(), buf.numpy(), rtol=1e-12, err_msg=name)


@pytest.mark.parametrize("case", ["no_grad", "reentrant without input gradients"])
def test_statistics_move_once_without_a_backward_through_the_region(case):
    theirs, mine = twin(_model("BatchNorm1d"))
    x = np.random.default_rng(2).standard_normal((5, 3, 7))
    for lib, model in ((torch, theirs), (flame, mine)):
        ck = torch.utils.checkpoint if lib is torch else flame.utils.checkpoint
        with warnings.catch_warnings(), lib.set_grad_enabled(case != "no_grad"):
            warnings.simplefilter("ignore")  # torch's "None of the inputs have requires_grad=True"
            ck.checkpoint(model[:3], lib.tensor(x), use_reentrant=case != "no_grad")
    assert int(mine[1].num_batches_tracked) == int(theirs[1].num_batches_tracked) == 1
    np.testing.assert_allclose(mine[1].running_mean.numpy(), theirs[1].running_mean.numpy(), rtol=1e-12)
