"""Gumbel against torch's in f64: log_prob, cdf, icdf, mean, mode, stddev, variance and entropy with
their gradients w.r.t. loc and scale (eager and compiled), shapes, expand, samples (moments, and
rsample's gradient) and validation."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.distributions as TD

import flame
import flame.distributions as FD

LOC, SCALE = np.array([[0.0, 1.0, -2.0]]), np.array([[1.0], [0.5]])
VALUE, QUANTILE = np.array([0.3, 1.2, -5.0]), np.array([0.1, 0.5, 0.95])


def _stats(d, value, q):
    return [d.log_prob(value), d.cdf(value), d.icdf(q), d.mean, d.mode, d.stddev, d.variance, d.entropy()]


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_values_and_gradients_match_torch(compiled):
    tloc, tscale = torch.tensor(LOC, requires_grad=True), torch.tensor(SCALE, requires_grad=True)
    want = _stats(TD.Gumbel(tloc, tscale), torch.tensor(VALUE), torch.tensor(QUANTILE))
    want_grads = torch.autograd.grad(sum(s.sum() for s in want), [tloc, tscale])

    def stats_and_grads(loc, scale, value, q):
        got = _stats(FD.Gumbel(loc, scale), value, q)
        return (*got, *flame.autograd.grad(sum(s.sum() for s in got), [loc, scale]))

    fn = flame.compile(stats_and_grads) if compiled else stats_and_grads
    got = fn(
        flame.tensor(LOC, requires_grad=True),
        flame.tensor(SCALE, requires_grad=True),
        flame.tensor(VALUE),
        flame.tensor(QUANTILE),
    )
    for g, w in zip(got, [*want, *want_grads]):
        assert g.shape == tuple(w.shape)
        np.testing.assert_allclose(g.numpy(), w.detach().numpy(), rtol=1e-10, atol=1e-12)


def test_shapes_expand_and_samples_match_torch():
    ours, theirs = FD.Gumbel(flame.tensor(LOC), flame.tensor(SCALE)), TD.Gumbel(torch.tensor(LOC), torch.tensor(SCALE))
    assert (ours.batch_shape, ours.event_shape, ours.has_rsample) == (tuple(theirs.batch_shape), (), True)
    for shape in [(), (5,), (2, 1)]:
        assert ours.rsample(shape).shape == tuple(theirs.rsample(shape).shape)
    np.testing.assert_allclose(
        ours.expand((4, 2, 3)).log_prob(flame.tensor(VALUE)).numpy(),
        theirs.expand((4, 2, 3)).log_prob(torch.tensor(VALUE)).numpy(),
        rtol=1e-12,
    )
    flame.manual_seed(0)
    draws = ours.sample((200_000,)).numpy()
    np.testing.assert_allclose(draws.mean(0), theirs.mean.numpy(), atol=0.03)
    np.testing.assert_allclose(draws.var(0), theirs.variance.numpy(), rtol=0.05)
    assert FD.Gumbel(0.5, 2.0).sample((3,)).shape == (3,)


def test_rsample_carries_the_reparameterised_gradient():
    loc, scale = flame.tensor([0.5], requires_grad=True), flame.tensor([2.0], requires_grad=True)
    flame.manual_seed(1)
    x = FD.Gumbel(loc, scale).rsample((100_000,))
    gloc, gscale = flame.autograd.grad(x.mean(), [loc, scale])
    assert gloc.item() == pytest.approx(1.0)
    assert gscale.item() == pytest.approx(0.5772, abs=0.02)  # d E[x] / d scale = the Euler-Mascheroni constant


def test_bad_scale_raises_torchs_error():
    with pytest.raises(ValueError, match="Expected parameter scale"):
        TD.Gumbel(torch.zeros(2), -torch.ones(2))
    with pytest.raises(ValueError, match="Expected parameter scale"):
        FD.Gumbel(flame.zeros(2), -flame.ones(2))
