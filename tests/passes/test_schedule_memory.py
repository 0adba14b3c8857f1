"""schedule_memory: the kernel order of plans fitted to a memory budget. On an MLP training step (Linear,
GELU, Linear, whose backward recomputes the GELU output from its saved input) the recomputation leaves
its sibling kernel and runs right before the weight-gradient matmul that reads it, which runs before the
input-gradient matmul; the results stay the same bit for bit. On this MLP the default order is the
lower one (or as low): its backward kernel recomputes the GELU output over the bytes of its input, and writes the
GELU input's gradient over its output's gradient (one segment, every value read before it is overwritten); a budget
tries the memory-first order only when the default one misses it."""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
import pytest

import flame
import flame.nn as nn
from flame import compiler
from flame.ir.graph import segments
from flame.passes import remat
from flame.passes.autodiff import is_backward
from flame.passes.remat import is_recompute
from flame.passes.schedule_memory import _peak, schedule_memory
from flame.plan.steps import MemoryBudget

TOKENS, WIDTH = 256, 32


def _mlp():
    """A GELU MLP (seeded) and its training step: the loss, with the gradients left in .grad."""
    flame.manual_seed(0)
    model = nn.Sequential(nn.Linear(WIDTH, 4 * WIDTH), nn.GELU(), nn.Linear(4 * WIDTH, WIDTH))

    def step(x):
        loss = (model(x) ** 2).mean()
        loss.backward()
        return loss

    return model, step


def _run(memory_first: bool, monkeypatch, bgrad: bool = True):
    """(graph after the passes, planned peak, loss, gradients) of the MLP step; memory_first plans it
    as a memory budget would (tier 0 recomputed, memory-first order). Bias gradients ride in their
    weight-gradient GEMMs (FLAME_MATMUL_BGRAD=1), the order the module docstring describes; as column
    kernels of their own (the default) the peak is the same (test below)."""
    monkeypatch.setattr(compiler, "_CACHE", OrderedDict())
    monkeypatch.setenv("FLAME_MATMUL_BGRAD", "1" if bgrad else "0")
    if memory_first:
        monkeypatch.setattr(compiler, "_fit_budget", lambda g, requested, finish: (
            lambda op: remat.tier(op) == 0, MemoryBudget(requested, 0, 0), True))
    model, step = _mlp()
    f = flame.compile(step, memory_budget=0.5 if memory_first else None)
    x = flame.tensor(np.random.default_rng(1).standard_normal((TOKENS, WIDTH)).astype(np.float32))
    report = f.memory_report(x)
    loss = f(x).item()
    return f.optimized(x), report.peak, loss, [p.grad.numpy().copy() for p in model.parameters()]


def test_memory_first_order_keeps_the_bits_and_a_budget_keeps_the_lower_order(monkeypatch):
    g0, peak0, loss0, grads0 = _run(False, monkeypatch)
    monkeypatch.undo()
    g, peak, loss, grads = _run(True, monkeypatch)
    assert loss == loss0
    for a, b in zip(grads, grads0):
        assert a.tobytes() == b.tobytes()
    assert peak0 <= peak, (peak0, peak)  # the fused, in-place backward kernel (module docstring)
    monkeypatch.undo()
    budgeted = flame.compile(_mlp()[1], memory_budget=1.0)
    x = flame.tensor(np.ones((TOKENS, WIDTH), np.float32))
    assert budgeted.memory_report(x).peak == peak0  # a budget the default order meets keeps that order
    # the recomputed GELU is a kernel of its own, and runs (for the weight gradient that reads it) before
    # the input gradient's matmul allocates the GELU input's gradient
    at = {op: i for i, grp in enumerate(g.groups) for op in grp.ops}
    (gelu,) = [op for op in g.ops if op.name == "gelu" and is_recompute(op)]
    assert len(segments(list(g.groups[at[gelu]].ops))) == 1
    (dh,) = [op for op in g.ops if op.name == "matmul" and is_backward(op) and op.out.shape == (TOKENS, 4 * WIDTH)]
    assert at[gelu] < at[dh]


@pytest.mark.parametrize("memory_first", [False, True])
def test_bias_gradients_as_column_kernels_keep_the_peak(monkeypatch, memory_first):
    g0, peak0, loss0, grads0 = _run(memory_first, monkeypatch)
    monkeypatch.undo()
    g, peak, loss, grads = _run(memory_first, monkeypatch, bgrad=False)
    assert not [grp for grp in g.groups if grp.epilogue.startswith("bgrad")]
    assert [grp for grp in g0.groups if grp.epilogue.startswith("bgrad")]
    assert peak == peak0 and loss == loss0
    for a, b in zip(grads, grads0):  # f32 sums in another order: equal to rounding
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_schedule_memory_keeps_the_kernels_and_never_raises_the_estimate(monkeypatch):
    g, *_ = _run(False, monkeypatch)
    out = schedule_memory(g)
    assert sorted(id(op) for op in out.ops) == sorted(id(op) for op in g.ops)
    assert [op for grp in out.groups for op in grp.ops] == out.ops
    assert _peak(out, out.groups) <= _peak(g, g.groups)
    assert g.groups is not None and schedule_memory(g) is not g  # g itself is left alone


@pytest.mark.parametrize("budget", [0.05])
def test_an_unreachable_budget_says_what_is_live_at_the_floor(budget):
    _, step = _mlp()
    f = flame.compile(step, memory_budget=budget)
    x = flame.tensor(np.ones((TOKENS, WIDTH), np.float32))
    with pytest.raises(flame.MemoryBudgetError, match=r"smallest reachable planned peak is .* of the .* planned "
                                                      r"without a budget.*the arena .*largest first: [\d.]+ KiB f32"):
        f(x)
