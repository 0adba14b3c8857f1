"""Learning-rate schedulers driving a real training loop against torch, eagerly and inside
@flame.compile, from the same f64 weights: the parameters after every step, get_last_lr() (equal as
floats), two parameter groups, stepping per epoch, a scheduler's state_dict resumed in a fresh
scheduler, two schedulers chaining on one optimizer and a rate set by hand continued from, as in
torch; a compiled step reads the rates at every call and never re-traces."""

from __future__ import annotations

import pytest
import torch

import flame
from tests.training_idioms.common import assert_same_params, batches, ce_step, to_lib, twin

DATA = batches(8, (6, 4), classes=3)


def _mlp(lib):
    nn = lib.nn
    return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 3))


def _setup(lib, model, compiled, opt_name="SGD"):
    groups = [{"params": model[0].parameters()}, {"params": model[2].parameters(), "lr": 0.05}]
    opt = lib.optim.SGD(groups, lr=0.1, momentum=0.9) if opt_name == "SGD" else lib.optim.AdamW(groups, lr=0.01)
    return opt, ce_step(lib, model, opt, compiled)


SCHEDULES = {
    "StepLR": lambda m, o: m.StepLR(o, step_size=3, gamma=0.5),
    "MultiStepLR": lambda m, o: m.MultiStepLR(o, milestones=[2, 5, 6], gamma=0.3),
    "CosineAnnealingLR": lambda m, o: m.CosineAnnealingLR(o, T_max=6, eta_min=0.001),
    "OneCycleLR": lambda m, o: m.OneCycleLR(o, max_lr=[0.3, 0.2], total_steps=10),
    "LambdaLR": lambda m, o: m.LambdaLR(o, [lambda e: 0.9**e, lambda e: 1 / (1 + e)]),
    "LinearLR+SequentialLR": lambda m, o: m.SequentialLR(
        o, [m.LinearLR(o, start_factor=0.1, total_iters=3), m.CosineAnnealingLR(o, T_max=7)], milestones=[3]
    ),
    "ExponentialLR": lambda m, o: m.ExponentialLR(o, gamma=0.8),
    "CosineAnnealingWarmRestarts": lambda m, o: m.CosineAnnealingWarmRestarts(o, T_0=3, T_mult=2),
    "CyclicLR": lambda m, o: m.CyclicLR(o, base_lr=0.01, max_lr=0.2, step_size_up=2),
    "ConstantLR": lambda m, o: m.ConstantLR(o, factor=0.5, total_iters=3),
    "PolynomialLR": lambda m, o: m.PolynomialLR(o, total_iters=6, power=2.0),
    "MultiplicativeLR": lambda m, o: m.MultiplicativeLR(o, lambda e: 0.9),
    "ChainedScheduler": lambda m, o: m.ChainedScheduler([m.LinearLR(o, 0.2, total_iters=3), m.ExponentialLR(o, 0.9)]),
}


@pytest.mark.parametrize("opt_name,compiled", [("SGD", False), ("SGD", True), ("AdamW", True)])
@pytest.mark.parametrize("name", list(SCHEDULES))
def test_training_follows_the_schedule(name, opt_name, compiled):
    theirs, mine = twin(_mlp)
    topt, tstep = _setup(torch, theirs, False, opt_name)
    fopt, fstep = _setup(flame, mine, compiled, opt_name)
    tsched, fsched = SCHEDULES[name](torch.optim.lr_scheduler, topt), SCHEDULES[name](flame.optim.lr_scheduler, fopt)
    for i, (x, y) in enumerate(DATA):
        tstep(*to_lib(torch, x, y))
        fstep(*to_lib(flame, x, y))
        tsched.step()
        fsched.step()
        assert fsched.get_last_lr() == tsched.get_last_lr()
        assert_same_params(mine, theirs, what=f"after step {i}")
    if compiled:
        assert fstep.stats().traces == 1


@pytest.mark.parametrize("compiled", [False, True])
def test_reduce_on_plateau_in_a_training_loop(compiled):
    theirs, mine = twin(_mlp)
    topt, tstep = _setup(torch, theirs, False)
    fopt, fstep = _setup(flame, mine, compiled)
    kw = dict(mode="min", factor=0.5, patience=0, threshold=0.3)
    tsched = torch.optim.lr_scheduler.ReduceLROnPlateau(topt, **kw)
    fsched = flame.optim.lr_scheduler.ReduceLROnPlateau(fopt, **kw)
    for epoch in range(4):  # an epoch of 3 batches, then a "validation loss" the scheduler reads
        for x, y in DATA[:3]:
            tl = tstep(*to_lib(torch, x, y))
            fl = fstep(*to_lib(flame, x, y))
        tsched.step(tl.item())
        fsched.step(fl.item())
        assert fsched.get_last_lr() == pytest.approx(tsched.get_last_lr(), rel=1e-12)
        assert [g["lr"] for g in fopt.param_groups] == pytest.approx([g["lr"] for g in topt.param_groups])
        assert_same_params(mine, theirs, what=f"after epoch {epoch}")
    assert fsched.get_last_lr() != [0.1, 0.05]  # the plateau was reached


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize(
    "name", ["StepLR", "OneCycleLR", "LinearLR+SequentialLR", "CosineAnnealingLR", "ExponentialLR", "ChainedScheduler"]
)
def test_scheduler_state_dict_resumes_in_a_fresh_loop(name, compiled):
    """Four steps, then model, optimizer and scheduler state into fresh objects (the scheduler made
    before the optimizer's state is loaded, as torch's docs advise; a scheduler torch computes from the
    current rate also after it), six more steps: as torch's uninterrupted run."""
    for scheduler_first in (True, False) if name in ("StepLR", "CosineAnnealingLR", "ExponentialLR") else (True,):
        theirs, mine = twin(_mlp)
        topt, tstep = _setup(torch, theirs, False)
        fopt, fstep = _setup(flame, mine, compiled)
        tsched, fsched = (
            SCHEDULES[name](torch.optim.lr_scheduler, topt),
            SCHEDULES[name](flame.optim.lr_scheduler, fopt),
        )
        for x, y in DATA[:4]:
            tstep(*to_lib(torch, x, y))
            fstep(*to_lib(flame, x, y))
            tsched.step()
            fsched.step()
        saved = (mine.state_dict(), fopt.state_dict(), fsched.state_dict())
        _, fresh = twin(_mlp, seed=1)
        fresh.load_state_dict(saved[0])
        fopt2, fstep2 = _setup(flame, fresh, compiled)
        if scheduler_first:
            fsched2 = SCHEDULES[name](flame.optim.lr_scheduler, fopt2)
            fopt2.load_state_dict(saved[1])
        else:
            fopt2.load_state_dict(saved[1])
            fsched2 = SCHEDULES[name](flame.optim.lr_scheduler, fopt2)
        fsched2.load_state_dict(saved[2])
        for i, (x, y) in enumerate(DATA[4:]):
            tstep(*to_lib(torch, x, y))
            fstep2(*to_lib(flame, x, y))
            tsched.step()
            fsched2.step()
            assert fsched2.get_last_lr() == tsched.get_last_lr()
            assert_same_params(fresh, theirs, what=f"after resumed step {i} (scheduler first: {scheduler_first})")


def test_scheduler_stepped_before_the_optimizer_gives_torchs_rates():
    """The order torch warns about (scheduler.step() first): the first rate of the schedule is skipped, in both."""
    theirs, mine = twin(_mlp)
    topt, tstep = _setup(torch, theirs, False)
    fopt, fstep = _setup(flame, mine, True)
    tsched, fsched = (
        SCHEDULES["StepLR"](torch.optim.lr_scheduler, topt),
        SCHEDULES["StepLR"](flame.optim.lr_scheduler, fopt),
    )
    for i, (x, y) in enumerate(DATA[:7]):
        with pytest.warns(UserWarning) if i == 0 else _nothing():
            tsched.step()
        fsched.step()
        tstep(*to_lib(torch, x, y))
        fstep(*to_lib(flame, x, y))
        assert_same_params(mine, theirs, what=f"after step {i}")


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


CHAINS = [
    lambda m, o: [m.ExponentialLR(o, 0.9), m.MultiStepLR(o, [2], 0.1)],  # the chaining example of torch's docs
    lambda m, o: [m.LinearLR(o, 0.1, total_iters=3), m.StepLR(o, 2)],
    lambda m, o: [m.LambdaLR(o, lambda e: min(1.0, (e + 1) / 3)), m.CosineAnnealingLR(o, 5)],
]


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("chain", range(len(CHAINS)))
def test_two_schedulers_on_one_optimizer_chain_as_in_torch(chain, compiled):
    """Each computes from the rate the other set (or, LambdaLR, overwrites it), as torch's: the same
    parameters after every step; the compiled step traced once."""
    theirs, mine = twin(_mlp)
    topt, tstep = _setup(torch, theirs, False)
    fopt, fstep = _setup(flame, mine, compiled)
    tscheds, fscheds = CHAINS[chain](torch.optim.lr_scheduler, topt), CHAINS[chain](flame.optim.lr_scheduler, fopt)
    for i, (x, y) in enumerate(DATA):
        tstep(*to_lib(torch, x, y))
        fstep(*to_lib(flame, x, y))
        for s in tscheds:
            s.step()
        for s in fscheds:
            s.step()
        assert [g["lr"] for g in fopt.param_groups] == [g["lr"] for g in topt.param_groups], i
        assert_same_params(mine, theirs, what=f"after step {i}")
    if compiled:
        assert fstep.stats().traces == 1


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize(
    "name", ["StepLR", "CosineAnnealingLR", "ExponentialLR", "LinearLR+SequentialLR", "OneCycleLR"]
)
def test_a_rate_set_by_hand_is_continued_as_in_torch(name, compiled):
    """A chainable scheduler continues from a rate set by hand; CyclicLR overwrites it at its next
    step: in both libraries; the compiled step trains at each rate without re-tracing."""
    theirs, mine = twin(_mlp)
    topt, tstep = _setup(torch, theirs, False)
    fopt, fstep = _setup(flame, mine, compiled)
    tsched, fsched = SCHEDULES[name](torch.optim.lr_scheduler, topt), SCHEDULES[name](flame.optim.lr_scheduler, fopt)
    for i, (x, y) in enumerate(DATA):
        if i in (1, 5):
            topt.param_groups[1]["lr"] = fopt.param_groups[1]["lr"] = 0.0123 * i
        tstep(*to_lib(torch, x, y))
        fstep(*to_lib(flame, x, y))
        tsched.step()
        fsched.step()
        assert fsched.get_last_lr() == tsched.get_last_lr(), i
        assert_same_params(mine, theirs, what=f"after step {i}")
    if compiled:
        assert fstep.stats().traces == 1


@pytest.mark.parametrize("compiled", [False, True])
def test_a_rate_set_by_hand_under_a_closed_form_scheduler_is_overwritten_as_in_torch(compiled):
    """LambdaLR computes from the initial lr in torch too: a rate set by hand lasts one step."""
    theirs, mine = twin(_mlp)
    topt, tstep = _setup(torch, theirs, False)
    fopt, fstep = _setup(flame, mine, compiled)
    tsched, fsched = (
        SCHEDULES["LambdaLR"](torch.optim.lr_scheduler, topt),
        SCHEDULES["LambdaLR"](flame.optim.lr_scheduler, fopt),
    )
    for i, (x, y) in enumerate(DATA[:5]):
        if i == 2:
            topt.param_groups[0]["lr"] = fopt.param_groups[0]["lr"] = 0.5
        tstep(*to_lib(torch, x, y))
        fstep(*to_lib(flame, x, y))
        tsched.step()
        fsched.step()
        assert_same_params(mine, theirs, what=f"after step {i}")
