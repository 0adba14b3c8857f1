"""torch.bernoulli, torch.normal's overloads, torch.randint_like and Tensor's random fills (bernoulli_
exponential_ geometric_ cauchy_ log_normal_ random_): torch's shapes, dtypes and errors, and the
statistics of torch's distributions (not its draws), eagerly and inside @flame.compile."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import flame

N = 40_000
COMPILED = pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])


def _run(fn, compiled, *args):
    return (flame.compile(fn) if compiled else fn)(*args)


@COMPILED
def test_bernoulli(compiled):
    p = flame.full((N,), 0.3, dtype=flame.float64)
    y = _run(lambda q: flame.bernoulli(q), compiled, p)
    assert y.dtype == flame.float64 and set(np.unique(y.numpy())) <= {0.0, 1.0}
    assert abs(y.numpy().mean() - 0.3) < 0.015
    z = _run(lambda q: q.bernoulli(0.8), compiled, flame.zeros(N))
    assert z.dtype == flame.float32 and abs(z.numpy().mean() - 0.8) < 0.015
    w = _run(lambda q: flame.bernoulli(q, 0.1), compiled, flame.zeros(N))
    assert abs(w.numpy().mean() - 0.1) < 0.015


@COMPILED
def test_bernoulli_in_place(compiled):
    x = _run(lambda q: q.clone().bernoulli_(0.25), compiled, flame.zeros(N, dtype=flame.int64))
    assert x.dtype == flame.int64 and abs(x.numpy().mean() - 0.25) < 0.015
    probs = flame.tensor([0.0, 1.0]).repeat(N // 2)
    y = _run(lambda q, p: q.clone().bernoulli_(p), compiled, flame.zeros(N), probs)
    np.testing.assert_array_equal(y.numpy(), probs.numpy())


def test_bernoulli_errors_as_torch():
    for lib in (torch, flame):
        with pytest.raises(RuntimeError):
            lib.bernoulli(lib.tensor([1.5]))
        with pytest.raises(RuntimeError):
            lib.zeros(3).bernoulli_(1.5)


@COMPILED
def test_normal_overloads(compiled):
    cases = [
        lambda L, m, s: L.normal(m, s),  # tensor, tensor
        lambda L, m, s: L.normal(m, 2.0),  # tensor, number
        lambda L, m, s: L.normal(1.0, s),  # number, tensor
        lambda L, m, s: L.normal(m),  # tensor, default std
        lambda L, m, s: L.normal(m.float(), s),  # mean's dtype
        lambda L, m, s: L.normal(m, s.float()),
        lambda L, m, s: L.normal(m[:1], s),  # broadcast
    ]
    m, s = np.full((N,), 3.0), np.full((N,), 0.5)
    for case in cases:
        t = case(torch, torch.tensor(m), torch.tensor(s))
        f = _run(lambda a, b, case=case: case(flame, a, b), compiled, flame.tensor(m), flame.tensor(s))
        assert tuple(f.shape) == tuple(t.shape)
        assert str(f.dtype) == {torch.float64: "f64", torch.float32: "f32"}[t.dtype]
        np.testing.assert_allclose(f.numpy().mean(), t.numpy().mean(), atol=0.05)
        np.testing.assert_allclose(f.numpy().std(), t.numpy().std(), rtol=0.05)


def test_normal_of_numbers():
    y = flame.normal(2.0, 3.0, (N,))
    assert y.dtype == flame.float32 and y.shape == (N,)
    assert abs(y.numpy().mean() - 2.0) < 0.1 and abs(y.numpy().std() - 3.0) < 0.1
    assert flame.normal(0.0, 1.0, size=(2, 3), dtype=flame.float64).dtype == flame.float64
    g = flame.Generator().manual_seed(3)
    a = flame.normal(0.0, 1.0, (5,), generator=g)
    b = flame.normal(0.0, 1.0, (5,), generator=flame.Generator().manual_seed(3))
    np.testing.assert_array_equal(a.numpy(), b.numpy())
    for lib in (torch, flame):
        with pytest.raises(RuntimeError):
            lib.normal(0.0, -1.0, (3,))
        with pytest.raises(RuntimeError):
            lib.normal(lib.zeros(3), -1.0)
        with pytest.raises(TypeError):
            lib.normal(0.0, 1.0)
        with pytest.raises(RuntimeError):
            lib.normal(lib.zeros(3, dtype=lib.int64), 1.0)


def test_randint_like():
    x = flame.zeros(N, dtype=flame.int32)
    for args in ((10,), (3, 10)):
        y = flame.randint_like(x, *args)
        t = torch.randint_like(torch.zeros(N, dtype=torch.int32), *args)
        assert y.dtype == flame.int32 and y.shape == (N,)
        assert y.numpy().min() == t.numpy().min() and y.numpy().max() == t.numpy().max()
    assert flame.randint_like(flame.zeros(3), 5, dtype=flame.int64).dtype == flame.int64
    assert flame.randint_like(flame.zeros(3), 5).dtype == flame.float32


@COMPILED
def test_continuous_fills(compiled):
    e = _run(lambda q: q.clone().exponential_(4.0), compiled, flame.zeros(N, dtype=flame.float64)).numpy()
    assert e.min() >= 0 and abs(e.mean() - 0.25) < 0.01
    c = _run(lambda q: q.clone().cauchy_(2.0, 0.5), compiled, flame.zeros(N, dtype=flame.float64)).numpy()
    assert abs(np.median(c) - 2.0) < 0.03 and abs(np.quantile(c, 0.75) - 2.5) < 0.05  # quartiles at median +- sigma
    ln = _run(lambda q: q.clone().log_normal_(0.5, 0.25), compiled, flame.zeros(N)).numpy()
    assert ln.min() > 0 and abs(np.log(ln).mean() - 0.5) < 0.01 and abs(np.log(ln).std() - 0.25) < 0.01


@COMPILED
def test_geometric_fill(compiled):
    g = _run(lambda q: q.clone().geometric_(0.25), compiled, flame.zeros(N, dtype=flame.int64)).numpy()
    t = torch.zeros(N, dtype=torch.int64).geometric_(0.25).numpy()
    assert g.min() == 1 and abs(g.mean() - t.mean()) < 0.15 and abs((g == 1).mean() - 0.25) < 0.015


@COMPILED
def test_random_fill(compiled):
    r = _run(lambda q: q.clone().random_(5), compiled, flame.zeros(N, dtype=flame.int64)).numpy()
    assert set(np.unique(r)) == set(range(5))
    r = _run(lambda q: q.clone().random_(-2, 3), compiled, flame.zeros(N)).numpy()
    assert set(np.unique(r)) == set(range(-2, 3))
    r = _run(lambda q: q.clone().random_(to=3), compiled, flame.zeros(N)).numpy()
    assert set(np.unique(r)) == {0, 1, 2}
    f = _run(lambda q: q.clone().random_(), compiled, flame.zeros(N)).numpy()
    assert f.min() >= 0 and f.max() <= 2**24 and f.max() > 2**23 and np.all(f == np.floor(f))
    b = _run(lambda q: q.clone().random_(), compiled, flame.zeros(N, dtype=flame.bool)).numpy()
    assert set(np.unique(b)) == {False, True}
    i = _run(lambda q: q.clone().random_(), compiled, flame.zeros(N, dtype=flame.int64)).numpy()
    assert i.min() >= 0 and i.max() > 2**62


def test_fills_return_self_and_take_a_generator():
    x = flame.zeros(6)
    for name, args in [("exponential_", ()), ("geometric_", (0.5,)), ("cauchy_", ()), ("log_normal_", ()),
                       ("random_", (4,)), ("bernoulli_", (0.5,))]:
        assert getattr(x, name)(*args) is x
        a = getattr(flame.zeros(6), name)(*args, generator=flame.Generator().manual_seed(1))
        b = getattr(flame.zeros(6), name)(*args, generator=flame.Generator().manual_seed(1))
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_fill_errors_as_torch():
    for lib in (torch, flame):
        for name, args in [("geometric_", (1.5,)), ("geometric_", (0.0,)), ("exponential_", (-1.0,)),
                           ("log_normal_", (1.0, -1.0)), ("random_", (3, 2))]:
            with pytest.raises(RuntimeError):
                getattr(lib.zeros(3), name)(*args)


@COMPILED
def test_poisson(compiled):
    rates = [0.0, 0.5, 4.0, 9.5, 10.0, 30.0, 1e4]
    lam = flame.tensor(np.repeat(rates, 20_000))
    x = _run(lambda r: flame.poisson(r), compiled, lam).numpy().reshape(len(rates), -1)
    assert x.dtype == np.float64 and np.all(x == np.floor(x)) and x.min() >= 0
    for rate, row in zip(rates, x):
        assert abs(row.mean() - rate) < 4 * max(rate, 1e-3) ** 0.5 / 20_000 ** 0.5 + 1e-9, rate
        assert abs(row.var() - rate) < 0.06 * rate + 1e-9, rate
    y = flame.poisson(flame.full((5,), 3.0), flame.Generator().manual_seed(2))
    z = flame.poisson(flame.full((5,), 3.0), flame.Generator().manual_seed(2))
    assert y.dtype == flame.float32 and y.numpy().tolist() == z.numpy().tolist()


def test_poisson_matches_the_probabilities():
    import math

    rate, n = 12.0, 100_000
    x = flame.poisson(flame.full((n,), rate, dtype=flame.float64)).numpy().astype(int)
    for k in range(3, 22):
        p = math.exp(-rate + k * math.log(rate) - math.lgamma(k + 1))
        assert abs((x == k).mean() - p) < 5 * (p / n) ** 0.5, k


def test_poisson_errors_as_torch():
    for lib in (torch, flame):
        with pytest.raises(RuntimeError):
            lib.poisson(lib.tensor([-1.0]))
        with pytest.raises(RuntimeError):
            lib.poisson(lib.tensor([1]))


def test_multinomial_method():
    probs = flame.tensor([[0.0, 1.0, 0.0], [0.5, 0.0, 0.5]])
    draws = probs.multinomial(2, True, generator=flame.Generator().manual_seed(0))
    t = torch.tensor([[0.0, 1.0, 0.0], [0.5, 0.0, 0.5]]).multinomial(2, True)
    assert draws.dtype == flame.int64 and tuple(draws.shape) == tuple(t.shape)
    assert draws.numpy()[0].tolist() == [1, 1] and set(draws.numpy()[1].tolist()) <= {0, 2}


@pytest.mark.parametrize("call,message", [
    (lambda lib, t: t.uniform_(2.0, 1.0), r"uniform_ expects to return a [from, to) range, but found from=2 > to=1"),
    (lambda lib, t: lib.nn.init.uniform_(t, 0.5, 0.25),
     r"uniform_ expects to return a [from, to) range, but found from=0.5 > to=0.25"),
    (lambda lib, t: t.normal_(0.0, -1.0), "normal expects std >= 0.0, but found std -1"),
    (lambda lib, t: lib.nn.init.normal_(t, 0.0, -0.5), "normal expects std >= 0.0, but found std -0.5"),
    (lambda lib, t: t.normal_(0.0, float("nan")), "normal expects std >= 0.0, but found std nan"),
])
def test_uniform_and_normal_fills_check_their_arguments_as_torch(call, message):
    for lib in (torch, flame):
        with pytest.raises(RuntimeError) as caught:
            call(lib, lib.zeros(3))
        assert str(caught.value).split("\n")[0] == message, lib
    np.testing.assert_array_equal(flame.zeros(3).uniform_(1.0, 1.0).numpy(), [1.0] * 3)
    np.testing.assert_array_equal(flame.zeros(3).normal_(2.0, 0.0).numpy(), [2.0] * 3)


_DTYPE_CASES = [
    ("exponential_", (), "int64"), ("exponential_", (), "bool"), ("cauchy_", (), "int32"),
    ("log_normal_", (), "int64"), ("log_normal_", (), "bool"), ("geometric_", (0.5,), "bool"),
    ("geometric_", (0.3,), "uint8"), ("exponential_", (), "float16"), ("log_normal_", (), "bfloat16"),
]


@pytest.mark.parametrize(("method", "args", "name"), _DTYPE_CASES)
def test_fill_dtypes_as_torch(method, args, name):
    """A continuous distribution refuses an integer or bool tensor and geometric_ a bool one, as torch's
    (a RuntimeError); the dtypes torch fills are filled."""
    try:
        getattr(torch.zeros(8, dtype=getattr(torch, name)), method)(*args)
    except RuntimeError as e:
        with pytest.raises(RuntimeError, match=str(e).split(" but ")[0].split(" not ")[0][:40].replace('"', "")):
            getattr(flame.zeros(8, dtype=getattr(flame, name)), method)(*args)
    else:
        out = getattr(flame.zeros(8, dtype=getattr(flame, name)), method)(*args)
        assert out.dtype == getattr(flame, name)


@pytest.mark.parametrize(("make", "ok"), [(lambda m: m.bernoulli(m.zeros(3, dtype=m.int64)), False),
                                          (lambda m: m.bernoulli(m.zeros(3, dtype=m.bool)), False),
                                          (lambda m: m.bernoulli(m.zeros(3, dtype=m.int64), 0.5), True),
                                          (lambda m: m.zeros(3).bernoulli_(m.tensor([0, 1, 1])), False),
                                          (lambda m: m.zeros(3, dtype=m.int64).bernoulli_(m.tensor([0.5] * 3)), True)])
def test_bernoulli_probability_dtypes_as_torch(make, ok):
    if ok:
        assert make(flame).dtype == getattr(flame, str(make(torch).dtype).split(".")[-1])
        return
    with pytest.raises(RuntimeError):
        make(torch)
    with pytest.raises(RuntimeError, match="bernoulli_tensor_cpu_p_"):
        make(flame)
