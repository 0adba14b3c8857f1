"""MixtureSameFamily against torch's in f64: log_prob, cdf, mean and variance with their gradients
w.r.t. the weights and the components' parameters (eager and compiled), batch and event shapes,
expand, support, samples (shapes and moments) and torch's errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.distributions as TD

import flame
import flame.distributions as FD

RNG = np.random.default_rng(5)
W3, W23 = RNG.uniform(0.1, 1, (3,)), RNG.uniform(0.1, 1, (2, 3))
LOC3, LOC23, LOC32 = RNG.normal(size=3), RNG.normal(size=(2, 3)), RNG.normal(size=(3, 2))

# name: (build(D, weights, loc), weights, loc, value)
CASES = {
    "normal": (
        lambda D, w, loc: D.MixtureSameFamily(D.Categorical(logits=w), D.Normal(loc, loc * 0 + 0.7)),
        W3,
        LOC3,
        [[0.3], [1.2], [-2.0]],
    ),
    "batched": (
        lambda D, w, loc: D.MixtureSameFamily(D.Categorical(probs=w), D.Normal(loc, loc.exp())),
        W23,
        LOC23,
        [[0.3, 1.2]],
    ),
    "vector events": (
        lambda D, w, loc: D.MixtureSameFamily(D.Categorical(probs=w), D.Independent(D.Normal(loc, loc * 0 + 1.5), 1)),
        W3,
        LOC32,
        [[0.3, 1.2], [0.0, -1.0]],
    ),
    "multivariate normal": (
        lambda D, w, loc: D.MixtureSameFamily(
            D.Categorical(logits=w), D.MultivariateNormal(loc, scale_tril=(loc[0, 0] * 0 + 1) * D_eye(D))
        ),
        W3,
        LOC32,
        [[0.3, 1.2]],
    ),
}


def D_eye(D):  # noqa: N802
    return torch.eye(2, dtype=torch.float64) if D is TD else flame.eye(2, dtype=flame.float64)


def _stats(d, value):
    out = [d.log_prob(value), d.mean, d.variance]
    if not d.event_shape:
        out.append(d.cdf(value))
    return out


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("case", list(CASES))
def test_values_and_gradients_match_torch(case, compiled):
    build, w, loc, value = CASES[case]
    tw, tloc = torch.tensor(w, requires_grad=True), torch.tensor(loc, requires_grad=True)
    want = _stats(build(TD, tw, tloc), torch.tensor(value))
    want_grads = torch.autograd.grad(sum(s.sum() for s in want), [tw, tloc])

    def stats_and_grads(fw, floc, fvalue):
        got = _stats(build(FD, fw, floc), fvalue)
        return (*got, *flame.autograd.grad(sum(s.sum() for s in got), [fw, floc]))

    fn = flame.compile(stats_and_grads) if compiled else stats_and_grads
    got = fn(flame.tensor(w, requires_grad=True), flame.tensor(loc, requires_grad=True), flame.tensor(value))
    for g, t in zip(got, [*want, *want_grads]):
        assert g.shape == tuple(t.shape)
        np.testing.assert_allclose(g.numpy(), t.detach().numpy(), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("case", list(CASES))
def test_shapes_expand_support_and_samples_match_torch(case):
    build, w, loc, value = CASES[case]
    ours, theirs = build(FD, flame.tensor(w), flame.tensor(loc)), build(TD, torch.tensor(w), torch.tensor(loc))
    assert (ours.batch_shape, ours.event_shape) == (tuple(theirs.batch_shape), tuple(theirs.event_shape))
    assert ours.support.event_dim == theirs.support.event_dim and not ours.has_rsample
    np.testing.assert_array_equal(
        ours.support.check(flame.tensor(value)).numpy(), theirs.support.check(torch.tensor(value)).numpy()
    )
    big, one = (4, *theirs.batch_shape), np.asarray(value)[:1]
    np.testing.assert_allclose(
        ours.expand(big).log_prob(flame.tensor(one)).numpy(),
        theirs.expand(big).log_prob(torch.tensor(one)).numpy(),
        rtol=1e-10,
    )
    for shape in [(), (5,), (2, 1)]:
        assert ours.sample(shape).shape == tuple(theirs.sample(shape).shape)
    flame.manual_seed(0)
    draws = ours.sample((200_000,)).numpy()
    np.testing.assert_allclose(draws.mean(0), theirs.mean.numpy(), atol=0.03)
    np.testing.assert_allclose(draws.var(0), theirs.variance.numpy(), rtol=0.05)


@pytest.mark.parametrize(
    "make,match",
    [
        (lambda D, t: D.MixtureSameFamily(D.Categorical(probs=t.ones(3)), D.Normal(t.zeros(2), 1.0)), "does not equal"),
        (lambda D, t: D.MixtureSameFamily(D.Normal(0.0, 1.0), D.Normal(t.zeros(2), 1.0)), "instance of"),
        (
            lambda D, t: D.MixtureSameFamily(D.Categorical(probs=t.ones(4, 2)), D.Normal(t.zeros(3, 2), 1.0)),
            "is not compatible",
        ),
        (
            lambda D, t: D.MixtureSameFamily(D.Categorical(probs=t.ones(2)), D.Exponential(t.ones(2))).log_prob(
                -t.ones(1)
            ),
            "support",
        ),
    ],
)
def test_errors_match_torch(make, match):
    with pytest.raises(ValueError, match=match):
        make(TD, torch)
    with pytest.raises(ValueError, match=match):
        make(FD, flame)
