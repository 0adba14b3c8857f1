"""Optimizer updates on the side stream (Target.side_stream; passes/fuse.py "updates",
plan/build.overlap_streams): each parameter's update is launched as soon as its gradient is final and
every reader of the parameter has run, issued on a second stream until a Wait, so it overlaps the
rest of the backward. Plans are made for a target that says so and run by the reference executor,
which runs the steps in order: the values must be those of the plan without a side stream, bit for bit."""

from __future__ import annotations

import dataclasses
from collections import OrderedDict

import numpy as np
import pytest

import flame
import flame.nn as nn
import flame.nn.functional as F
from flame import compiler
from flame.plan.steps import Copy, KernelLaunch, MatmulCall, Wait
from flame.runtime.backend import capabilities


def _target(monkeypatch, side: bool) -> None:
    monkeypatch.setattr(compiler, "_CACHE", OrderedDict())
    # bias gradients in their GEMMs (BGRAD): a Linear's weight and bias updates are then ready together
    target = dataclasses.replace(capabilities("reference"), side_stream=side, bgrad_epilogue=True)
    monkeypatch.setattr(compiler, "_target", lambda *settings: target)


def _train(monkeypatch, side: bool, opt_name: str = "AdamW", steps: int = 3):
    """A 3-layer GELU MLP trained `steps` compiled steps: (plan, losses, parameters)."""
    _target(monkeypatch, side)
    flame.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 64), nn.GELU(), nn.Linear(64, 8))
    opt = getattr(flame.optim, opt_name)(model.parameters(), lr=1e-2)

    @flame.compile
    def step(x, y):
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss

    rng = np.random.default_rng(0)
    x = flame.tensor(rng.standard_normal((16, 32)).astype(np.float32))
    y = flame.tensor(rng.integers(0, 8, 16))
    losses = [step(x, y).item() for _ in range(steps)]
    plan = step._lookup(step._args([x, y])).plan
    return plan, losses, [p.numpy().copy() for p in model.parameters()]


@pytest.mark.parametrize("opt_name", ["AdamW", "SGD"])
def test_side_updates_give_the_same_bits(monkeypatch, opt_name):
    _, losses0, params0 = _train(monkeypatch, False, opt_name)
    monkeypatch.undo()
    plan, losses, params = _train(monkeypatch, True, opt_name)
    assert losses == losses0
    for a, b in zip(params, params0):
        np.testing.assert_array_equal(a, b)
    assert any(isinstance(s, KernelLaunch) and s.side for s in plan.steps)


def test_updates_overlap_the_backward_matmuls_and_write_in_place(monkeypatch):
    plain, _, _ = _train(monkeypatch, False, steps=1)
    monkeypatch.undo()
    plan, _, _ = _train(monkeypatch, True, steps=1)
    side = [i for i, s in enumerate(plan.steps) if isinstance(s, KernelLaunch) and s.side]
    matmuls = [i for i, s in enumerate(plan.steps) if isinstance(s, MatmulCall)]
    # the last two layers' updates (weight and bias: one kernel each) go while matmuls of the backward
    # remain; the first layer's is last, on the plan's own stream (nothing left to overlap)
    assert len(side) == 2 and all(i < matmuls[-1] for i in side), plan
    assert not plan.steps[matmuls[-1] + 1].side and plan.steps[matmuls[-1] + 1].name.startswith("fused")
    # one Wait per side launch, after it, naming what the launch writes
    waits = [s for s in plan.steps if isinstance(s, Wait)]
    assert sorted(w.out for w in waits) == sorted(plan.steps[i].out for i in side)
    for i in side:
        launch = plan.steps[i]
        w = next(j for j, s in enumerate(plan.steps) if isinstance(s, Wait) and s.out == launch.out)
        assert w > i + 1 and set(w_ for w_ in plan.steps[w].writes) == set(launch.writes)
        # the updated parameters and moments are written in place: the wait does not read them
        assert not set(plan.steps[w].reads) & set(launch.writes)
    # in place, as without the side stream: no copy into a parameter at the end, no more arena
    assert not any(isinstance(s, Copy) for s in plan.steps)
    assert plan.arena_size <= plain.arena_size * 1.05 + 4096
    # the plain plan keeps one multi-tensor update at the end
    assert not any(isinstance(s, (Wait,)) or getattr(s, "side", False) for s in plain.steps)
    assert "on side stream" in str(plan) and "on the side stream has finished" in str(plan)


def test_an_eager_optimizer_step_has_nothing_to_overlap(monkeypatch):
    _target(monkeypatch, True)
    flame.manual_seed(0)
    lin = nn.Linear(8, 8)
    opt = flame.optim.AdamW(lin.parameters(), lr=1e-2)
    before = lin.weight.numpy().copy()
    lin(flame.tensor(np.ones((4, 8), np.float32))).sum().backward()
    opt.step()
    assert not np.array_equal(lin.weight.numpy(), before)
    for entry in compiler._CACHE.values():
        assert not any(isinstance(s, Wait) or getattr(s, "side", False) for s in entry.plan.steps)

