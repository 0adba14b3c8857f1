"""A model changed between compiled steps trains as torch's: a layer replaced, appended or deleted, a
function held in an attribute swapped, a forward patched on the instance, a ModuleList grown, and a
parameter put into an optimizer's group by hand. Each change re-traces the step (a flame.RecompileWarning
names it) instead of replaying the program of the old model."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import flame
from tests.training_idioms.common import assert_same_params, batches, ce_step, numpy_of, to_lib, twin


class _Net:
    """Built from lib: two Linears with an activation module and an activation function between."""

    @staticmethod
    def build(lib):
        class Net(lib.nn.Module):
            def __init__(self):
                super().__init__()
                self.fc1, self.act, self.fc2 = lib.nn.Linear(5, 7), lib.nn.Tanh(), lib.nn.Linear(7, 3)
                self.fn = lib.nn.functional.softplus
                self.extra = lib.nn.ModuleList()

            def forward(self, x):
                h = self.fn(self.act(self.fc1(x)))
                for m in self.extra:
                    h = m(h)
                return self.fc2(h)

        return Net()


def _swap_act(lib, m):
    m.act = lib.nn.ReLU()


def _swap_fn(lib, m):
    m.fn = lib.nn.functional.sigmoid


def _grow_list(lib, m):
    m.extra.append(lib.nn.Hardtanh(-0.5, 0.5))


def _patch_forward(lib, m):
    m.act.forward = lambda x: x * 0.5


def _sequential_replace(lib, m):
    m[1] = lib.nn.GELU()


def _sequential_append(lib, m):
    m.append(lib.nn.Softsign())


def _sequential_delete(lib, m):
    del m[1]


def _sequential(lib):
    return lib.nn.Sequential(lib.nn.Linear(5, 7), lib.nn.Tanh(), lib.nn.Linear(7, 7), lib.nn.Tanh(),
                             lib.nn.Linear(7, 3))


CASES = {
    "attribute module replaced": (_Net.build, _swap_act),
    "attribute function replaced": (_Net.build, _swap_fn),
    "ModuleList appended to": (_Net.build, _grow_list),
    "forward patched on the instance": (_Net.build, _patch_forward),
    "Sequential item replaced": (_sequential, _sequential_replace),
    "Sequential appended to": (_sequential, _sequential_append),
    "Sequential item deleted": (_sequential, _sequential_delete),
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("compiled", [False, True])
def test_a_model_changed_between_steps_trains_as_torch(case, compiled):
    build, change = CASES[case]
    theirs, mine = twin(build)
    steps = {}
    for lib, m in ((torch, theirs), (flame, mine)):
        steps[lib] = ce_step(lib, m, lib.optim.SGD(m.parameters(), lr=0.1, momentum=0.9), compiled and lib is flame)
    for i, (x, y) in enumerate(batches(5, (6, 5), classes=3)):
        if i == 2:
            change(torch, theirs)
            change(flame, mine)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", flame.RecompileWarning)
            want, got = steps[torch](*to_lib(torch, x, y)), steps[flame](*to_lib(flame, x, y))
        np.testing.assert_allclose(numpy_of(got), numpy_of(want), rtol=1e-9, err_msg=f"step {i}")
    assert_same_params(mine, theirs)


def test_a_replaced_layer_is_named_by_the_recompile_warning():
    model = _sequential(flame)
    step = flame.compile(lambda x: model(x).sum())
    x = flame.ones(2, 5)
    step(x)
    step(x)
    assert step.stats().traces == 1
    model[1] = flame.nn.ReLU()
    with pytest.warns(flame.RecompileWarning, match=r"submodules of Sequential 'model': "
                                                     r"\(a Linear, a Tanh, .*\) -> \(a Linear, a ReLU, "):
        step(x)
    step(x)
    assert step.stats().traces == 2


@pytest.mark.parametrize("name", ["SGD", "Adam"])
@pytest.mark.parametrize("compiled", [False, True])
def test_a_parameter_put_into_a_group_by_hand_is_optimized_as_in_torch(name, compiled):
    """torch.optim creates a parameter's state at its first step, so a parameter swapped into
    group['params'] (a layer re-initialised as a new Parameter) trains from fresh state."""
    theirs, mine = twin(_sequential)
    steps = {}
    for lib, m in ((torch, theirs), (flame, mine)):
        opt = getattr(lib.optim, name)(m.parameters(), lr=0.05)
        steps[lib] = (ce_step(lib, m, opt, compiled and lib is flame), opt)
    for i, (x, y) in enumerate(batches(5, (6, 5), classes=3)):
        if i == 2:
            for lib, m in ((torch, theirs), (flame, mine)):
                m[0].weight = lib.nn.Parameter(m[0].weight.detach() * 0.5)
                steps[lib][1].param_groups[0]["params"][0] = m[0].weight
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", flame.RecompileWarning)
            want, got = steps[torch][0](*to_lib(torch, x, y)), steps[flame][0](*to_lib(flame, x, y))
        np.testing.assert_allclose(numpy_of(got), numpy_of(want), rtol=1e-9, err_msg=f"step {i}")
    assert_same_params(mine, theirs)
