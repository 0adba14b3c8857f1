"""torch.randint and Tensor.random_ against torch: the range each dtype allows, every integer of a wide range
reachable (low bits as random as high ones), the overloads and keywords, and torch's bounds errors."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

import flame

N = 20_000
DTYPES = ["uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16", "float32", "float64", "bool"]


def _np(t) -> np.ndarray:
    return t.to(torch.float64).numpy() if isinstance(t, torch.Tensor) else t.to(flame.float64).numpy()


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("name", ["uint8", "int8", "bool", "bfloat16", "float16"])
def test_random_no_arguments_covers_the_dtype_range(name, compiled):
    """random_() draws 0 .. the dtype's largest value (floats: 2**digits): with N draws of a small range
    both torch and flame reach its top."""
    expected = torch.zeros(N, dtype=getattr(torch, name)).random_()

    def fill(x):
        return x.clone().random_()

    got = (flame.compile(fill) if compiled else fill)(flame.zeros(N, dtype=getattr(flame, name)))
    assert _np(got).min() == _np(expected).min() == 0
    assert _np(got).max() == _np(expected).max()


@pytest.mark.parametrize("name", ["int32", "int64", "float32", "float64"])
def test_random_no_arguments_wide_range(name):
    """A wide range is drawn to its last bit: odd values as often as even ones, as torch's."""
    expected = _np(torch.zeros(N, dtype=getattr(torch, name)).random_())
    got = _np(flame.zeros(N, dtype=getattr(flame, name)).random_())
    assert got.min() >= 0 and got.max() <= expected.max() * 1.01
    assert abs(np.fmod(got, 2).mean() - np.fmod(expected, 2).mean()) < 0.03


@pytest.mark.parametrize("high", [2**30, 2**40, 3 * 10**9 + 1, 2**62])
def test_randint_wide_range_reaches_every_residue(high):
    expected = torch.randint(0, high, (N,)).numpy()
    got = flame.randint(0, high, (N,)).numpy()
    assert got.dtype == expected.dtype and got.min() >= 0 and got.max() < high
    for m in (2, 7, 1024):
        assert abs(len(np.unique(got % m)) - len(np.unique(expected % m))) <= m // 100
    assert abs((got % 2).mean() - (expected % 2).mean()) < 0.03
    assert abs(got.mean() / high - expected.mean() / high) < 0.02


def test_randint_full_int64_range():
    lo, hi = -(2**63), 2**63 - 1
    expected, got = torch.randint(lo, hi, (N,)).numpy(), flame.randint(lo, hi, (N,)).numpy()
    assert abs((got < 0).mean() - (expected < 0).mean()) < 0.03
    assert abs((got % 2).mean() - (expected % 2).mean()) < 0.03


@pytest.mark.parametrize("args", [(-5, None), (3, None)])
def test_random_from_and_to_none_runs_to_the_dtype_maximum(args):
    """random_(from, None) draws from `from` to the dtype's largest value (not random_(from)'s [0, from))."""
    expected = _np(torch.zeros(N, dtype=torch.int64).random_(*args))
    got = _np(flame.zeros(N, dtype=flame.int64).random_(*args))
    assert got.min() >= args[0]
    assert abs(got.mean() / 2**63 - expected.mean() / 2**63) < 0.03
    kw = _np(flame.zeros(N, dtype=flame.int64).random_(args[0], to=None))
    assert kw.min() >= args[0] and abs(kw.mean() / 2**63 - expected.mean() / 2**63) < 0.03


@pytest.mark.parametrize(("name", "args"), [("uint8", (300,)), ("uint8", (-5, 5)), ("int8", (-200, 5)),
                                            ("int8", (0, 129)), ("float16", (0, 70000)),
                                            ("int16", (0, 2**15 + 1)), ("bool", (0, 3)), ("int32", (5, 5)),
                                            ("float16", (-70000, 0))])
def test_random_bounds_outside_the_dtype_raise(name, args):
    with pytest.raises(RuntimeError) as expected:
        torch.zeros(3, dtype=getattr(torch, name)).random_(*args)
    with pytest.raises(RuntimeError, match=str(expected.value).split(" (")[0][:30]):
        flame.zeros(3, dtype=getattr(flame, name)).random_(*args)
    with pytest.raises(RuntimeError) as expected:
        torch.randint(*args if len(args) == 2 else (0, *args), (3,), dtype=getattr(torch, name))
    with pytest.raises(RuntimeError, match=str(expected.value).split(" (")[0][:30]):
        flame.randint(*args if len(args) == 2 else (0, *args), (3,), dtype=getattr(flame, name))


@pytest.mark.parametrize(("name", "args"), [("bfloat16", (-1000, 0)), ("float16", (0, 5000))])
def test_random_float_bounds_beyond_exact_integers_warn(name, args):
    with pytest.warns(UserWarning) as expected:
        torch.zeros(3, dtype=getattr(torch, name)).random_(*args)
    with pytest.warns(UserWarning, match=re.escape(str(expected[0].message)[:60])):
        flame.zeros(3, dtype=getattr(flame, name)).random_(*args)


def test_random_huge_range_is_uniform():
    """A range wider than 2**62 has no favoured end: its quarters are drawn equally often (torch's
    modulo draw is no oracle here: it favours the low end)."""
    low = -(2**62)
    got = flame.zeros(N, dtype=flame.int64).random_(low, None).numpy()
    expected = torch.zeros(N, dtype=torch.int64).random_(low, None).numpy()
    assert got.min() >= low and expected.min() >= low
    span = 2**63 - low
    counts = np.bincount(((got.astype(object) - low) * 4 // span).astype(np.int64), minlength=4)
    assert np.abs(counts / N - 0.25).max() < 0.02
    wide = flame.randint(0, 3 * 2**61, (N,)).numpy()
    counts = np.bincount((wide.astype(object) * 3 // (3 * 2**61)).astype(np.int64), minlength=3)
    assert np.abs(counts / N - 1 / 3).max() < 0.02


@pytest.mark.parametrize("name", DTYPES)
def test_randint_into_each_dtype(name):
    expected = torch.randint(0, 2, (N,), dtype=getattr(torch, name))
    got = flame.randint(0, 2, (N,), dtype=getattr(flame, name))
    assert str(got.dtype) == str(getattr(flame, name)) and tuple(got.shape) == tuple(expected.shape)
    assert set(np.unique(_np(got))) == set(np.unique(_np(expected)))


@pytest.mark.parametrize("call", [dict(low=2, high=9, size=(4, 5)), dict(high=9, size=(4, 5)),
                                  dict(size=(4, 5), high=3, low=-3)])
def test_randint_keywords(call):
    expected, got = torch.randint(**call), flame.randint(**call)
    assert tuple(got.shape) == tuple(expected.shape) and got.dtype == flame.int64
    assert got.numpy().min() >= call.get("low", 0) and got.numpy().max() < call["high"]


@pytest.mark.parametrize("args", [(5, 5, (3,)), (5, 2, (3,))])
def test_randint_empty_range_raises_runtime_error(args):
    with pytest.raises(RuntimeError) as expected:
        torch.randint(*args)
    with pytest.raises(RuntimeError, match=str(expected.value)[:40]):
        flame.randint(*args)


def test_randint_float_bounds_raise_type_error():
    with pytest.raises(TypeError):
        torch.randint(0.5, 3.7, (3,))
    with pytest.raises(TypeError, match="low"):
        flame.randint(0.5, 3.7, (3,))


def test_randint_generator_is_used_and_advanced():
    g = flame.Generator(7)
    before = flame.get_rng_state().numpy().copy()
    a, b = flame.randint(0, 2**40, (8,), generator=g), flame.randint(0, 2**40, (8,), generator=g)
    np.testing.assert_array_equal(flame.get_rng_state().numpy(), before)
    np.testing.assert_array_equal(flame.randint(0, 2**40, (8,), generator=flame.Generator(7)).numpy(), a.numpy())
    assert not np.array_equal(a.numpy(), b.numpy())
