"""kl_divergence against torch's in f64 (values and gradients w.r.t. both distributions' parameters,
eager and compiled), the infinite cases, and register_kl's dispatch."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.distributions as TD

import flame
import flame.distributions as FD
from tests.distributions.common import probs, spd, tril

# name: (build(D, params, side) -> distribution, params(rng, side) -> {name: array})
PAIRS = {
    "Normal": (
        lambda D, p: D.Normal(p["loc"], p["scale"]),
        lambda r: {"loc": r.normal(size=(3, 2)), "scale": r.uniform(0.5, 2, size=(3, 2))},
    ),
    "Bernoulli": (lambda D, p: D.Bernoulli(logits=p["logits"]), lambda r: {"logits": r.normal(size=(4,))}),
    "BernoulliProbs": (lambda D, p: D.Bernoulli(probs=p["probs"]), lambda r: {"probs": r.uniform(0.1, 0.9, (4,))}),
    "Categorical": (lambda D, p: D.Categorical(logits=p["logits"]), lambda r: {"logits": r.normal(size=(3, 5))}),
    "CategoricalProbs": (lambda D, p: D.Categorical(probs=p["probs"]), lambda r: {"probs": probs(r, 2, 4)}),
    "OneHotCategorical": (
        lambda D, p: D.OneHotCategorical(logits=p["logits"]),
        lambda r: {"logits": r.normal(size=(3, 5))},
    ),
    "Uniform": (
        lambda D, p: D.Uniform(p["low"], p["high"]),
        lambda r: {"low": r.uniform(-2, -1, size=(3,)), "high": r.uniform(1, 2, size=(3,))},
    ),
    "Laplace": (
        lambda D, p: D.Laplace(p["loc"], p["scale"]),
        lambda r: {"loc": r.normal(size=(4,)), "scale": r.uniform(0.5, 2, size=(4,))},
    ),
    "Exponential": (lambda D, p: D.Exponential(p["rate"]), lambda r: {"rate": r.uniform(0.5, 2, size=(2, 3))}),
    "MultivariateNormal": (
        lambda D, p: D.MultivariateNormal(p["loc"], scale_tril=p["scale_tril"]),
        lambda r: {"loc": r.normal(size=(2, 3)), "scale_tril": tril(r, 2)},
    ),
    "MultivariateNormalCovariance": (
        lambda D, p: D.MultivariateNormal(p["loc"], covariance_matrix=p["covariance_matrix"]),
        lambda r: {"loc": r.normal(size=(2, 3)), "covariance_matrix": spd(r, 2)},
    ),
    "MultivariateNormalPrecision": (
        lambda D, p: D.MultivariateNormal(p["loc"], precision_matrix=p["precision_matrix"]),
        lambda r: {"loc": r.normal(size=(3,)), "precision_matrix": spd(r)},
    ),
    "LogNormal": (
        lambda D, p: D.LogNormal(p["loc"], p["scale"]),
        lambda r: {"loc": r.normal(size=(3,)), "scale": r.uniform(0.5, 2, size=(3,))},
    ),
    "TransformedDistribution": (  # the same transforms on both sides: the KL of the base distributions
        lambda D, p: D.TransformedDistribution(
            D.Normal(p["loc"], p["scale"]), [D.transforms.TanhTransform(), D.transforms.AffineTransform(1.0, 2.0)]
        ),
        lambda r: {"loc": r.normal(size=(2, 3)), "scale": r.uniform(0.5, 2, size=(2, 3))},
    ),
    "Independent": (
        lambda D, p: D.Independent(D.Normal(p["loc"], p["scale"]), 2),
        lambda r: {"loc": r.normal(size=(2, 3, 2)), "scale": r.uniform(0.5, 2, size=(2, 3, 2))},
    ),
}


def _params(case, seed):
    rng = np.random.default_rng(seed)
    make = PAIRS[case][1]
    p, q = make(rng), make(rng)
    if case == "Uniform":  # q's support holds p's: a finite KL
        q = {"low": p["low"] - rng.uniform(0.1, 1, size=3), "high": p["high"] + rng.uniform(0.1, 1, size=3)}
    return p, q


def _torch_kl(build, p, q, weight):
    tp = {k: torch.tensor(v, requires_grad=True) for k, v in p.items()}
    tq = {k: torch.tensor(v, requires_grad=True) for k, v in q.items()}
    kl = TD.kl_divergence(build(TD, tp), build(TD, tq))
    grads = torch.autograd.grad((kl * torch.tensor(weight)).sum(), [*tp.values(), *tq.values()])
    return kl.detach().numpy(), [g.numpy() for g in grads]


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("case", list(PAIRS))
def test_kl_divergence_and_gradients_match_torch(case, compiled):
    build = PAIRS[case][0]
    p, q = _params(case, 11)
    shape = TD.kl_divergence(
        build(TD, {k: torch.tensor(v) for k, v in p.items()}), build(TD, {k: torch.tensor(v) for k, v in q.items()})
    ).shape
    weight = np.random.default_rng(1).normal(size=tuple(shape))
    want, want_grads = _torch_kl(build, p, q, weight)
    kp, kq = list(p), list(q)

    def kl_and_grads(w, *ps):
        fp, fq = dict(zip(kp, ps[: len(kp)])), dict(zip(kq, ps[len(kp) :]))
        kl = FD.kl_divergence(build(FD, fp), build(FD, fq))
        return (kl, *flame.autograd.grad((kl * w).sum(), list(ps)))

    fn = flame.compile(kl_and_grads) if compiled else kl_and_grads
    ps = [flame.tensor(v, requires_grad=True) for v in [*p.values(), *q.values()]]
    kl, *grads = fn(flame.tensor(weight), *ps)
    assert kl.shape == tuple(shape) and kl.dtype == flame.f64
    np.testing.assert_allclose(kl.numpy(), want, rtol=1e-10, atol=1e-12)
    for g, w in zip(grads, want_grads):
        np.testing.assert_allclose(g.numpy(), w, rtol=1e-9, atol=1e-11)


@pytest.mark.parametrize("case", ["Bernoulli", "Categorical", "Uniform"])
def test_infinite_and_zero_terms_match_torch(case):
    if case == "Bernoulli":
        p, q = np.array([0.0, 1.0, 0.3, 0.0, 0.5]), np.array([0.5, 0.5, 0.0, 0.0, 1.0])
        make = lambda D, lib, v: D.Bernoulli(probs=lib.tensor(v))  # noqa: E731
    elif case == "Categorical":
        p, q = np.array([[0.0, 0.5, 0.5], [0.2, 0.8, 0.0]]), np.array([[0.5, 0.5, 0.0], [0.0, 0.5, 0.5]])
        make = lambda D, lib, v: D.Categorical(probs=lib.tensor(v))  # noqa: E731
    else:
        p, q = np.array([[0.0, 1.0], [0.0, 2.0]]), np.array([[0.5, 3.0], [-1.0, 3.0]])
        make = lambda D, lib, v: D.Uniform(lib.tensor(v[:, 0]), lib.tensor(v[:, 1]))  # noqa: E731
    want = TD.kl_divergence(make(TD, torch, p), make(TD, torch, q)).numpy()
    got = FD.kl_divergence(make(FD, flame, p), make(FD, flame, q)).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-6)


CROSS = {  # (p, q): torch's closed form (or infinity, where p's support leaves q's)
    ("Exponential", "Normal"): {"rate": (0.5, 2)},
    ("Laplace", "Normal"): {},
    ("Normal", "Laplace"): {},
    ("Uniform", "Exponential"): {},
    ("Uniform", "Normal"): {},
    ("Exponential", "Uniform"): {},
    ("Laplace", "Exponential"): {},
    ("Laplace", "Uniform"): {},
    ("Normal", "Exponential"): {},
    ("Normal", "Uniform"): {},
    ("Gumbel", "Gumbel"): {},
    ("Exponential", "Gumbel"): {},
    ("Normal", "Gumbel"): {},
    ("Uniform", "Gumbel"): {},
    ("Gumbel", "Normal"): {},
    ("Gumbel", "Exponential"): {},
    ("Gumbel", "Uniform"): {},
}


def _cross(D, name, v):
    if name == "Normal":
        return D.Normal(v[0], v[1])
    if name == "Laplace":
        return D.Laplace(v[0], v[1])
    if name == "Exponential":
        return D.Exponential(v[1])
    if name == "Gumbel":
        return D.Gumbel(v[0], v[1])
    return D.Uniform(v[0] - v[1], v[0] + v[1])


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("pair", list(CROSS), ids="||".join)
def test_kl_between_families_matches_torch(pair, compiled):
    rng = np.random.default_rng(3)
    vp = np.stack([rng.normal(size=4), rng.uniform(0.5, 2, size=4)])
    vp[0, 0] = 3.0  # a Uniform p inside [0, inf) and one leaving it
    vq = np.stack([rng.normal(size=4), rng.uniform(0.5, 2, size=4)])
    tp, tq = torch.tensor(vp, requires_grad=True), torch.tensor(vq, requires_grad=True)
    want = TD.kl_divergence(_cross(TD, pair[0], tp), _cross(TD, pair[1], tq))
    finite = want.isfinite()
    want_grads = torch.autograd.grad(want[finite].sum(), [tp, tq], allow_unused=True) if finite.any() else None

    def kl_and_grads(a, b):
        kl = FD.kl_divergence(_cross(FD, pair[0], a), _cross(FD, pair[1], b))
        if want_grads is None:
            return (kl,)
        return (kl, *flame.autograd.grad((kl * flame.tensor(finite.numpy())).nan_to_num(0.0).sum(), [a, b]))

    fn = flame.compile(kl_and_grads) if compiled else kl_and_grads
    kl, *grads = fn(flame.tensor(vp, requires_grad=True), flame.tensor(vq, requires_grad=True))
    np.testing.assert_allclose(kl.numpy(), want.detach().numpy(), rtol=1e-10, atol=1e-12)
    for g, w in zip(grads, want_grads or ()):
        np.testing.assert_allclose(g.numpy(), np.zeros_like(g.numpy()) if w is None else w.numpy(), atol=1e-11)


def test_kl_of_unregistered_pair_raises_torchs_error():
    with pytest.raises(
        NotImplementedError, match="No KL\\(p \\|\\| q\\) is implemented for p type Laplace and q type Bernoulli"
    ):
        FD.kl_divergence(FD.Laplace(0.0, 1.0), FD.Bernoulli(0.3))


def test_independent_kl_needs_equal_reinterpreted_dims():
    base = FD.Normal(flame.zeros(2, 3), flame.ones(2, 3))
    with pytest.raises(NotImplementedError):
        FD.kl_divergence(FD.Independent(base, 1), FD.Independent(base, 2))


def test_transformed_kl_needs_equal_transforms_as_torch():
    for D, t in ((TD, torch), (FD, flame)):
        base = D.Normal(t.zeros(3), t.ones(3))
        p = D.TransformedDistribution(base, [D.transforms.AffineTransform(0.0, 2.0)])
        q = D.TransformedDistribution(base, [D.transforms.AffineTransform(0.0, 3.0)])
        with pytest.raises(NotImplementedError):
            D.kl_divergence(p, q)


def test_transformed_kl_inside_compile_needs_known_or_identical_transform_parameters():
    """Comparing the transforms reads their parameters: the same tensor on both sides, or values known
    while tracing, compare; two traced tensors computed from the arguments cannot, and say so."""

    def kl(loc, shift, other_shift):
        base = FD.Normal(loc, flame.ones_like(loc))
        p = FD.TransformedDistribution(base, [FD.transforms.AffineTransform(shift, 2.0)])
        q = FD.TransformedDistribution(base, [FD.transforms.AffineTransform(other_shift, 2.0)])
        return FD.kl_divergence(p, q)

    same = flame.compile(lambda loc, shift: kl(loc, shift, shift))
    assert same(flame.zeros(3), flame.ones(3)).numpy().tolist() == [0.0, 0.0, 0.0]
    with pytest.raises(flame.TraceError, match="(?s)comparing two AffineTransforms.*test_distributions_kl.py"):
        flame.compile(lambda loc, shift: kl(loc, shift, shift * 1))(flame.zeros(3), flame.ones(3))


def test_mvn_kl_needs_equal_event_shapes():
    p = FD.MultivariateNormal(flame.zeros(2), scale_tril=flame.eye(2))
    q = FD.MultivariateNormal(flame.zeros(3), scale_tril=flame.eye(3))
    with pytest.raises(ValueError, match="different event shapes"):
        FD.kl_divergence(p, q)


def test_register_kl_dispatches_to_the_most_specific_pair():
    class MyNormal(FD.Normal):
        pass

    class MyOtherNormal(FD.Normal):
        pass

    p, q = MyNormal(0.0, 1.0), MyNormal(1.0, 2.0)
    np.testing.assert_allclose(
        FD.kl_divergence(p, q).numpy(), TD.kl_divergence(TD.Normal(0.0, 1.0), TD.Normal(1.0, 2.0)).numpy()
    )
    FD.register_kl(MyNormal, MyNormal)(lambda a, b: flame.tensor(-1.0))
    assert FD.kl_divergence(p, q).item() == -1.0
    assert FD.kl_divergence(MyOtherNormal(0.0, 1.0), q).item() != -1.0  # falls back to (Normal, Normal)


def test_register_kl_refuses_non_distributions():
    with pytest.raises(TypeError, match="Expected type_p to be a Distribution subclass"):
        FD.register_kl(int, FD.Normal)
    with pytest.raises(TypeError, match="Expected type_q to be a Distribution subclass"):
        FD.register_kl(FD.Normal, "Normal")
