"""Multinomial, Weibull, Pareto, GeneralizedPareto, InverseGamma, Kumaraswamy, FisherSnedecor,
LowRankMultivariateNormal, the relaxed distributions, LogisticNormal, OneHotCategoricalStraightThrough,
ContinuousBernoulli, VonMises, LKJCholesky and Wishart against torch.distributions in f64: each quantity's
value and its gradients with respect to the parameters, eagerly and inside @flame.compile; shapes, flags,
expand and validation (their draws and KL pairs: test_distributions_more_draws.py)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.distributions as TD

import flame
import flame.distributions as FD
from tests.distributions.common import probs, spd, tril
from tests.distributions.test_distributions_values import _flame_compiled, _flame_eager, _torch_side

MOMENTS = ["entropy", "mean", "mode", "variance", "stddev"]


def _counts(r, p, n=6):
    """Multinomial counts of n draws over p's last dim, for every batch element (4 per element)."""
    flat = p.reshape(-1, p.shape[-1])
    out = np.stack([[r.multinomial(n, q) for q in flat] for _ in range(4)])
    return out.reshape(4, *p.shape).astype(np.float64)


def _corr_tril(r, batch, n):
    """Lower Cholesky factors of [batch] n x n correlation matrices: tril() rows scaled to unit norm."""
    a = tril(r, batch, n=n)
    return a / np.sqrt((a * a).sum(-1, keepdims=True))


# name: (build(D, params), params(rng), value(rng, params), quantities)
CASES = {
    "Multinomial_probs": (
        lambda D, p: D.Multinomial(6, probs=p["probs"]),
        lambda r: {"probs": probs(r, 2, 4)},
        lambda r, p: _counts(r, p["probs"]),
        ["log_prob", "entropy", "mean", "variance", "logits"],
    ),
    "Multinomial_logits": (
        lambda D, p: D.Multinomial(5, logits=p["logits"]),
        lambda r: {"logits": r.normal(size=(3,))},
        lambda r, p: _counts(r, np.exp(p["logits"]) / np.exp(p["logits"]).sum(), 5),
        ["log_prob", "entropy", "mean", "variance", "probs"],
    ),
    "Weibull": (
        lambda D, p: D.Weibull(p["scale"], p["concentration"]),
        # concentrations on each side of 1 (NaN mode below)
        lambda r: {"scale": r.uniform(0.5, 2, size=(2, 3)), "concentration": np.array([0.7, 1.5, 3.0])},
        lambda r, p: r.uniform(0.05, 4, size=(4, 2, 3)),
        ["log_prob", "cdf", "icdf", *MOMENTS],
    ),
    "Pareto": (
        lambda D, p: D.Pareto(p["scale"], p["alpha"]),
        # alpha below 1, between 1 and 2, above 2: infinite mean and variance, infinite variance, finite
        lambda r: {"scale": r.uniform(0.5, 1, size=(2, 1)), "alpha": np.array([0.7, 1.5, 3.0])},
        lambda r, p: r.uniform(1.0, 6, size=(4, 2, 3)),
        ["log_prob", "cdf", "icdf", *MOMENTS],
    ),
    "GeneralizedPareto": (
        lambda D, p: D.GeneralizedPareto(p["loc"], p["scale"], p["concentration"]),
        # a negative concentration (bounded support), zero (exponential tail) and two positive ones
        lambda r: {
            "loc": r.normal(size=(4,)) * 0.3,
            "scale": r.uniform(0.5, 2, size=(2, 4)),
            "concentration": np.array([-0.2, 0.0, 0.3, 0.8]),
        },
        lambda r, p: p["loc"] + r.uniform(0.01, 1.5, size=(3, 2, 4)),
        ["log_prob", "cdf", "icdf", *MOMENTS],
    ),
    "InverseGamma": (
        lambda D, p: D.InverseGamma(p["concentration"], p["rate"]),
        lambda r: {"concentration": np.array([0.5, 1.5, 2.5, 6.0]), "rate": r.uniform(0.5, 2, size=(3, 1))},
        lambda r, p: r.uniform(0.05, 4, size=(3, 4)),
        ["log_prob", *MOMENTS],
    ),
    "Kumaraswamy": (
        lambda D, p: D.Kumaraswamy(p["c1"], p["c0"]),
        lambda r: {"c1": np.array([0.5, 1.5, 2.0, 4.0]), "c0": np.array([2.0, 0.7, 3.0, 1.5])},
        lambda r, p: r.uniform(0.05, 0.95, size=(3, 4)),
        ["log_prob", "cdf", "icdf", *MOMENTS, "concentration1"],
    ),
    "FisherSnedecor": (
        lambda D, p: D.FisherSnedecor(p["df1"], p["df2"]),
        # df1 on each side of 2 (NaN mode), df2 on each side of 2 and 4 (NaN mean, variance)
        lambda r: {"df1": np.array([1.5, 3.0, 5.0, 8.0]), "df2": np.array([1.5, 3.0, 5.0, 10.0])},
        lambda r, p: r.uniform(0.05, 4, size=(3, 4)),
        ["log_prob", "mean", "mode", "variance"],
    ),
    # loc [2, 3] against one factor [3, 2], and loc [3] against a batch [2, 1] of factors: batch dims broadcast
    "LowRankMultivariateNormal": (
        lambda D, p: D.LowRankMultivariateNormal(p["loc"], p["cov_factor"], p["cov_diag"]),
        lambda r: {
            "loc": r.normal(size=(2, 3)),
            "cov_factor": r.normal(size=(3, 2)),
            "cov_diag": r.uniform(0.5, 2, (3,)),
        },
        lambda r, p: r.normal(size=(4, 2, 3)),
        [
            "log_prob",
            "entropy",
            "mean",
            "mode",
            "variance",
            "stddev",
            "scale_tril",
            "covariance_matrix",
            "precision_matrix",
        ],
    ),
    "LowRankMultivariateNormal_batched": (
        lambda D, p: D.LowRankMultivariateNormal(p["loc"], p["cov_factor"], p["cov_diag"]),
        lambda r: {
            "loc": r.normal(size=(3,)),
            "cov_factor": r.normal(size=(2, 1, 3, 1)),
            "cov_diag": r.uniform(0.5, 2, (2, 1, 3)),
        },
        lambda r, p: r.normal(size=(4, 2, 1, 3)),
        ["log_prob", "entropy", "variance", "scale_tril", "precision_matrix"],
    ),
    "RelaxedBernoulli_probs": (
        lambda D, p: D.RelaxedBernoulli(p["temperature"], probs=p["probs"]),
        lambda r: {"temperature": np.array(0.7), "probs": r.uniform(0.1, 0.9, size=(2, 3))},
        lambda r, p: r.uniform(0.02, 0.98, size=(4, 2, 3)),
        ["log_prob", "logits"],
    ),
    "RelaxedBernoulli_logits": (
        lambda D, p: D.RelaxedBernoulli(p["temperature"], logits=p["logits"]),
        lambda r: {"temperature": r.uniform(0.3, 2, size=(3,)), "logits": r.normal(size=(3,))},
        lambda r, p: r.uniform(0.02, 0.98, size=(2, 3)),
        ["log_prob", "probs"],
    ),
    "RelaxedOneHotCategorical": (
        lambda D, p: D.RelaxedOneHotCategorical(p["temperature"], logits=p["logits"]),
        lambda r: {"temperature": np.array(0.5), "logits": r.normal(size=(2, 4))},
        lambda r, p: probs(r, 3, 2, 4),
        ["log_prob", "probs"],
    ),
    "RelaxedOneHotCategorical_probs": (
        lambda D, p: D.RelaxedOneHotCategorical(p["temperature"], probs=p["probs"]),
        lambda r: {"temperature": np.array(1.5), "probs": probs(r, 3)},
        lambda r, p: probs(r, 2, 3),
        ["log_prob", "logits"],
    ),
    "LogisticNormal": (
        lambda D, p: D.LogisticNormal(p["loc"], p["scale"]),
        lambda r: {"loc": r.normal(size=(2, 3)) * 0.5, "scale": r.uniform(0.5, 2, size=(3,))},
        lambda r, p: probs(r, 4, 2, 4),
        ["log_prob", "loc", "scale"],
    ),
    "OneHotCategoricalStraightThrough": (
        lambda D, p: D.OneHotCategoricalStraightThrough(logits=p["logits"]),
        lambda r: {"logits": r.normal(size=(3, 4))},
        lambda r, p: np.eye(4)[r.integers(0, 4, size=(2, 3))],
        ["log_prob", "entropy", "mean", "mode", "variance", "probs"],
    ),
    # probs on each side of 1/2 and inside torch's unstable region (0.499, 0.501] (Taylor expansions)
    "ContinuousBernoulli_probs": (
        lambda D, p: D.ContinuousBernoulli(probs=p["probs"]),
        lambda r: {"probs": np.array([[0.05, 0.3, 0.4995, 0.5005, 0.8, 0.97]])},
        lambda r, p: r.uniform(0.01, 0.99, size=(3, 1, 6)),
        ["log_prob", "cdf", "icdf", "entropy", "mean", "variance", "stddev", "logits"],
    ),
    "ContinuousBernoulli_logits": (
        lambda D, p: D.ContinuousBernoulli(logits=p["logits"]),
        lambda r: {"logits": np.array([-4.0, -0.5, 1e-4, 0.3, 2.0])},
        lambda r, p: r.uniform(0.01, 0.99, size=(2, 5)),
        ["log_prob", "cdf", "icdf", "entropy", "mean", "variance", "probs"],
    ),
    "VonMises": (
        lambda D, p: D.VonMises(p["loc"], p["concentration"]),
        # concentrations on each side of 3.75, where torch's Bessel approximations switch
        lambda r: {"loc": r.uniform(-3, 3, size=(4,)), "concentration": np.array([0.05, 1.0, 3.7, 12.0])},
        lambda r, p: r.uniform(-np.pi, np.pi, size=(3, 4)),
        ["log_prob", "mean", "mode", "variance"],
    ),
    "LKJCholesky": (
        lambda D, p: D.LKJCholesky(3, p["concentration"]),
        lambda r: {"concentration": np.array([0.5, 1.0, 4.0])},
        lambda r, p: np.stack([_corr_tril(r, 3, 3) for _ in range(2)]),
        ["log_prob"],
    ),
    "Wishart_scale_tril": (
        lambda D, p: D.Wishart(p["df"], scale_tril=p["scale_tril"]),
        # df on each side of p + 1 (NaN mode below)
        lambda r: {"df": np.array([3.5, 6.0]), "scale_tril": tril(r, 2)},
        lambda r, p: spd(r, 4, 2),
        ["log_prob", "entropy", "mean", "mode", "variance", "covariance_matrix", "precision_matrix"],
    ),
    "Wishart_covariance": (
        lambda D, p: D.Wishart(p["df"], covariance_matrix=p["covariance_matrix"]),
        lambda r: {"df": np.array(5.0), "covariance_matrix": spd(r, 2)},
        lambda r, p: spd(r, 3, 2),
        ["log_prob", "entropy", "mean", "variance", "scale_tril"],
    ),
    "Wishart_precision": (
        lambda D, p: D.Wishart(p["df"], precision_matrix=p["precision_matrix"]),
        lambda r: {"df": np.array([4.0, 7.0]), "precision_matrix": spd(r)},
        lambda r, p: spd(r, 3, 2),
        ["log_prob", "entropy", "mean", "covariance_matrix"],
    ),
}

QUANTITIES = [(case, q) for case, spec in CASES.items() for q in spec[3]]


def _inputs(case, seed):
    rng = np.random.default_rng(seed)
    build, make_params, make_value, _ = CASES[case]
    params = make_params(rng)
    return build, params, make_value(rng, params), rng


@pytest.fixture(autouse=True)
def _torch_f64_default_for_generalized_pareto(request):
    """torch's GeneralizedPareto compares its concentration with a tensor of the default dtype, which
    fails for f64 parameters under an f32 default: its f64 values are read with f64 as the default."""
    before = torch.get_default_dtype()
    if "GeneralizedPareto" in request.node.name:
        torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(before)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("case,name", QUANTITIES, ids=[f"{c}-{q}" for c, q in QUANTITIES])
def test_quantity_and_gradients_match_torch(case, name, compiled):
    build, params, value, rng = _inputs(case, 11)
    if name == "icdf":
        value = rng.uniform(0.05, 0.95, size=value.shape)
    t_out, _ = _torch_side(build, params, value, name, 1.0)
    weight = rng.normal(size=t_out.shape)
    t_out, t_grads = _torch_side(build, params, value, name, weight)
    run = _flame_compiled if compiled else _flame_eager
    out, grads = run(build, params, value, name, weight, sorted(t_grads))
    assert out.shape == t_out.shape and str(out.dtype) == str(t_out.dtype)
    np.testing.assert_allclose(out, t_out, rtol=1e-10, atol=1e-12, equal_nan=True)
    for k in t_grads:  # (scale_tril's whole gradient: torch's cholesky_solve differentiates its upper triangle)
        np.testing.assert_allclose(grads[k], t_grads[k], rtol=2e-8, atol=1e-10, equal_nan=True, err_msg=f"d/d{k}")


@pytest.mark.parametrize("case", list(CASES))
def test_shapes_flags_and_expand_match_torch(case):
    build, params, value, _ = _inputs(case, 3)
    fd = build(FD, {k: flame.tensor(v, dtype=flame.f64) for k, v in params.items()})
    td = build(TD, {k: torch.tensor(v, dtype=torch.float64) for k, v in params.items()})
    assert fd.batch_shape == tuple(td.batch_shape) and fd.event_shape == tuple(td.event_shape)
    assert fd.has_rsample == td.has_rsample and fd.has_enumerate_support == td.has_enumerate_support
    assert type(fd.support).__name__ == type(td.support).__name__
    assert sorted(fd.arg_constraints) == sorted(td.arg_constraints)
    new_batch = (2, *td.batch_shape)
    fe, te = fd.expand(new_batch), td.expand(new_batch)
    assert type(fe) is type(fd) and fe.batch_shape == tuple(te.batch_shape) == new_batch
    assert fe.event_shape == tuple(te.event_shape)
    want = te.log_prob(torch.tensor(value[0]))
    np.testing.assert_allclose(fe.log_prob(flame.tensor(value[0])).numpy(), want.numpy(), rtol=1e-12)
    assert fe.sample((3,)).shape == tuple(te.sample((3,)).shape)
    if fd.has_rsample:
        assert fe.rsample((3,)).shape == tuple(te.rsample((3,)).shape)


BAD = [
    ("Weibull", lambda D, W: D.Weibull(W([1.0]), W([-1.0]))),
    ("Weibull value", lambda D, W: D.Weibull(W([1.0]), W([1.0])).log_prob(W([-1.0]))),
    ("Pareto", lambda D, W: D.Pareto(W([0.0]), W([1.0]))),
    ("Pareto value", lambda D, W: D.Pareto(W([2.0]), W([1.0])).log_prob(W([1.0]))),
    ("GeneralizedPareto", lambda D, W: D.GeneralizedPareto(W([0.0]), W([-1.0]), W([0.5]))),
    ("GeneralizedPareto value", lambda D, W: D.GeneralizedPareto(W([0.0]), W([1.0]), W([-0.5])).log_prob(W([3.0]))),
    ("InverseGamma", lambda D, W: D.InverseGamma(W([0.0]), W([1.0]))),
    ("InverseGamma value", lambda D, W: D.InverseGamma(W([1.0]), W([1.0])).log_prob(W([-1.0]))),
    ("Kumaraswamy", lambda D, W: D.Kumaraswamy(W([1.0]), W([-1.0]))),
    ("Kumaraswamy value", lambda D, W: D.Kumaraswamy(W([1.0]), W([1.0])).log_prob(W([1.5]))),
    ("FisherSnedecor", lambda D, W: D.FisherSnedecor(W([1.0]), W([0.0]))),
    ("RelaxedBernoulli", lambda D, W: D.RelaxedBernoulli(W(0.5), W([1.5]))),
    ("RelaxedBernoulli value", lambda D, W: D.RelaxedBernoulli(W(0.5), W([0.5])).log_prob(W([1.5]))),
    ("RelaxedBernoulli both", lambda D, W: D.RelaxedBernoulli(W(0.5), W([0.5]), W([0.5]))),
    ("RelaxedOneHotCategorical", lambda D, W: D.RelaxedOneHotCategorical(W(0.5), W([0.5, -0.5]))),
    (
        "RelaxedOneHotCategorical value",
        lambda D, W: D.RelaxedOneHotCategorical(W(0.5), W([0.5, 0.5])).log_prob(W([0.7, 0.7])),
    ),
    ("LogisticNormal", lambda D, W: D.LogisticNormal(W([0.0]), W([0.0]))),
    ("ContinuousBernoulli checked", lambda D, W: D.ContinuousBernoulli(W([1.5]), validate_args=False)),
    ("ContinuousBernoulli value", lambda D, W: D.ContinuousBernoulli(W([0.3])).log_prob(W([1.5]))),
    ("VonMises", lambda D, W: D.VonMises(W([0.0]), W([0.0]))),
    ("Wishart df", lambda D, W: D.Wishart(W([0.5]), covariance_matrix=W([[[1.0, 0.0], [0.0, 1.0]]] * 1))),
    ("Wishart matrix", lambda D, W: D.Wishart(W(3.0), covariance_matrix=W([[1.0, 2.0], [2.0, 1.0]]))),
    (
        "Wishart value",
        lambda D, W: D.Wishart(W(3.0), scale_tril=W([[1.0, 0.0], [0.0, 1.0]])).log_prob(W([[1.0, 2.0], [2.0, 1.0]])),
    ),
    ("LKJCholesky dim", lambda D, W: D.LKJCholesky(1, W(1.0))),
    ("LKJCholesky", lambda D, W: D.LKJCholesky(3, W([0.0]))),
    ("LKJCholesky value", lambda D, W: D.LKJCholesky(2, W(1.0)).log_prob(W([[1.0, 0.0], [0.5, 0.5]]))),
    ("LogisticNormal value", lambda D, W: D.LogisticNormal(W([0.0]), W([1.0])).log_prob(W([0.5, 0.6]))),
    ("LowRank diag", lambda D, W: D.LowRankMultivariateNormal(W([0.0, 0.0]), W([[1.0], [1.0]]), W([1.0, 0.0]))),
    ("LowRank loc", lambda D, W: D.LowRankMultivariateNormal(W(0.0), W([[1.0], [1.0]]), W([1.0, 1.0]))),
    ("LowRank factor dims", lambda D, W: D.LowRankMultivariateNormal(W([0.0, 0.0]), W([1.0, 1.0]), W([1.0, 1.0]))),
    ("LowRank factor rows", lambda D, W: D.LowRankMultivariateNormal(W([0.0, 0.0]), W([[1.0]] * 3), W([1.0, 1.0]))),
    ("LowRank diag shape", lambda D, W: D.LowRankMultivariateNormal(W([0.0, 0.0]), W([[1.0], [1.0]]), W([1.0] * 3))),
    (
        "LowRank batch",
        lambda D, W: D.LowRankMultivariateNormal(W([[0.0, 0.0]] * 2), W([[[1.0], [1.0]]] * 3), W([1.0, 1.0])),
    ),
    ("Multinomial probs", lambda D, W: D.Multinomial(3, W([0.5, -0.5]))),
    ("Multinomial value", lambda D, W: D.Multinomial(3, W([0.5, 0.5])).log_prob(W([3.0, 1.0]))),
    ("Multinomial both", lambda D, W: D.Multinomial(3, W([0.5, 0.5]), W([0.5, 0.5]))),
]


@pytest.mark.parametrize("label,make", BAD, ids=[b[0] for b in BAD])
def test_bad_parameters_and_values_raise_as_torch(label, make):
    with pytest.raises(ValueError) as want:
        make(TD, lambda x: torch.tensor(x, dtype=torch.float64))
    with pytest.raises(ValueError) as got:
        make(FD, lambda x: flame.tensor(x, dtype=flame.f64))
    # flame writes shapes as tuples and tensors as flame prints them
    head = str(want.value).split(" (")[0].split(": loc")[0].split(" torch.Size")[0].split("=tensor")[0]
    assert str(got.value).startswith(head), (str(got.value), str(want.value))


def test_multinomial_samples_have_its_moments_and_torchs_errors():
    flame.manual_seed(1)
    p = np.array([[0.2, 0.3, 0.5], [0.6, 0.3, 0.1]])
    s = FD.Multinomial(10, flame.tensor(p)).sample((20000,)).numpy()
    assert s.shape == (20000, 2, 3) and s.dtype == np.float64 and np.all(s.sum(-1) == 10)
    np.testing.assert_allclose(s.mean(0), 10 * p, rtol=0.03)
    np.testing.assert_allclose(s.var(0), 10 * p * (1 - p), rtol=0.06)
    with pytest.raises(NotImplementedError, match="inhomogeneous total_count is not supported"):
        FD.Multinomial(flame.tensor([3.0]), flame.tensor([0.5, 0.5]))

    @flame.compile
    def draw(logits):
        return FD.Multinomial(4, logits=logits).sample((5,))

    out = draw(flame.tensor([0.0, 1.0, -1.0])).numpy()
    assert out.shape == (5, 3) and np.all(out.sum(-1) == 4)


EXP_FAMILIES = [
    ("Bernoulli", lambda D, W: D.Bernoulli(W([0.3, 0.8]))),
    ("Beta", lambda D, W: D.Beta(W([0.5, 2.0]), W([1.5, 3.0]))),
    ("Dirichlet", lambda D, W: D.Dirichlet(W([[0.5, 2.0, 1.0]]))),
    ("Exponential", lambda D, W: D.Exponential(W([0.5, 2.0]))),
    ("Gamma", lambda D, W: D.Gamma(W([0.5, 2.0]), W([1.5, 3.0]))),
    ("Normal", lambda D, W: D.Normal(W([0.5, 2.0]), W([1.5, 3.0]))),
    ("Poisson", lambda D, W: D.Poisson(W([0.5, 2.0]))),
    ("ContinuousBernoulli", lambda D, W: D.ContinuousBernoulli(W([0.2, 0.4995, 0.9]))),
    ("Wishart", lambda D, W: D.Wishart(W([4.0, 6.0]), covariance_matrix=W([[2.0, 0.5], [0.5, 1.0]]))),
]


@pytest.mark.parametrize("label,build", EXP_FAMILIES, ids=[e[0] for e in EXP_FAMILIES])
def test_exponential_family_bregman_entropy_is_torchs(label, build):
    """ExponentialFamily.entropy from each family's natural parameters and log-normaliser, as torch's
    (NotImplementedError where torch's family gives no mean carrier measure)."""
    td = build(TD, lambda x: torch.tensor(x, dtype=torch.float64))
    fd = build(FD, lambda x: flame.tensor(x, dtype=flame.f64))
    assert isinstance(fd, FD.ExponentialFamily) and isinstance(td, TD.ExponentialFamily)
    try:
        want = TD.ExponentialFamily.entropy(td).detach().numpy()
    except NotImplementedError:
        with pytest.raises(NotImplementedError):
            FD.ExponentialFamily.entropy(fd)
        return
    np.testing.assert_allclose(FD.ExponentialFamily.entropy(fd).detach().numpy(), want, rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(fd.entropy().detach().numpy(), want, rtol=1e-10, atol=1e-14)
