"""nn.CrossEntropyLoss's ignore_index and F.cross_entropy's default are torch's -100, so code that reads
it (`labels != criterion.ignore_index` to mask padding out of an accuracy or a token count) runs as with
torch; a few steps of training with ignored labels follow torch's parameters, eagerly and compiled."""

from __future__ import annotations

import inspect

import numpy as np
import pytest
import torch

import flame
from tests.nn_parity.common import rng, twin


def test_default_ignore_index_as_torch():
    assert flame.nn.CrossEntropyLoss().ignore_index == torch.nn.CrossEntropyLoss().ignore_index == -100
    default = lambda f: inspect.signature(f).parameters["ignore_index"].default
    assert default(flame.nn.functional.cross_entropy) == default(torch.nn.functional.cross_entropy)


@pytest.mark.parametrize("compiled", [False, True])
def test_masked_accuracy_and_training_with_ignored_labels(compiled):
    theirs, mine = twin(lambda lib: lib.nn.Linear(5, 4))
    crit = {torch: torch.nn.CrossEntropyLoss(), flame: flame.nn.CrossEntropyLoss()}
    opts = {torch: torch.optim.SGD(theirs.parameters(), lr=0.5), flame: flame.optim.SGD(mine.parameters(), lr=0.5)}

    def step(lib, model, x, y):
        opts[lib].zero_grad()
        logits = model(x)
        loss = crit[lib](logits, y)
        loss.backward()
        opts[lib].step()
        keep = y != crit[lib].ignore_index
        correct = ((logits.argmax(-1) == y) & keep).sum()
        return loss, correct, keep.sum()

    mine_step = flame.compile(lambda x, y: step(flame, mine, x, y)) if compiled else None
    r = rng(11)
    for _ in range(3):
        x, y = r.standard_normal((6, 5)), r.integers(0, 4, 6)
        y[r.random(6) < 0.4] = -100
        want = step(torch, theirs, torch.tensor(x), torch.tensor(y))
        fx, fy = flame.tensor(x), flame.tensor(y)
        got = mine_step(fx, fy) if compiled else step(flame, mine, fx, fy)
        np.testing.assert_allclose(got[0].item(), want[0].item(), rtol=1e-12)
        assert (got[1].item(), got[2].item()) == (want[1].item(), want[2].item())
        for (name, p), q in zip(mine.named_parameters(), theirs.parameters()):
            np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), rtol=1e-12, atol=1e-14, err_msg=name)
