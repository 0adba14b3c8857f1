"""gpt_train's loss (issue 13): F.cross_entropy(logits.float().reshape(-1, V), labels) of bf16 logits from a
tied head, forward and backward, against PyTorch; on the GPU (`gpu` marker) too, where the row kernel
reads the bf16 logits and writes the bf16 gradient (tests/passes/test_fuse.py checks the plan)."""

import numpy as np
import pytest
import torch

import flame
import flame.nn.functional as F


def _data(n: int, d: int, vocab: int):
    rng = np.random.default_rng(0)
    return (rng.standard_normal((2, n // 2, d)).astype(np.float32), rng.standard_normal((vocab, d)).astype(np.float32),
            rng.integers(0, vocab, n))


def _flame(x, w, y):
    wt = flame.tensor(w, requires_grad=True)

    @flame.compile
    def step(x, y):
        logits = x.to("bf16") @ wt.to("bf16").transpose(0, 1)
        loss = F.cross_entropy(logits.float().reshape(-1, w.shape[0]), y)
        loss.backward()
        return loss

    loss = step(flame.tensor(x), flame.tensor(y))
    return loss.item(), wt.grad.numpy()


def _torch(x, w, y):
    wt = torch.tensor(w, requires_grad=True)
    logits = torch.tensor(x).bfloat16() @ wt.bfloat16().T
    loss = torch.nn.functional.cross_entropy(logits.float().reshape(-1, w.shape[0]), torch.tensor(y))
    loss.backward()
    return loss.item(), wt.grad.numpy()


def _check(n, d, vocab):
    got, want = _flame(*_data(n, d, vocab)), _torch(*_data(n, d, vocab))
    np.testing.assert_allclose(got[0], want[0], rtol=1e-3)
    np.testing.assert_allclose(got[1], want[1], rtol=3e-2, atol=3e-2 * np.abs(want[1]).max())


def test_bf16_logits_cross_entropy_matches_torch():
    _check(16, 8, 300)


@pytest.mark.gpu
@pytest.mark.parametrize("vocab", [300, 32768, 50000])  # rows in registers, the longest cached, streamed
def test_bf16_logits_cross_entropy_on_the_gpu_matches_torch(vocab):
    _check(256, 64, vocab)
