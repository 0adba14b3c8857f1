"""Consumers of an attention result that read it through a view the plan folds twice over: the
attention call writes its result into the buffer of the permuted value its consumers read
(flame.plan.views), so the result itself has no buffer, and a matmul must then read that permuted
buffer rather than fold the transpose into the GEMM (which would read the result's missing buffer).
A matmul reading the result transposed (either side, .mT or permute), adaptive_avg_pool2d and bilinear
interpolate (both matmuls over a transposed input), heads merged into a linear and a convolution over
the result moved to channels-first: values and gradients against torch in float64, eager and compiled
on the reference executor; the same steps planned for the CUDA target (bf16, cuDNN attention) build
and their kernels compile with NVRTC."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import flame
import flame.nn.functional as F
from flame.plan.steps import AttentionCall

B, H, L, E = 2, 4, 4, 8


def _attn(nn, a, w=None):
    """attention(a, a, a), or with the queries scaled by w."""
    return nn.scaled_dot_product_attention(a if w is None else a * w, a, a)


CONSUMERS = {  # name: (fn(nn functional module, a [B, H, L, E], w), shape of w)
    "transposed-matmul": (lambda nn, a, w: _attn(nn, a).mT @ w, (B, H, L, 3)),
    "matmul-transposed": (lambda nn, a, w: w @ _attn(nn, a).mT, (B, H, 3, E)),
    "permute-matmul": (lambda nn, a, w: _attn(nn, a).permute(0, 1, 3, 2) @ w, (L, 5)),
    "adaptive-avg-pool": (lambda nn, a, w: nn.adaptive_avg_pool2d(_attn(nn, a, w), (3, 3)), (E,)),
    "bilinear-interpolate": (
        lambda nn, a, w: nn.interpolate(_attn(nn, a, w), size=(5, 3), mode="bilinear", align_corners=False),
        (E,),
    ),
    "transposed-interpolate": (
        lambda nn, a, w: nn.interpolate(_attn(nn, a, w).mT, size=(16, 6), mode="bilinear", align_corners=True),
        (E,),
    ),
    "heads-merged-linear": (lambda nn, a, w: _attn(nn, a).permute(0, 2, 1, 3).reshape(B, L, H * E) @ w, (H * E, 6)),
    "reshape-conv": (lambda nn, a, w: nn.conv2d(_attn(nn, a).permute(0, 3, 1, 2), w), (3, E, 2, 2)),
}


def _arrays(name):
    rng = np.random.default_rng(sorted(CONSUMERS).index(name))
    return [rng.standard_normal(s).astype(np.float32) for s in ((B, H, L, E), CONSUMERS[name][1])]


def _torch(name, arrays):
    fn = CONSUMERS[name][0]
    ts = [torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in arrays]
    out = fn(TF, *ts)
    cot = np.random.default_rng(7).standard_normal(tuple(out.shape)).astype(np.float32)
    (out * torch.tensor(cot, dtype=torch.float64)).sum().backward()
    return [out.detach().numpy()] + [t.grad.numpy() for t in ts], cot


def _flame(name, arrays, cot, compiled, dtype="f32"):
    fn = CONSUMERS[name][0]
    xs = [flame.tensor(a, dtype=dtype, requires_grad=True) for a in arrays]
    c = flame.tensor(cot)

    def step(a, w):
        out = fn(F, a, w)
        (out.float() * c).sum().backward()
        return out

    step = flame.compile(step) if compiled else step
    out = step(*xs)
    return [out.float().numpy()] + [x.grad.float().numpy() for x in xs], step


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("name", sorted(CONSUMERS))
def test_consumer_of_attention_result_matches_torch(name, compiled):
    arrays = _arrays(name)
    want, cot = _torch(name, arrays)
    got, step = _flame(name, arrays, cot, compiled)
    for what, g, w in zip(("out", "da", "dw"), got, want):
        assert g.shape == w.shape, f"{name} {what}"
        np.testing.assert_allclose(g, w, rtol=2e-5, atol=2e-5, err_msg=f"{name} {what}")
    if compiled:
        assert any(isinstance(s, AttentionCall) for s in step._last.plan.steps)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("name", sorted(CONSUMERS))
def test_inference_consumer_of_attention_result_matches_torch(name, compiled):
    """No gradient: the attention result has no other reader (the backward's), the case that crashed."""
    arrays = _arrays(name)
    want = CONSUMERS[name][0](TF, *(torch.tensor(a, dtype=torch.float64) for a in arrays)).numpy()
    fn = CONSUMERS[name][0]
    step = flame.compile(lambda a, w: fn(F, a, w)) if compiled else (lambda a, w: fn(F, a, w))
    got = step(*(flame.tensor(a) for a in arrays)).numpy()
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5, err_msg=name)


@pytest.mark.parametrize("name", sorted(CONSUMERS))
def test_consumer_of_attention_result_on_the_cuda_target(cuda_target, name):
    """Planned for the CUDA target (bf16: cuDNN runs the attention) the step builds, its kernels compile
    with NVRTC, and the reference executor running that plan agrees with torch to bf16 precision."""
    from flame.codegen.nvrtc import compile_cubin

    arrays = [np.asarray(flame.tensor(a, dtype="bf16").float().numpy()) for a in _arrays(name)]
    want, cot = _torch(name, arrays)
    got, step = _flame(name, arrays, cot, True, dtype="bf16")
    assert any(isinstance(s, AttentionCall) for s in step._last.plan.steps)
    for source in {k.source for k in step._last.plan.kernels()}:
        assert compile_cubin(source, "sm_90")[:4] == b"\x7fELF"
    for what, g, w in zip(("out", "da", "dw"), got, want):
        scale = max(1.0, float(np.abs(w).max()))
        np.testing.assert_allclose(g, w, rtol=0.05, atol=0.03 * scale, err_msg=f"{name} {what}")
