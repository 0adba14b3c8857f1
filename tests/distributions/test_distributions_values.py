"""flame.distributions against torch.distributions in f64: log_prob, cdf, icdf, entropy, mean, mode,
variance, stddev and kl_divergence, their values and their gradients with respect to the parameters,
eagerly and inside @flame.compile."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.distributions as TD

import flame
import flame.distributions as FD
from tests.distributions.common import probs, spd, tril

MVN_QUANTITIES = ["log_prob", "entropy", "mean", "variance", "scale_tril", "covariance_matrix", "precision_matrix"]

# name: (build(D, params) -> distribution, params(rng) -> {name: array}, value(rng, params) -> array, quantities)
CASES = {
    "Normal": (
        lambda D, p: D.Normal(p["loc"], p["scale"]),
        lambda r: {"loc": r.normal(size=(3, 4)), "scale": r.uniform(0.5, 2, size=(3, 4))},
        lambda r, p: r.normal(size=(2, 3, 4)),
        ["log_prob", "cdf", "icdf", "entropy", "mean", "mode", "variance", "stddev"],
    ),
    "Bernoulli_probs": (
        lambda D, p: D.Bernoulli(probs=p["probs"]),
        lambda r: {"probs": r.uniform(0.05, 0.95, size=(5,))},
        lambda r, p: r.integers(0, 2, size=(2, 5)).astype(np.float64),
        ["log_prob", "entropy", "mean", "variance", "stddev", "logits"],
    ),
    "Bernoulli_logits": (
        lambda D, p: D.Bernoulli(logits=p["logits"]),
        lambda r: {"logits": r.normal(size=(4, 2)) * 2},
        lambda r, p: r.integers(0, 2, size=(4, 2)).astype(np.float64),
        ["log_prob", "entropy", "mean", "mode", "variance", "probs"],
    ),
    "Categorical_probs": (
        lambda D, p: D.Categorical(probs=p["probs"]),
        lambda r: {"probs": probs(r, 3, 5)},
        lambda r, p: r.integers(0, 5, size=(2, 3)),
        ["log_prob", "entropy", "mode", "logits", "probs"],
    ),
    "Categorical_logits": (
        lambda D, p: D.Categorical(logits=p["logits"]),
        lambda r: {"logits": r.normal(size=(2, 3, 6))},
        lambda r, p: r.integers(0, 6, size=(2, 3)),
        ["log_prob", "entropy", "mode", "probs", "logits"],
    ),
    "OneHotCategorical": (
        lambda D, p: D.OneHotCategorical(logits=p["logits"]),
        lambda r: {"logits": r.normal(size=(3, 4))},
        lambda r, p: np.eye(4)[r.integers(0, 4, size=(2, 3))],
        ["log_prob", "entropy", "mean", "mode", "variance", "probs"],
    ),
    "Uniform": (
        lambda D, p: D.Uniform(p["low"], p["high"]),
        lambda r: {"low": r.normal(size=(4,)), "high": r.normal(size=(4,)) + 3.0},
        lambda r, p: r.uniform(0, 1, size=(3, 4)) * (p["high"] - p["low"]) + p["low"],
        ["log_prob", "cdf", "icdf", "entropy", "mean", "variance", "stddev"],
    ),
    "Laplace": (
        lambda D, p: D.Laplace(p["loc"], p["scale"]),
        lambda r: {"loc": r.normal(size=(3,)), "scale": r.uniform(0.5, 2, size=(3,))},
        lambda r, p: r.normal(size=(5, 3)),
        ["log_prob", "cdf", "icdf", "entropy", "mean", "mode", "variance", "stddev"],
    ),
    "Exponential": (
        lambda D, p: D.Exponential(p["rate"]),
        lambda r: {"rate": r.uniform(0.5, 2, size=(2, 3))},
        lambda r, p: r.uniform(0.01, 3, size=(2, 3)),
        ["log_prob", "cdf", "icdf", "entropy", "mean", "variance", "stddev"],
    ),
    "MultivariateNormal": (
        lambda D, p: D.MultivariateNormal(p["loc"], scale_tril=p["scale_tril"]),
        lambda r: {"loc": r.normal(size=(2, 3)), "scale_tril": tril(r)},
        lambda r, p: r.normal(size=(4, 2, 3)),
        ["log_prob", "entropy", "mean", "mode", "variance", "scale_tril", "covariance_matrix", "precision_matrix"],
    ),
    # loc [2, 3] against one matrix, and loc [3] against a batch [2, 1] of matrices: batch dims broadcast
    "MultivariateNormal_covariance": (
        lambda D, p: D.MultivariateNormal(p["loc"], covariance_matrix=p["covariance_matrix"]),
        lambda r: {"loc": r.normal(size=(2, 3)), "covariance_matrix": spd(r)},
        lambda r, p: r.normal(size=(4, 2, 3)),
        MVN_QUANTITIES,
    ),
    "MultivariateNormal_precision": (
        lambda D, p: D.MultivariateNormal(p["loc"], precision_matrix=p["precision_matrix"]),
        lambda r: {"loc": r.normal(size=(3,)), "precision_matrix": spd(r, 2, 1)},
        lambda r, p: r.normal(size=(4, 2, 1, 3)),
        MVN_QUANTITIES,
    ),
    "Independent": (
        lambda D, p: D.Independent(D.Normal(p["loc"], p["scale"]), 1),
        lambda r: {"loc": r.normal(size=(3, 4)), "scale": r.uniform(0.5, 2, size=(3, 4))},
        lambda r, p: r.normal(size=(3, 4)),
        ["log_prob", "entropy", "mean", "variance"],
    ),
    "LogNormal": (
        lambda D, p: D.LogNormal(p["loc"], p["scale"]),
        lambda r: {"loc": r.normal(size=(3,)) * 0.5, "scale": r.uniform(0.3, 1, size=(3,))},
        lambda r, p: r.uniform(0.1, 4, size=(2, 3)),
        ["log_prob", "cdf", "entropy", "mean", "mode", "variance"],
    ),
    "TransformedDistribution": (
        lambda D, p: D.TransformedDistribution(
            D.Normal(p["loc"], p["scale"]),
            [D.transforms.AffineTransform(0.5, 2.0), D.transforms.SigmoidTransform()],
        ),
        lambda r: {"loc": r.normal(size=(4,)) * 0.3, "scale": r.uniform(0.3, 1, size=(4,))},
        lambda r, p: r.uniform(0.05, 0.95, size=(2, 4)),
        ["log_prob", "cdf"],
    ),
    "TanhTransform": (  # a squashed Gaussian policy (SAC)
        lambda D, p: D.TransformedDistribution(
            D.Normal(p["loc"], p["scale"]), [D.transforms.TanhTransform(), D.transforms.AffineTransform(0.0, 2.0)]
        ),
        lambda r: {"loc": r.normal(size=(4,)) * 0.5, "scale": r.uniform(0.3, 1, size=(4,))},
        lambda r, p: r.uniform(-1.9, 1.9, size=(2, 4)),
        ["log_prob"],
    ),
}


def _quantity(dist, name, value):
    if name in ("log_prob", "cdf"):
        return getattr(dist, name)(value)
    if name == "icdf":
        return dist.icdf(value)
    if name == "entropy":
        return dist.entropy()
    return getattr(dist, name)


def _icdf_arg(rng, shape):
    return rng.uniform(0.05, 0.95, size=shape)


def _inputs(case, seed):
    rng = np.random.default_rng(seed)
    build, make_params, make_value, _ = CASES[case]
    params = make_params(rng)
    value = make_value(rng, params)
    return build, params, value, rng


def _torch_side(build, params, value, name, weight):
    tp = {k: torch.tensor(v, dtype=torch.float64, requires_grad=True) for k, v in params.items()}
    tv = torch.tensor(value)
    out = _quantity(build(TD, tp), name, tv)
    grads = {}
    if out.dtype == torch.float64 and out.requires_grad:
        g = torch.autograd.grad((out * torch.tensor(weight)).sum(), list(tp.values()), allow_unused=True)
        grads = {k: gi for k, gi in zip(tp, g) if gi is not None}
    return out.detach().numpy(), {k: g.numpy() for k, g in grads.items()}


def _flame_eager(build, params, value, name, weight, grad_keys):
    fp = {k: flame.tensor(v, dtype=flame.f64, requires_grad=True) for k, v in params.items()}
    out = _quantity(build(FD, fp), name, flame.tensor(value))
    if grad_keys:
        (out * flame.tensor(weight)).sum().backward()
    return out.detach().numpy(), {k: fp[k].grad.numpy() for k in grad_keys}


def _flame_compiled(build, params, value, name, weight, grad_keys):
    keys = list(params)

    @flame.compile
    def step(value, weight, *ps):
        fp = dict(zip(keys, ps))
        out = _quantity(build(FD, fp), name, value)
        if not grad_keys:
            return (out,)
        grads = flame.autograd.grad((out * weight).sum(), [fp[k] for k in grad_keys])
        return (out, *grads)

    ps = [flame.tensor(params[k], dtype=flame.f64, requires_grad=True) for k in keys]
    out, *grads = step(flame.tensor(value), flame.tensor(weight), *ps)
    return out.numpy(), {k: g.numpy() for k, g in zip(grad_keys, grads)}


QUANTITIES = [(case, q) for case, spec in CASES.items() for q in spec[3]]


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("case,name", QUANTITIES, ids=[f"{c}-{q}" for c, q in QUANTITIES])
def test_quantity_and_gradients_match_torch(case, name, compiled):
    build, params, value, rng = _inputs(case, 7)
    if name == "icdf":
        value = _icdf_arg(rng, value.shape)
    t_out, t_grads = _torch_side(build, params, value, name, 1.0)
    weight = rng.normal(size=t_out.shape) if t_out.dtype == np.float64 else np.ones(t_out.shape)
    t_out, t_grads = _torch_side(build, params, value, name, weight)
    run = _flame_compiled if compiled else _flame_eager
    out, grads = run(build, params, value, name, weight, sorted(t_grads))
    assert out.shape == t_out.shape
    assert str(out.dtype) == str(t_out.dtype).replace("torch.", "")
    np.testing.assert_allclose(out, t_out, rtol=1e-10, atol=1e-12, equal_nan=True)
    for k in t_grads:  # (scale_tril's whole gradient: torch's cholesky_inverse differentiates its upper triangle)
        np.testing.assert_allclose(grads[k], t_grads[k], rtol=1e-9, atol=1e-11, err_msg=f"d/d{k}")


@pytest.mark.parametrize("case", list(CASES))
def test_shapes_and_flags_match_torch(case):
    build, params, _, _ = _inputs(case, 3)
    fd = build(FD, {k: flame.tensor(v, dtype=flame.f64) for k, v in params.items()})
    td = build(TD, {k: torch.tensor(v, dtype=torch.float64) for k, v in params.items()})
    assert fd.batch_shape == tuple(td.batch_shape) and fd.event_shape == tuple(td.event_shape)
    assert fd.has_rsample == td.has_rsample and fd.has_enumerate_support == td.has_enumerate_support
    assert type(fd.support).__name__ == type(td.support).__name__


@pytest.mark.parametrize("case", list(CASES))
def test_expand_matches_torch(case):
    build, params, value, _ = _inputs(case, 5)
    fd = build(FD, {k: flame.tensor(v, dtype=flame.f64) for k, v in params.items()})
    td = build(TD, {k: torch.tensor(v, dtype=torch.float64) for k, v in params.items()})
    new_batch = (2, *td.batch_shape)
    fe, te = fd.expand(new_batch), td.expand(new_batch)
    assert type(fe) is type(fd) and fe.batch_shape == tuple(te.batch_shape) == new_batch
    assert fe.event_shape == tuple(te.event_shape)
    name = "entropy" if "entropy" in CASES[case][3] else "log_prob"
    want = _quantity(te, name, torch.tensor(value))
    assert want.shape[-len(new_batch) :] == new_batch
    np.testing.assert_allclose(_quantity(fe, name, flame.tensor(value)).numpy(), want.numpy(), rtol=1e-12)
    assert fe.sample().shape == tuple(te.sample().shape)


def test_scalar_parameters_make_f32_distributions_of_empty_batch():
    for fd, td in [
        (FD.Normal(0.0, 1.0), TD.Normal(0.0, 1.0)),
        (FD.Exponential(2.0), TD.Exponential(2.0)),
        (FD.Bernoulli(0.3), TD.Bernoulli(0.3)),
        (FD.Uniform(0.0, 2.0), TD.Uniform(0.0, 2.0)),
    ]:
        assert fd.batch_shape == tuple(td.batch_shape) == ()
        assert fd.sample().dtype == flame.f32 and td.sample().dtype == torch.float32
        np.testing.assert_allclose(fd.entropy().numpy(), td.entropy().numpy(), rtol=1e-6)


def test_mixed_number_and_tensor_parameters_take_the_tensors_dtype():
    loc = np.array([0.5, -1.0])
    fd, td = FD.Normal(flame.tensor(loc, dtype=flame.f64), 2.0), TD.Normal(torch.tensor(loc), 2.0)
    assert fd.scale.dtype == flame.f64 and td.scale.dtype == torch.float64
    np.testing.assert_allclose(fd.log_prob(flame.tensor(loc)).numpy(), td.log_prob(torch.tensor(loc)).numpy())


def test_enumerate_support_matches_torch():
    p = probs(np.random.default_rng(0), 2, 3)
    for name in ("Categorical", "OneHotCategorical"):
        fd, td = getattr(FD, name)(flame.tensor(p)), getattr(TD, name)(torch.tensor(p))
        for expand in (True, False):
            np.testing.assert_array_equal(fd.enumerate_support(expand).numpy(), td.enumerate_support(expand).numpy())
    fb, tb = FD.Bernoulli(flame.tensor(p[0])), TD.Bernoulli(torch.tensor(p[0]))
    np.testing.assert_array_equal(fb.enumerate_support().numpy(), tb.enumerate_support().numpy())


def test_sample_n_warns_and_samples_as_torch():
    with pytest.warns(FutureWarning, match=r"sample_n\(n\)` will be deprecated") as want:
        t = TD.Normal(torch.zeros(2), torch.ones(2)).sample_n(3)
    with pytest.warns(FutureWarning) as got:
        f = FD.Normal(flame.zeros(2), flame.ones(2)).sample_n(3)
    assert f.shape == tuple(t.shape) and str(got[0].message) == str(want[0].message)


def test_transforms_compare_as_torchs():
    for lib in (TD, FD):
        T = lib.transforms
        loc = (torch if lib is TD else flame).tensor([0.5, 1.0])
        assert T.ExpTransform() == T.ExpTransform() and T.TanhTransform() != T.SigmoidTransform()
        assert T.AffineTransform(0.0, 2.0) == T.AffineTransform(0.0, 2.0) != T.AffineTransform(0.0, 3.0)
        assert T.AffineTransform(loc, 2.0) == T.AffineTransform(loc * 1, 2.0) != T.AffineTransform(loc * 2, 2.0)
        assert T.ExpTransform().inv == T.ExpTransform().inv != T.ExpTransform()
        assert T.ComposeTransform([T.ExpTransform()]) == T.ComposeTransform([T.ExpTransform()])


def test_tanh_as_documented_composition_matches_torchs_tanh_transform():
    """tanh x = 2 sigmoid(2x) - 1: [AffineTransform(0, 2), SigmoidTransform(), AffineTransform(-1, 2)] is
    torch's TanhTransform (a squashed Gaussian policy)."""
    rng = np.random.default_rng(9)
    loc, scale, v = rng.normal(size=(3,)), rng.uniform(0.3, 1, size=(3,)), rng.uniform(-0.9, 0.9, size=(4, 3))
    T = FD.transforms
    parts = [T.AffineTransform(0.0, 2.0), T.SigmoidTransform(), T.AffineTransform(-1.0, 2.0)]
    floc = flame.tensor(loc, requires_grad=True)
    got = FD.TransformedDistribution(FD.Normal(floc, flame.tensor(scale)), parts).log_prob(flame.tensor(v))
    tloc = torch.tensor(loc, requires_grad=True)
    want = TD.TransformedDistribution(TD.Normal(tloc, torch.tensor(scale)), TD.TanhTransform()).log_prob(
        torch.tensor(v)
    )
    np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=1e-9)
    got.sum().backward()
    want.sum().backward()
    np.testing.assert_allclose(floc.grad.numpy(), tloc.grad.numpy(), rtol=1e-9)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_one_hot_log_prob_takes_bool_values_as_torch(compiled):
    """A one-hot value given as a bool tensor (one_hot(...).bool(), a mask) is scored as its 0/1 float."""
    p, idx = probs(np.random.default_rng(2), 3, 4), np.array([0, 3, 1])
    value = np.eye(4, dtype=bool)[idx]
    want = TD.OneHotCategorical(torch.tensor(p)).log_prob(torch.tensor(value))

    def log_prob(probs_, value_):
        return FD.OneHotCategorical(probs_).log_prob(value_)

    run = flame.compile(log_prob) if compiled else log_prob
    got = run(flame.tensor(p), flame.tensor(value))
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-12)
