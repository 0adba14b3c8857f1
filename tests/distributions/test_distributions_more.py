"""Multinomial, Weibull, Pareto, GeneralizedPareto, InverseGamma, Kumaraswamy, FisherSnedecor,
ContinuousBernoulli, VonMises, LowRankMultivariateNormal and the relaxed distributions against
torch.distributions in f64: each quantity's value and its gradients with respect to the parameters, eagerly
and inside @flame.compile; shapes, flags, expand, validation and sample statistics."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.distributions as TD

import flame
import flame.distributions as FD
from tests.distributions.common import probs
from tests.distributions.test_distributions_values import _flame_compiled, _flame_eager, _torch_side

MOMENTS = ["entropy", "mean", "mode", "variance", "stddev"]


def _counts(r, p, n=6):
    """Multinomial counts of n draws over p's last dim, for every batch element (4 per element)."""
    flat = p.reshape(-1, p.shape[-1])
    out = np.stack([[r.multinomial(n, q) for q in flat] for _ in range(4)])
    return out.reshape(4, *p.shape).astype(np.float64)


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
}

QUANTITIES = [(case, q) for case, spec in CASES.items() for q in spec[3]]


def _inputs(case, seed):
    rng = np.random.default_rng(seed)
    build, make_params, make_value, _ = CASES[case]
    params = make_params(rng)
    return build, params, make_value(rng, params), rng


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
    head = str(want.value).split(" (")[0]
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
