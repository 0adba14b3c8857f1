"""BatchNorm training at the per-channel count of resnet_block_train (N 64 x 64 x 64 = 262144 values per
channel): the last block's tail (conv3x3 -> BatchNorm -> + residual -> ReLU -> global average pool ->
linear -> cross-entropy) in bf16 on the reference executor against torch. There the pooled gradient is
constant per (n, c) wherever the ReLU passes it, so BatchNorm's input gradient is a small difference
and the convolution's weight gradient (a sum of 262144 products per element against a ReLU output
of positive mean) amplifies any per-channel bias of it by ~count (frontend/norms.py
_batch_norm_train's centred scale-and-shift backward)."""

from __future__ import annotations

import numpy as np
import torch

import flame
import flame.nn.functional as F

N, HW, C = 64, 64, 4


def _rel(a, b) -> float:
    return float(np.linalg.norm(np.asarray(a, np.float64) - b) / np.linalg.norm(b))


def _tail(fn, x, h, w, g, b, fw, fb, labels):
    z = fn.batch_norm(fn.conv2d(h, w, padding=1), None, None, g, b, training=True, momentum=0.1, eps=1e-5)
    return fn.cross_entropy(fn.linear(fn.relu(z + x).mean((2, 3)), fw, fb).float(), labels)


def test_last_block_weight_gradient_at_the_benchmark_count_matches_torch():
    rng = np.random.default_rng(0)

    def bf16(a):
        return torch.tensor(np.asarray(a, np.float32)).bfloat16().float().numpy()

    x = bf16(np.abs(rng.standard_normal((N, C, HW, HW))) + 1.0)  # a residual stream after a few blocks
    h = bf16(np.maximum(rng.standard_normal((N, C, HW, HW)), 0))  # the ReLU output the conv reads
    w = bf16(rng.standard_normal((C, C, 3, 3)) * (2 / (9 * C)) ** 0.5)
    g, b = bf16(1 + 0.1 * rng.standard_normal(C)), bf16(0.1 * rng.standard_normal(C))
    fw, fb = bf16(rng.standard_normal((10, C)) * C**-0.5), bf16(0.1 * rng.standard_normal(10))
    labels = rng.integers(0, 10, N)

    want = {}
    for name, dt in (("bf16", torch.bfloat16), ("f64", torch.float64)):
        t = [torch.tensor(a).to(dt) for a in (x, h, w, g, b, fw, fb)]
        t[2].requires_grad_(True)
        _tail(torch.nn.functional, *t, torch.tensor(labels)).backward()
        want[name] = t[2].grad.double().numpy()

    args = [flame.tensor(a).to(flame.bf16) for a in (x, h, w, g, b, fw, fb)]
    lab = flame.tensor(labels)

    @flame.compile
    def step(x, h, w, g, b, fw, fb, lab):
        return flame.grad(lambda w_: _tail(F, x, h, w_, g, b, fw, fb, lab), (0,))(w)

    got = step(*args, lab)
    got = (got[0] if isinstance(got, (tuple, list)) else got).float().numpy()
    # vs the f64 gradient from the same bf16 inputs
    assert _rel(got, want["f64"]) < 0.1  # measured 0.031 (torch bf16: 0.084)
    assert _rel(got, want["bf16"]) < 0.2
