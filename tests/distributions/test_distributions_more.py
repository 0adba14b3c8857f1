"""Multinomial, Weibull, Pareto, GeneralizedPareto, InverseGamma, Kumaraswamy, FisherSnedecor,
ContinuousBernoulli, VonMises, LowRankMultivariateNormal and the relaxed distributions against
torch.distributions in f64: each quantity's value and its gradients with respect to the parameters, eagerly
and inside @flame.compile; shapes, flags, expand, validation and sample statistics."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.stats as st
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
    for k in t_grads:
        if case.startswith("Wishart") and k == "scale_tril":
            # torch's cholesky_solve also differentiates scale_tril's unread upper triangle
            grads[k], t_grads[k] = np.tril(grads[k]), np.tril(t_grads[k])
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


LAWS = [
    (
        "Weibull",
        lambda D, W: D.Weibull(W([2.0, 0.5]), W([1.5, 0.8])),
        [st.weibull_min(1.5, scale=2.0), st.weibull_min(0.8, scale=0.5)],
    ),
    ("Pareto", lambda D, W: D.Pareto(W([1.0, 2.0]), W([3.0, 1.5])), [st.pareto(3.0), st.pareto(1.5, scale=2.0)]),
    (
        "GeneralizedPareto",
        lambda D, W: D.GeneralizedPareto(W([0.0, 1.0, -1.0]), W([1.0, 2.0, 0.5]), W([0.3, 0.0, -0.4])),
        [st.genpareto(0.3), st.genpareto(0.0, loc=1.0, scale=2.0), st.genpareto(-0.4, loc=-1.0, scale=0.5)],
    ),
    (
        "InverseGamma",
        lambda D, W: D.InverseGamma(W([0.7, 3.0]), W([2.0, 1.0])),
        [st.invgamma(0.7, scale=2.0), st.invgamma(3.0)],
    ),
    ("Kumaraswamy", lambda D, W: D.Kumaraswamy(W([0.5, 3.0]), W([2.0, 1.5])), None),
    ("FisherSnedecor", lambda D, W: D.FisherSnedecor(W([3.0, 10.0]), W([5.0, 2.5])), [st.f(3.0, 5.0), st.f(10.0, 2.5)]),
]


@pytest.mark.parametrize("label,build,laws", LAWS, ids=[g[0] for g in LAWS])
def test_samples_follow_the_law(label, build, laws):
    flame.manual_seed(3)
    fd = build(FD, lambda x: flame.tensor(x, dtype=flame.f64))
    s = fd.sample((20000,)).numpy()
    r = fd.rsample((20000,)).numpy()
    assert s.shape == r.shape == (20000, *fd.batch_shape) and s.dtype == np.float64
    for i in range(fd.batch_shape[0]):
        if laws is None:  # the distribution's own cdf (checked against torch above)
            law_cdf = lambda x, i=i: fd.cdf(flame.tensor(x[:, None].repeat(fd.batch_shape[0], 1))).numpy()[:, i]  # noqa: E731
        else:
            law_cdf = laws[i].cdf
        assert st.kstest(s[:, i], law_cdf).pvalue > 1e-3, (label, i)
        assert st.kstest(r[:, i], law_cdf).pvalue > 1e-3, (label, i)


# (build, params, f, d/dparam E[f(x)] in closed form): pathwise gradients of rsample follow the expectation
RSAMPLE_GRADIENTS = [
    (
        "Weibull",
        lambda p: FD.Weibull(p[0], p[1]),
        [2.0, 1.5],
        lambda x: x,
        lambda s, k: [math.exp(math.lgamma(1 + 1 / k)), None],
    ),
    ("Pareto", lambda p: FD.Pareto(p[0], p[1]), [1.5, 3.0], lambda x: x, lambda s, a: [a / (a - 1), -s / (a - 1) ** 2]),
    (
        "InverseGamma",
        lambda p: FD.InverseGamma(p[0], p[1]),
        [3.0, 2.0],
        lambda x: x,
        lambda a, b: [-b / (a - 1) ** 2, 1 / (a - 1)],
    ),
    (
        "GeneralizedPareto",
        lambda p: FD.GeneralizedPareto(p[0], p[1], p[2]),
        [0.5, 2.0, 0.2],
        lambda x: x,
        lambda m, s, c: [1.0, 1 / (1 - c), s / (1 - c) ** 2],
    ),
    (
        "FisherSnedecor",
        lambda p: FD.FisherSnedecor(p[0], p[1]),
        [3.0, 8.0],
        lambda x: x,
        lambda d1, d2: [0.0, -2 / (d2 - 2) ** 2],
    ),
]


@pytest.mark.parametrize("label,build,params,f,want", RSAMPLE_GRADIENTS, ids=[g[0] for g in RSAMPLE_GRADIENTS])
def test_rsample_gradients_follow_the_expectation(label, build, params, f, want):
    flame.manual_seed(6)
    ps = [flame.tensor(v, dtype=flame.f64, requires_grad=True) for v in params]
    f(build(ps).rsample((200000,))).mean().backward()
    for p, w in zip(ps, want(*params)):
        if w is not None:
            np.testing.assert_allclose(float(p.grad.numpy()), w, rtol=0.03, atol=0.01)


# KL pairs torch registers with these distributions on a side: (p case, q case)
KL_PAIRS = {
    "Pareto-Pareto": ("Pareto", "Pareto"),
    "Pareto-Exponential": ("Pareto", "Exponential"),
    "Pareto-Gamma": ("Pareto", "Gamma"),
    "Pareto-Normal": ("Pareto", "Normal"),
    "Pareto-Uniform": ("Pareto", "Uniform"),
    "Pareto-Beta": ("Pareto", "Beta"),
    "Uniform-Pareto": ("Uniform_above", "Pareto"),
    "Normal-Pareto": ("Normal", "Pareto"),
    "Gamma-Pareto": ("Gamma", "Pareto"),
    "Exponential-Pareto": ("Exponential", "Pareto"),
    "Beta-Pareto": ("Beta", "Pareto"),
    "Gumbel-Pareto": ("Gumbel", "Pareto"),
    "Laplace-Pareto": ("Laplace", "Pareto"),
    "LowRank-LowRank": ("LowRank", "LowRank_b"),
    "CB-CB": ("CB", "CB_logits"),
    "Beta-CB": ("Beta", "CB"),
    "CB-Exponential": ("CB", "Exponential"),
    "CB-Normal": ("CB_logits", "Normal"),
    "CB-Uniform": ("CB", "Uniform_wide"),
    "CB-Uniform_inf": ("CB", "Uniform"),
    "Uniform-CB": ("Uniform", "CB"),
    "Uniform-CB_inf": ("Uniform_wide", "CB"),
    "CB-Pareto": ("CB", "Pareto"),
    "Exponential-CB": ("Exponential", "CB"),
    "Gamma-CB": ("Gamma", "CB"),
    "Gumbel-CB": ("Gumbel", "CB"),
    "Laplace-CB": ("Laplace", "CB"),
    "Normal-CB": ("Normal", "CB"),
    "Pareto-CB": ("Pareto", "CB"),
    "MVN-LowRank": ("MVN", "LowRank"),
    "LowRank-MVN": ("LowRank_b", "MVN"),
}

# the other side of the pairs: build(D, params), params(rng), all of batch [2, 3]
KL_FAMILIES = {
    "Pareto": (
        lambda D, p: D.Pareto(p["scale"], p["alpha"]),
        lambda r: {"scale": r.uniform(0.5, 1.5, (2, 3)), "alpha": np.array([[0.7, 1.5, 3.0]] * 2)},
    ),
    "Normal": (
        lambda D, p: D.Normal(p["loc"], p["scale"]),
        lambda r: {"loc": r.normal(size=(2, 3)), "scale": r.uniform(0.5, 2, (2, 3))},
    ),
    "Gumbel": (
        lambda D, p: D.Gumbel(p["loc"], p["scale"]),
        lambda r: {"loc": r.normal(size=(2, 3)), "scale": r.uniform(0.5, 2, (2, 3))},
    ),
    "Laplace": (
        lambda D, p: D.Laplace(p["loc"], p["scale"]),
        lambda r: {"loc": r.normal(size=(2, 3)), "scale": r.uniform(0.5, 2, (2, 3))},
    ),
    "Exponential": (lambda D, p: D.Exponential(p["rate"]), lambda r: {"rate": r.uniform(0.5, 2, (2, 3))}),
    "Gamma": (
        lambda D, p: D.Gamma(p["c"], p["rate"]),
        lambda r: {"c": r.uniform(0.5, 3, (2, 3)), "rate": r.uniform(0.5, 2, (2, 3))},
    ),
    "Beta": (
        lambda D, p: D.Beta(p["a"], p["b"]),
        lambda r: {"a": r.uniform(0.5, 3, (2, 3)), "b": r.uniform(0.5, 3, (2, 3))},
    ),
    "Uniform": (
        lambda D, p: D.Uniform(p["low"], p["high"]),
        lambda r: {"low": r.uniform(0, 0.3, (2, 3)), "high": r.uniform(0.6, 1, (2, 3))},
    ),
    # partly above the Pareto's scale (finite), partly below it (infinite)
    "Uniform_above": (
        lambda D, p: D.Uniform(p["low"], p["high"]),
        lambda r: {"low": np.array([[0.2, 1.6, 2.0]] * 2), "high": np.array([[3.0, 2.0, 4.0]] * 2)},
    ),
    "LowRank": (
        lambda D, p: D.LowRankMultivariateNormal(p["loc"], p["W"], p["D"]),
        lambda r: {"loc": r.normal(size=(2, 3)), "W": r.normal(size=(3, 2)), "D": r.uniform(0.5, 2, (3,))},
    ),
    "LowRank_b": (
        lambda D, p: D.LowRankMultivariateNormal(p["loc"], p["W"], p["D"]),
        lambda r: {"loc": r.normal(size=(3,)), "W": r.normal(size=(2, 3, 1)), "D": r.uniform(0.5, 2, (2, 3))},
    ),
    "CB": (lambda D, p: D.ContinuousBernoulli(p["probs"]), lambda r: {"probs": np.array([[0.2, 0.4995, 0.9]] * 2)}),
    "CB_logits": (lambda D, p: D.ContinuousBernoulli(logits=p["logits"]), lambda r: {"logits": r.normal(size=(2, 3))}),
    # around [0, 1] in some places (finite against a ContinuousBernoulli), inside it elsewhere
    "Uniform_wide": (
        lambda D, p: D.Uniform(p["low"], p["high"]),
        lambda r: {"low": np.array([[-0.5, 0.0, 0.2]] * 2), "high": np.array([[1.5, 1.0, 3.0]] * 2)},
    ),
    "MVN": (
        lambda D, p: D.MultivariateNormal(p["loc"], scale_tril=p["L"]),
        lambda r: {"loc": r.normal(size=(2, 3)), "L": tril(r)},
    ),
}


def _kl_build(D, pp, qp, p_case, q_case):
    return D.kl_divergence(KL_FAMILIES[p_case][0](D, pp), KL_FAMILIES[q_case][0](D, qp))


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("pair", list(KL_PAIRS))
def test_kl_divergence_and_gradients_match_torch(pair, compiled):
    p_case, q_case = KL_PAIRS[pair]
    rng = np.random.default_rng(5)
    pp, qp = KL_FAMILIES[p_case][1](rng), KL_FAMILIES[q_case][1](rng)
    params = {**{f"p_{k}": v for k, v in pp.items()}, **{f"q_{k}": v for k, v in qp.items()}}
    keys = list(params)

    def split(ps):
        return {k[2:]: v for k, v in ps.items() if k[0] == "p"}, {k[2:]: v for k, v in ps.items() if k[0] == "q"}

    tp = {k: torch.tensor(v, dtype=torch.float64, requires_grad=True) for k, v in params.items()}
    want = _kl_build(TD, *split(tp), p_case, q_case)
    weight = rng.normal(size=tuple(want.shape))
    if not want.requires_grad:  # a constant (infinite) divergence
        got = _kl_build(FD, *split({k: flame.tensor(v) for k, v in params.items()}), p_case, q_case)
        np.testing.assert_array_equal(got.numpy(), want.detach().numpy())
        return
    t_grads = torch.autograd.grad((want * torch.tensor(weight)).sum(), list(tp.values()))
    if compiled:

        @flame.compile
        def step(weight, *ps):
            out = _kl_build(FD, *split(dict(zip(keys, ps))), p_case, q_case)
            return (out, *flame.autograd.grad((out * weight).sum(), list(ps)))

        got, *grads = step(flame.tensor(weight), *[flame.tensor(params[k], requires_grad=True) for k in keys])
        grads = [g.numpy() for g in grads]
    else:
        fp = {k: flame.tensor(v, requires_grad=True) for k, v in params.items()}
        got = _kl_build(FD, *split(fp), p_case, q_case)
        (got * flame.tensor(weight)).sum().backward()
        grads = [fp[k].grad.numpy() for k in keys]
    np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=1e-10, atol=1e-12)
    for k, g, tg in zip(keys, grads, t_grads):
        np.testing.assert_allclose(g, tg.numpy(), rtol=2e-8, atol=1e-10, err_msg=f"d/d{k}")


def test_lowrank_samples_have_its_covariance_and_its_kl_errors_are_torchs():
    flame.manual_seed(2)
    rng = np.random.default_rng(0)
    loc, W, d = rng.normal(size=3), rng.normal(size=(3, 2)), rng.uniform(0.5, 2, 3)
    fd = FD.LowRankMultivariateNormal(flame.tensor(loc), flame.tensor(W), flame.tensor(d))
    s = fd.rsample((40000,)).numpy()
    assert s.shape == (40000, 3)
    np.testing.assert_allclose(s.mean(0), loc, atol=0.05)
    np.testing.assert_allclose(np.cov(s.T), W @ W.T + np.diag(d), atol=0.1)
    for lib, mk in ((TD, torch.tensor), (FD, flame.tensor)):
        p = lib.LowRankMultivariateNormal(mk(loc), mk(W), mk(d))
        q = lib.LowRankMultivariateNormal(mk(loc[:2]), mk(W[:2]), mk(d[:2]))
        with pytest.raises(ValueError, match="different event shapes cannot be computed"):
            lib.kl_divergence(p, q)


def test_relaxed_samples_approach_their_discrete_laws():
    flame.manual_seed(4)
    p = np.array([0.2, 0.5, 0.9])
    s = FD.RelaxedBernoulli(flame.tensor(0.3), probs=flame.tensor(p)).rsample((20000,)).numpy()
    assert s.shape == (20000, 3) and np.all((s > 0) & (s < 1))
    np.testing.assert_allclose((s > 0.5).mean(0), p, atol=0.015)  # P(X > 1/2) = probs at any temperature
    q = np.array([[0.1, 0.2, 0.7], [0.5, 0.25, 0.25]])
    s = FD.RelaxedOneHotCategorical(flame.tensor(0.5), probs=flame.tensor(q)).rsample((20000,)).numpy()
    assert s.shape == (20000, 2, 3) and np.all(s > 0)
    np.testing.assert_allclose(s.sum(-1), 1.0, rtol=1e-12)
    counts = np.stack([(s.argmax(-1) == k).mean(0) for k in range(3)], -1)  # the argmax is Categorical(q)
    np.testing.assert_allclose(counts, q, atol=0.015)


def test_logistic_normal_samples_are_stick_broken_normals():
    flame.manual_seed(5)
    loc, scale = np.array([0.5, -1.0]), np.array([1.0, 0.5])
    fd = FD.LogisticNormal(flame.tensor(loc), flame.tensor(scale))
    s = fd.rsample((20000,))
    assert s.shape == (20000, 3) and fd.event_shape == (3,) and fd.batch_shape == ()
    np.testing.assert_allclose(s.numpy().sum(-1), 1.0, rtol=1e-12)
    x = FD.transforms.StickBreakingTransform().inv(s).numpy()
    for i in range(2):
        assert st.kstest(x[:, i], st.norm(loc[i], scale[i]).cdf).pvalue > 1e-3


def test_straight_through_rsample_carries_the_probs_gradient():
    flame.manual_seed(6)
    logits = flame.tensor([[0.5, -0.5, 1.0]], dtype=flame.f64, requires_grad=True)
    fd = FD.OneHotCategoricalStraightThrough(logits=logits)
    s = fd.rsample((5,))
    assert s.shape == (5, 1, 3) and np.all(s.detach().numpy().sum(-1) == 1)
    (s * flame.tensor([1.0, 2.0, 3.0], dtype=flame.f64)).sum().backward()
    tl = torch.tensor([[0.5, -0.5, 1.0]], dtype=torch.float64, requires_grad=True)
    (TD.OneHotCategorical(logits=tl).probs * torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64) * 5).sum().backward()
    np.testing.assert_allclose(logits.grad.numpy(), tl.grad.numpy(), rtol=1e-12)


def test_von_mises_samples_follow_the_law():
    flame.manual_seed(7)
    loc, kappa = np.array([0.5, -2.5, 3.0, 0.0]), np.array([0.01, 1.0, 4.0, 50.0])
    fd = FD.VonMises(flame.tensor(loc), flame.tensor(kappa))
    s = fd.sample((20000,)).numpy()
    assert s.shape == (20000, 4) and s.dtype == np.float64 and np.all((s >= -np.pi) & (s < np.pi))
    for i in range(4):
        centred = (s[:, i] - loc[i] + np.pi) % (2 * np.pi) - np.pi  # scipy's law lives on [loc - pi, loc + pi)
        assert st.kstest(centred, st.vonmises(kappa[i]).cdf).pvalue > 1e-3, i
    f32 = FD.VonMises(flame.tensor([0.0]), flame.tensor([2.0])).sample((3,))
    assert f32.dtype == flame.f32 and f32.shape == (3, 1)
    fe, te = fd.expand((2, 4)), TD.VonMises(torch.tensor(loc), torch.tensor(kappa)).expand((2, 4))
    assert type(fe) is FD.VonMises and fe.batch_shape == tuple(te.batch_shape)


def test_continuous_bernoulli_samples_follow_its_cdf_and_exponential_family_entropy_is_torchs():
    # probs outside [0, 1] pass unchecked without validate_args (torch clamps them first), as torch's
    FD.ContinuousBernoulli(flame.tensor([1.5]))
    TD.ContinuousBernoulli(torch.tensor([1.5]))
    flame.manual_seed(8)
    p = np.array([0.1, 0.4995, 0.8])
    fd = FD.ContinuousBernoulli(flame.tensor(p))
    s = fd.rsample((20000,)).numpy()
    assert s.shape == (20000, 3) and np.all((s >= 0) & (s <= 1))
    for i in range(3):
        cdf = lambda x, i=i: fd.cdf(flame.tensor(np.repeat(x[:, None], 3, 1))).numpy()[:, i]  # noqa: E731
        assert st.kstest(s[:, i], cdf).pvalue > 1e-3, i
    # the Bregman form of the base class, as torch's (autodiff of the log-normaliser)
    logits = np.array([-2.0, 0.5, 3.0])
    tl = torch.tensor(logits, requires_grad=True)
    want = TD.ExponentialFamily.entropy(TD.ContinuousBernoulli(logits=tl))
    fl = flame.tensor(logits, requires_grad=True)
    got = FD.ExponentialFamily.entropy(FD.ContinuousBernoulli(logits=fl))
    np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=1e-10)
    assert isinstance(fd, FD.ExponentialFamily) and isinstance(FD.Gamma(1.0, 1.0), FD.ExponentialFamily)
    for lib, mk in ((TD, torch.tensor), (FD, flame.tensor)):
        with pytest.raises(NotImplementedError) as e:
            lib.kl_divergence(lib.Poisson(mk([1.0])), lib.Gamma(mk([1.0]), mk([1.0])))
        if lib is TD:
            message = str(e.value)
        else:
            assert str(e.value) == message


def test_lkj_cholesky_samples_have_beta_correlations():
    flame.manual_seed(9)
    eta, d = np.array([0.5, 2.0]), 4
    L = FD.LKJCholesky(d, flame.tensor(eta)).sample((20000,)).numpy()
    assert L.shape == (20000, 2, d, d)
    np.testing.assert_allclose((L**2).sum(-1), 1.0, rtol=1e-12)
    assert np.all(np.triu(L, 1) == 0) and np.all(np.diagonal(L, axis1=-2, axis2=-1) > 0)
    C = L @ np.swapaxes(L, -1, -2)
    torch.manual_seed(0)
    tl = TD.LKJCholesky(d, torch.tensor(eta)).sample((20000,)).numpy()
    tc = tl @ np.swapaxes(tl, -1, -2)
    for b in range(2):
        a = eta[b] - 1 + d / 2  # the first correlation is 2 Beta(a, a) - 1
        assert st.kstest((C[:, b, 1, 0] + 1) / 2, st.beta(a, a).cdf).pvalue > 1e-3, b
        # later rows: torch's own draws fail that marginal too (KS p below 1e-15), so compare with them
        for i, j in [(2, 1), (3, 2)]:
            assert st.ks_2samp(C[:, b, i, j], tc[:, b, i, j]).pvalue > 1e-3, (b, i, j)


def test_wishart_samples_have_its_moments():
    flame.manual_seed(10)
    rng = np.random.default_rng(1)
    cov, df = spd(rng), 6.0
    fd = FD.Wishart(flame.tensor(df, dtype=flame.f64), covariance_matrix=flame.tensor(cov))
    s = fd.rsample((40000,)).numpy()
    assert s.shape == (40000, 3, 3)
    np.testing.assert_allclose(s, np.swapaxes(s, -1, -2), atol=1e-12)
    assert np.all(np.linalg.eigvalsh(s) > 0)
    np.testing.assert_allclose(s.mean(0), df * cov, atol=0.1)
    np.testing.assert_allclose(s.var(0), df * (cov**2 + np.outer(np.diag(cov), np.diag(cov))), rtol=0.1)
    with pytest.raises(AssertionError, match="Exactly one of covariance_matrix"):
        FD.Wishart(3.0)
