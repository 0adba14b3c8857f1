"""Sampling of flame.distributions: shapes and dtypes as torch's, draws from flame's generator
(flame.manual_seed repeats them), sample statistics that match the distribution, and rsample's
gradients: given the noise flame drew, torch's reparameterised sample of the same noise has the same
gradients with respect to the parameters, eagerly and inside @flame.compile."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.distributions as TD

import flame
import flame.distributions as FD

TRIL = np.array([[1.0, 0.0, 0.0], [0.5, 0.8, 0.0], [-0.3, 0.2, 1.2]])

# name: (build(D, lib, dtype) -> distribution)
MAKE = {
    "Normal": lambda D, t, dt: D.Normal(t.tensor([0.5, -1.0], dtype=dt), t.tensor([1.0, 2.0], dtype=dt)),
    "Bernoulli": lambda D, t, dt: D.Bernoulli(t.tensor([0.2, 0.7], dtype=dt)),
    "BernoulliLogits": lambda D, t, dt: D.Bernoulli(logits=t.tensor([0.2, -1.7], dtype=dt)),
    "Categorical": lambda D, t, dt: D.Categorical(t.tensor([[0.2, 0.3, 0.5], [0.6, 0.1, 0.3]], dtype=dt)),
    "CategoricalLogits": lambda D, t, dt: D.Categorical(logits=t.tensor([0.5, -1.0, 2.0, 0.0], dtype=dt)),
    "OneHotCategorical": lambda D, t, dt: D.OneHotCategorical(t.tensor([0.2, 0.3, 0.5], dtype=dt)),
    "Uniform": lambda D, t, dt: D.Uniform(t.tensor([0.0, -2.0], dtype=dt), t.tensor([1.0, 3.0], dtype=dt)),
    "Laplace": lambda D, t, dt: D.Laplace(t.tensor([0.5, -1.0], dtype=dt), t.tensor([1.0, 0.5], dtype=dt)),
    "Exponential": lambda D, t, dt: D.Exponential(t.tensor([0.5, 3.0], dtype=dt)),
    "MultivariateNormal": lambda D, t, dt: D.MultivariateNormal(
        t.tensor([1.0, 0.0, -1.0], dtype=dt), scale_tril=t.tensor(TRIL, dtype=dt)
    ),
    "Independent": lambda D, t, dt: D.Independent(
        D.Normal(t.tensor([[0.0, 1.0]], dtype=dt), t.tensor([[1.0, 0.5]], dtype=dt)), 1
    ),
    "LogNormal": lambda D, t, dt: D.LogNormal(t.tensor([0.0, 0.5], dtype=dt), t.tensor([0.5, 0.25], dtype=dt)),
}
DTYPES = [(flame.f32, torch.float32), (flame.f64, torch.float64)]


@pytest.mark.parametrize("dtypes", DTYPES, ids=["f32", "f64"])
@pytest.mark.parametrize("sample_shape", [(), (5,), (2, 3)], ids=str)
@pytest.mark.parametrize("case", list(MAKE))
def test_sample_shape_and_dtype_match_torch(case, sample_shape, dtypes):
    fd, td = MAKE[case](FD, flame, dtypes[0]), MAKE[case](TD, torch, dtypes[1])
    got, want = fd.sample(sample_shape), td.sample(sample_shape)
    assert got.shape == tuple(want.shape)
    assert str(got.dtype) == {torch.float32: "f32", torch.float64: "f64", torch.int64: "i64"}[want.dtype]
    assert not got.requires_grad
    if td.has_rsample:
        r = fd.rsample(sample_shape)
        assert r.shape == tuple(want.shape) and r.dtype == got.dtype


@pytest.mark.parametrize("case", list(MAKE))
def test_manual_seed_repeats_the_draws(case):
    fd = MAKE[case](FD, flame, flame.f64)
    flame.manual_seed(123)
    a = fd.sample((50,)).numpy()
    b = fd.sample((50,)).numpy()
    flame.manual_seed(123)
    np.testing.assert_array_equal(fd.sample((50,)).numpy(), a)
    assert not np.array_equal(a, b) or case.startswith("Bernoulli")  # the generator moves on


N = 40000


@pytest.mark.parametrize("case", [c for c in MAKE if "Categorical" not in c])
def test_sample_mean_and_variance_match_the_distribution(case):
    flame.manual_seed(7)
    fd, td = MAKE[case](FD, flame, flame.f64), MAKE[case](TD, torch, torch.float64)
    x = fd.sample((N,)).numpy()
    mean, var = td.mean.numpy(), td.variance.numpy()
    np.testing.assert_allclose(x.mean(0), mean, atol=6 * np.sqrt(var.max() / N))
    np.testing.assert_allclose(x.var(0), var, rtol=0.06)


@pytest.mark.parametrize("case", ["Categorical", "CategoricalLogits", "OneHotCategorical"])
def test_category_frequencies_match_the_probabilities(case):
    flame.manual_seed(3)
    fd, td = MAKE[case](FD, flame, flame.f64), MAKE[case](TD, torch, torch.float64)
    x = fd.sample((N,)).numpy()
    probs = td.probs.numpy()
    k = probs.shape[-1]
    freq = x.mean(0) if case == "OneHotCategorical" else np.stack([(x == i).mean(0) for i in range(k)], -1)
    np.testing.assert_allclose(freq, probs, atol=6 * np.sqrt(0.25 / N))


def test_mvn_sample_covariance_is_scale_tril_squared():
    flame.manual_seed(5)
    x = MAKE["MultivariateNormal"](FD, flame, flame.f64).sample((N,)).numpy()
    np.testing.assert_allclose(np.cov(x.T), TRIL @ TRIL.T, atol=0.05)
    np.testing.assert_allclose(x.mean(0), [1.0, 0.0, -1.0], atol=0.04)


def test_compiled_sampling_draws_fresh_noise_each_call():
    @flame.compile
    def draw(loc, scale):
        return FD.Normal(loc, scale).rsample((4,))

    loc, scale = flame.zeros(3, dtype=flame.f64), flame.ones(3, dtype=flame.f64)
    flame.manual_seed(0)
    a, b = draw(loc, scale).numpy(), draw(loc, scale).numpy()
    assert a.shape == (4, 3) and not np.array_equal(a, b)
    flame.manual_seed(0)
    np.testing.assert_array_equal(draw(loc, scale).numpy(), a)


@pytest.mark.parametrize("case", ["Bernoulli", "Categorical", "OneHotCategorical"])
def test_rsample_of_a_discrete_distribution_raises_as_torch(case):
    with pytest.raises(NotImplementedError):
        MAKE[case](TD, torch, torch.float64).rsample()
    with pytest.raises(NotImplementedError):
        MAKE[case](FD, flame, flame.f64).rsample()


def _torch_precision_scale_tril(p):
    return TD.MultivariateNormal(p["loc"], precision_matrix=p["precision_matrix"]).scale_tril


# name: (params, build(D, params), noise of flame's sample, torch's sample from that noise)
def _reparam_cases():
    r = np.random.default_rng(0)
    loc, scale = r.normal(size=(3,)), r.uniform(0.5, 2, size=(3,))
    affine = lambda x, p: (x - p["loc"]) / p["scale"]  # noqa: E731
    return {
        "Normal": (
            {"loc": loc, "scale": scale},
            lambda D, p: D.Normal(p["loc"], p["scale"]),
            affine,
            lambda p, z: p["loc"] + z * p["scale"],
        ),
        "Laplace": (
            {"loc": loc, "scale": scale},
            lambda D, p: D.Laplace(p["loc"], p["scale"]),
            affine,
            lambda p, z: p["loc"] + z * p["scale"],
        ),
        "Exponential": (
            {"rate": scale},
            lambda D, p: D.Exponential(p["rate"]),
            lambda x, p: x * p["rate"],
            lambda p, z: z / p["rate"],
        ),
        "Uniform": (
            {"low": loc, "high": loc + scale},
            lambda D, p: D.Uniform(p["low"], p["high"]),
            lambda x, p: (x - p["low"]) / (p["high"] - p["low"]),
            lambda p, z: p["low"] + z * (p["high"] - p["low"]),
        ),
        "LogNormal": (
            {"loc": loc, "scale": scale * 0.3},
            lambda D, p: D.LogNormal(p["loc"], p["scale"]),
            lambda x, p: (np.log(x) - p["loc"]) / p["scale"],
            lambda p, z: (p["loc"] + z * p["scale"]).exp(),
        ),
        "MultivariateNormal": (
            {"loc": loc, "scale_tril": TRIL},
            lambda D, p: D.MultivariateNormal(p["loc"], scale_tril=p["scale_tril"]),
            lambda x, p: np.linalg.solve(p["scale_tril"], (x - p["loc"])[..., None])[..., 0],
            lambda p, z: p["loc"] + (p["scale_tril"] @ z[..., None])[..., 0],
        ),
        "MultivariateNormal_covariance": (
            {"loc": loc, "covariance_matrix": TRIL @ TRIL.T},
            lambda D, p: D.MultivariateNormal(p["loc"], covariance_matrix=p["covariance_matrix"]),
            lambda x, p: np.linalg.solve(TRIL, (x - p["loc"])[..., None])[..., 0],
            lambda p, z: p["loc"] + (torch.linalg.cholesky(p["covariance_matrix"]) @ z[..., None])[..., 0],
        ),
        "MultivariateNormal_precision": (
            {"loc": loc, "precision_matrix": np.linalg.inv(TRIL @ TRIL.T)},
            lambda D, p: D.MultivariateNormal(p["loc"], precision_matrix=p["precision_matrix"]),
            lambda x, p: np.linalg.solve(TRIL, (x - p["loc"])[..., None])[..., 0],
            lambda p, z: p["loc"] + (_torch_precision_scale_tril(p) @ z[..., None])[..., 0],
        ),
    }


REPARAM = _reparam_cases()


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("case", list(REPARAM))
def test_rsample_gradients_match_torch_for_the_same_noise(case, compiled):
    params, build, noise_of, torch_sample = REPARAM[case]
    keys = list(params)
    weight = np.random.default_rng(1).normal(size=(6, 3))

    def sample_and_grads(w, *ps):
        x = build(FD, dict(zip(keys, ps))).rsample((6,))
        return (x, *flame.autograd.grad((x * w).sum(), list(ps)))

    fn = flame.compile(sample_and_grads) if compiled else sample_and_grads
    flame.manual_seed(2)
    x, *grads = fn(flame.tensor(weight), *[flame.tensor(params[k], requires_grad=True) for k in keys])
    z = noise_of(x.numpy(), params)
    tp = {k: torch.tensor(v, requires_grad=True) for k, v in params.items()}
    tx = torch_sample(tp, torch.tensor(z))
    np.testing.assert_allclose(x.numpy(), tx.detach().numpy(), rtol=1e-10, atol=1e-12)
    want = torch.autograd.grad((tx * torch.tensor(weight)).sum(), list(tp.values()))
    for k, g, w in zip(keys, grads, want):
        np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-8, atol=1e-10, err_msg=f"d/d{k}")
