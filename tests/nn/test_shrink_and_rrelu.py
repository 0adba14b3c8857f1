"""tanhshrink, softshrink, hardshrink and rrelu (functional and modules) against PyTorch: f64 values and
gradients eager and compiled, f16/bf16 bits, rrelu's eval slope and its training-time slopes' range, and
torch's refusals as flame errors naming the caller's line."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import flame
import flame.nn as fnn
import flame.nn.functional as F
from tests.frontend.test_activation_opmath import _close_to_torch

CASES = {
    "tanhshrink": (lambda F, t: F.tanhshrink(t), "Tanhshrink", {}),
    "softshrink": (lambda F, t: F.softshrink(t, 0.7), "Softshrink", {"lambd": 0.7}),
    "softshrink default": (lambda F, t: F.softshrink(t), "Softshrink", {}),
    "hardshrink": (lambda F, t: F.hardshrink(t, 0.3), "Hardshrink", {"lambd": 0.3}),
    "rrelu eval": (lambda F, t: F.rrelu(t, 0.1, 0.3, training=False), "RReLU", {"lower": 0.1, "upper": 0.3}),
}


def _x(n: int = 2048, seed: int = 0) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal(n) * 2).astype(np.float32)


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_f64_values_and_gradients_are_torchs(name, compiled):
    fn = CASES[name][0]
    x = _x().astype(np.float64)
    g = _x(seed=1).astype(np.float64)
    t = torch.tensor(x, requires_grad=True)
    want = fn(TF, t)
    (want_grad,) = torch.autograd.grad(want, t, torch.tensor(g))

    def step(a, c):
        return fn(F, a), flame.grad(lambda a: (fn(F, a) * c).sum())(a)

    run = flame.compile(step) if compiled else step
    out, grad = run(flame.tensor(x), flame.tensor(g))
    np.testing.assert_allclose(out.numpy(), want.detach().numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(grad.numpy(), want_grad.numpy(), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dt,tdt", [(flame.bf16, torch.bfloat16), (flame.f16, torch.float16)], ids=["bf16", "f16"])
@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_half_precision_values_and_gradients_are_torchs_bits(name, dt, tdt, compiled):
    fn = CASES[name][0]
    x, g = _x(), _x(seed=1)
    t = torch.tensor(x).to(tdt).requires_grad_()
    want = fn(TF, t)
    cot = torch.tensor(g).to(tdt)
    (want_grad,) = torch.autograd.grad(want, t, cot)

    def step(a, c):
        return fn(F, a), flame.grad(lambda a: (fn(F, a) * c).float().sum())(a)

    run = flame.compile(step) if compiled else step
    out, grad = run(flame.tensor(x).to(dt), flame.tensor(cot.float().numpy()).to(dt))
    _close_to_torch(out.float().numpy(), want.detach().float().numpy(), dt)
    _close_to_torch(grad.float().numpy(), want_grad.float().numpy(), dt)


@pytest.mark.parametrize("name", list(CASES))
def test_modules_are_torchs(name):
    _, module, kwargs = CASES[name]
    m, tm = getattr(fnn, module)(**kwargs).eval(), getattr(torch.nn, module)(**kwargs).eval()
    x = _x()
    np.testing.assert_allclose(m(flame.tensor(x)).numpy(), tm(torch.tensor(x)).numpy(), rtol=1e-6, atol=1e-7)
    assert repr(m) == repr(tm)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_rrelu_training_draws_a_slope_per_negative_element_in_its_range(compiled):
    lower, upper = 0.1, 0.4
    x = -np.abs(_x(1 << 14)) - 0.5
    x[:100] = np.abs(x[:100])  # positive elements pass through

    def step(a):
        return F.rrelu(a, lower, upper, training=True)

    out = (flame.compile(step) if compiled else step)(flame.tensor(x)).numpy()
    np.testing.assert_array_equal(out[:100], x[:100])
    slope = out[100:] / x[100:]
    assert slope.min() >= lower and slope.max() <= upper
    assert abs(slope.mean() - (lower + upper) / 2) < 0.01 and slope.std() > 0.07  # uniform: std 0.087
    m = fnn.RReLU(lower, upper)
    assert not np.array_equal(m(flame.tensor(x)).numpy(), m.eval()(flame.tensor(x)).numpy())


def test_refusals_are_torchs():
    x = flame.tensor(_x(8))
    with pytest.raises(RuntimeError):
        TF.softshrink(torch.tensor(_x(8)), -1.0)
    with pytest.raises(flame.ArgumentError, match=r"(?s)lambda must be in range .*test_shrink_and_rrelu.py"):
        F.softshrink(x, -1.0)
    with pytest.raises(RuntimeError):
        TF.rrelu(torch.tensor(_x(8)), 0.5, 0.1)
    bounds = r"(?s)less than or equal to the upper bound.*test_shrink_and_rrelu.py"
    with pytest.raises(flame.ArgumentError, match=bounds):
        fnn.RReLU(0.5, 0.1)(x)
