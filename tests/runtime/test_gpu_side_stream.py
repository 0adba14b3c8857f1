"""On a GPU: optimizer updates issued on the side stream (FLAME_SIDE_STREAM=1) give the
same bits as the same plan with every step on the plan's stream, with and without CUDA graphs, over
steps whose updates run while the backward's matmuls do; and the values of the plan without a side
stream (one multi-tensor update at the end) up to rounding: NVRTC contracts the update's multiply-adds
into FMAs per kernel source, and the two plans' update kernels are different sources."""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
import pytest

import flame
import flame.nn as nn
import flame.nn.functional as F
from flame import compiler
from flame.plan.steps import KernelLaunch, Wait

pytestmark = pytest.mark.gpu


def _train(monkeypatch, side: bool, graphs: bool, on_side_stream: bool = True, steps: int = 4):
    monkeypatch.setattr(compiler, "_CACHE", OrderedDict())
    monkeypatch.setenv("FLAME_SIDE_STREAM", "1" if side else "0")
    monkeypatch.setenv("FLAME_CUDA_GRAPHS", "1" if graphs else "0")
    monkeypatch.setenv("FLAME_MATMUL_BGRAD", "1")  # a Linear's weight and bias updates ready together: one launch
    if not on_side_stream:  # the same plan, its side launches issued on the plan's stream
        from flame.runtime import cuda_steps

        monkeypatch.setattr(cuda_steps, "_side_kernel", cuda_steps._kernel)
        monkeypatch.setitem(cuda_steps.STEP_HANDLERS, Wait, lambda s, fn, bufs, stream: None)
    flame.manual_seed(0)
    width = 1024  # big enough that an update still runs when the next matmul starts
    model = nn.Sequential(nn.Linear(256, width), nn.GELU(), nn.Linear(width, width), nn.GELU(),
                          nn.Linear(width, width), nn.GELU(), nn.Linear(width, 64)).to(flame.bfloat16)
    opt = flame.optim.AdamW(model.parameters(), lr=1e-3)

    @flame.compile
    def step(x, y):
        loss = F.cross_entropy(model(x).float(), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss

    rng = np.random.default_rng(0)
    losses = []
    for _ in range(steps):
        x = flame.tensor(rng.standard_normal((2048, 256)).astype(np.float32)).to(flame.bfloat16)
        y = flame.tensor(rng.integers(0, 64, 2048))
        losses.append(step(x, y).item())
    plan = step._lookup(step._args([x, y])).plan
    return plan, losses, [p.float().numpy() for p in model.parameters()]


@pytest.mark.parametrize("graphs", [False, True])
def test_side_stream_updates_equal_in_order_updates(monkeypatch, graphs):
    plan, losses, params = _train(monkeypatch, True, graphs)
    monkeypatch.undo()
    same, losses1, params1 = _train(monkeypatch, True, graphs, on_side_stream=False)
    monkeypatch.undo()
    plain, losses0, params0 = _train(monkeypatch, False, graphs)
    side = [s for s in plan.steps if isinstance(s, KernelLaunch) and s.side]
    assert len(side) == 3 and sum(isinstance(s, Wait) for s in plan.steps) == 3
    assert not any(isinstance(s, Wait) for s in plain.steps)
    assert losses == losses1
    for a, b in zip(params, params1):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(losses, losses0, rtol=1e-3)
    for a, b in zip(params, params0):  # a bf16 ulp here and there
        assert np.mean(a != b) < 1e-3
        np.testing.assert_allclose(a, b, rtol=2e-2, atol=1e-3)
