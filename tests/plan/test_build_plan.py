"""The plan builder folds a transpose into a matmul (ta/tb) only when the transpose runs as its own
kernel: a transpose fused into its producer's kernel has an input that lives only inside that kernel
(no buffer to read), which used to fail with a KeyError while building the plan (issue 13 item 8,
issue 14 item 1). Reference executor, checked against PyTorch."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import flame
import flame.nn as nn
import flame.nn.functional as F
from flame.ir import Builder, Graph, TensorType, dtype_of, verify
from flame.passes.pipeline import lower, run_pipeline
from flame.plan.build import fold_transposes, to_plan
from flame.plan.memory import check_plan
from flame.plan.steps import MatmulCall
from flame.runtime.reference import run_graph, run_plan


def _grads(f_flame, f_torch, arrays):
    """Gradients of f(...).sum() for every argument, flame (eager backward) and torch."""
    fl = [flame.tensor(a, requires_grad=True) for a in arrays]
    to = [torch.tensor(a, requires_grad=True) for a in arrays]
    f_flame(*fl).sum().backward()
    f_torch(*to).sum().backward()
    return [t.grad.numpy() for t in fl], [t.grad.numpy() for t in to]


def _arrays(*shapes, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s).astype(np.float32) for s in shapes]


@pytest.mark.parametrize("act", ["gelu", "relu"])
def test_eager_backward_of_an_activation_between_two_matmuls(act):
    fl, to = {"gelu": (F.gelu, torch.nn.functional.gelu), "relu": (F.relu, torch.relu)}[act]
    got, want = _grads(lambda x, w1, b1, w2: fl(x @ w1 + b1) @ w2, lambda x, w1, b1, w2: to(x @ w1 + b1) @ w2,
                       _arrays((16, 32), (32, 64), (64,), (64, 8)))
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)


def test_compiled_transpose_of_a_relu_into_a_matmul():
    a, b = _arrays((2, 3), (2, 4))
    got = flame.compile(lambda a, b: a.relu().T @ b)(flame.tensor(a), flame.tensor(b))
    np.testing.assert_allclose(got.numpy(), np.maximum(a, 0).T @ b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("f", [lambda a, b: a @ b.relu().T, lambda a, b: a.exp().T @ b.exp().T],
                         ids=["rhs", "both"])
def test_compiled_transposes_of_fused_results_on_both_sides(f):
    a, b = _arrays((3, 3), (3, 3))
    got = flame.compile(f)(flame.tensor(a), flame.tensor(b))
    np.testing.assert_allclose(got.numpy(), f(torch.tensor(a), torch.tensor(b)).numpy(), rtol=1e-5)


def test_eager_backward_of_a_sequential_mlp():
    flame.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    ref = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    with torch.no_grad():
        for p, q in zip(model.parameters(), ref.parameters()):
            q.copy_(torch.tensor(p.numpy()))
    (x,) = _arrays((5, 4))
    model(flame.tensor(x)).sum().backward()
    ref(torch.tensor(x)).sum().backward()
    for p, q in zip(model.parameters(), ref.parameters()):
        np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-5, atol=1e-6)


def _transpose_into_matmul(fused_producer: bool) -> Graph:
    """matmul(transpose(relu(a)) or transpose(a), b)."""
    g = Graph("t")
    bld = Builder(g)
    a = g.add_input(TensorType((2, 3), dtype_of("f32")))
    b = g.add_input(TensorType((2, 4), dtype_of("f32")))
    g.outputs = [bld.matmul(bld.transpose_last(bld.relu(a) if fused_producer else a), b)]
    return lower(run_pipeline(verify(g)))


@pytest.mark.parametrize("fused_producer", [False, True])
def test_only_a_transpose_running_alone_is_folded(fused_producer):
    g = _transpose_into_matmul(fused_producer)
    folded = fold_transposes(g)
    plan = to_plan(g)
    check_plan(plan)
    (call,) = [s for s in plan.steps if isinstance(s, MatmulCall)]
    assert bool(folded) == call.ta == (not fused_producer)
    a, b = _arrays((2, 3), (2, 4))
    np.testing.assert_allclose(run_plan(plan, [a, b])[0], run_graph(g, [a, b])[0], rtol=1e-6)


@pytest.mark.gpu
def test_fused_transposes_into_matmuls_on_the_gpu():
    a, b = _arrays((2, 3), (2, 4))
    got = flame.compile(lambda a, b: a.relu().T @ b)(flame.tensor(a), flame.tensor(b))
    np.testing.assert_allclose(got.numpy(), np.maximum(a, 0).T @ b, rtol=1e-5, atol=1e-6)
    got, want = _grads(lambda x, w1, b1, w2: F.gelu(x @ w1 + b1) @ w2,
                       lambda x, w1, b1, w2: torch.nn.functional.gelu(x @ w1 + b1) @ w2,
                       _arrays((16, 32), (32, 64), (64,), (64, 8)))
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)
