"""The long-tail functions in a training step planned for the CUDA target: the same loss and gradient on the
reference executor as eagerly, and every kernel of the plan compiles with NVRTC for sm_90."""

from __future__ import annotations

import numpy as np

import flame
import flame.nn.functional as F
from tests.ops.test_everyday_ops import check_gpu_step

R = np.random.default_rng(5)


def test_ctc_and_margin_losses_step_for_the_gpu(cuda_target):
    w = flame.nn.Parameter(flame.tensor(R.standard_normal((4, 5)).astype(np.float32)))

    def body(x, y, il, tl, ml):
        logits = x @ w  # [T, N, 5]
        loss = F.ctc_loss(F.log_softmax(logits, -1), y, il, tl)
        loss = loss + F.multilabel_margin_loss(logits[0], ml) + F.cosine_similarity(logits[1], logits[2]).sum()
        loss = loss + F.triplet_margin_with_distance_loss(logits[0], logits[1], logits[2], swap=True)
        loss.backward()
        return loss

    x = flame.tensor(R.standard_normal((6, 3, 4)).astype(np.float32))
    y = flame.tensor(np.array([[1, 2, 2], [3, 1, 0], [4, 4, 0]]))
    il, tl = flame.tensor(np.array([6, 5, 4])), flame.tensor(np.array([3, 2, 1]))
    ml = flame.tensor(np.array([[1, -1, 0, 0, 0], [0, 2, 3, -1, 0], [4, 0, 0, 0, 0]]))
    check_gpu_step(body, w, x, y, il, tl, ml)


def test_packed_lstm_and_clipping_step_for_the_gpu(cuda_target):
    flame.manual_seed(0)
    lstm = flame.nn.LSTM(3, 4, bidirectional=True)
    w = lstm.weight_hh_l0

    def body(x):
        lstm.zero_grad()  # the clipping reads every gradient: none left over from the eager run
        packed = flame.nn.utils.rnn.pack_padded_sequence(x, [4, 2, 3], enforce_sorted=False)
        out, (h, c) = lstm(packed)
        padded, _ = flame.nn.utils.rnn.pad_packed_sequence(out)
        loss = (padded**2).mean() + h.sum() + c.mean()
        loss.backward()
        flame.nn.utils.clip_grad_norm_(lstm.parameters(), 0.5, norm_type=float("inf"))
        return loss

    check_gpu_step(body, w, flame.tensor(R.standard_normal((4, 3, 3)).astype(np.float32)))


def test_weight_norm_and_spectral_norm_step_for_the_gpu(cuda_target):
    """A weight-normed Conv1d then a spectral-normed Linear (power iteration in training mode: a state
    update of the step), its buffers set back at the start so the eager and compiled runs agree."""
    flame.manual_seed(0)
    conv = flame.nn.utils.parametrizations.weight_norm(flame.nn.Conv1d(3, 4, 3))
    lin = flame.nn.utils.parametrizations.spectral_norm(flame.nn.Linear(4, 2))
    sn = lin.parametrizations.weight[0]
    u0, v0 = sn._u.clone(), sn._v.clone()
    g = conv.parametrizations.weight.original0

    def body(x):
        with flame.no_grad():
            sn._u.copy_(u0)
            sn._v.copy_(v0)
        for p in (*conv.parameters(), *lin.parameters()):
            p.grad = None
        loss = (lin(conv(x).mean(-1)) ** 2).sum()
        loss.backward()
        return loss

    check_gpu_step(body, g, flame.tensor(R.standard_normal((2, 3, 7)).astype(np.float32)))
