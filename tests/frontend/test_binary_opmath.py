"""PyTorch's glu, hypot, logaddexp, logaddexp2, sinc and threshold kernels on f16/bf16 tensors compute in
f32 and round once; their gradients are PyTorch's: glu's backward kernel (in f32 from the rounded
sigmoid), and hypot's, logaddexp's, logaddexp2's and sinc's formulas as the half-precision ops torch's
autograd runs. prod's gradient is torch's prod_backward (grad * (result / x), or the exclusive cumprods
where x holds a zero). flame's eager and compiled values and gradients are torch's bits but for rare
elements (_close_to_torch); sinc's gradient, whose CPU kernels round where flame's formula cannot follow,
is held to a looser bound."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import flame
import flame.nn.functional as FF
from tests.frontend.test_activation_opmath import DTYPES, _close_to_torch

SHAPE = (32, 128)

CASES = {
    "glu": lambda F, L, t, u: F.glu(t, -1),
    "glu dim 0": lambda F, L, t, u: F.glu(t, 0),
    "hypot": lambda F, L, t, u: L.hypot(t, u),
    "logaddexp": lambda F, L, t, u: L.logaddexp(t, u),
    "logaddexp2": lambda F, L, t, u: L.logaddexp2(t, u),
    "threshold": lambda F, L, t, u: F.threshold(t, 0.3, 0.7),
    "prod": lambda F, L, t, u: _prod(L, t / 3, -1),
    "prod dim 0": lambda F, L, t, u: _prod(L, t / 3, 0, True),
    "prod all": lambda F, L, t, u: _prod(L, t[:2, :6] / 3),
    "prod with a zero": lambda F, L, t, u: _prod(L, t / 3 * (u.abs() > 0.02).to(t.dtype), -1),
}


def _prod(L, p, *args):
    """p.prod(*args); for torch, its value the f32 product rounded once (torch's CUDA kernel's; its CPU
    kernel rounds every product to bf16, in its vector lanes' order, and for f16 along an outer dim), its
    gradient torch's prod_backward (which reads torch's own result: see test_values_and_gradients_are_torchs)."""
    if L is flame or p.dtype == torch.float64:
        return p.prod(*args)
    out = p.prod(*args)
    return out + (p.float().prod(*args).to(p.dtype) - out).detach()


def _inputs(name):
    rng = np.random.default_rng(len(name))
    return (rng.standard_normal(SHAPE).astype(np.float32) * 3, rng.standard_normal(SHAPE).astype(np.float32))


def _torch(fn, x, y, tdt):
    t, u = (torch.tensor(a).to(tdt).requires_grad_() for a in (x, y))
    want = fn(TF, torch, t, u)
    cot = torch.tensor(np.random.default_rng(5).standard_normal(want.shape).astype(np.float32)).to(tdt)
    gt, gu = torch.autograd.grad(want, (t, u), cot, allow_unused=True)
    gu = torch.zeros_like(u) if gu is None else gu
    return want.detach(), gt, gu, cot


def _flame(fn, x, y, cot, dt, compiled):
    def step(a, b, g):
        out = fn(FF, flame, a, b)
        grads = flame.grad(lambda a, b: (fn(FF, flame, a, b) * g).float().sum(), argnums=(0, 1))(a, b)
        return out, *grads

    run = flame.compile(step) if compiled else step
    return run(flame.tensor(x).to(dt), flame.tensor(y).to(dt), flame.tensor(cot.float().numpy()).to(dt))


@pytest.mark.parametrize("dt,tdt", DTYPES, ids=["bf16", "f16"])
@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_values_and_gradients_are_torchs(name, dt, tdt, compiled):
    fn = CASES[name]
    x, y = _inputs(name)
    want, gt, gu, cot = _torch(fn, x, y, tdt)
    out, ga, gb = _flame(fn, x, y, cot, dt, compiled)
    assert out.dtype == dt and ga.dtype == dt
    _close_to_torch(out.float().numpy(), want.float().numpy(), dt)
    if name in ("prod", "prod dim 0", "prod all"):
        # grad * (result / x) with torch's CPU result, a few steps of the dtype from the f32 product
        ref = gt.float().numpy()
        np.testing.assert_allclose(ga.float().numpy(), ref, rtol=2**-5, atol=2**-5 * np.abs(ref).max())
    else:
        _close_to_torch(ga.float().numpy(), gt.float().numpy(), dt)
    _close_to_torch(gb.float().numpy(), gu.float().numpy(), dt)


@pytest.mark.parametrize("dt,tdt", DTYPES, ids=["bf16", "f16"])
@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_sinc(dt, tdt, compiled):
    """sinc's value is torch's bits; its gradient torch's formula in the input's dtype, whose CPU kernels
    round a few more of the elements differently (within two steps of the dtype)."""
    fn = lambda F, L, t, u: L.sinc(t)  # noqa: E731
    x, y = _inputs("sinc")
    want, gt, _, cot = _torch(fn, x, y, tdt)
    out, ga, _ = _flame(fn, x, y, cot, dt, compiled)
    _close_to_torch(out.float().numpy(), want.float().numpy(), dt)
    got, ref = ga.float().numpy(), gt.float().numpy()
    np.testing.assert_allclose(got, ref, rtol=2 ** -6 if dt == flame.bf16 else 2 ** -9, atol=1e-3)


@pytest.mark.parametrize("name", ["hypot", "logaddexp", "logaddexp2", "glu", "prod"])
def test_f64_keeps_its_path(name):
    """f64 values and gradients are torch's to f64 rounding."""
    fn = CASES[name]
    x, y = (a.astype(np.float64) for a in _inputs(name))
    t, u = (torch.tensor(a).requires_grad_() for a in (x, y))
    want = fn(TF, torch, t, u)
    want_grads = torch.autograd.grad(want.sum(), (t, u), allow_unused=True)
    a, b = flame.tensor(x), flame.tensor(y)
    got = fn(FF, flame, a, b)
    grads = flame.grad(lambda a, b: fn(FF, flame, a, b).sum(), argnums=(0, 1))(a, b)
    np.testing.assert_allclose(got.numpy(), want.detach().numpy(), rtol=1e-12, atol=1e-300)
    for g, w in zip(grads, want_grad_or_zero(want_grads, (t, u))):
        np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-10, atol=1e-300)


def want_grad_or_zero(grads, inputs):
    """torch's gradients, zeros where an input took no part."""
    return [torch.zeros_like(i) if g is None else g for g, i in zip(grads, inputs)]
