"""PyTorch's activation kernels on f16/bf16 tensors compute in f32 and round once, and so do their
backward kernels (log1p's and expm1's gradients are two ops of the input's dtype, as torch's formulas);
flame's eager and compiled values and gradients are torch's bits but for the rare element where
torch's CPU kernel uses another libm (mish's gradient: at most 0.2 % of the elements, one step of the
dtype apart)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import flame
import flame.nn.functional as FF

DTYPES = [(flame.bf16, torch.bfloat16), (flame.f16, torch.float16)]
N = 4096

CASES = {
    "elu 0.3": lambda F, L, t: F.elu(t, 0.3),
    "elu": lambda F, L, t: F.elu(t),
    "celu 0.7": lambda F, L, t: F.celu(t, 0.7),
    "selu": lambda F, L, t: F.selu(t),
    "softplus beta 2": lambda F, L, t: F.softplus(t, beta=2.0),
    "softplus threshold 1": lambda F, L, t: F.softplus(t, threshold=1.0),
    "mish": lambda F, L, t: F.mish(t),
    "hardswish": lambda F, L, t: F.hardswish(t),
    "hardsigmoid": lambda F, L, t: F.hardsigmoid(t),
    "logsigmoid": lambda F, L, t: F.logsigmoid(t),
    "log1p": lambda F, L, t: L.log1p(t.abs()),
    "expm1": lambda F, L, t: L.expm1(t),
}


def _close_to_torch(got: np.ndarray, want: np.ndarray, dt) -> None:
    """Equal bits (NaN where torch has NaN) but for at most 0.2 % of the elements, those within one step
    of the dtype."""
    differ = ~((got == want) | (np.isnan(got) & np.isnan(want)))
    assert differ.sum() <= got.size * 0.002, f"{differ.sum()} of {got.size} differ"
    step = np.spacing(np.abs(want[differ]).astype(np.float32)) * (2**16 if dt == flame.bf16 else 2**13)
    assert np.all(np.abs(got[differ] - want[differ]) <= step)


@pytest.mark.parametrize("dt,tdt", DTYPES, ids=["bf16", "f16"])
@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_values_and_gradients_are_torchs(name, dt, tdt, compiled):
    fn = CASES[name]
    rng = np.random.default_rng(len(name))
    x = rng.standard_normal(N).astype(np.float32) * 3
    t = torch.tensor(x).to(tdt).requires_grad_()
    want = fn(TF, torch, t)
    cot = torch.tensor(rng.standard_normal(N).astype(np.float32)).to(tdt)
    (want_grad,) = torch.autograd.grad(want, t, cot)

    def step(a, g):
        out = fn(FF, flame, a)
        return out, flame.grad(lambda a: (fn(FF, flame, a) * g).float().sum())(a)

    run = flame.compile(step) if compiled else step
    out, grad = run(flame.tensor(x).to(dt), flame.tensor(cot.float().numpy()).to(dt))
    assert out.dtype == dt and grad.dtype == dt
    _close_to_torch(out.float().numpy(), want.detach().float().numpy(), dt)
    _close_to_torch(grad.float().numpy(), want_grad.float().numpy(), dt)


@pytest.mark.parametrize("name", ["elu", "softplus beta 2", "logsigmoid", "log1p"])
def test_f32_keeps_its_path(name):
    """f32 inputs compute as before (no widening): torch's values to f32 rounding."""
    fn = CASES[name]
    x = np.random.default_rng(3).standard_normal(N).astype(np.float32) * 3
    want = fn(TF, torch, torch.tensor(x)).numpy()
    got = fn(FF, flame, flame.tensor(x)).numpy()
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-7)
