"""The margin, embedding and likelihood losses of flame.frontend.margin_losses (and their flame.nn
modules) against torch on the CPU: values and gradients, eagerly and compiled, every reduction and
option; their shape errors; gumbel_softmax's distribution and straight-through gradient."""

from __future__ import annotations

import numpy as np
import pytest
import torch.nn.functional as TF

import flame
import flame.nn as nn
import flame.nn.functional as F
from flame.errors import ShapeError
from tests.ops.test_everyday_ops import MODES, check, check_gpu_step, randn

REDUCTIONS = ("mean", "sum", "none")


def _signs(*shape, key=0) -> np.ndarray:
    return np.where(randn(*shape, key=key) > 0, 1.0, -1.0).astype(np.float32)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_pairwise_and_sign_losses(reduction, mode):
    x1, x2, y = randn(6, key=1), randn(6, key=2), _signs(6, key=3)
    check(lambda a, b, t: F.margin_ranking_loss(a, b, t, 0.3, reduction=reduction),
          lambda a, b, t: TF.margin_ranking_loss(a, b, t, 0.3, reduction=reduction), x1, x2, y, wrt=[0, 1], mode=mode)
    check(lambda a, t: F.hinge_embedding_loss(a, t, 0.5, reduction=reduction),
          lambda a, t: TF.hinge_embedding_loss(a, t, 0.5, reduction=reduction), x1, y, wrt=[0], mode=mode)
    check(lambda a, t: F.soft_margin_loss(a, t, reduction=reduction),
          lambda a, t: TF.soft_margin_loss(a, t, reduction=reduction), x1 * 3, y, wrt=[0], mode=mode)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_multilabel_soft_margin(reduction, mode):
    x, t, w = randn(4, 5), (randn(4, 5, key=1) > 0).astype(np.float32), np.abs(randn(5, key=2))
    check(lambda a, b: F.multilabel_soft_margin_loss(a, b, reduction=reduction),
          lambda a, b: TF.multilabel_soft_margin_loss(a, b, reduction=reduction), x, t, wrt=[0], mode=mode)
    check(lambda a, b, c: F.multilabel_soft_margin_loss(a, b, c, reduction=reduction),
          lambda a, b, c: TF.multilabel_soft_margin_loss(a, b, c, reduction=reduction), x, t, w, wrt=[0, 2], mode=mode)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_cosine_embedding(reduction, mode):
    x1, x2, y = randn(5, 4, key=1), randn(5, 4, key=2), _signs(5, key=3)
    check(lambda a, b, t: F.cosine_embedding_loss(a, b, t, 0.2, reduction=reduction),
          lambda a, b, t: TF.cosine_embedding_loss(a, b, t, 0.2, reduction=reduction), x1, x2, y, wrt=[0, 1],
          mode=mode)
    check(lambda a, b, t: F.cosine_embedding_loss(a, b, t, reduction=reduction),
          lambda a, b, t: TF.cosine_embedding_loss(a, b, t, reduction=reduction), x1[0], x2[0], y[0], wrt=[0, 1],
          mode=mode)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("swap,p", [(False, 2.0), (True, 1.0), (True, 3.0)])
def test_triplet_margin(swap, p, reduction, mode):
    a, pos, neg = randn(6, 4, key=1), randn(6, 4, key=2), randn(6, 4, key=3)
    check(lambda x, y, z: F.triplet_margin_loss(x, y, z, 0.5, p, swap=swap, reduction=reduction),
          lambda x, y, z: TF.triplet_margin_loss(x, y, z, 0.5, p, swap=swap, reduction=reduction),
          a, pos, neg, mode=mode, rtol=1e-4)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("p", [1, 2])
def test_multi_margin(p, reduction, mode):
    x, w = randn(5, 4), np.abs(randn(4, key=2)) + 0.1
    t = np.array([0, 3, 1, 1, 2])
    check(lambda a, b: F.multi_margin_loss(a, b, p, 0.7, reduction=reduction),
          lambda a, b: TF.multi_margin_loss(a, b, p, 0.7, reduction=reduction), x, t, mode=mode)
    check(lambda a, b, c: F.multi_margin_loss(a, b, p, weight=c, reduction=reduction),
          lambda a, b, c: TF.multi_margin_loss(a, b, p, weight=c, reduction=reduction), x, t, w, wrt=[0],
          mode=mode)
    check(lambda a, b: F.multi_margin_loss(a, b, p), lambda a, b: TF.multi_margin_loss(a, b, p), x[0], t[0],
          mode=mode)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("log_input,full", [(True, False), (False, False), (True, True), (False, True)])
def test_poisson_nll(log_input, full, reduction, mode):
    x = randn(3, 4) if log_input else np.abs(randn(3, 4)) + 0.05
    t = np.array([[0, 1, 2, 5], [3, 0, 1, 1], [7, 2, 0, 4]], np.float32)
    check(lambda a, b: F.poisson_nll_loss(a, b, log_input, full, reduction=reduction),
          lambda a, b: TF.poisson_nll_loss(a, b, log_input, full, reduction=reduction), x, t, wrt=[0], mode=mode)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("full", [False, True])
def test_gaussian_nll(full, reduction, mode):
    x, t = randn(4, 3, key=1), randn(4, 3, key=2)
    var = np.abs(randn(4, 3, key=3)) + 0.1
    var[0, 0] = 1e-9  # clamped to eps for the value; its gradient passes as if unclamped, as torch's
    check(lambda a, b, v: F.gaussian_nll_loss(a, b, v, full, reduction=reduction),
          lambda a, b, v: TF.gaussian_nll_loss(a, b, v, full, reduction=reduction), x, t, var, mode=mode, rtol=1e-4)
    per_sample = np.abs(randn(4, key=4)) + 0.1  # one variance per sample: [4] or [4, 1]
    for v in (per_sample, per_sample[:, None]):
        check(lambda a, b, s: F.gaussian_nll_loss(a, b, s, full),
              lambda a, b, s: TF.gaussian_nll_loss(a, b, s, full), x, t, v, mode=mode)
    check(lambda a, b: F.gaussian_nll_loss(a, b, 0.5, full), lambda a, b: TF.gaussian_nll_loss(a, b, 0.5, full),
          x, t, mode=mode)


def test_modules_match_the_functions():
    x1, x2, y = flame.tensor(randn(6, key=1)), flame.tensor(randn(6, key=2)), flame.tensor(_signs(6, key=3))
    assert nn.MarginRankingLoss(0.3)(x1, x2, y).item() == F.margin_ranking_loss(x1, x2, y, 0.3).item()
    assert nn.HingeEmbeddingLoss(reduction="sum")(x1, y).item() == F.hinge_embedding_loss(x1, y, reduction="sum").item()
    assert nn.SoftMarginLoss()(x1, y).item() == F.soft_margin_loss(x1, y).item()
    m = flame.tensor(randn(3, 4))
    labels = flame.tensor((randn(3, 4, key=5) > 0).astype(np.float32))
    w = flame.tensor(np.abs(randn(4, key=6)))
    assert nn.MultiLabelSoftMarginLoss(w)(m, labels).item() == F.multilabel_soft_margin_loss(m, labels, w).item()
    assert "weight" in dict(nn.MultiLabelSoftMarginLoss(w).named_buffers())
    a, b = flame.tensor(randn(3, 4, key=7)), flame.tensor(randn(3, 4, key=8))
    s = flame.tensor(_signs(3, key=9))
    assert nn.CosineEmbeddingLoss(0.1)(a, b, s).item() == F.cosine_embedding_loss(a, b, s, 0.1).item()
    assert nn.TripletMarginLoss(swap=True)(a, b, m).item() == F.triplet_margin_loss(a, b, m, swap=True).item()
    cls = flame.tensor(np.array([0, 2, 3]))
    assert nn.MultiMarginLoss(p=2)(m, cls).item() == F.multi_margin_loss(m, cls, 2).item()
    assert nn.PoissonNLLLoss(full=True)(m, a.abs()).item() == F.poisson_nll_loss(m, a.abs(), full=True).item()
    var = b.abs() + 0.1
    assert nn.GaussianNLLLoss(full=True)(m, a, var).item() == F.gaussian_nll_loss(m, a, var, full=True).item()


def test_shape_errors_name_the_loss():
    x, y = flame.tensor(randn(4)), flame.tensor(randn(5))
    with pytest.raises(ShapeError, match="margin_ranking_loss: input1 \\[4\\], input2 \\[5\\]"):
        F.margin_ranking_loss(x, y, x)
    with pytest.raises(ShapeError, match="cosine_embedding_loss: expected inputs"):
        F.cosine_embedding_loss(flame.ones(2, 3), flame.ones(2, 3), flame.ones(3))
    with pytest.raises(ShapeError, match="multi_margin_loss: expected input"):
        F.multi_margin_loss(flame.ones(2, 3), flame.ones(2))
    with pytest.raises(ValueError, match="only p == 1 and p == 2"):
        nn.MultiMarginLoss(p=3)
    with pytest.raises(ShapeError, match="gaussian_nll_loss: var \\[3\\] fits neither"):
        F.gaussian_nll_loss(flame.ones(2, 4), flame.ones(2, 4), flame.ones(3))
    with pytest.raises(ValueError, match="var has negative entry"):
        F.gaussian_nll_loss(flame.ones(2), flame.ones(2), flame.tensor([1.0, -1.0]))


@pytest.mark.parametrize("hard", [False, True])
def test_gumbel_softmax_samples_the_softmax(hard):
    """Over many draws the argmax of gumbel_softmax(logits) falls on class k with probability
    softmax(logits)[k] (the Gumbel-max trick); soft samples are distributions, hard ones one-hot with
    the soft sample's gradient (straight through)."""
    flame.manual_seed(0)
    logits = flame.tensor(np.log(np.array([[0.1, 0.2, 0.7]] * 4000, np.float32)))
    y = F.gumbel_softmax(logits, tau=0.5, hard=hard)
    got = y.numpy()
    np.testing.assert_allclose(got.sum(-1), 1.0, rtol=1e-5)
    if hard:
        assert set(np.unique(got)) <= {0.0, 1.0}
    freq = np.bincount(got.argmax(-1), minlength=3) / len(got)
    np.testing.assert_allclose(freq, [0.1, 0.2, 0.7], atol=0.03)
    x = flame.tensor(randn(2, 3), requires_grad=True)
    flame.manual_seed(1)
    out = F.gumbel_softmax(x, hard=hard, dim=0)
    (out * flame.tensor(randn(2, 3, key=4))).sum().backward()
    assert x.grad is not None and np.isfinite(x.grad.numpy()).all() and np.abs(x.grad.numpy()).sum() > 0
    np.testing.assert_allclose(out.numpy().sum(0), 1.0, rtol=1e-5)


def test_gumbel_softmax_inside_compile_draws_anew_each_call():
    f = flame.compile(lambda t: F.gumbel_softmax(t, hard=True))
    logits = flame.zeros(64, 5)
    a, b = f(logits).numpy(), f(logits).numpy()
    assert not np.array_equal(a, b) and (a.sum(-1) == 1).all()


def test_a_step_of_them_fuses_renders_and_compiles_for_the_gpu(cuda_target):
    """A training step over every loss here, planned for the CUDA target: the fused plan gives the eager
    values on the reference executor, and each of its kernels compiles with NVRTC for sm_90."""

    def make():
        return nn.Parameter(flame.randn(8, 8, generator=flame.Generator(3)) * 0.3)

    def body(w, x, y, s, cls):
        h = x @ w
        loss = F.margin_ranking_loss(h[:, 0], h[:, 1], s, 0.2) + F.hinge_embedding_loss(h[:, 2], s)
        loss = loss + F.soft_margin_loss(h[:, 3], s) + F.multilabel_soft_margin_loss(h, (y > 0).float())
        loss = loss + F.cosine_embedding_loss(h, y, s) + F.triplet_margin_loss(h, y, x, swap=True)
        loss = loss + F.multi_margin_loss(h, cls, 2) + F.poisson_nll_loss(h, y.abs(), full=True)
        loss = loss + F.gaussian_nll_loss(h, y, h.abs() + 0.1, full=True)
        loss.backward()
        return loss

    x, y = flame.tensor(randn(6, 8)), flame.tensor(randn(6, 8, key=1))
    s, cls = flame.tensor(_signs(6, key=2)), flame.tensor(np.array([0, 3, 7, 1, 1, 5]))
    w = make()
    check_gpu_step(lambda *a: body(w, *a), w, x, y, s, cls)
