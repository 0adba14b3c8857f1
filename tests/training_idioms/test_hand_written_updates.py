"""Parameter updates written by hand, as tutorials write plain SGD: `p.data = p.data - lr * p.grad`,
`p.data.sub_(...)`, `p.add_(...)` under no_grad, `p.copy_(...)`: the same parameters as torch after
several steps, eagerly and inside @flame.compile."""

from __future__ import annotations

import pytest
import torch

import flame
from tests.training_idioms.common import assert_same_params, batches, maybe_compile, to_lib, twin


def _mlp(lib):
    return lib.nn.Sequential(lib.nn.Linear(4, 6), lib.nn.Tanh(), lib.nn.Linear(6, 2))


def _data_assigned(lib, p, lr):
    p.data = p.data - lr * p.grad


def _data_written(lib, p, lr):
    p.data.sub_(lr * p.grad.data)


def _added(lib, p, lr):
    with lib.no_grad():
        p.add_(p.grad, alpha=-lr)


def _copied(lib, p, lr):
    with lib.no_grad():
        p.copy_(p - lr * p.grad)


@pytest.mark.parametrize("update", [_data_assigned, _data_written, _added, _copied])
@pytest.mark.parametrize("compiled", [False, True])
def test_hand_written_sgd_trains_as_torchs(update, compiled):
    theirs, mine = twin(_mlp)

    def step_of(lib, model):
        @maybe_compile(lib, compiled)
        def step(x, y, lr):
            loss = ((model(x) - y) ** 2).mean()
            loss.backward()
            for p in model.parameters():
                update(lib, p, lr)
                p.grad = None
            return loss

        return step

    tstep, step = step_of(torch, theirs), step_of(flame, mine)
    for x, y in batches(4, (5, 4)):
        tstep(*to_lib(torch, x, y), 0.1)
        step(*to_lib(flame, x, y), flame.tensor(0.1, dtype=flame.float64))
    assert_same_params(mine, theirs, what=update.__name__)


def test_data_of_another_shape_inside_a_compiled_step_says_so():
    p = flame.nn.Parameter(flame.zeros(3))

    @flame.compile
    def step():
        p.data = flame.zeros(2)

    with pytest.raises(flame.TraceError, match=r"\.data takes a tensor of its own shape and dtype only"):
        step()

