"""Uniform draws stay inside torch's documented [from, to) in every floating dtype: rand, rand_like,
Tensor.uniform_ and nn.init.uniform_, eagerly and inside @flame.compile (rounding to a narrow dtype
must not reach the upper bound)."""

from __future__ import annotations

import statistics

import numpy as np
import pytest
import torch

import flame

N = 200_000
FLOATS = ["float16", "bfloat16", "float32", "float64"]
COMPILED = pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])


def _np(t) -> np.ndarray:
    return t.to(torch.float64).numpy() if isinstance(t, torch.Tensor) else t.to(flame.float64).numpy()


def _run(fn, compiled, *args):
    return (flame.compile(fn) if compiled else fn)(*args)


@COMPILED
@pytest.mark.parametrize("name", FLOATS)
def test_rand_stays_below_one(name, compiled):
    expected = _np(torch.rand(N, dtype=getattr(torch, name)))
    got = _run(lambda: flame.rand(N, dtype=getattr(flame, name)), compiled)
    assert str(got.dtype) == str(getattr(flame, name))
    got = _np(got)
    assert got.min() >= 0 and expected.max() < 1 and got.max() < 1
    assert abs(got.mean() - expected.mean()) < 0.01
    like = _np(flame.rand_like(flame.zeros(N, dtype=getattr(flame, name))))
    assert like.min() >= 0 and like.max() < 1


@COMPILED
@pytest.mark.parametrize(("name", "a", "b"), [("float16", -1.0, 1.0), ("bfloat16", 0.99, 1.0), ("float16", 0.999, 1.0),
                                              ("float32", 1.0, 1.0000001), ("float64", 0.0, 1.0)])
def test_uniform_stays_below_to(name, a, b, compiled):
    expected = _np(torch.empty(N, dtype=getattr(torch, name)).uniform_(a, b))
    top = float(torch.tensor(b, dtype=getattr(torch, name)))
    got = _np(_run(lambda x: x.clone().uniform_(a, b), compiled, flame.zeros(N, dtype=getattr(flame, name))))
    assert expected.max() < top and got.max() < top
    assert got.min() >= expected.min() - 1e-3 * abs(b - a)
    init = _np(flame.nn.init.uniform_(flame.zeros(N, dtype=getattr(flame, name)), a, b))
    assert init.max() < top


# float64 uniform draws written the same for torch and flame (`lib`): each carries 53 random bits, as torch's
WIDE_DRAWS = {
    "rand": lambda lib: lib.rand(N, dtype=lib.float64),
    "rand_like": lambda lib: lib.rand_like(lib.zeros(N, dtype=lib.float64)),
    "uniform_": lambda lib: lib.zeros(N, dtype=lib.float64).uniform_(0.0, 1.0),
    "init.uniform_": lambda lib: lib.nn.init.uniform_(lib.zeros(N, dtype=lib.float64)),
}


def _low_bits(u: np.ndarray) -> np.ndarray:
    """The bits of a float64 in [0, 1) below 2**-24, as a fraction in [0, 1)."""
    return (u * 2.0**24) % 1.0


@COMPILED
@pytest.mark.parametrize("draw", sorted(WIDE_DRAWS))
def test_float64_uniform_carries_53_bits(draw, compiled):
    expected = _np(WIDE_DRAWS[draw](torch))
    got = _np(_run(lambda: WIDE_DRAWS[draw](flame), compiled))
    assert got.dtype == np.float64 and got.min() >= 0 and got.max() < 1
    for u in (expected, got):  # nearly every draw has bits below 2**-24, spread uniformly
        low = _low_bits(u)
        assert np.mean(low != 0) > 0.999
        assert abs(low.mean() - 0.5) < 0.01 and abs(low.var() - 1 / 12) < 0.01
        assert abs(np.mean((u * 2.0**53) % 2) - 0.5) < 0.01  # the last of the 53 bits is random too
        assert len(np.unique(u)) > 0.999 * N
    assert abs(got.mean() - expected.mean()) < 0.01 and abs(got.var() - expected.var()) < 0.01
    assert np.histogram(got, 10, (0, 1))[0].min() > 0.9 * N / 10  # uniform across [0, 1)


@COMPILED
@pytest.mark.parametrize("draw", ["randn", "normal_"])
def test_float64_normal_follows_torch(draw, compiled):
    """Both libraries' float64 normals against the exact quantiles of N(mean, std^2), each within 5 standard
    errors of a sample quantile of N draws (seeded: the test is deterministic)."""
    mean, std = {"randn": (0.0, 1.0), "normal_": (1.0, 2.0)}[draw]
    make = {"randn": lambda lib: lib.randn(N, dtype=lib.float64),
            "normal_": lambda lib: lib.zeros(N, dtype=lib.float64).normal_(mean, std)}[draw]
    torch.manual_seed(0)
    flame.manual_seed(0)
    expected = _np(make(torch))
    got = _np(_run(lambda: make(flame), compiled))
    assert got.dtype == np.float64
    unit = statistics.NormalDist()
    qs = np.linspace(0.01, 0.99, 25)
    exact = np.array([mean + std * unit.inv_cdf(q) for q in qs])
    standard_error = std * np.sqrt(qs * (1 - qs) / N) / np.array([unit.pdf(unit.inv_cdf(q)) for q in qs])
    for sample in (expected, got):
        assert np.all(np.abs(np.quantile(sample, qs) - exact) < 5 * standard_error)


@pytest.mark.parametrize("name", ["float32", "bfloat16", "float16"])
def test_narrow_draws_are_the_top_bits_of_the_float64_draw(name):
    """Widening float64 draws to 53 bits leaves the narrower dtypes' numbers as they were: each is the
    float64 draw of the same state cut to 24 bits (then to its own significand)."""
    state = flame.get_rng_state()
    wide = _np(flame.rand(N, dtype=flame.float64))
    flame.set_rng_state(state)
    narrow = _np(flame.rand(N, dtype=getattr(flame, name)))
    digits = 1 - int(np.log2(torch.finfo(getattr(torch, name)).eps))  # significand bits
    np.testing.assert_array_equal(narrow, np.floor(wide * 2.0**digits) * 2.0**-digits)
