"""PyTorch's fused pointwise ops on f16/bf16 tensors (add and sub with alpha, addcmul, addcdiv, lerp)
compute in f32 and round once (add and sub read alpha in the tensors' dtype first); flame's eager and
compiled results are torch's bits but for the rare element where torch's CPU kernel contracts a
product and a sum into one fused multiply-add (at most 0.2 % of the elements, one step of the dtype
apart). Gradients likewise."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import flame
from tests.frontend.test_activation_opmath import DTYPES, N, _close_to_torch

CASES = {
    "add alpha 0.3": lambda L, x, y, z: L.add(x, y, alpha=0.3),
    "add alpha -1e-3": lambda L, x, y, z: L.add(x, y, alpha=-1e-3),
    "sub alpha 2.5": lambda L, x, y, z: L.sub(x, y, alpha=2.5),
    "addcmul 0.3": lambda L, x, y, z: L.addcmul(x, y, z, value=0.3),
    "addcmul -0.5": lambda L, x, y, z: L.addcmul(x, y, z, value=-0.5),
    "addcdiv 0.3": lambda L, x, y, z: L.addcdiv(x, y, z.abs() + 1, value=0.3),
    "lerp 0.3": lambda L, x, y, z: L.lerp(x, y, 0.3),
    "lerp 0.7": lambda L, x, y, z: L.lerp(x, y, 0.7),
    "lerp tensor": lambda L, x, y, z: L.lerp(x, y, z.abs() / 4),
}


def _inputs(seed: int):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(N).astype(np.float32) for _ in range(3)]


@pytest.mark.parametrize("dt,tdt", DTYPES, ids=["bf16", "f16"])
@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_values_and_gradients_are_torchs(name, dt, tdt, compiled):
    fn = CASES[name]
    arrays = _inputs(len(name))
    ts = [torch.tensor(a).to(tdt).requires_grad_() for a in arrays]
    want = fn(torch, *ts)
    cot = torch.tensor(_inputs(7)[0]).to(tdt)
    want_grads = torch.autograd.grad(want, ts, cot, allow_unused=True)

    def step(x, y, z, g):
        out = fn(flame, x, y, z)
        return (out, *flame.grad(lambda a, b, c: (fn(flame, a, b, c) * g).float().sum(), (0, 1, 2))(x, y, z))

    run = flame.compile(step) if compiled else step
    fs = [flame.tensor(a).to(dt) for a in arrays]
    out, *grads = run(*fs, flame.tensor(cot.float().numpy()).to(dt))
    _close_to_torch(out.float().numpy(), want.detach().float().numpy(), dt)
    for g, w in zip(grads, want_grads):
        if w is not None:
            _close_to_torch(g.float().numpy(), w.float().numpy(), dt)


def test_half_precision_add_with_alpha_keeps_no_rounded_product():
    """bf16 p.add_(g, alpha=-lr), the update of SGD written by hand: torch's bits (a product rounded to
    bf16 before the sum differed in a quarter of the elements)."""
    rng = np.random.default_rng(1)
    p, g = (rng.standard_normal(N).astype(np.float32) for _ in range(2))
    tp = torch.tensor(p).bfloat16()
    tp.add_(torch.tensor(g).bfloat16(), alpha=-0.01)
    fp = flame.tensor(p).to(flame.bf16)
    fp.add_(flame.tensor(g).to(flame.bf16), alpha=-0.01)
    _close_to_torch(fp.float().numpy(), tp.float().numpy(), flame.bf16)
