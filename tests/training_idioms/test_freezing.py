"""Freezing and zero_grad idioms against torch, eagerly and inside @flame.compile, from the same f64
weights: `requires_grad_(False)` on a submodule between steps (and unfreezing it later), with
zero_grad's set_to_none=True (a frozen parameter then has no .grad and the optimizer skips it) and
set_to_none=False (it keeps a zero .grad, so momentum and weight decay still move it, as in torch),
and a parameter that some steps do not reach."""

from __future__ import annotations

import pytest
import torch

import flame
from tests.training_idioms.common import assert_same_params, batches, ce_step, maybe_compile, numpy_of, to_lib, twin

DATA = batches(8, (6, 4), classes=3)


def _mlp(lib):
    nn = lib.nn
    return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 3))


def _step_fn(lib, model, opt, compiled, set_to_none=True, zero_with="opt"):
    holder = opt if zero_with == "opt" else model
    return ce_step(lib, model, opt, compiled, lambda: holder.zero_grad(set_to_none=set_to_none))


OPTS = [
    ("SGD", dict(lr=0.1, momentum=0.9, weight_decay=0.05)),
    ("AdamW", dict(lr=0.01, weight_decay=0.1)),
]


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("set_to_none", [True, False])
@pytest.mark.parametrize("name,kw", OPTS)
def test_freeze_and_unfreeze_a_submodule_between_steps(name, kw, set_to_none, compiled):
    """The middle layer frozen after 2 steps and unfrozen after 5: torch's parameters at every step."""
    theirs, mine = twin(_mlp)
    topt, fopt = (
        getattr(torch.optim, name)(theirs.parameters(), **kw),
        getattr(flame.optim, name)(mine.parameters(), **kw),
    )
    tstep = _step_fn(torch, theirs, topt, False, set_to_none)
    fstep = _step_fn(flame, mine, fopt, compiled, set_to_none)
    for i, (x, y) in enumerate(DATA):
        if i in (2, 5):
            theirs[2].requires_grad_(i == 5)
            mine[2].requires_grad_(i == 5)
        tl, fl = tstep(*to_lib(torch, x, y)), fstep(*to_lib(flame, x, y))
        assert abs(tl.item() - fl.item()) < 1e-10, f"loss at step {i}"
        assert_same_params(mine, theirs, what=f"after step {i}")
        for (n, fp), tp in zip(mine.named_parameters(), theirs.parameters()):
            assert (fp.grad is None) == (tp.grad is None), f"{n}.grad after step {i}"
            if tp.grad is not None:
                assert not numpy_of(fp.grad).any() and not numpy_of(tp.grad).any()


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("name,kw", OPTS)
def test_frozen_before_the_first_step_never_moves(name, kw, compiled):
    theirs, mine = twin(_mlp)
    theirs[0].requires_grad_(False)
    mine[0].requires_grad_(False)
    topt, fopt = (
        getattr(torch.optim, name)(theirs.parameters(), **kw),
        getattr(flame.optim, name)(mine.parameters(), **kw),
    )
    before = numpy_of(mine[0].weight).copy()
    tstep, fstep = _step_fn(torch, theirs, topt, False), _step_fn(flame, mine, fopt, compiled)
    for x, y in DATA[:4]:
        tstep(*to_lib(torch, x, y))
        fstep(*to_lib(flame, x, y))
    assert_same_params(mine, theirs)
    assert (numpy_of(mine[0].weight) == before).all()
    assert mine[0].weight.grad is None


def _branchy(lib):
    nn = lib.nn
    return nn.ModuleDict({"a": nn.Linear(4, 3), "b": nn.Linear(4, 3)})


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("set_to_none", [True, False])
@pytest.mark.parametrize("zero_with", ["opt", "model"])
@pytest.mark.parametrize("name,kw", OPTS)
def test_a_parameter_some_steps_do_not_reach(name, kw, zero_with, set_to_none, compiled):
    """Branch "b" is used on even steps only (an argument chooses it): with set_to_none=False its zeroed
    .grad still drives momentum, weight decay and Adam's moments on the odd steps, as in torch."""
    theirs, mine = twin(_branchy)
    topt, fopt = (
        getattr(torch.optim, name)(theirs.parameters(), **kw),
        getattr(flame.optim, name)(mine.parameters(), **kw),
    )

    def make(lib, model, opt, compiled):
        F = lib.nn.functional

        @maybe_compile(lib, compiled)
        def step(x, y, use_b):
            out = model["a"](x) + (model["b"](x) if use_b else 0.0)
            loss = F.cross_entropy(out, y)
            loss.backward()
            opt.step()
            (opt if zero_with == "opt" else model).zero_grad(set_to_none=set_to_none)
            return loss

        return step

    tstep, fstep = make(torch, theirs, topt, False), make(flame, mine, fopt, compiled)
    for i, (x, y) in enumerate(DATA):
        tstep(*to_lib(torch, x, y), i % 2 == 0)
        fstep(*to_lib(flame, x, y), i % 2 == 0)
        assert_same_params(mine, theirs, what=f"after step {i}")
