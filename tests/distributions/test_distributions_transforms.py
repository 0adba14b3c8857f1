"""flame.distributions.transforms against torch.distributions.transforms in f64: forward, inverse and
log_abs_det_jacobian values and their gradients, eagerly and inside @flame.compile; event dims, shapes,
equality and errors; TransformedDistribution over shape-changing transforms."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.distributions as TD

import flame
import flame.distributions as FD
from tests.distributions.common import probs, tril


def _spd(r, *batch):
    a = tril(r, *batch)
    return a @ np.swapaxes(a, -1, -2)


def _corr_tril_n(r, batch, n):
    """Lower Cholesky factors of [batch] n x n correlation matrices: tril() rows scaled to unit norm."""
    a = tril(r, batch, n=n)
    return a / np.sqrt((a * a).sum(-1, keepdims=True))


# name: (build(T, param) -> transform, param(rng) or None, x(rng) for the forward, y(rng) for the inverse)
CASES = {
    "Power": (
        lambda T, p: T.PowerTransform(p),
        lambda r: r.uniform(0.3, 2.5, size=(3,)),
        lambda r: r.uniform(0.2, 3, size=(2, 3)),
        lambda r: r.uniform(0.2, 3, size=(2, 3)),
    ),
    "Power_negative": (
        lambda T, p: T.PowerTransform(p),
        lambda r: np.array(-1.0),
        lambda r: r.uniform(0.2, 3, size=(4,)),
        lambda r: r.uniform(0.2, 3, size=(4,)),
    ),
    "Softplus": (
        lambda T, p: T.SoftplusTransform(),
        None,
        lambda r: r.normal(size=(3, 4)) * 3,
        lambda r: r.uniform(0.05, 5, size=(3, 4)),
    ),
    "Softmax": (
        lambda T, p: T.SoftmaxTransform(),
        None,
        lambda r: r.normal(size=(3, 4)),
        lambda r: probs(r, 3, 4),
    ),
    "StickBreaking": (
        lambda T, p: T.StickBreakingTransform(),
        None,
        lambda r: r.normal(size=(2, 4)),
        lambda r: probs(r, 2, 5),
    ),
    "LowerCholesky": (
        lambda T, p: T.LowerCholeskyTransform(),
        None,
        lambda r: r.normal(size=(2, 3, 3)),
        lambda r: tril(r, 2),
    ),
    "PositiveDefinite": (
        lambda T, p: T.PositiveDefiniteTransform(),
        None,
        lambda r: r.normal(size=(2, 3, 3)) * 0.5,
        lambda r: _spd(r, 2),
    ),
    "Reshape": (
        lambda T, p: T.ReshapeTransform((2, 3), (6,)),
        None,
        lambda r: r.normal(size=(4, 2, 3)),
        lambda r: r.normal(size=(4, 6)),
    ),
    "Independent": (
        lambda T, p: T.IndependentTransform(T.ExpTransform(), 1),
        None,
        lambda r: r.normal(size=(3, 4)),
        lambda r: r.uniform(0.1, 3, size=(3, 4)),
    ),
    "Cat": (
        lambda T, p: T.CatTransform([T.ExpTransform(), T.AffineTransform(1.0, 2.0)], dim=-1, lengths=[2, 3]),
        None,
        lambda r: r.normal(size=(3, 5)),
        lambda r: r.uniform(0.1, 3, size=(3, 5)),
    ),
    "Cat_event": (
        lambda T, p: T.CatTransform([T.StickBreakingTransform(), T.StickBreakingTransform()], dim=0),
        None,
        lambda r: r.normal(size=(2, 3)),
        lambda r: probs(r, 2, 4),
    ),
    "Stack": (
        lambda T, p: T.StackTransform([T.ExpTransform(), T.SoftplusTransform(), T.SigmoidTransform()], dim=1),
        None,
        lambda r: r.normal(size=(4, 3)),
        lambda r: r.uniform(0.1, 0.9, size=(4, 3)),
    ),
    "CumulativeDistribution": (
        lambda T, p: T.CumulativeDistributionTransform((FD if T is FD.transforms else TD).Normal(p, 2.0)),
        lambda r: r.normal(size=(3,)),
        lambda r: r.normal(size=(2, 3)),
        lambda r: r.uniform(0.05, 0.95, size=(2, 3)),
    ),
    "CorrCholesky": (
        lambda T, p: T.CorrCholeskyTransform(),
        None,
        lambda r: r.normal(size=(2, 6)),
        lambda r: _corr_tril_n(r, 2, 4),
    ),
}


def _run(lib, case, what, param, z):
    build = CASES[case][0]
    t = build(lib.transforms, param)
    if what == "forward":
        return t(z)
    if what == "inverse":
        return t.inv(z)
    return t.log_abs_det_jacobian(z, t(z))


WHATS = ["forward", "inverse", "log_abs_det_jacobian"]


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("what", WHATS)
@pytest.mark.parametrize("case", list(CASES))
def test_transform_values_and_gradients_match_torch(case, what, compiled):
    rng = np.random.default_rng(2)
    _, make_param, make_x, make_y = CASES[case]
    param = make_param(rng) if make_param else None
    x, y = make_x(rng), make_y(rng)
    z = y if what == "inverse" else x
    if what == "log_abs_det_jacobian" and case in ("Softmax", "LowerCholesky", "PositiveDefinite"):
        # not bijective onto a space of the same dimension: torch defines no Jacobian term, nor does flame
        for lib, mk in ((TD, torch.tensor), (FD, flame.tensor)):
            with pytest.raises(NotImplementedError):
                _run(lib, case, what, None, mk(z))
        return
    tz = torch.tensor(z, requires_grad=True)
    tp = None if param is None else torch.tensor(param, requires_grad=True)
    want = _run(TD, case, what, tp, tz)
    weight = rng.normal(size=tuple(want.shape))
    if not want.requires_grad:  # ReshapeTransform's Jacobian term: zeros
        got = _run(FD, case, what, None if param is None else flame.tensor(param), flame.tensor(z))
        np.testing.assert_array_equal(got.numpy(), want.numpy())
        return
    inputs = [tz] if tp is None else [tz, tp]
    t_grads = [g.numpy() for g in torch.autograd.grad((want * torch.tensor(weight)).sum(), inputs)]
    if compiled:

        @flame.compile
        def step(weight, *ins):
            out = _run(FD, case, what, ins[1] if len(ins) > 1 else None, ins[0])
            return (out, *flame.autograd.grad((out * weight).sum(), list(ins)))

        ins = [flame.tensor(z, requires_grad=True)] + (
            [] if param is None else [flame.tensor(param, requires_grad=True)]
        )
        got, *grads = step(flame.tensor(weight), *ins)
        grads = [g.numpy() for g in grads]
    else:
        ins = [flame.tensor(z, requires_grad=True)] + (
            [] if param is None else [flame.tensor(param, requires_grad=True)]
        )
        got = _run(FD, case, what, ins[1] if len(ins) > 1 else None, ins[0])
        (got * flame.tensor(weight)).sum().backward()
        grads = [i.grad.numpy() for i in ins]
    assert got.shape == tuple(want.shape)
    np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=1e-10, atol=1e-12)
    for g, tg in zip(grads, t_grads):
        if case in ("LowerCholesky", "PositiveDefinite", "CorrCholesky") and what == "inverse":
            # torch's inverses read (and differentiate) only the lower triangle, as flame's
            g, tg = np.tril(g), np.tril(tg)
        np.testing.assert_allclose(g, tg, rtol=1e-9, atol=1e-11)


@pytest.mark.parametrize("case", list(CASES))
def test_event_dims_shapes_and_flags_match_torch(case):
    rng = np.random.default_rng(4)
    build, make_param, make_x, make_y = CASES[case]
    param = make_param(rng) if make_param else None
    ft = build(FD.transforms, None if param is None else flame.tensor(param))
    tt = build(TD.transforms, None if param is None else torch.tensor(param))
    for a, b in [(ft.domain, tt.domain), (ft.codomain, tt.codomain)]:
        assert a.event_dim == b.event_dim and type(a).__name__ == type(b).__name__
    assert ft.bijective == tt.bijective
    x, y = make_x(rng), make_y(rng)
    assert tuple(ft.forward_shape(x.shape)) == tuple(tt.forward_shape(torch.Size(x.shape)))
    assert tuple(ft.inverse_shape(y.shape)) == tuple(tt.inverse_shape(torch.Size(y.shape)))
    assert ft.inv.inv is ft and ft == ft and ft.with_cache() is not None


def test_transforms_compare_as_torchs():
    for lib, mk in ((TD, torch.tensor), (FD, flame.tensor)):
        T = lib.transforms
        assert T.SoftplusTransform() == T.SoftplusTransform() != T.SoftmaxTransform()
        assert T.StickBreakingTransform() == T.StickBreakingTransform()
        assert T.PowerTransform(mk(2.0)) == T.PowerTransform(mk(2.0)) != T.PowerTransform(mk(3.0))
        assert T.CorrCholeskyTransform() != T.CorrCholeskyTransform()  # torch's has no __eq__
        assert T.LowerCholeskyTransform() != T.PositiveDefiniteTransform()


ERRORS = [
    (ValueError, lambda T, W: T.ReshapeTransform((2, 3), (5,))),
    (ValueError, lambda T, W: T.ReshapeTransform((2, 3), (6,)).forward_shape((4, 3, 2))),
    (ValueError, lambda T, W: T.StickBreakingTransform().forward_shape(())),
    (ValueError, lambda T, W: T.CorrCholeskyTransform().forward_shape((4,))),
    (ValueError, lambda T, W: T.CorrCholeskyTransform().inverse_shape((2, 3))),
    (AssertionError, lambda T, W: T.CatTransform([T.ExpTransform()], lengths=[1, 2])),
    (AssertionError, lambda T, W: T.CatTransform([T.ExpTransform(), T.ExpTransform()], dim=0)(W([1.0, 2.0, 3.0]))),
    (AssertionError, lambda T, W: T.StackTransform([T.ExpTransform()], dim=0)(W([1.0, 2.0]))),
    (AssertionError, lambda T, W: T.StackTransform([T.ExpTransform()], dim=3)(W([1.0]))),
]


@pytest.mark.parametrize("err,make", ERRORS)
def test_errors_are_torchs(err, make):
    with pytest.raises(err) as want:
        make(TD.transforms, lambda x: torch.tensor(x, dtype=torch.float64))
    with pytest.raises(err) as got:
        make(FD.transforms, lambda x: flame.tensor(x, dtype=flame.f64))
    assert str(got.value) == str(want.value).replace("torch.Size([", "(").replace("])", ")")


# distributions built from the new transforms: (build(D, T, params), params, value)
TRANSFORMED = {
    "logistic_normal_by_hand": (
        lambda D, T, p: D.TransformedDistribution(D.Normal(p["loc"], p["scale"]), T.StickBreakingTransform()),
        {"loc": np.array([0.3, -0.2, 0.5]), "scale": np.array([0.5, 1.0, 2.0])},
        np.array([[0.2, 0.3, 0.1, 0.4], [0.1, 0.1, 0.7, 0.1]]),
    ),
    "lkj_like": (
        lambda D, T, p: D.TransformedDistribution(D.Normal(p["loc"], p["scale"]), T.CorrCholeskyTransform()),
        {"loc": np.array([0.3, -0.2, 0.5]), "scale": np.array([0.5, 1.0, 2.0])},
        _corr_tril_n(np.random.default_rng(1), 2, 3),
    ),
    "reshape": (
        lambda D, T, p: D.TransformedDistribution(
            D.Normal(p["loc"], p["scale"]),
            [T.ReshapeTransform((6,), (2, 3)), T.IndependentTransform(T.ExpTransform(), 2)],
        ),
        {"loc": np.linspace(-1, 1, 6), "scale": np.linspace(0.5, 2, 6)},
        np.random.default_rng(3).uniform(0.2, 3, size=(4, 2, 3)),
    ),
    "affine_broadcast": (
        lambda D, T, p: D.TransformedDistribution(D.Normal(p["loc"], p["scale"]), T.AffineTransform(p["shift"], 2.0)),
        {"loc": np.array(0.5), "scale": np.array(2.0), "shift": np.array([0.0, 1.0, 2.0])},
        np.array([[0.1, 0.2, 0.3]]),
    ),
}


@pytest.mark.parametrize("case", list(TRANSFORMED))
def test_transformed_distributions_over_new_transforms_match_torch(case):
    build, params, value = TRANSFORMED[case]
    tp = {k: torch.tensor(v, requires_grad=True) for k, v in params.items()}
    fp = {k: flame.tensor(v, requires_grad=True) for k, v in params.items()}
    td, fd = build(TD, TD.transforms, tp), build(FD, FD.transforms, fp)
    assert fd.batch_shape == tuple(td.batch_shape) and fd.event_shape == tuple(td.event_shape)
    want, got = td.log_prob(torch.tensor(value)), fd.log_prob(flame.tensor(value))
    np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=1e-10)
    want.sum().backward()
    got.sum().backward()
    for k in params:
        np.testing.assert_allclose(fp[k].grad.numpy(), tp[k].grad.numpy(), rtol=1e-9, atol=1e-12)
    assert fd.sample((5,)).shape == tuple(td.sample((5,)).shape)
    fe, te = fd.expand((2, *fd.batch_shape)), td.expand((2, *td.batch_shape))
    assert fe.batch_shape == tuple(te.batch_shape) and fe.sample().shape == tuple(te.sample().shape)


def test_cached_transforms_return_the_draw_as_torchs():
    """cache_size=1 (a squashed Gaussian policy, SAC): the inverse of the last output is the last input
    itself, so the log_prob of a tanh draw that rounded to 1 stays finite."""
    for lib, mk in ((TD, torch.tensor), (FD, flame.tensor)):
        T = lib.transforms
        t = T.TanhTransform(cache_size=1)
        x = mk([0.5, 30.0])
        y = t(x)
        assert t.inv(y) is x and t(x) is y
        assert T.ExpTransform().with_cache()._cache_size == 1 and T.ExpTransform().inv.with_cache()._cache_size == 1
        assert T.AffineTransform(0.0, 2.0).with_cache(1)._cache_size == 1
        compose = T.ComposeTransform([T.TanhTransform(), T.AffineTransform(0.0, 2.0)], cache_size=1)
        assert all(p._cache_size == 1 for p in compose.parts)
        d = lib.TransformedDistribution(lib.Normal(mk([0.0]), mk([20.0])), [T.TanhTransform(cache_size=1)])
        a = d.rsample((200,))
        assert bool((a.abs() == 1).any()) and bool(d.log_prob(a).isfinite().all())
        uncached = lib.TransformedDistribution(lib.Normal(mk([0.0]), mk([20.0])), [T.TanhTransform()])
        assert not bool(uncached.log_prob(a).isfinite().all())
    with pytest.raises(ValueError, match="cache_size must be 0 or 1"):
        FD.transforms.ExpTransform(cache_size=2)


SIGNS = {  # every transform; a sign only where torch's has one
    "exp": lambda T, W: T.ExpTransform(),
    "abs": lambda T, W: T.AbsTransform(),
    "sigmoid_inv": lambda T, W: T.SigmoidTransform().inv,
    "affine_negative": lambda T, W: T.AffineTransform(0.0, -2.0),
    "power": lambda T, W: T.PowerTransform(W([2.0, -1.0])),
    "softmax": lambda T, W: T.SoftmaxTransform(),
    "stick_breaking": lambda T, W: T.StickBreakingTransform(),
    "lower_cholesky": lambda T, W: T.LowerCholeskyTransform(),
    "reshape": lambda T, W: T.ReshapeTransform((2,), (2, 1)),
    "independent_abs": lambda T, W: T.IndependentTransform(T.AbsTransform(), 1),
    "compose_exp_abs": lambda T, W: T.ComposeTransform([T.ExpTransform(), T.AbsTransform()]),
    "cat": lambda T, W: T.CatTransform([T.ExpTransform(), T.ExpTransform()], lengths=[1, 1]),
    "stack": lambda T, W: T.StackTransform([T.ExpTransform(), T.ExpTransform()]),
    "corr_cholesky": lambda T, W: T.CorrCholeskyTransform(),
}


@pytest.mark.parametrize("case", list(SIGNS))
def test_sign_is_torchs_and_only_where_torch_has_one(case):
    tt = SIGNS[case](TD.transforms, lambda x: torch.tensor(x, dtype=torch.float64))
    ft = SIGNS[case](FD.transforms, lambda x: flame.tensor(x, dtype=flame.f64))
    try:
        want = tt.sign
    except NotImplementedError:
        with pytest.raises(NotImplementedError):
            ft.sign  # noqa: B018
        return
    got = ft.sign
    np.testing.assert_array_equal(np.asarray(got.numpy() if hasattr(got, "numpy") else got), np.asarray(want))


def test_cdf_through_a_transform_without_a_sign_raises_as_torchs():
    """A folded Normal (|x| of a Normal) has no monotone map to its base: its cdf is not the base's cdf at
    |y|, so torch raises NotImplementedError for cdf and icdf rather than return that."""
    for method in ("cdf", "icdf"):
        for lib, mk in ((TD, torch.tensor), (FD, flame.tensor)):
            d = lib.TransformedDistribution(lib.Normal(mk([0.5]), mk([1.0])), [lib.transforms.AbsTransform()])
            with pytest.raises(NotImplementedError):
                getattr(d, method)(mk([0.3]))
