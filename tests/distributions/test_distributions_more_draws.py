"""The distributions of test_distributions_more.py by their draws and their KL pairs: sample and rsample
statistics against the laws (scipy's, or torch's own draws), pathwise rsample gradients against the
derivative of the expectation, and the KL divergences torch registers with them, values and gradients
against torch in f64, eagerly and inside @flame.compile."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.stats as st
import torch
import torch.distributions as TD

import flame
import flame.distributions as FD
from tests.distributions.common import spd, tril

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


def test_draws_inside_compile_have_torchs_shapes():
    @flame.compile
    def draws(loc, kappa, cov, eta, p, t):
        return (
            FD.VonMises(loc, kappa).sample((4,)),
            FD.Wishart(flame.tensor(5.0, dtype=flame.f64), covariance_matrix=cov).rsample((2,)),
            FD.LKJCholesky(3, eta).sample((2,)),
            FD.RelaxedBernoulli(t, probs=p).rsample((3,)),
            FD.ContinuousBernoulli(p).rsample((3,)),
            FD.RelaxedOneHotCategorical(t, probs=p).rsample((3,)),
            FD.LogisticNormal(loc, kappa).rsample((2,)),
        )

    f64 = flame.f64
    outs = draws(
        flame.tensor([0.0, 1.0], dtype=f64),
        flame.tensor([1.0, 5.0], dtype=f64),
        flame.tensor(np.eye(3) * 2.0),
        flame.tensor(2.0, dtype=f64),
        flame.tensor([0.3, 0.7], dtype=f64),
        flame.tensor(0.5, dtype=f64),
    )
    assert [o.shape for o in outs] == [(4, 2), (2, 3, 3), (2, 3, 3), (3, 2), (3, 2), (3, 2), (2, 3)]
    vm, w, lkj = (o.numpy() for o in outs[:3])
    assert np.all((vm >= -np.pi) & (vm < np.pi)) and np.all(np.linalg.eigvalsh(w) > 0)
    np.testing.assert_allclose((lkj**2).sum(-1), 1.0, rtol=1e-12)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_wishart_kl_is_torchs_bregman_divergence(compiled):
    rng = np.random.default_rng(0)
    params = {"df_p": np.array([5.0, 3.5]), "cov_p": spd(rng), "df_q": np.array(7.0), "cov_q": spd(rng)}

    def kl(D, p):
        return D.kl_divergence(
            D.Wishart(p["df_p"], covariance_matrix=p["cov_p"]), D.Wishart(p["df_q"], covariance_matrix=p["cov_q"])
        )

    tp = {k: torch.tensor(v, requires_grad=True) for k, v in params.items()}
    want = kl(TD, tp)
    # p's natural parameters enter detached (torch's Bregman form): only q's parameters get gradients
    keys = ["df_q", "cov_q"]
    t_grads = torch.autograd.grad(want.sum(), [tp[k] for k in keys])
    if compiled:

        @flame.compile
        def step(*ps):
            fp = dict(zip(params, ps))
            out = kl(FD, fp)
            return (out, *flame.autograd.grad(out.sum(), [fp[k] for k in keys]))

        got, *grads = step(*[flame.tensor(v, requires_grad=True) for v in params.values()])
    else:
        fp = {k: flame.tensor(v, requires_grad=True) for k, v in params.items()}
        got = kl(FD, fp)
        got.sum().backward()
        grads = [fp[k].grad for k in keys]
    np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=1e-10)
    for k, g, tg in zip(keys, grads, t_grads):
        np.testing.assert_allclose(g.numpy(), tg.numpy(), rtol=1e-8, atol=1e-10, err_msg=f"d/d{k}")
