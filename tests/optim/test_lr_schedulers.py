"""Learning-rate schedules against torch.optim.lr_scheduler (same lr sequence)."""

import math

import numpy as np
import pytest
import torch

import flame
import flame.nn as nn
import flame.optim as optim
from flame.optim import lr_scheduler as sched


def _pair(lr=0.1):
    ours = optim.SGD([nn.Parameter(flame.zeros(1))], lr=lr)
    theirs = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=lr)
    return ours, theirs


@pytest.mark.parametrize("make", [
    lambda o, m: m.LambdaLR(o, lambda e: 0.9**e + 0.01 * e),
    lambda o, m: m.StepLR(o, step_size=3, gamma=0.5),
    lambda o, m: m.CosineAnnealingLR(o, T_max=10, eta_min=0.001),
], ids=["lambda", "step", "cosine"])
def test_schedule_matches_torch(make):
    ours, theirs = _pair()
    s, t = make(ours, sched), make(theirs, torch.optim.lr_scheduler)
    seq_ours, seq_theirs = [s.get_last_lr()[0]], [t.get_last_lr()[0]]
    for _ in range(12):
        theirs.step()
        s.step()
        t.step()
        seq_ours.append(s.get_last_lr()[0])
        seq_theirs.append(t.get_last_lr()[0])
    np.testing.assert_allclose(seq_ours, seq_theirs, rtol=1e-12, atol=1e-15)
    assert ours.param_groups[0]["lr"] == seq_ours[-1]
    assert ours.param_groups[0]["initial_lr"] == 0.1


def test_warmup_cosine_shape():
    ours, _ = _pair(lr=1.0)
    s = sched.WarmupCosineLR(ours, warmup_steps=4, total_steps=14, min_lr_ratio=0.1)
    lrs = [s.get_last_lr()[0]]
    for _ in range(16):
        s.step()
        lrs.append(s.get_last_lr()[0])
    np.testing.assert_allclose(lrs[:5], [0, 0.25, 0.5, 0.75, 1.0])
    assert lrs[9] == pytest.approx(0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 0.5)))
    assert all(a >= b for a, b in zip(lrs[4:], lrs[5:]))
    assert lrs[14] == pytest.approx(0.1) and lrs[16] == pytest.approx(0.1)
    hf = sched.get_cosine_schedule_with_warmup(_pair(lr=2.0)[0], 2, 10)
    assert hf.get_last_lr() == [0.0]


def test_per_group_lambdas_and_state_dict():
    a, b = nn.Parameter(flame.zeros(1)), nn.Parameter(flame.zeros(1))
    opt = optim.Adam([{"params": [a], "lr": 1.0}, {"params": [b], "lr": 2.0}])
    s = sched.LambdaLR(opt, [lambda e: 1.0 / (e + 1), lambda e: 0.5])
    s.step()
    assert s.get_last_lr() == [0.5, 1.0]
    st = s.state_dict()
    assert st["last_epoch"] == 1 and "lr_lambdas" not in st
    s2 = sched.StepLR(opt, 2)
    s2.load_state_dict({"last_epoch": 7})
    assert s2.last_epoch == 7
