"""Optimizer idioms of everyday PyTorch code against torch.optim, eagerly and inside @flame.compile, from the
same f64 weights: parameter groups with their own lr and weight_decay, hyperparameters changed by hand
between compiled steps (in a group, or a group dict replaced), add_param_group in the middle of training,
and an optimizer state_dict (torch's or flame's) loaded into a fresh optimizer that then continues as torch
does."""

from __future__ import annotations

import contextlib

import pytest
import torch

import flame
from tests.training_idioms.common import assert_same_params, batches, ce_step, to_lib, twin

DATA = batches(8, (6, 4), classes=3)


def _mlp(lib):
    nn = lib.nn
    return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 3))


OPTIMIZERS = [
    ("SGD", dict(lr=0.1, momentum=0.9, nesterov=True), dict(lr=0.3, weight_decay=0.05)),
    ("SGD", dict(lr=0.1, momentum=0.5, dampening=0.2), dict(lr=0.02, weight_decay=0.1)),
    ("Adam", dict(lr=0.01, amsgrad=True), dict(lr=0.05, weight_decay=0.1, betas=(0.8, 0.9))),
    ("AdamW", dict(lr=0.01, weight_decay=0.01), dict(lr=0.03, weight_decay=0.0)),
    ("RMSprop", dict(lr=0.01, momentum=0.5, centered=True), dict(lr=0.002, weight_decay=0.1)),
    ("Adagrad", dict(lr=0.1), dict(lr=0.3, weight_decay=0.02, lr_decay=0.01)),
]


def _groups(model, head_kw):
    """Two groups, torch's spelling: the first layer with the defaults, the last with its own options."""
    return [{"params": list(model[0].parameters())}, {"params": list(model[2].parameters()), **head_kw}]


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("name,defaults,head_kw", OPTIMIZERS)
def test_param_groups_with_their_own_options(name, defaults, head_kw, compiled):
    theirs, mine = twin(_mlp)
    topt = getattr(torch.optim, name)(_groups(theirs, head_kw), **defaults)
    fopt = getattr(flame.optim, name)(_groups(mine, head_kw), **defaults)
    tstep, fstep = ce_step(torch, theirs, topt, False), ce_step(flame, mine, fopt, compiled)
    for x, y in DATA[:5]:
        tl, fl = tstep(*to_lib(torch, x, y)), fstep(*to_lib(flame, x, y))
        assert abs(tl.item() - fl.item()) < 1e-10
    assert_same_params(mine, theirs)


CHANGES = [  # (optimizer, its options, what a user sets by hand on group 1 after some steps)
    ("SGD", dict(lr=0.1, momentum=0.9, weight_decay=0.01), dict(lr=0.5, momentum=0.3, weight_decay=0.1)),
    ("SGD", dict(lr=0.1, momentum=0.9), dict(weight_decay=0.2)),  # 0 -> non-zero: a choice made in Python
    ("SGD", dict(lr=0.1, momentum=0.9, weight_decay=0.1), dict(weight_decay=0.0)),
    ("Adam", dict(lr=0.01), dict(lr=0.1, betas=(0.5, 0.7), eps=1e-3)),
    ("AdamW", dict(lr=0.01, weight_decay=0.1), dict(weight_decay=0.5, eps=1e-4)),
    ("RMSprop", dict(lr=0.01, momentum=0.5), dict(alpha=0.5, lr=0.03, momentum=0.1, weight_decay=0.1)),
]


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("name,defaults,change", CHANGES)
def test_options_changed_by_hand_between_steps(name, defaults, change, compiled):
    """`opt.param_groups[i][key] = v` between steps takes effect at the next step, as in torch."""
    theirs, mine = twin(_mlp)
    topt = getattr(torch.optim, name)(_groups(theirs, {}), **defaults)
    fopt = getattr(flame.optim, name)(_groups(mine, {}), **defaults)
    tstep, fstep = ce_step(torch, theirs, topt, False), ce_step(flame, mine, fopt, compiled)
    for i, (x, y) in enumerate(DATA):
        if i == 3:
            topt.param_groups[1].update(change)
            fopt.param_groups[1].update(change)
        if i == 5:
            topt.param_groups[0]["lr"] *= 0.1
            fopt.param_groups[0]["lr"] *= 0.1
        tstep(*to_lib(torch, x, y))
        fstep(*to_lib(flame, x, y))
        assert_same_params(mine, theirs, what=f"after step {i}")


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("how", ["group", "list"])
@pytest.mark.parametrize("name,defaults,change", CHANGES[1::2])
def test_a_group_dict_replaced_between_steps(name, defaults, change, how, compiled):
    """`opt.param_groups[i] = {**group, key: v}` (or a new list of groups) between steps: the next step
    reads the new dict's options, as torch's, not those of the dict the step was traced with."""
    theirs, mine = twin(_mlp)
    topt = getattr(torch.optim, name)(_groups(theirs, {}), **defaults)
    fopt = getattr(flame.optim, name)(_groups(mine, {}), **defaults)
    tstep, fstep = ce_step(torch, theirs, topt, False), ce_step(flame, mine, fopt, compiled)
    for i, (x, y) in enumerate(DATA):
        if i == 3:
            for opt in (topt, fopt):
                if how == "group":
                    opt.param_groups[1] = {**opt.param_groups[1], **change}
                else:
                    opt.param_groups = [{**g, **change, "lr": g["lr"] * 2} for g in opt.param_groups]
        tstep(*to_lib(torch, x, y))
        fstep(*to_lib(flame, x, y))
        assert_same_params(mine, theirs, what=f"after step {i}")


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("name,defaults", [("SGD", dict(lr=0.1, momentum=0.9)), ("AdamW", dict(lr=0.01))])
def test_add_param_group_in_the_middle_of_training(name, defaults, compiled):
    """The head trains from step 3 on, with its own lr: the compiled step must update it from then on."""
    theirs, mine = twin(_mlp)
    topt = getattr(torch.optim, name)(theirs[0].parameters(), **defaults)
    fopt = getattr(flame.optim, name)(mine[0].parameters(), **defaults)
    tstep, fstep = ce_step(torch, theirs, topt, False), ce_step(flame, mine, fopt, compiled)
    for i, (x, y) in enumerate(DATA):
        if i == 3:
            topt.add_param_group({"params": theirs[2].parameters(), "lr": 0.05})
            fopt.add_param_group({"params": mine[2].parameters(), "lr": 0.05})
        tstep(*to_lib(torch, x, y))
        fstep(*to_lib(flame, x, y))
        assert_same_params(mine, theirs, what=f"after step {i}")


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("source", ["torch", "flame"])
@pytest.mark.parametrize("name,defaults,head_kw", OPTIMIZERS[::2] + [OPTIMIZERS[3]])
def test_state_dict_resume_continues_as_torch(name, defaults, head_kw, source, compiled):
    """Three steps, then the model's and the optimizer's state_dicts (saved by torch or by flame) into a
    fresh model and optimizer (made with another lr and without the head group's options), and
    three more steps: as torch's uninterrupted run."""
    theirs, mine = twin(_mlp)
    topt = getattr(torch.optim, name)(_groups(theirs, head_kw), **defaults)
    fopt = getattr(flame.optim, name)(_groups(mine, head_kw), **defaults)
    tstep, fstep = ce_step(torch, theirs, topt, False), ce_step(flame, mine, fopt, compiled)
    for x, y in DATA[:3]:
        tstep(*to_lib(torch, x, y))
        fstep(*to_lib(flame, x, y))
    saved_model, saved_opt = (theirs, topt) if source == "torch" else (mine, fopt)
    model_sd, opt_sd = saved_model.state_dict(), saved_opt.state_dict()
    _, fresh = twin(_mlp, seed=1)
    fresh.load_state_dict(
        {k: flame.tensor(v.detach().numpy()) if isinstance(v, torch.Tensor) else v for k, v in model_sd.items()}
    )
    fresh_opt = getattr(flame.optim, name)(_groups(fresh, {}), **(defaults | {"lr": 0.5}))
    fresh_opt.load_state_dict(opt_sd)
    fstep = ce_step(flame, fresh, fresh_opt, compiled)
    for i, (x, y) in enumerate(DATA[3:6]):
        tstep(*to_lib(torch, x, y))
        fstep(*to_lib(flame, x, y))
        assert_same_params(fresh, theirs, what=f"after resumed step {i}")


@pytest.mark.parametrize("compiled", [False, True])
def test_a_rate_the_step_sets_from_its_argument_before_the_update(compiled):
    """`g['lr'] = lr` at the top of the step, lr an argument alternating between two values: each call
    updates with its own rate, as torch's (a replay sets the groups as its trace's body did, instead of
    reading the rate another trace's call left in them)."""
    theirs, mine = twin(_mlp)
    steps = {}
    for lib, model in ((torch, theirs), (flame, mine)):
        opt = lib.optim.SGD(model.parameters(), lr=0.5, momentum=0.5)

        def step(x, y, lr, model=model, opt=opt, lib=lib):
            for g in opt.param_groups:
                g["lr"] = lr
            loss = lib.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad()
            return loss

        steps[lib] = flame.compile(step) if compiled and lib is flame else step
    for i, (x, y) in enumerate(DATA[:6]):
        lr = (0.1, 0.01)[i % 2]
        with pytest.warns(flame.RecompileWarning) if compiled and i == 1 else contextlib.nullcontext():
            tl, fl = steps[torch](*to_lib(torch, x, y), lr), steps[flame](*to_lib(flame, x, y), lr)
        assert fl.item() == pytest.approx(tl.item(), rel=1e-10)
        assert_same_params(mine, theirs, what=f"after step {i}")


def test_a_rate_the_step_sets_after_the_update_used_it_is_a_trace_error():
    m = flame.nn.Linear(3, 1)
    opt = flame.optim.SGD(m.parameters(), lr=0.5)

    @flame.compile
    def step(x):
        m(x).sum().backward()
        opt.step()
        opt.zero_grad()
        for g in opt.param_groups:
            g["lr"] *= 0.5

    with pytest.raises(flame.TraceError, match=r"param_groups\[0\]\['lr'\] was set inside @flame.compile after"):
        step(flame.ones(2, 3))
