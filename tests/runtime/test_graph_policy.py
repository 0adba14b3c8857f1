"""When the CUDA executor replays a plan as a CUDA graph (runtime/cuda_graphs.py graphs_pay_off): a replay
copies staged inputs in and fresh outputs out; it pays off where that costs less than half of the
host time the plain launches would take, and library calls cost the host far more than a kernel
launch. No GPU needed: the policy reads only the plan."""

from __future__ import annotations

import numpy as np

import flame
import flame.nn.functional as F
from flame.plan.steps import AttentionCall, KernelLaunch
from flame.runtime.cuda_graphs import LAUNCH_US, LIBRARY_CALL_US, _host_us, graphs_pay_off


def _plan(fn, *shapes, dtype="bf16"):
    arrays = [flame.tensor(np.zeros(s, np.float32)).to(dtype) for s in shapes]
    c = flame.compile(fn)
    return c._build(c._args(arrays)).plan


def _outputs_bytes(plan) -> int:
    return sum(plan.buffers[o].nbytes for o in plan.outputs)


def _fwd_bwd(q, k, v, dout):
    """Causal attention's output and its gradients to q, k, v for the cotangent dout (sdpa_fwd_bwd)."""
    def loss(q, k, v):
        return (F.scaled_dot_product_attention(q, k, v, is_causal=True) * dout).sum()

    _, grads = flame.value_and_grad(loss, (0, 1, 2))(q, k, v)
    return (F.scaled_dot_product_attention(q, k, v, is_causal=True), *grads)


def test_attention_forward_and_backward_replay_although_their_outputs_are_large():
    """sdpa_fwd_bwd's plan: two cuDNN calls (~150 us of host time each when run plainly) and 64 MB of
    outputs to copy out of the graph (~34 us): the replay pays off."""
    shape = (8, 16, 1024, 64)
    plan = _plan(_fwd_bwd, shape, shape, shape, shape)
    calls = [s for s in plan.steps if isinstance(s, AttentionCall)]
    assert len(calls) == 2 and not any(isinstance(s, KernelLaunch) and s.launches for s in plan.steps)
    assert sum(_host_us(s) for s in plan.steps) == 2 * LIBRARY_CALL_US[AttentionCall]
    assert _outputs_bytes(plan) == 4 * 8 * 16 * 1024 * 64 * 2
    assert graphs_pay_off(plan, _outputs_bytes(plan)) == (True, "")


def test_attention_at_head_dim_128_and_4096_tokens_replays():
    """sdpa_fwd_bwd_4k_d128's plan (B 4, H 16): 256 MiB of outputs (~134 us to copy out) against two
    cuDNN calls (~150 us of host time each): the replay pays off, so a call costs the GPU time alone."""
    shape = (4, 16, 4096, 128)
    plan = _plan(_fwd_bwd, shape, shape, shape, shape)
    assert _outputs_bytes(plan) == 4 * 4 * 16 * 4096 * 128 * 2
    assert graphs_pay_off(plan, _outputs_bytes(plan)) == (True, "")


def test_one_kernel_over_a_large_output_runs_plainly():
    """One elementwise kernel (~8 us of host time) writing 32 MB: copying the output out of a graph
    would cost more than the launch it saves, and the policy says so."""
    plan = _plan(lambda x: x * 2.0, (4096, 4096), dtype="f32")
    assert sum(s.launches for s in plan.steps) == 1
    ok, why = graphs_pay_off(plan, _outputs_bytes(plan))
    assert not ok and "1 launches it saves (~8 us)" in why and f"{LAUNCH_US:.0f}" in why
