"""On the GPU: with flame.backends.cudnn.deterministic, cuDNN's attention and convolution backward give the
same bits at every run; under flame.use_deterministic_algorithms(True) a step with an atomic segment_sum
(an embedding's gradient) is refused (runtime/determinism.py)."""

from __future__ import annotations

import numpy as np
import pytest

import flame
import flame.nn.functional as F
from flame.errors import DeterminismError


def _bf16(rng, *shape):
    return flame.tensor(rng.standard_normal(shape).astype(np.float32)).to(flame.bfloat16)


@pytest.mark.gpu
def test_cudnn_backward_repeats_bitwise(determinism_settings):
    pytest.importorskip("cudnn")
    flame.backends.cudnn.deterministic = True
    rng = np.random.default_rng(0)
    q, k, v = (_bf16(rng, 2, 4, 256, 64) for _ in range(3))
    x, w = _bf16(rng, 4, 16, 32, 32), _bf16(rng, 32, 16, 3, 3)

    def loss(q, k, v, x, w):
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True).float().square().sum()
        return att + F.conv2d(x, w, padding=1).float().square().sum()

    step = flame.compile(flame.value_and_grad(loss, (0, 1, 2, 3, 4)))
    first = [g.float().numpy() for g in step(q, k, v, x, w)[1]]
    for _ in range(3):
        again = [g.float().numpy() for g in step(q, k, v, x, w)[1]]
        for a, b in zip(first, again):
            np.testing.assert_array_equal(a, b)


@pytest.mark.gpu
def test_an_atomic_segment_sum_is_refused_on_the_gpu(determinism_settings):
    flame.use_deterministic_algorithms(True)
    w = flame.nn.Parameter(flame.ones(10, 4))

    @flame.compile
    def step(idx):
        loss = F.embedding(idx, w).sum()
        loss.backward()
        return loss

    with pytest.raises(DeterminismError, match="segment_sum"):
        step(flame.tensor(np.array([1, 3, 1])))
