"""Attention in the IR and the plan (issue 13): the backward reads the forward's softmax statistics.
autodiff emits scaled_dot_product_attention_stats right after the forward (a forward op, printed and
parsed like any), the backward op takes it as an input; the fusion pass joins it to its forward, so
one AttentionCall writes the result and the statistics into planned buffers; the backward call reads
them, and its workspace (the CUDA target's bound, no GPU here) no longer holds the statistics and a
copy of the output; an inference graph keeps no statistics buffer. The reference executor runs the
CUDA target's plans, and the gradients match torch's SDPA."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from flame.ir import Builder, Graph, TensorType, parse, print_graph, verify
from flame.ir.dtypes import bf16, f32
from flame.ir.ops.attention import BACKWARD, FORWARD, STATS
from flame.passes.autodiff import autodiff, is_backward
from flame.passes.pipeline import legalize, lower, run_pipeline
from flame.plan.build import to_plan
from flame.plan.memory import check_plan
from flame.plan.steps import AttentionCall
from flame.runtime import cudnn_attention
from flame.runtime.backend import capabilities
from flame.runtime.reference import ReferenceExecutor, run_graph

B, H, L, E = 2, 4, 64, 16
ATTRS = {"scale": E**-0.5, "is_causal": True}


def _graph(train: bool, dtype=bf16) -> Graph:
    """loss = sum(attention(q, k, v) * cot), with the gradients of q, k, v when `train`."""
    g = Graph("attn")
    q, k, v, cot = (g.add_input(TensorType((B, H, L, E), dtype), "param" if i < 3 else "data") for i in range(4))
    b = Builder(g, "model.py:3  y = F.scaled_dot_product_attention(q, k, v, is_causal=True)")
    y = b.emit(FORWARD, q, k, v, **ATTRS)
    loss = b.reduce_sum(b.cast(b.mul(y, cot), dtype=f32), axes=[0, 1, 2, 3], keepdim=False)
    g.outputs = [loss, *autodiff(g, loss, [q, k, v])] if train else [y]
    return verify(g)


def _compiled(g: Graph):
    """The graph and plan compile_graph makes for the CUDA executor (cuDNN runs bf16 causal attention)."""
    target = capabilities("cuda")
    g = lower(legalize(run_pipeline(g), target.attention_unsupported), target=target)
    return g, to_plan(g, target=target)


def _arrays(g: Graph, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(v.type.shape).astype(v.type.dtype.np_dtype) for v in g.inputs]


def test_autodiff_saves_the_statistics_after_the_forward_and_the_ir_round_trips():
    g = _graph(True)
    names = [op.name for op in g.ops]
    fwd, stats, bwd = (g.ops[names.index(n)] for n in (FORWARD, STATS, BACKWARD))
    assert names.index(STATS) == names.index(FORWARD) + 1  # right after it, a forward op with its line
    assert not is_backward(stats) and stats.loc == fwd.loc and is_backward(bwd)
    assert stats.inputs == fwd.inputs and stats.attrs == fwd.attrs
    assert stats.out.type == TensorType((B, H, L), f32)
    assert bwd.inputs[3] is fwd.out and bwd.inputs[5] is stats.out
    text = print_graph(g)
    assert f"= {STATS} %0, %1, %2 {{" in text and ": f32[2,4,64]" in text
    assert print_graph(parse(text)) == text


def test_training_plan_one_forward_call_writes_out_and_stats_and_the_backward_reads_them():
    g, plan = _compiled(_graph(True))
    check_plan(plan)
    fwd, bwd = (s for s in plan.steps if isinstance(s, AttentionCall))
    assert [op.name for op in fwd.ops] == [FORWARD, STATS] and fwd.outputs == (fwd.out, fwd.stats)
    assert fwd.writes == (fwd.out, fwd.stats, *fwd.scratch)
    stats = plan.buffers[fwd.stats]
    assert stats.role == "temporary" and stats.shape == (B, H, L) and stats.dtype == f32
    assert bwd.backward and bwd.stats == fwd.stats and bwd.o == fwd.out
    assert bwd.reads == (fwd.q, fwd.k, fwd.v, fwd.out, bwd.grad_out, fwd.stats)
    # the forward keeps nothing in its workspace; the backward's holds only what cuDNN accumulates
    assert plan.buffers[fwd.workspace].nbytes == 1 << 20
    accum = 4 * B * H * L * E + 2 * 4 * B * H * L
    assert plan.buffers[bwd.workspace].nbytes == -(-accum // 256) * 256 + (1 << 20)
    line = f"b{fwd.out}, b{fwd.stats} = call attention (b{fwd.q}, b{fwd.k}, b{fwd.v}) scratch=b{fwd.workspace}"
    assert line in str(plan) and f"= call attention_backward (b{fwd.q}" in str(plan)
    grp = next(grp for grp in g.groups if grp.kind == "attention" and len(grp.ops) == 2)
    assert grp.reason.startswith("attention (one library call")


def test_training_plan_runs_on_the_reference_executor_like_the_graph():
    g = _graph(True)
    _, plan = _compiled(g)
    arrays = _arrays(g)
    got = ReferenceExecutor().compile(plan)(arrays)
    for a, b in zip(got, run_graph(g, arrays)):
        np.testing.assert_allclose(np.asarray(a, np.float64), np.asarray(b, np.float64), rtol=2e-2, atol=2e-2)


def test_inference_keeps_no_statistics():
    """A forward alone: no stats op, no stats buffer; the call writes them into its own workspace."""
    g, plan = _compiled(_graph(False))
    assert STATS not in print_graph(g)
    (call,) = (s for s in plan.steps if isinstance(s, AttentionCall))
    assert call.stats is None and call.stats_op is None and call.outputs == (call.out,)
    assert plan.buffers[call.workspace].nbytes == 4 * B * H * L + (1 << 20)


def test_workspace_bounds_per_call():
    """What each call keeps in its workspace (no GPU: the bounds from the shapes)."""
    g = _graph(True)
    fwd, stats, bwd = (next(op for op in g.ops if op.name == n) for n in (FORWARD, STATS, BACKWARD))
    mib = 1 << 20
    assert cudnn_attention.workspace_bytes(fwd, with_stats=True) == mib
    assert cudnn_attention.workspace_bytes(fwd) == 4 * B * H * L + mib  # the statistics, then dropped
    assert cudnn_attention.workspace_bytes(stats) == 2 * B * H * L * E + mib  # the output, then dropped
    assert cudnn_attention.workspace_bytes(bwd) == 4 * B * H * L * E + 8 * B * H * L + mib


def test_statistics_alone_are_their_own_call():
    """The statistics without their forward (e.g. a remat that recomputes the forward): one call for
    them, the reference executor writes the log-sum-exp."""
    g = Graph("stats")
    q, k, v = (g.add_input(TensorType((B, H, L, E), bf16)) for _ in range(3))
    g.outputs = [Builder(g).emit(STATS, q, k, v, **ATTRS)]
    _, plan = _compiled(g)
    (call,) = (s for s in plan.steps if isinstance(s, AttentionCall))
    assert call.op.name == STATS and call.stats is None and "= call attention_stats (" in str(plan)
    assert plan.buffers[call.workspace].nbytes == 2 * B * H * L * E + (1 << 20)
    arrays = _arrays(g)
    (got,) = ReferenceExecutor().compile(plan)(arrays)
    s = np.einsum("bhle,bhse->bhls", *(a.astype(np.float64) for a in arrays[:2])) * ATTRS["scale"]
    s = np.where(np.tril(np.ones((L, L), bool)), s, -np.inf)
    want = np.log(np.exp(s - s.max(-1, keepdims=True)).sum(-1)) + s.max(-1)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("causal", [False, True])
def test_gradients_through_the_cuda_plan_match_torch(causal):
    g = Graph("attn")
    q, k, v, cot = (g.add_input(TensorType((B, H, L, E), f32), "param" if i < 3 else "data") for i in range(4))
    b = Builder(g)
    y = b.emit(FORWARD, q, k, v, scale=E**-0.5, is_causal=causal)
    loss = b.reduce_sum(b.mul(y, cot), axes=[0, 1, 2, 3], keepdim=False)
    g.outputs = [y, *autodiff(g, loss, [q, k, v])]
    _, plan = _compiled(verify(g))  # f32: cuDNN does not take it, so this plan is the decomposed graph
    arrays = _arrays(g, 1)
    ts = [torch.tensor(a, requires_grad=True) for a in arrays[:3]]
    want = torch.nn.functional.scaled_dot_product_attention(*ts, is_causal=causal)
    want.backward(torch.tensor(arrays[3]))
    for got in (ReferenceExecutor().compile(plan)(arrays), run_graph(g, arrays)):
        np.testing.assert_allclose(got[0], want.detach().numpy(), rtol=1e-5, atol=1e-5)
        for x, t in zip(got[1:], ts):
            np.testing.assert_allclose(x, t.grad.numpy(), rtol=1e-4, atol=1e-5)
