"""The arena workspace a GEMM's call reserves: on a GPU, what cuBLASLt's heuristic ranks first asks for
(at least 4 KiB, at most the bound sized by the output); without one, or for a size the plan leaves
symbolic, the bound. A bf16 transformer's GEMMs ask for none, and the 32 MiB bound sat in the arena at
the step's peak."""

from __future__ import annotations

import numpy as np
import pytest

import flame
import flame.nn as nn
from flame.ir import Builder, Graph, TensorType, dtype_of
from flame.plan.steps import MatmulCall
from flame.runtime import backend, matmul


def _matmul_op(m: int, k: int, n: int, dt: str = "bf16"):
    g = Graph("mm")
    b = Builder(g)
    x = g.add_input(TensorType((m, k), dtype_of(dt)))
    w = g.add_input(TensorType((k, n), dtype_of(dt)))
    return b.matmul(x, w).producer


def test_without_a_gpu_the_bound_is_planned(monkeypatch):
    monkeypatch.setattr(backend, "cuda_available", lambda: False)
    op = _matmul_op(2048, 512, 1024)
    assert backend._matmul_workspace(op) == matmul.workspace_bytes(2048 * 1024) == 32 << 20


def _mlp_step(width: int):
    flame.manual_seed(0)
    model = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width)).to(flame.bf16)
    opt = flame.optim.AdamW(model.parameters(), lr=1e-3)

    @flame.compile
    def step(x):
        loss = (model(x).float() ** 2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss

    return step, list(model.parameters())


@pytest.mark.gpu
def test_on_a_gpu_each_gemm_plans_what_its_first_algorithm_asks_for():
    step, step_params = _mlp_step(512)
    x = flame.tensor(np.random.default_rng(0).standard_normal((2048, 512)).astype(np.float32)).to(flame.bf16)
    plan = step._lookup(step._args([x])).plan
    calls = [s for s in plan.steps if isinstance(s, MatmulCall)]
    sizes = [(plan.buffers[s.workspace].nbytes, matmul.workspace_bytes(int(np.prod(plan.buffers[s.out].shape))))
             for s in calls]
    assert sizes and all(4096 <= n <= bound for n, bound in sizes)
    assert any(n < bound for n, bound in sizes)  # the heuristic's first algorithm asks for less than the bound
    before = [p.numpy().astype(np.float32).copy() for p in step_params]
    assert np.isfinite(step(x).item())  # the step runs with those workspaces (CUDA vs reference: elsewhere)
    after = [p.numpy().astype(np.float32) for p in step_params]
    assert all(np.isfinite(a).all() and not np.array_equal(a, b) for a, b in zip(after, before))
