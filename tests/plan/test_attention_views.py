"""Attention operands and results through strides (flame.plan.views, issue 13): q, k, v read as
strided views of the qkv projection's buffer, the output written in [B, T, H, D] order for the output
projection, the backward reading grad_out from its projection's buffer and writing dq, dk, dv into
one [B, T, 3, H, D] buffer; no copy kernel runs around the attention calls. The reference executor
runs the same plans through NumPy strided views, and the values and gradients match torch's. Layouts
cuDNN cannot take fall back to the copy, whose launch says why."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import flame
import flame.nn.functional  # noqa: F401  (flame.nn.functional below)
from flame.explain import explain_plan
from flame.ir import Builder, Graph, TensorType, verify
from flame.ir.dtypes import bf16, f32
from flame.ir.indexmap import is_view
from flame.ir.ops.attention import BACKWARD, FORWARD, STATS
from flame.passes.autodiff import autodiff
from flame.passes.pipeline import legalize, lower, run_pipeline
from flame.plan.build import to_plan
from flame.plan.memory import check_plan
from flame.plan.steps import AttentionCall, KernelLaunch
from flame.plan.views import Strided, flat_range, reshaped, view_start
from flame.runtime.backend import capabilities
from flame.runtime.reference import ReferenceExecutor, run_graph

B, T, H, D = 2, 16, 2, 8
C = H * D


def _block(dtype, B=B, seq=T, H=H, D=D) -> Graph:
    """loss = sum((attention(qkv[0], qkv[1], qkv[2]) as [B, T, C]) @ w * cot) with qkv = x as
    [B, T, 3, H, D] permuted to [3, B, H, T, D] (the GPT block's attention); gradients of x and w."""
    C = H * D
    g = Graph("block")
    x = g.add_input(TensorType((B, seq, 3 * C), dtype), "param")
    w = g.add_input(TensorType((C, C), dtype), "param")
    cot = g.add_input(TensorType((B, seq, C), dtype), "data")
    b = Builder(g)
    qkv = b.permute(b.reshape(x, shape=[B, seq, 3, H, D]), perm=[2, 0, 3, 1, 4])
    q, k, v = (b.squeeze(b.slice(qkv, starts=[i, 0, 0, 0, 0], stops=[i + 1, B, H, seq, D], steps=[1] * 5), axes=[0])
               for i in range(3))
    y = b.emit(FORWARD, q, k, v, scale=D**-0.5, is_causal=True)
    o = b.matmul(b.reshape(b.permute(y, perm=[0, 2, 1, 3]), shape=[B, seq, C]), w)
    loss = b.reduce_sum(b.cast(b.mul(o, cot), dtype=f32), axes=[0, 1, 2], keepdim=False)
    g.outputs = [loss, *autodiff(g, loss, [x, w])]
    return verify(g)


def _lora_block(dtype) -> Graph:
    """_block's attention on qkv = h @ wx + 2.0 * (h @ wa) (a LoRA projection: the base product plus
    the scaled adapter's), computed by a fused kernel instead of read from a projection's buffer."""
    g = Graph("lora_block")
    h = g.add_input(TensorType((B, T, C), dtype), "data")
    wx = g.add_input(TensorType((C, 3 * C), dtype), "param")
    wa = g.add_input(TensorType((C, 3 * C), dtype), "param")
    w = g.add_input(TensorType((C, C), dtype), "param")
    b = Builder(g)
    s = b.add(b.matmul(h, wx), b.mul(b.matmul(h, wa), b.full(shape=(), value=2.0, dtype=dtype.name)))
    qkv = b.permute(b.reshape(s, shape=[B, T, 3, H, D]), perm=[2, 0, 3, 1, 4])
    q, k, v = (b.squeeze(b.slice(qkv, starts=[i, 0, 0, 0, 0], stops=[i + 1, B, H, T, D], steps=[1] * 5), axes=[0])
               for i in range(3))
    y = b.emit(FORWARD, q, k, v, scale=D**-0.5, is_causal=True)
    o = b.matmul(b.reshape(b.permute(y, perm=[0, 2, 1, 3]), shape=[B, T, C]), w)
    loss = b.reduce_sum(b.cast(o, dtype=f32), axes=[0, 1, 2], keepdim=False)
    g.outputs = [loss, *autodiff(g, loss, [wx, wa])]
    return verify(g)


def _compiled(g: Graph, executor: str):
    target = capabilities(executor)
    g = lower(legalize(run_pipeline(g), target.attention_unsupported), target=target)
    plan = to_plan(g, target=target)
    check_plan(plan)
    return g, plan


def _arrays(g: Graph, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(v.type.shape).astype(v.type.dtype.np_dtype) for v in g.inputs]


def _copies(plan) -> list[KernelLaunch]:
    """Launches that only move elements (every op a view)."""
    return [s for s in plan.kernels() if s.grid and all(is_view(op) for op in s.ops)]


def _torch_block(arrays):
    x, w, cot = (torch.tensor(a, dtype=torch.float64, requires_grad=i < 2) for i, a in enumerate(arrays))
    qkv = x.reshape(B, -1, 3, H, D).permute(2, 0, 3, 1, 4)
    y = torch.nn.functional.scaled_dot_product_attention(qkv[0], qkv[1], qkv[2], is_causal=True, scale=D**-0.5)
    loss = ((y.transpose(1, 2).reshape(B, -1, C) @ w) * cot).sum()
    loss.backward()
    return [loss.detach().numpy(), x.grad.numpy(), w.grad.numpy()]


def test_reference_plan_reads_and_writes_through_strides_and_matches_torch():
    g = _block(f32)
    _, plan = _compiled(g, "reference")
    fwd, bwd = (s for s in plan.steps if isinstance(s, AttentionCall))
    assert dict((n, (st, s)) for n, st, s in fwd.layouts) == {
        "q": (0, (T * 3 * C, D, 3 * C, 1)), "k": (C, (T * 3 * C, D, 3 * C, 1)), "v": (2 * C, (T * 3 * C, D, 3 * C, 1)),
        "o": (0, (T * C, D, C, 1))}
    assert fwd.q == fwd.k == fwd.v == bwd.q and bwd.o == fwd.out
    assert {n for n, _, _ in bwd.layouts} >= {"q", "k", "v", "o", "grad_out"}
    assert plan.buffers[fwd.out].shape == (B, T, H, D)  # the output projection's operand, written once
    assert not _copies(plan), [s.name for s in _copies(plan)]
    arrays = _arrays(g)
    got = ReferenceExecutor().compile(plan)(arrays)
    for a, want in zip(got, _torch_block(arrays)):
        np.testing.assert_allclose(a, want, rtol=1e-5, atol=1e-5)
    for a, want in zip(got, run_graph(g, arrays)):
        np.testing.assert_array_equal(a, want)


def test_cuda_plan_of_a_gpt_block_has_no_copy_around_attention():
    """The CUDA target's plan (bf16: cuDNN runs it; planned here without a GPU): no kernel made of
    views only, the calls take 16-byte aligned strided operands; the reference executor runs it."""
    g = _block(bf16)
    _, plan = _compiled(g, "cuda")
    calls = [s for s in plan.steps if isinstance(s, AttentionCall)]
    assert [c.op.name for c in calls] == [FORWARD, BACKWARD] and calls[0].stats_op.name == STATS
    assert not _copies(plan), [s.name for s in _copies(plan)]
    assert "{strided q=0+[" in str(plan) and " o=0+[" in str(plan)
    arrays = _arrays(g, 1)
    got = ReferenceExecutor().compile(plan)(arrays)
    for a, want in zip(got, run_graph(g, arrays)):
        np.testing.assert_allclose(np.asarray(a, np.float64), np.asarray(want, np.float64), rtol=2e-2, atol=2e-2)


def _packed_grads_graph(dtype) -> Graph:
    """dq, dk, dv of attention at q, k, v [B, H, T, D], packed, as [B, T, 3, H, D] (the gradient of
    the GPT block's qkv projection when nothing lies between the backward and the permute)."""
    g = Graph("grads")
    q, k, v, gout = (g.add_input(TensorType((B, H, T, D), dtype)) for _ in range(4))
    b = Builder(g)
    attrs = {"scale": D**-0.5, "is_causal": False}
    y = b.emit(FORWARD, q, k, v, **attrs)
    stats = b.emit(STATS, q, k, v, **attrs)
    packed = b.emit(BACKWARD, q, k, v, y, gout, stats, **attrs)
    dqkv = b.reshape(b.permute(b.reshape(packed, shape=[3, B, H, T, D]), perm=[1, 3, 0, 2, 4]), shape=[B, T, 3 * C])
    g.outputs = [b.matmul(dqkv, b.full(shape=[3 * C, C], value=1.0, dtype=dtype.name))]
    return verify(g)


@pytest.mark.parametrize("executor", ["reference", "cuda"])
def test_backward_writes_the_three_gradients_into_one_interleaved_buffer(executor):
    g = _packed_grads_graph(f32 if executor == "reference" else bf16)
    _, plan = _compiled(g, executor)
    bwd = next(s for s in plan.steps if isinstance(s, AttentionCall) and s.backward)
    lays = {n: (st, s) for n, st, s in bwd.layouts}
    assert lays["dq"] == (0, (T * 3 * C, D, 3 * C, 1)) and lays["dk"][0] == C and lays["dv"][0] == 2 * C
    assert plan.buffers[bwd.out].shape == (B, T, 3 * C)  # the matmul reads it as it is
    assert not _copies(plan)
    arrays = _arrays(g, 2)
    (got,), (want,) = ReferenceExecutor().compile(plan)(arrays), run_graph(g, arrays)
    tol = 1e-5 if executor == "reference" else 2e-2
    np.testing.assert_allclose(np.asarray(got, np.float64), np.asarray(want, np.float64), rtol=tol, atol=tol)


def test_a_layout_cudnn_cannot_take_keeps_the_copy_and_says_why():
    """q read with its head dim strided (a transpose of [.., D, T]): the NumPy reference takes it,
    cuDNN does not, so the CUDA target's plan copies it and the launch gives cuDNN's reason."""
    g = Graph("transposed")
    qt = g.add_input(TensorType((B, H, D, T), bf16))
    k, v = (g.add_input(TensorType((B, H, T, D), bf16)) for _ in range(2))
    b = Builder(g)
    g.outputs = [b.emit(FORWARD, b.permute(qt, perm=[0, 1, 3, 2]), k, v, scale=D**-0.5, is_causal=False)]
    verify(g)
    _, ref = _compiled(g, "reference")
    assert not _copies(ref) and ref.steps[-1].layouts[0][0] == "q"
    lowered, plan = _compiled(g, "cuda")
    (copy,) = _copies(plan)
    assert copy.reason.startswith("scaled_dot_product_attention reads q through views, but cuDNN needs the head dim")
    assert "cuDNN needs the head dim" in explain_plan("transposed", lowered, plan)
    arrays = _arrays(g, 3)
    for p in (ref, plan):
        (got,) = ReferenceExecutor().compile(p)(arrays)
        np.testing.assert_array_equal(got, run_graph(g, arrays)[0])


def test_layouts_of_views():
    """reshape keeps a strided tensor's layout where the merged dims are contiguous in themselves; a
    flat range is a slice then a reshape; view_start is the contiguous case."""
    lay = Strided(0, (3072, 64, 1))  # [T, H, D] inside [T, 3, H, D]
    assert reshaped(lay, (8, 16, 64), (8, 1024)) == Strided(0, (3072, 1))
    assert reshaped(Strided(0, (64, 1024, 1)), (16, 8, 64), (128, 64)) is None  # merging [H, T] of [T, H, D]
    assert flat_range(Strided(0, (64, 1024, 192, 1)), (3, 16, 8, 64), 8192, 16384, (16, 8, 64)) == \
        Strided(64, (1024, 192, 1))
    g = Graph("v")
    x = g.add_input(TensorType((4, 1, 64), f32))
    b = Builder(g)
    ops = [b.permute(x, perm=[1, 0, 2]), b.permute(x, perm=[2, 0, 1]),
           b.slice(x, starts=[2, 0, 0], stops=[4, 1, 64], steps=[1, 1, 1]),  # 512 bytes in: ALIGNed
           b.slice(x, starts=[1, 0, 0], stops=[4, 1, 64], steps=[1, 1, 1])]  # 256 bytes in
    assert [view_start(v.producer) for v in ops] == [0, None, 128, 64]


@pytest.mark.parametrize("executor", ["reference", "cuda"])
def test_a_fused_projection_is_stored_once_and_read_through_strides(executor):
    """The kernel computing x + 2.0 * a writes it as it is, [B, T, 3C] (not q, k and v transposed
    apart: 24% of copy in a LoRA step on an H100); the attention calls read q, k, v through strides,
    the backward writes dq, dk, dv into one buffer (the +0.0 of the slab sum is dropped though the
    gradient is scaled by 2.0 on its way to a GEMM), and no copy runs."""
    g = _lora_block(f32 if executor == "reference" else bf16)
    _, plan = _compiled(g, executor)
    fwd = next(s for s in plan.steps if isinstance(s, AttentionCall) and not s.backward)
    assert dict((n, st) for n, st, _ in fwd.layouts) == {"q": 0, "k": C, "v": 2 * C, "o": 0}
    assert plan.buffers[fwd.q].shape == (B, T, 3 * C)
    bwd = next(s for s in plan.steps if isinstance(s, AttentionCall) and s.backward)
    lays = {n: (st, s) for n, st, s in bwd.layouts}
    assert lays["dq"] == (0, (T * 3 * C, D, 3 * C, 1)) and lays["dk"][0] == C and lays["dv"][0] == 2 * C
    shapes = [plan.buffers[a].shape for k in plan.kernels() for a in k.args[k.n_inputs:k.n_inputs + k.n_outputs]]
    assert (B, H, T, D) not in shapes and (3, B, H, T, D) not in shapes  # nothing written transposed apart
    assert not _copies(plan), [s.name for s in _copies(plan)]
    arrays = _arrays(g, 3)
    tol = 1e-5 if executor == "reference" else 2e-2
    for got, want in zip(ReferenceExecutor().compile(plan)(arrays), run_graph(g, arrays)):
        np.testing.assert_allclose(np.asarray(got, np.float64), np.asarray(want, np.float64), rtol=tol, atol=tol)


def test_attention_of_empty_sequences_plans_without_a_view():
    """Queries, keys and values with no position: their gradients are no range of a packed result
    (an empty tensor has none), and the step plans and runs (torch: empty results, zero gradients)."""
    assert flat_range(Strided(0, (0, 0, 2, 1)), (2, 1, 0, 2), 0, 0, (2, 1, 0, 2)) is None
    q = flame.tensor(np.zeros((2, 1, 0, 2), np.float32), requires_grad=True)
    y = flame.nn.functional.scaled_dot_product_attention(q, q, q)
    (y * y).sum().backward()
    assert y.shape == (2, 1, 0, 2) and q.grad.shape == (2, 1, 0, 2)
