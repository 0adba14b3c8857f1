"""passes/fuse_traffic.py and the shared channels-last input (prepare_fusion.clone_constants): a big
kernel's costly per-channel work runs once in a small kernel; a BatchNorm backward's f32 dy * scale
is recomputed by the kernel that reads it instead of written; a ResNet's first residual add reads
the channels-last copy of the input the convolution reads. Each keeps the values: the compiled
functions are checked against torch on the reference executor with the size thresholds lowered."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import flame
import flame.nn.functional as F
from flame.ir.graph import Kind
from flame.passes import fuse_traffic

HOISTED = "work on broadcast values"


def _bf16(a: np.ndarray) -> np.ndarray:
    return torch.tensor(a).bfloat16().float().numpy()


def _groups(fn, *arrays):
    step = flame.compile(fn)
    return step, step.optimized(*[flame.tensor(a).to(flame.bf16) for a in arrays]).groups


def _bn_apply(x, w, b):
    return F.relu(F.batch_norm(x, None, None, w, b, training=True))


def test_per_channel_rsqrt_of_a_big_kernel_runs_once():
    """BatchNorm over [16, 256, 32, 32] (4.2M elements): rsqrt of the variance and the running
    statistics' work are one small kernel's; the normalising kernel has no rsqrt or division."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((16, 256, 32, 32)).astype(np.float32)
    w, b = rng.standard_normal(256).astype(np.float32), rng.standard_normal(256).astype(np.float32)
    _, groups = _groups(_bn_apply, x, w, b)
    small = [g for g in groups if g.reason.startswith(HOISTED)]
    assert small and any(op.name == "rsqrt" for g in small for op in g.ops)
    big = [g for g in groups if g.kind == Kind.ELEMENTWISE and max(v.type.numel for v in g.outputs) == x.size]
    assert big and not any(op.name in ("rsqrt", "div") for g in big for op in g.ops)


def _conv_bn_block(x, w1, g1, b1, w2):
    h = F.relu(F.batch_norm(F.conv2d(x, w1, padding=1), None, None, g1, b1, training=True))
    return (F.conv2d(h, w2, padding=1).float() ** 2).mean()


def _block_inputs(n: int, c: int, hw: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    fan_in = (9 * c) ** -0.5
    shapes = (((n, c, hw, hw), 1.0), ((c, c, 3, 3), fan_in), ((c,), 1.0), ((c,), 0.1), ((c, c, 3, 3), fan_in))
    return [_bf16(rng.standard_normal(s).astype(np.float32) * k) for s, k in shapes]


def _grads(fn, arrays):
    @flame.compile
    def step(x, w1, g1, b1, w2):
        return flame.grad(fn, (1, 2, 3, 4))(x, w1, g1, b1, w2)

    return step, [flame.tensor(a).to(flame.bf16) for a in arrays]


def test_batch_norm_backward_writes_no_f32_activation():
    """conv -> BatchNorm -> ReLU -> conv in bf16 at 4.2M elements per activation (planned, not run):
    no kernel writes an f32 value of that size (dy * scale is recomputed from the bf16 dy and ReLU
    output, once the per-channel work that tied it to the statistics kernel is hoisted)."""
    arrays = _block_inputs(16, 64, 64)
    step, args = _grads(_conv_bn_block, arrays)
    n = arrays[0].size
    written = [v for g in step.optimized(*args).groups if g.kind in (Kind.ELEMENTWISE, Kind.ROWS) for v in g.outputs]
    assert not [v for v in written if v.type.numel == n and v.dtype == flame.f32], written


@pytest.mark.parametrize("lowered", [False, True])
def test_moved_work_keeps_the_values(monkeypatch, lowered):
    """The block's weight gradients against torch (bf16 inputs, f64 math) on the reference executor,
    with the thresholds as they are and lowered to 0 (every candidate moves)."""
    if lowered:
        monkeypatch.setattr(fuse_traffic, "HOIST_MIN", 0)
        monkeypatch.setattr(fuse_traffic, "TAIL_MIN", 0)
    arrays = _block_inputs(2, 8, 6, seed=1)
    step, args = _grads(_conv_bn_block, arrays)
    got = [g.float().numpy() for g in step(*args)]
    t = [torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in arrays]
    h = torch.relu(torch.nn.functional.batch_norm(torch.nn.functional.conv2d(t[0], t[1], padding=1), None, None,
                                                  t[2], t[3], training=True))
    (torch.nn.functional.conv2d(h, t[4], padding=1) ** 2).mean().backward()
    for g, want in zip(got, [x.grad.numpy() for x in t[1:]]):
        assert np.linalg.norm(g - want) / np.linalg.norm(want) < 0.03


def test_first_residual_reads_the_channels_last_input():
    """x -> conv -> BatchNorm -> + x: the add reads the permuted copy of x the convolution reads (one
    permute of x in the forward, its own kernel), not x through a transposing view."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 8, 6, 6)).astype(np.float32)
    w = (rng.standard_normal((8, 8, 3, 3)) * 0.1).astype(np.float32)

    def f(x, w):
        return F.relu(F.batch_norm(F.conv2d(x, w, padding=1), None, None, None, None, training=True) + x)

    step, groups = _groups(f, x, w)
    permutes = [g for g in groups for op in g.ops if op.name == "permute" and op.inputs[0].producer is None]
    assert len(permutes) == 1 and len(permutes[0].ops) == 1
    got = step(flame.tensor(x).to(flame.bf16), flame.tensor(w).to(flame.bf16)).float().numpy()
    tx, tw = torch.tensor(_bf16(x), dtype=torch.float64), torch.tensor(_bf16(w), dtype=torch.float64)
    want = torch.relu(torch.nn.functional.batch_norm(torch.nn.functional.conv2d(tx, tw, padding=1), None, None,
                                                     training=True) + tx).numpy()
    np.testing.assert_allclose(got, want, rtol=2e-2, atol=2e-2)


def _rope(q, inv_freq):
    """Rotary embedding as Llama writes it: the cos/sin tables from positions, concatenated halves."""
    t = flame.arange(q.shape[-2]).float()
    freqs = t[:, None] * inv_freq[None, :]
    emb = flame.cat([freqs, freqs], dim=-1)
    half = q.shape[-1] // 2
    rotated = flame.cat([-q[..., half:], q[..., :half]], dim=-1)
    return q * emb.cos().to(q.dtype) + rotated * emb.sin().to(q.dtype)


def test_rotary_tables_are_computed_once_not_per_head():
    """RoPE over [2, 16, 1024, 128] (4.2M elements): the cos and sin of the [1024, 128] table, built from
    positions through a concat, run once in a small kernel; the rotating kernel computes no cos or sin.
    Values as torch's."""
    rng = np.random.default_rng(0)
    q = _bf16(rng.standard_normal((2, 16, 1024, 128)).astype(np.float32))
    inv_freq = _bf16(1.0 / 10000 ** (np.arange(0, 128, 2, dtype=np.float32) / 128))
    step, groups = _groups(lambda a, f: _rope(a, f.float()), q, inv_freq)
    small = [g for g in groups if g.reason.startswith(HOISTED)]
    assert any(op.name in ("cos", "sin") for g in small for op in g.ops)
    big = [g for g in groups if max(v.type.numel for v in g.outputs) == q.size]
    assert big and not any(op.name in ("cos", "sin") for g in big for op in g.ops)
    out = step(flame.tensor(q).to(flame.bf16), flame.tensor(inv_freq).to(flame.bf16)).float().numpy()
    tq = torch.tensor(q).to(torch.bfloat16)
    freqs = torch.arange(1024).float()[:, None] * torch.tensor(inv_freq)[None, :]
    emb = torch.cat([freqs, freqs], dim=-1)
    rotated = torch.cat([-tq[..., 64:], tq[..., :64]], -1)
    want = tq * emb.cos().to(torch.bfloat16) + rotated * emb.sin().to(torch.bfloat16)
    np.testing.assert_allclose(out, want.float().numpy(), rtol=1e-2, atol=1e-2)


def test_cross_entropy_gradient_one_hot_is_computed_in_the_softmax_kernel():
    """A language model's loss over bf16 [B, T, V] logits (planned, then run on the reference executor):
    the gradient's one-hot `where(arange(V) == label, -g, 0)` is computed where the softmax kernel needs
    it, from the labels and the index, instead of being written as an f32 [B*T, V] tensor (gpt_train: a
    1 GiB buffer, and 0.56 ms writing it on an H100) by the kernel that also clamps the labels for the
    gather."""
    rng = np.random.default_rng(0)
    b, t, vocab = 2, 32, 2048
    logits = flame.tensor(rng.standard_normal((b, t, vocab)).astype(np.float32)).to(flame.bf16)
    labels = flame.tensor(rng.integers(0, vocab, (b, t)))

    @flame.compile
    def step(x, y):
        x.requires_grad_(True)
        loss = F.cross_entropy(x.float().reshape(-1, vocab), y.reshape(-1))
        loss.backward()
        return loss, x.grad

    groups = step.optimized(logits, labels).groups
    written = [v for g in groups if g.kind in (Kind.ELEMENTWISE, Kind.ROWS) for v in g.outputs]
    assert not [v for v in written if v.type.numel == b * t * vocab and v.dtype == flame.f32], written
    loss, grad = step(logits, labels)
    x = torch.tensor(logits.float().numpy(), dtype=torch.float64, requires_grad=True)
    want = torch.nn.functional.cross_entropy(x.reshape(-1, vocab), torch.tensor(labels.numpy()).reshape(-1))
    want.backward()
    assert abs(loss.item() - want.item()) < 1e-4 * abs(want.item())
    np.testing.assert_allclose(grad.float().numpy(), x.grad.numpy(), rtol=2e-2, atol=1e-5)
