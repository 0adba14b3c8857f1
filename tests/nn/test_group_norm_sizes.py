"""F.group_norm and nn.GroupNorm refuse, in training and in evaluation, an input whose groups hold one
value (torch's _verify_batch_size of [N * C // groups, groups, *positions]: a batch of one sample
without positions, each channel its own group, as a DataLoader's last batch may be); torch.group_norm
checks nothing. Against torch, eagerly and inside @flame.compile."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import flame

CASES = [  # groups, input shape
    (3, (1, 3)),
    (3, (1, 3, 1)),
    (4, (1, 4, 1, 1)),
    (3, (2, 3)),  # two samples: torch's product is 2 (each group still holds one value a sample)
    (1, (1, 3)),
    (3, (1, 3, 2)),
    (2, (1, 4)),
]


def _outcome(lib, groups, shape, training, how, compiled):
    x = lib.tensor(np.linspace(-1.0, 1.0, int(np.prod(shape))).reshape(shape))
    module = lib.nn.GroupNorm(groups, shape[1]).double().train(training)
    calls = {
        "module": lambda x: module(x),
        "functional": lambda x: lib.nn.functional.group_norm(x, groups, module.weight, module.bias),
        "torch.group_norm": lambda x: lib.group_norm(x, groups, module.weight, module.bias),
    }
    f = flame.compile(calls[how]) if compiled and lib is flame else calls[how]
    try:
        y = f(x)
    except ValueError as e:
        return "ValueError", str(e)
    return y.detach().numpy() if lib is torch else y.numpy(), None


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("how", ["module", "functional", "torch.group_norm"])
@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
@pytest.mark.parametrize("groups,shape", CASES, ids=str)
def test_groups_of_one_value_are_refused_as_torch(groups, shape, training, how, compiled):
    want, why = _outcome(torch, groups, shape, training, how, False)
    got, flame_why = _outcome(flame, groups, shape, training, how, compiled)
    if isinstance(want, str):
        assert got == "ValueError", f"torch raised ({why}), flame gave {got}"
        assert "more than 1 value per channel" in flame_why
        return
    assert not isinstance(got, str), flame_why
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
