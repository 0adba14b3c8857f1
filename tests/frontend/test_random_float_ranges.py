"""Uniform draws stay inside torch's documented [from, to) in every floating dtype: rand, rand_like,
Tensor.uniform_ and nn.init.uniform_, eagerly and inside @flame.compile (rounding to a narrow dtype
must not reach the upper bound)."""

from __future__ import annotations

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
