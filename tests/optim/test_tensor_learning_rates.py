"""A learning rate held as a tensor (lr=tensor(0.1), as torch.optim takes one): schedulers fill it in
place as torch's do (the tensor given stays the group's and holds the rate), get_last_lr() gives copies,
and a compiled step reads the rate the tensor holds at each call, whether a scheduler or the user's
fill_() changed it."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import flame


def _param(lib):
    return (torch.nn.Parameter if lib is torch else flame.nn.Parameter)(lib.tensor([1.0, -2.0], dtype=lib.float64))


_SCHEDULES = {
    "step": lambda S, o: S.StepLR(o, 2, 0.5),
    "onecycle": lambda S, o: S.OneCycleLR(o, max_lr=0.1, total_steps=10),
    "cyclic": lambda S, o: S.CyclicLR(o, 0.01, 0.1, step_size_up=2, cycle_momentum=False),
    "plateau": lambda S, o: S.ReduceLROnPlateau(o, patience=0, factor=0.5),
    "sequential": lambda S, o: S.SequentialLR(o, [S.ConstantLR(o, 0.5, total_iters=2), S.ExponentialLR(o, 0.8)],
                                              milestones=[2]),
}


@pytest.mark.parametrize("name", list(_SCHEDULES))
@pytest.mark.parametrize("kind", ["SGD", "Adam"])
@pytest.mark.parametrize("compiled", [False, True])
def test_a_tensor_rate_is_filled_in_place_and_read_at_each_call(name, kind, compiled):
    out = {}
    for lib in (torch, flame):
        p = _param(lib)
        lr = lib.tensor(0.05, dtype=lib.float64)
        kw = {"momentum": 0.9} if kind == "SGD" else {}
        opt = getattr(lib.optim, kind)([p], lr=lr, **kw)
        sched = _SCHEDULES[name](lib.optim.lr_scheduler, opt)

        def step(p=p, opt=opt):
            loss = (p * p).sum()
            loss.backward()
            opt.step()
            opt.zero_grad()
            return loss

        step = flame.compile(step) if compiled and lib is flame else step
        rates = []
        for _ in range(6):
            step()
            sched.step(*((1.0,) if name == "plateau" else ()))
            assert opt.param_groups[0]["lr"] is lr
            rates.append([float(r) for r in sched.get_last_lr()])
        out[lib] = (p.detach().numpy().copy(), rates, float(lr))
    np.testing.assert_allclose(out[flame][0], out[torch][0], rtol=1e-12)
    assert out[flame][1:] == out[torch][1:]


def test_a_tensor_rate_filled_by_hand_between_compiled_calls():
    got = {}
    for lib in (torch, flame):
        p = _param(lib)
        lr = lib.tensor(0.1, dtype=lib.float64)
        opt = lib.optim.SGD([p], lr=lr)

        def step(p=p, opt=opt):
            (p * p).sum().backward()
            opt.step()
            opt.zero_grad()

        step = flame.compile(step) if lib is flame else step
        for k in range(4):
            lr.fill_(0.1 / (k + 1))
            step()
        got[lib] = p.detach().numpy()
    np.testing.assert_allclose(got[flame], got[torch], rtol=1e-12)
