"""Initialisation distributions compared with torch's, and gradients of layers compared with
torch.autograd (relative error < 1e-5 in float32)."""

import math

import numpy as np
import pytest
import torch
from scipy import stats

import flame
import flame.nn as nn
import flame.nn.functional as F


def rel_err(a, b) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


def _rng(seed=0):
    return np.random.default_rng(seed)


# ---- initialisation ---------------------------------------------------------------------------------
@pytest.mark.parametrize("fan_in,fan_out", [(256, 384), (30, 512)])
def test_linear_init_matches_torch_distribution(fan_in, fan_out):
    ours = nn.Linear(fan_in, fan_out, generator=flame.Generator(7))
    torch.manual_seed(7)
    theirs = torch.nn.Linear(fan_in, fan_out)
    bound = 1 / math.sqrt(fan_in)
    for name in ("weight", "bias"):
        a = getattr(ours, name).numpy().ravel()
        b = getattr(theirs, name).detach().numpy().ravel()
        assert np.abs(a).max() <= bound and a.min() < -0.9 * bound and a.max() > 0.9 * bound
        if name == "weight":  # U(-b, b): mean 0, variance b^2/3, and the same distribution as torch's
            assert abs(a.mean()) < 0.02 * bound and abs(a.var() / (bound**2 / 3) - 1) < 0.03
            assert stats.ks_2samp(a, b).pvalue > 1e-3


def test_embedding_and_norm_init():
    e = nn.Embedding(400, 64, generator=flame.Generator(0)).weight.numpy().ravel()
    assert abs(e.mean()) < 0.02 and abs(e.std() - 1) < 0.02
    torch.manual_seed(0)
    assert stats.ks_2samp(e, torch.nn.Embedding(400, 64).weight.detach().numpy().ravel()).pvalue > 1e-3
    ln = nn.LayerNorm(5)
    np.testing.assert_array_equal(ln.weight.numpy(), np.ones(5))
    np.testing.assert_array_equal(ln.bias.numpy(), np.zeros(5))
    np.testing.assert_array_equal(nn.RMSNorm(5).weight.numpy(), np.ones(5))


def test_init_is_reproducible_with_a_generator():
    a = nn.Linear(8, 8, generator=flame.Generator(3)).weight.numpy()
    b = nn.Linear(8, 8, generator=flame.Generator(3)).weight.numpy()
    c = nn.Linear(8, 8, generator=flame.Generator(4)).weight.numpy()
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)


def test_linear_f64_and_no_bias():
    lin = nn.Linear(3, 2, bias=False, dtype="f64")
    assert lin.bias is None and lin.weight.dtype == flame.f64
    assert [n for n, _ in lin.named_parameters()] == ["weight"]


# ---- gradients against torch.autograd ---------------------------------------------------------------
def _pair(arr, requires_grad=True):
    return nn.Parameter(flame.tensor(arr)) if requires_grad else flame.tensor(arr), \
        torch.tensor(arr, requires_grad=requires_grad)


def _check_grads(pairs, tol=1e-5):
    for f, t in pairs:
        assert f.grad is not None and t.grad is not None
        assert rel_err(f.grad.numpy(), t.grad.numpy()) < tol


def test_linear_grads_match_torch():
    r = _rng(1)
    x, xt = _pair(r.standard_normal((6, 5)).astype(np.float32))
    w, wt = _pair(r.standard_normal((4, 5)).astype(np.float32))
    b, bt = _pair(r.standard_normal(4).astype(np.float32))
    up = r.standard_normal((6, 4)).astype(np.float32)
    (F.linear(x, w, b) * flame.tensor(up)).sum().backward()
    (torch.nn.functional.linear(xt, wt, bt) * torch.tensor(up)).sum().backward()
    _check_grads([(x, xt), (w, wt), (b, bt)])


@pytest.mark.parametrize("shape", [(3, 8), (2, 3, 16)])
def test_layer_norm_grads_match_torch(shape):
    r = _rng(2)
    x, xt = _pair((r.standard_normal(shape) * 3 + 1).astype(np.float32))
    w, wt = _pair(r.standard_normal(shape[-1]).astype(np.float32))
    b, bt = _pair(r.standard_normal(shape[-1]).astype(np.float32))
    up = r.standard_normal(shape).astype(np.float32)
    out = F.layer_norm(x, shape[-1], w, b, 1e-5)
    ref = torch.nn.functional.layer_norm(xt, (shape[-1],), wt, bt, 1e-5)
    assert rel_err(out.numpy(), ref.detach().numpy()) < 1e-5
    (out * flame.tensor(up)).sum().backward()
    (ref * torch.tensor(up)).sum().backward()
    _check_grads([(x, xt), (w, wt), (b, bt)])


def test_rms_norm_module_matches_torch():
    r = _rng(3)
    xa = r.standard_normal((4, 6)).astype(np.float32)
    ours, theirs = nn.RMSNorm(6), torch.nn.RMSNorm(6)
    up = r.standard_normal((4, 6)).astype(np.float32)
    x, xt = _pair(xa)
    (ours(x) * flame.tensor(up)).sum().backward()
    (theirs(xt) * torch.tensor(up)).sum().backward()
    _check_grads([(x, xt), (ours.weight, theirs.weight)])


@pytest.mark.parametrize("reduction,smoothing", [("mean", 0.0), ("sum", 0.0), ("mean", 0.1)])
def test_cross_entropy_grads_match_torch(reduction, smoothing):
    r = _rng(4)
    logits, lt = _pair((r.standard_normal((7, 5)) * 2).astype(np.float32))
    y = r.integers(0, 5, 7)
    loss = nn.CrossEntropyLoss(reduction=reduction, label_smoothing=smoothing)(logits, flame.tensor(y))
    ref = torch.nn.CrossEntropyLoss(reduction=reduction, label_smoothing=smoothing)(lt, torch.tensor(y))
    assert rel_err(loss.numpy(), ref.detach().numpy()) < 1e-6
    loss.backward()
    ref.backward()
    _check_grads([(logits, lt)])


def test_mse_and_embedding_grads_match_torch():
    r = _rng(5)
    emb = nn.Embedding(10, 4)
    temb = torch.nn.Embedding(10, 4)
    with torch.no_grad():
        temb.weight.copy_(torch.tensor(emb.weight.numpy()))
    idx = r.integers(0, 10, (3, 5))
    target = r.standard_normal((3, 5, 4)).astype(np.float32)
    nn.MSELoss()(emb(flame.tensor(idx)), flame.tensor(target)).backward()
    torch.nn.MSELoss()(temb(torch.tensor(idx)), torch.tensor(target)).backward()
    _check_grads([(emb.weight, temb.weight)])


def test_embedding_padding_row_gets_no_gradient():
    emb = nn.Embedding(5, 3, padding_idx=0, generator=flame.Generator(0))
    np.testing.assert_array_equal(emb.weight.numpy()[0], np.zeros(3))
    emb(flame.tensor([[0, 1], [0, 2]])).sum().backward()
    g = emb.weight.grad.numpy()
    np.testing.assert_array_equal(g[0], np.zeros(3))
    np.testing.assert_array_equal(g[1], np.ones(3))


def _torch_mlp_like(ours):
    lins = [m for m in ours if isinstance(m, nn.Linear)]
    layers = []
    for m in ours:
        if isinstance(m, nn.Linear):
            t = torch.nn.Linear(m.in_features, m.out_features)
            with torch.no_grad():
                t.weight.copy_(torch.tensor(m.weight.numpy()))
                t.bias.copy_(torch.tensor(m.bias.numpy()))
            layers.append(t)
        else:
            layers.append({nn.GELU: torch.nn.GELU, nn.Tanh: torch.nn.Tanh, nn.SiLU: torch.nn.SiLU}[type(m)]())
    assert len(lins) == 3
    return torch.nn.Sequential(*layers)


def test_three_layer_mlp_grads_match_torch():
    g = flame.Generator(11)
    ours = nn.Sequential(nn.Linear(10, 32, generator=g), nn.GELU(), nn.Linear(32, 16, generator=g), nn.Tanh(),
                         nn.Linear(16, 4, generator=g))
    theirs = _torch_mlp_like(ours)
    r = _rng(6)
    x = r.standard_normal((9, 10)).astype(np.float32)
    y = r.integers(0, 4, 9)
    loss = F.cross_entropy(ours(flame.tensor(x)), flame.tensor(y))
    ref = torch.nn.functional.cross_entropy(theirs(torch.tensor(x)), torch.tensor(y))
    assert rel_err(loss.numpy(), ref.detach().numpy()) < 1e-6
    loss.backward()
    ref.backward()
    _check_grads(zip(ours.parameters(), theirs.parameters()))
