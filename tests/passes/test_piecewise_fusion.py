"""Piecewise ops (concat, pad: the OpDef trait `pieces`) fuse as elementwise work. A rotary embedding as
a Llama-style attention block writes it (halves rotated with cat, or interleaved pairs with stack and
flatten) plans as one kernel with the projection's reshape and permute that produce its input, forward
and backward, for the CUDA target; values and gradients agree with torch in float64 on the reference
executor, and every kernel of the plans compiles with NVRTC for sm_90. The fusion is on by default
(FLAME_FUSE_PIECES=0 turns it off); these tests set it on whatever the environment says."""

from __future__ import annotations

import zlib

import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import flame
import flame.nn.functional as F
from flame.codegen.nvrtc import compile_cubin
from flame.ir.graph import is_backward

B, T, H, KV, D = 2, 8, 4, 2, 16
PIECEWISE = ("concat", "pad")


@pytest.fixture(autouse=True)
def _pieces_fused(monkeypatch):
    monkeypatch.setenv("FLAME_FUSE_PIECES", "1")


def _rng(*key) -> np.random.Generator:
    return np.random.default_rng(zlib.crc32(repr(key).encode()))


def _randn(*shape, key=0, scale=1.0) -> np.ndarray:
    return (_rng(shape, key).standard_normal(shape) * scale).astype(np.float32)


def rope(x, cos, sin, variant: str, cat, stack):
    """The usual hand-written rotary embedding (either library's cat and stack)."""
    if variant == "half":
        half = x.shape[-1] // 2
        x1, x2 = x[..., :half], x[..., half:]
        return x * cos + cat([-x2, x1], -1) * sin
    x1, x2 = x[..., ::2], x[..., 1::2]
    c, s = cos[..., ::2], sin[..., ::2]
    return stack([x1 * c - x2 * s, x1 * s + x2 * c], -1).flatten(-2)


def attention_block(x, wq, wk, wv, wo, cos, sin, variant: str, lib, sdpa):
    """The attention half of a Llama-style block: projections, RoPE on q and k, grouped-query SDPA."""
    q = (x @ wq).reshape(B, T, H, D).permute(0, 2, 1, 3)
    k = (x @ wk).reshape(B, T, KV, D).permute(0, 2, 1, 3)
    v = (x @ wv).reshape(B, T, KV, D).permute(0, 2, 1, 3)
    q, k = rope(q, cos, sin, variant, lib.cat, lib.stack), rope(k, cos, sin, variant, lib.cat, lib.stack)
    a = sdpa(q, k, v, is_causal=True, enable_gqa=True)
    return a.permute(0, 2, 1, 3).reshape(B, T, H * D) @ wo


def _arrays() -> list[np.ndarray]:
    pos = np.arange(T)[:, None] / 10000 ** (np.arange(0, D, 2) / D)[None, :]
    emb = np.concatenate([pos, pos], -1)
    return [
        _randn(B, T, H * D, key=1),
        _randn(H * D, H * D, key=2, scale=0.2),
        _randn(H * D, KV * D, key=3, scale=0.2),
        _randn(H * D, KV * D, key=4, scale=0.2),
        _randn(H * D, H * D, key=5, scale=0.2),
        np.cos(emb).astype(np.float32),
        np.sin(emb).astype(np.float32),
    ]


def _torch_grads(fn, arrays, ct):
    ts = [torch.tensor(a, dtype=torch.float64, requires_grad=i < 5) for i, a in enumerate(arrays)]
    out = fn(*ts)
    (out * torch.tensor(ct, dtype=torch.float64)).sum().backward()
    return out.detach().numpy(), [t.grad.numpy() for t in ts[:5]]


def _flame_step(fn, arrays, ct, amp: bool = False):
    """fn's output and the gradients of its first five inputs (.grad after the call), compiled."""
    ts = [flame.tensor(a, requires_grad=i < 5) for i, a in enumerate(arrays)]
    cot = flame.tensor(ct)

    def step(*xs):
        with flame.autocast(dtype=flame.bfloat16, enabled=amp):
            out = fn(*xs)
        (out.float() * cot).sum().backward()
        return out

    compiled = flame.compile(step)
    out = compiled(*ts)
    return out.float().numpy(), [t.grad.numpy() for t in ts[:5]], compiled._last.plan


def _close(got, want, amp: bool) -> None:
    """float32 within float32 rounding of torch's float64 answer; bf16 autocast within 2% in norm."""
    if not amp:
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
        return
    assert np.linalg.norm(got - want) <= 2e-2 * np.linalg.norm(want)


def _compiles(plan) -> None:
    sources = {k.source for k in plan.kernels()}
    assert sources
    for source in sources:
        assert compile_cubin(source, "sm_90")[:4] == b"\x7fELF"


def _rope_kernels(plan, backward: bool) -> list:
    """The kernels of one phase that negate (-x2, and its gradient) or place the halves (concat forward,
    pad backward): the rotary embedding's (a float32 attention's own backward, decomposed, ends in a
    concat of the flattened q, k and v gradients, which is no part of it)."""
    return [
        k
        for k in plan.kernels()
        if any(op.name == ("pad" if backward else "concat") for op in k.ops)
        and any(op.name in ("neg", "mul") for op in k.ops)
        and any(is_backward(op) for op in k.ops) == backward
    ]


@pytest.mark.parametrize("variant", ["half", "interleaved"])
@pytest.mark.parametrize("mode", ["eager", "compiled"])
def test_rope_block_values_and_gradients(variant, mode):
    arrays = _arrays()
    ct = _randn(B, T, H * D, key=9)
    want, want_grads = _torch_grads(
        lambda *a: attention_block(*a, variant, torch, TF.scaled_dot_product_attention), arrays, ct
    )

    def block(*a):
        return attention_block(*a, variant, flame, F.scaled_dot_product_attention)

    if mode == "compiled":
        got, grads, _ = _flame_step(block, arrays, ct)
    else:
        ts = [flame.tensor(a, requires_grad=i < 5) for i, a in enumerate(arrays)]
        out = block(*ts)
        (out * flame.tensor(ct)).sum().backward()
        got, grads = out.numpy(), [t.grad.numpy() for t in ts[:5]]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    for i, (g, w) in enumerate(zip(grads, want_grads)):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5, err_msg=f"gradient of input {i}")


def _planned_against_torch(variant: str, amp: bool):
    """The attention block's step with RoPE `variant`, planned for the CUDA target and run on the
    reference executor: its values and gradients checked against torch; its plan."""
    arrays = _arrays()
    ct = _randn(B, T, H * D, key=9)
    want, want_grads = _torch_grads(
        lambda *a: attention_block(*a, variant, torch, TF.scaled_dot_product_attention), arrays, ct
    )
    got, grads, plan = _flame_step(
        lambda *a: attention_block(*a, variant, flame, F.scaled_dot_product_attention), arrays, ct, amp
    )
    _close(got, want, amp)
    for g, w in zip(grads, want_grads):
        _close(g, w, amp)
    return plan


@pytest.mark.parametrize("amp", [False, True])
def test_rope_half_is_one_kernel_each_way(cuda_target, amp):
    """cat([-x2, x1]) and its gradient (slices padded back into place) are computed where x is produced
    and where its gradient is consumed: one kernel forward (both q and k, the projection's reshape and
    permute included), one backward (ending in the permute the weight gradient's matmul reads)."""
    plan = _planned_against_torch("half", amp)
    (fwd,), (bwd,) = _rope_kernels(plan, False), _rope_kernels(plan, True)
    assert {"reshape", "permute", "slice", "neg", "concat", "mul", "add"} <= {op.name for op in fwd.ops}
    assert sum(op.name == "concat" for op in fwd.ops) == 2  # q and k
    assert {"slice", "neg", "pad", "mul", "add", "permute"} <= {op.name for op in bwd.ops}
    assert not [k for k in plan.kernels() if k not in (fwd, bwd) and any(op.name == "neg" for op in k.ops)]
    _compiles(plan)


@pytest.mark.parametrize("amp", [False, True])
def test_rope_interleaved_forward_is_one_kernel(cuda_target, amp):
    """stack([...], -1).flatten(-2) of the even and odd elements: the forward is one kernel over the
    pairs, reading the projection through its reshape, permute and strided slices; the backward places
    each half back with a pad (the strided slice's gradient) in at most three kernels (the pairs'
    domain cannot also store the permuted sum the weight gradient reads)."""
    plan = _planned_against_torch("interleaved", amp)
    (fwd,) = _rope_kernels(plan, False)
    assert {"reshape", "permute", "slice", "concat", "mul", "sub", "add"} <= {op.name for op in fwd.ops}
    assert 1 <= len(_rope_kernels(plan, True)) <= 3
    _compiles(plan)


def _check_fused(fn, tfn, arrays):
    """fn compiled (values and gradients of every input) against torch in float64; its piecewise ops
    share kernels with other work; every kernel compiles."""
    ts64 = [torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in arrays]
    want = tfn(*ts64)
    ct = _randn(*want.shape, key=7)
    (want * torch.tensor(ct, dtype=torch.float64)).sum().backward()
    xs = [flame.tensor(a, requires_grad=True) for a in arrays]
    cot = flame.tensor(ct)

    def step(*xs):
        out = fn(*xs)
        (out * cot).sum().backward()
        return out

    compiled = flame.compile(step)
    got = compiled(*xs)
    np.testing.assert_allclose(got.numpy(), want.detach().numpy(), rtol=1e-4, atol=1e-5)
    for x, t in zip(xs, ts64):
        np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), rtol=1e-4, atol=1e-5)
    plan = compiled._last.plan
    for k in plan.kernels():
        if any(op.name in PIECEWISE for op in k.ops):
            assert any(op.name not in PIECEWISE for op in k.ops), f"{k.name} computes a piecewise op alone"
    _compiles(plan)
    return plan


def test_concat_joins_a_layer_norm_row_kernel(cuda_target):
    """A skip connection's concat read by a LayerNorm: the concat is computed in the row kernel."""
    a, b, w = _randn(6, 24, key=1), _randn(6, 8, key=2), _randn(32, key=3)
    plan = _check_fused(
        lambda a, b, w: F.layer_norm(flame.cat([a.exp(), b * 2], -1), (32,), w) * 3,
        lambda a, b, w: TF.layer_norm(torch.cat([a.exp(), b * 2], -1), (32,), w) * 3,
        [a, b, w],
    )
    (ops,) = {k.ops for k in plan.kernels() if any(op.name == "concat" for op in k.ops)}  # (and its fold)
    assert any(op.name == "reduce_mean" for op in ops)


@pytest.mark.parametrize("shape, pads", [((5, 7), (1, 2, 0, 3)), ((4, 16), (8, 0)), ((3, 1, 9), (0, 1, 2, 2, 1, 0))])
def test_pad_fuses_with_elementwise_work(cuda_target, shape, pads):
    """F.pad between elementwise ops (its gradient is a slice of the padded gradient): no copy kernels."""
    x = _randn(*shape, key=4)
    _check_fused(
        lambda t: F.pad(t.sin(), pads, value=0.5) * 2 + 1, lambda t: TF.pad(t.sin(), pads, value=0.5) * 2 + 1, [x]
    )


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_concat_of_computed_and_broadcast_parts(cuda_target, dim):
    """cat of values computed in the kernel, one of them broadcast, along a leading, middle or last
    axis of odd sizes (the element-by-element path), read twice at shifted positions."""
    a, b = _randn(3, 5, 7, key=5), _randn(1, 5, 1, key=6)
    sizes = {0: (2, 5, 7), 1: (3, 2, 7), -1: (3, 5, 3)}[dim]
    c = _randn(*sizes, key=8)

    def f(lib, a, b, c):
        y = lib.cat([a.tanh(), c * 3, (b + 0 * a) - 1], dim)
        n = y.shape[dim]
        return y.narrow(dim, 1, n - 1) * y.narrow(dim, 0, n - 1)

    _check_fused(lambda a, b, c: f(flame, a, b, c), lambda a, b, c: f(torch, a, b, c), [a, b, c])


@pytest.mark.gpu
@pytest.mark.parametrize("variant", ["half", "interleaved"])
def test_rope_block_on_the_gpu(variant):
    """The fused rotary embedding kernels on the GPU, bf16 autocast: values and gradients near torch's
    float64 answer (bf16 tolerance)."""
    arrays = _arrays()
    ct = _randn(B, T, H * D, key=9)
    want, want_grads = _torch_grads(
        lambda *a: attention_block(*a, variant, torch, TF.scaled_dot_product_attention), arrays, ct
    )
    got, grads, _ = _flame_step(
        lambda *a: attention_block(*a, variant, flame, F.scaled_dot_product_attention), arrays, ct, amp=True
    )
    _close(got, want, True)
    for g, w in zip(grads, want_grads):
        _close(g, w, True)
