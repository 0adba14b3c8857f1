"""For a GPU target the plan builder renders the fused groups of the most ops first (a step's optimizer
update: its slowest NVRTC compile, the step's last group) and starts their compiles before the step's
first group's; the plan is the one built in step order, kernel for kernel, and no early rendering
counts as a reused rendering."""

from __future__ import annotations

import dataclasses

import numpy as np

import flame
import flame.nn as nn
import flame.nn.functional as F
from flame import compiler
from flame.codegen import nvrtc
from flame.plan.build import EARLY_GROUPS, to_plan


def test_the_largest_groups_compile_first_and_the_plan_is_unchanged(cuda_target, monkeypatch):
    flame.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.LayerNorm(32), nn.Linear(32, 4))
    opt = flame.optim.AdamW(model.parameters(), lr=1e-3)

    @flame.compile
    def step(x, y):
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss

    rng = np.random.default_rng(0)
    graph = step.optimized(flame.tensor(rng.standard_normal((8, 16)).astype(np.float32)),
                           flame.tensor(rng.integers(0, 4, 8)))
    started: list[str] = []
    monkeypatch.setattr(nvrtc, "compile_ahead", lambda source, arch, name="": started.append(source))
    target = compiler.capabilities("cuda")
    in_order = to_plan(graph, target=target)  # no architecture: nothing started, nothing early
    assert not started
    plan = to_plan(graph, target=dataclasses.replace(target, arch="sm_90"))
    assert plan.steps == in_order.steps
    assert plan.reused == in_order.reused
    largest = sorted((g for g in graph.groups if len(g.ops) > 1 and g.kind in ("elementwise", "rows", "reduction")),
                     key=lambda g: -len(g.ops))[:EARLY_GROUPS]
    early = {k.source for k in plan.kernels() if set(k.ops) <= {op for g in largest for op in g.ops}}
    assert early and set(started[: len(early)]) == early  # started before any other kernel
    assert set(started) == {k.source for k in plan.kernels()}
