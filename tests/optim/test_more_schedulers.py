"""The learning-rate schedulers against torch.optim.lr_scheduler on the same optimizer settings: every
step's learning rates, equal as floats (and, for OneCycleLR, the momentum or beta1 it cycles), state_dict round trips,
and a compiled step that reads the scheduled rate without re-tracing."""

from __future__ import annotations

import pytest
import torch

import flame
import flame.nn as nn
import flame.optim.lr_scheduler as S

STEPS = 40


def _optimizers(kind: str, lr: float = 0.1, groups: int = 1):
    p, tp = nn.Parameter(flame.zeros(3)), torch.nn.Parameter(torch.zeros(3))
    ps = [{"params": [nn.Parameter(flame.zeros(2))], "lr": lr * (k + 1)} for k in range(groups)]
    tps = [{"params": [torch.nn.Parameter(torch.zeros(2))], "lr": lr * (k + 1)} for k in range(groups)]
    if groups == 1:
        ps, tps = [p], [tp]
    if kind == "sgd":
        return flame.optim.SGD(ps, lr=lr, momentum=0.9), torch.optim.SGD(tps, lr=lr, momentum=0.9)
    return flame.optim.AdamW(ps, lr=lr), torch.optim.AdamW(tps, lr=lr)


def _same_lrs(make, kind="sgd", groups=1, momentum=False, steps=STEPS):
    opt, topt = _optimizers(kind, groups=groups)
    mine, theirs = make(S, opt), make(torch.optim.lr_scheduler, topt)
    for step in range(steps):
        assert mine.get_last_lr() == theirs.get_last_lr(), f"step {step}"
        if momentum:
            key = "betas" if kind == "adam" else "momentum"
            got = [g[key][0] if key == "betas" else g[key] for g in opt.param_groups]
            want = [g[key][0] if key == "betas" else g[key] for g in topt.param_groups]
            assert got == want, f"momentum at step {step}"
        topt.step()
        mine.step()
        theirs.step()


@pytest.mark.parametrize(
    "name,make",
    [
        ("MultiStepLR", lambda m, o: m.MultiStepLR(o, [5, 12, 30], gamma=0.3)),
        ("ExponentialLR", lambda m, o: m.ExponentialLR(o, 0.9)),
        ("ConstantLR", lambda m, o: m.ConstantLR(o, factor=0.25, total_iters=7)),
        ("LinearLR", lambda m, o: m.LinearLR(o, start_factor=0.1, end_factor=0.8, total_iters=15)),
        ("PolynomialLR", lambda m, o: m.PolynomialLR(o, total_iters=30, power=2.0)),
        ("MultiplicativeLR", lambda m, o: m.MultiplicativeLR(o, lambda e: 0.95 if e % 2 else 1.0)),
        ("CosineAnnealingWarmRestarts", lambda m, o: m.CosineAnnealingWarmRestarts(o, T_0=4, T_mult=2, eta_min=0.01)),
        ("CosineAnnealingWarmRestarts1", lambda m, o: m.CosineAnnealingWarmRestarts(o, T_0=6)),
        (
            "SequentialLR",
            lambda m, o: m.SequentialLR(
                o, [m.LinearLR(o, start_factor=0.01, total_iters=5), m.CosineAnnealingLR(o, T_max=30)], milestones=[5]
            ),
        ),
        (
            "SequentialLR3",
            lambda m, o: m.SequentialLR(
                o,
                [m.ConstantLR(o, factor=0.5, total_iters=3), m.ExponentialLR(o, 0.9), m.StepLR(o, 4)],
                milestones=[3, 20],
            ),
        ),
    ],
)
@pytest.mark.parametrize("groups", [1, 2])
def test_schedule_matches_pytorch(name, make, groups):
    _same_lrs(make, groups=groups)


@pytest.mark.parametrize("kind", ["sgd", "adam"])
@pytest.mark.parametrize("three_phase,strategy", [(False, "cos"), (True, "linear")])
def test_one_cycle_matches_pytorch(kind, three_phase, strategy):
    _same_lrs(
        lambda m, o: m.OneCycleLR(
            o, max_lr=1.0, total_steps=STEPS, pct_start=0.25, three_phase=three_phase, anneal_strategy=strategy
        ),
        kind=kind,
        momentum=True,
        steps=STEPS,
    )
    _same_lrs(
        lambda m, o: m.OneCycleLR(o, max_lr=[0.5, 2.0], epochs=4, steps_per_epoch=10, cycle_momentum=False),
        kind=kind,
        groups=2,
    )


@pytest.mark.parametrize("kind", ["sgd", "adam"])
@pytest.mark.parametrize(
    "kw",
    [
        dict(mode="triangular"),
        dict(mode="triangular2", step_size_down=3),
        dict(mode="exp_range", gamma=0.97),
        dict(scale_fn=lambda x: 0.5**x, scale_mode="cycle"),
        dict(scale_fn=lambda x: 1 / (1 + 0.1 * x), scale_mode="iterations"),
    ],
)
def test_cyclic_matches_pytorch(kind, kw):
    _same_lrs(lambda m, o: m.CyclicLR(o, base_lr=0.01, max_lr=0.1, step_size_up=5, **kw), kind=kind, momentum=True)
    _same_lrs(
        lambda m, o: m.CyclicLR(o, base_lr=[0.01, 0.02], max_lr=[0.1, 0.3], step_size_up=4, cycle_momentum=False, **kw),
        kind=kind,
        groups=2,
    )


def test_cyclic_checks_and_round_trips():
    opt, _ = _optimizers("sgd")
    with pytest.raises(ValueError, match="mode 'sine' is none of"):
        S.CyclicLR(opt, 0.01, 0.1, mode="sine")
    with pytest.raises(ValueError, match="max_lr has 2 values, the optimizer 1 param_groups"):
        S.CyclicLR(opt, 0.01, [0.1, 0.2])
    plain = flame.optim.Adagrad([nn.Parameter(flame.zeros(2))])
    with pytest.raises(ValueError, match="must support momentum or beta1"):
        S.CyclicLR(plain, 0.01, 0.1)
    a = S.CyclicLR(opt, 0.01, 0.1, step_size_up=3, mode="triangular2")
    for _ in range(7):
        a.step()
    opt2, _ = _optimizers("sgd")
    b = S.CyclicLR(opt2, 0.01, 0.1, step_size_up=3, mode="triangular2")
    b.load_state_dict(a.state_dict())
    for _ in range(5):
        a.step()
        b.step()
        assert a.get_last_lr() == b.get_last_lr()


def test_one_cycle_refuses_to_run_past_its_steps():
    opt, _ = _optimizers("sgd")
    sched = S.OneCycleLR(opt, max_lr=1.0, total_steps=3)
    for _ in range(3):
        sched.step()
    with pytest.raises(ValueError, match="more than total_steps = 3"):
        sched.step()


@pytest.mark.parametrize("mode,threshold_mode", [("min", "rel"), ("max", "abs")])
def test_reduce_on_plateau_matches_pytorch(mode, threshold_mode):
    opt, topt = _optimizers("sgd", groups=2)
    kw = dict(
        mode=mode,
        factor=0.5,
        patience=2,
        threshold=0.01,
        threshold_mode=threshold_mode,
        cooldown=1,
        min_lr=[0.02, 0.001],
    )
    mine, theirs = S.ReduceLROnPlateau(opt, **kw), torch.optim.lr_scheduler.ReduceLROnPlateau(topt, **kw)
    metrics = [1.0, 0.9, 0.95, 0.95, 0.95, 0.94, 0.8, 0.8, 0.8, 0.8, 0.8, 0.8, 0.79, 0.7, 0.7, 0.7, 0.7, 0.7]
    for m in metrics + metrics[::-1]:
        m = m if mode == "min" else -m
        mine.step(m)
        theirs.step(m)
        assert mine.get_last_lr() == theirs.get_last_lr()
        assert [g["lr"] for g in opt.param_groups] == [g["lr"] for g in topt.param_groups]


def test_state_dicts_round_trip():
    """SequentialLR's state (its schedulers' inside) into a fresh one, with the optimizer's state and
    without it: as torch's, the chainable form continues from the rate the group holds."""

    def make(m, o):
        return m.SequentialLR(o, [m.LinearLR(o, start_factor=0.1, total_iters=4), m.ExponentialLR(o, 0.8)], [4])

    for load_optimizer in (True, False):
        opt, topt = _optimizers("sgd")
        sched, tsched = make(S, opt), make(torch.optim.lr_scheduler, topt)
        for _ in range(6):
            topt.step()
            sched.step()
            tsched.step()
        opt2, topt2 = _optimizers("sgd")
        again, tagain = make(S, opt2), make(torch.optim.lr_scheduler, topt2)
        if load_optimizer:
            opt2.load_state_dict(opt.state_dict())
            topt2.load_state_dict(topt.state_dict())
        again.load_state_dict(sched.state_dict())
        tagain.load_state_dict(tsched.state_dict())
        for _ in range(5):
            topt2.step()
            again.step()
            tagain.step()
            assert again.get_last_lr() == tagain.get_last_lr()
            if load_optimizer:
                sched.step()
                assert again.get_last_lr() == sched.get_last_lr()
    plateau = S.ReduceLROnPlateau(opt, patience=0)
    plateau.step(1.0)
    plateau.step(2.0)
    assert S.ReduceLROnPlateau(opt).load_state_dict(plateau.state_dict()) is None
    assert set(plateau.state_dict()) == set(torch.optim.lr_scheduler.ReduceLROnPlateau(topt).state_dict())


def test_a_compiled_step_follows_one_cycle_without_retracing():
    model = nn.Linear(4, 1, generator=flame.Generator(0))
    opt = flame.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    sched = S.OneCycleLR(opt, max_lr=0.5, total_steps=12)
    x, y = flame.randn(16, 4, generator=flame.Generator(1)), flame.randn(16, 1, generator=flame.Generator(2))

    @flame.compile
    def step(x, y):
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss

    for _ in range(12):
        step(x, y)
        sched.step()
    assert step.stats().traces == 1
