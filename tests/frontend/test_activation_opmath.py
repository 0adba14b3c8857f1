"""PyTorch's activation and softmax kernels on f16/bf16 tensors compute in f32 and round once, and so
do their backward kernels (log1p's and expm1's gradients are two ops of the input's dtype, as torch's
formulas; softmax's and log_softmax's read the rounded result); flame's eager and compiled values and
gradients are torch's bits but for the rare element where torch's CPU kernel uses another libm (mish's
gradient, elu's in f16: at most 0.2 % of the elements, one step of the dtype apart). log_softmax is
compared with torch's CUDA kernel's semantics (the row's log-sum in f32; torch's CPU kernel rounds it to
the input's dtype first) through torch's own backward kernel. Hand-written attention in bf16 still
becomes one attention op."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import flame
import flame.nn.functional as FF

SDPA = "scaled_dot_product_attention"

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
    step = np.maximum(step, 2.0**-133 if dt == flame.bf16 else 2.0**-24)  # a subnormal's step
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


ROWS = {
    "softmax": lambda F, t: F.softmax(t, -1),
    "var": lambda F, t: t.var(-1),
    "var correction 0 keepdim": lambda F, t: t.var(-1, keepdim=True, correction=0),
    "var all": lambda F, t: t.var(),
    "std": lambda F, t: t.std(-1),
    "std dim 0 correction 0": lambda F, t: t.std(0, correction=0),
    "std of a constant row": lambda F, t: (t * (torch if F is TF else flame).arange(32.0)[:, None].lt(1)).std(-1),
    "softmax dim 0": lambda F, t: F.softmax(t, 0),
    "log_softmax": lambda F, t: F.log_softmax(t, -1),
}


def _torch_rows(name, x, cot, tdt):
    """torch's value and gradient: softmax, var and std as they are; log_softmax in f32 rounded once (torch's CUDA
    kernel), its gradient torch's backward kernel on that result."""
    t = torch.tensor(x).to(tdt).requires_grad_()
    if name != "log_softmax":
        want = ROWS[name](TF, t)
        return want.detach(), torch.autograd.grad(want, t, cot)[0]
    want = TF.log_softmax(t.detach().float(), -1).to(tdt)
    return want, torch.ops.aten._log_softmax_backward_data(cot, want, -1, tdt)


@pytest.mark.parametrize("dt,tdt", DTYPES, ids=["bf16", "f16"])
@pytest.mark.parametrize("name", list(ROWS))
@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_row_values_and_gradients_are_torchs(name, dt, tdt, compiled):
    rng = np.random.default_rng(len(name))
    x = (rng.standard_normal((32, 128)) * 3).astype(np.float32)
    fn = ROWS[name]
    shape = fn(TF, torch.tensor(x)).shape
    cot = torch.tensor(rng.standard_normal(shape).astype(np.float32)).to(tdt)
    want, want_grad = _torch_rows(name, x, cot, tdt)

    def step(a, g):
        return fn(FF, a), flame.grad(lambda a: (fn(FF, a) * g).float().sum())(a)

    run = flame.compile(step) if compiled else step
    out, grad = run(flame.tensor(x).to(dt), flame.tensor(cot.float().numpy()).to(dt))
    _close_to_torch(out.float().numpy(), want.float().numpy(), dt)
    _close_to_torch(grad.float().numpy(), want_grad.float().numpy(), dt)


@pytest.mark.parametrize("in_f32", [False, True], ids=["bf16 softmax", "f32 softmax between casts"])
def test_bf16_attention_written_by_hand_trains_as_one_attention_op(in_f32):
    """The softmax's gradient form is part of the pattern: one attention op forward, one backward."""
    rng = np.random.default_rng(0)
    q, k, v, c = (flame.tensor(rng.standard_normal((2, 2, 16, 8)).astype(np.float32)).to("bf16") for _ in range(4))

    def attention(q, k, v):
        s = q @ k.transpose(-2, -1) * 0.3
        p = FF.softmax(s.float(), -1).to("bf16") if in_f32 else FF.softmax(s, -1)
        return p @ v

    step = flame.compile(lambda q, k, v: flame.grad(lambda *a: (attention(*a) * c).float().sum(), (0, 1, 2))(q, k, v))
    names = [op.name for op in step.optimized(q, k, v).ops]
    assert names.count(SDPA) == 1 and f"{SDPA}_backward" in names, names
    assert "exp" not in names and "reduce_max" not in names, names
    grads = step(q, k, v)
    tq, tk, tv = (torch.tensor(t.float().numpy()).bfloat16().requires_grad_() for t in (q, k, v))
    out = TF.scaled_dot_product_attention(tq, tk, tv, scale=0.3)
    want = torch.autograd.grad((out * torch.tensor(c.float().numpy()).bfloat16()).float().sum(), (tq, tk, tv))
    for got, w in zip(grads, want):
        np.testing.assert_allclose(got.float().numpy(), w.float().numpy(), rtol=5e-2, atol=5e-2)
