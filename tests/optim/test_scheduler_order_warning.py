"""An LR scheduler stepped before the optimizer's first step warns as torch's does ("Detected call of
`lr_scheduler.step()` before `optimizer.step()`"), and only then: the scheduler and optimizer of every
kind, stepped in the right order, the wrong order, or with no optimizer step, warn as torch's do, eagerly
and with the optimizer step inside @flame.compile."""

from __future__ import annotations

import warnings

import pytest
import torch

import flame


def _sched(lib):
    return lib.optim.lr_scheduler


SCHEDULERS = {
    "StepLR": lambda lib, o: _sched(lib).StepLR(o, 3),
    "CosineAnnealingWarmRestarts": lambda lib, o: _sched(lib).CosineAnnealingWarmRestarts(o, 3),
    "CyclicLR": lambda lib, o: _sched(lib).CyclicLR(o, 0.01, 0.1),
    "OneCycleLR": lambda lib, o: _sched(lib).OneCycleLR(o, max_lr=1.0, total_steps=13),
    "SequentialLR": lambda lib, o: _sched(lib).SequentialLR(
        o, [_sched(lib).LinearLR(o, 0.1, total_iters=3), _sched(lib).ExponentialLR(o, 0.9)], milestones=[2]),
    "ChainedScheduler": lambda lib, o: _sched(lib).ChainedScheduler(
        [_sched(lib).ConstantLR(o, 0.5, total_iters=4), _sched(lib).ExponentialLR(o, 0.9)]),
    "ReduceLROnPlateau": lambda lib, o: _sched(lib).ReduceLROnPlateau(o),
    "SWALR": lambda lib, o: lib.optim.swa_utils.SWALR(o, 0.05),
}


def _warned(lib, make, order: str, compiled: bool = False) -> bool:
    w = lib.nn.Parameter(lib.ones(1))
    opt = lib.optim.SGD([w], lr=0.1, momentum=0.9)
    sched = make(lib, opt)

    def train_step():
        opt.zero_grad()
        (w * 2).sum().backward()
        if order != "never":
            opt.step()

    if compiled:
        train_step = flame.compile(train_step)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            if order == "wrong":
                sched.step(*([1.0] if "Plateau" in type(sched).__name__ else []))
            train_step()
            if order != "wrong":
                sched.step(*([1.0] if "Plateau" in type(sched).__name__ else []))
    return any("before `optimizer.step()`" in str(c.message) for c in caught)


@pytest.mark.parametrize("order", ["right", "wrong", "never"])
@pytest.mark.parametrize("name", sorted(SCHEDULERS))
def test_scheduler_before_optimizer_warns_as_torch(name, order):
    want = _warned(torch, SCHEDULERS[name], order)
    assert _warned(flame, SCHEDULERS[name], order) == want
    if name == "StepLR":
        assert want == (order != "right")
        assert _warned(flame, SCHEDULERS[name], order, compiled=True) == want


def test_a_users_optimizer_step_counts():
    class Plain(flame.optim.Optimizer):
        def __init__(self, params):
            super().__init__(params, {"lr": 0.1})

        def step(self, closure=None):
            for g in self.param_groups:
                for p in g["params"]:
                    p.data.add_(p.grad, alpha=-g["lr"])

    w = flame.nn.Parameter(flame.ones(1))
    opt = Plain([w])
    sched = flame.optim.lr_scheduler.StepLR(opt, 1)
    (w * 2).sum().backward()
    opt.step()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sched.step()
