"""flame.nn.functional.scaled_dot_product_attention with dropout_p > 0, as torch's: the attention
probabilities dropped with probability p after the softmax and the rest scaled by 1 / (1 - p). Values
and the gradients of query, key, value and an additive mask are checked against torch in float64 with
the mask flame drew (the same flame.manual_seed drawn again with flame.rand), eager and inside
@flame.compile; a tiny p agrees with the fused op; the fraction dropped is p and the expectation is
kept; the draws repeat under flame.manual_seed; p outside [0, 1] raises as torch's."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import flame
import flame.nn.functional as F

SEED = 1234


def _inputs(rng, b=2, h=4, hkv=4, length=5, keys=7, e=8, ev=6):
    return (rng.standard_normal((b, h, length, e)).astype(np.float32),
            rng.standard_normal((b, hkv, keys, e)).astype(np.float32),
            rng.standard_normal((b, hkv, keys, ev)).astype(np.float32))


def _mask(rng, kind, shape):
    if kind == "bool":
        m = rng.random(shape) < 0.7
        m[..., 0] = True
        m[..., 1, :] = False  # a row no key takes part in gives 0
        return m
    if kind == "additive":
        return rng.standard_normal(shape).astype(np.float32)
    return None


def _flame(q, k, v, mask, cot, compiled, p, **kw):
    """flame's result and the gradients of q, k, v (and of an additive mask), drawn after SEED."""
    args = [flame.tensor(x, requires_grad=True) for x in (q, k, v)]
    m = None if mask is None else flame.tensor(mask, requires_grad=mask.dtype != bool)
    c = flame.tensor(cot)

    def step(q, k, v, m):
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=m, dropout_p=p, **kw)
        (y * c).sum().backward()
        return y

    flame.manual_seed(SEED)
    y = (flame.compile(step) if compiled else step)(*args, m)
    grads = [x.grad.numpy() for x in args]
    if m is not None and m.requires_grad:
        grads.append(m.grad.numpy())
    return [y.numpy()] + grads


def _keep(shape, p):
    """The keep mask flame's dropout draws first after SEED: uniform numbers >= p."""
    flame.manual_seed(SEED)
    return flame.rand(*shape).numpy() >= p


def _torch_ref(q, k, v, mask, cot, keep, p, is_causal=False, scale=None, enable_gqa=False):
    """softmax(q k^T * scale + mask) * keep / (1 - p) @ v in float64 (torch's math path, the dropout
    mask given), with a row no key takes part in giving 0."""
    ts = [torch.tensor(x, dtype=torch.float64, requires_grad=True) for x in (q, k, v)]
    tq, tk, tv = ts
    if enable_gqa:
        groups = tq.shape[-3] // tk.shape[-3]
        tk, tv = tk.repeat_interleave(groups, -3), tv.repeat_interleave(groups, -3)
    s = tq @ tk.transpose(-1, -2) * (1 / np.sqrt(q.shape[-1]) if scale is None else scale)
    if is_causal:
        s = s.masked_fill(~torch.ones(s.shape[-2:], dtype=torch.bool).tril(), float("-inf"))
    tm = None
    if mask is not None and mask.dtype == bool:
        s = s.masked_fill(~torch.tensor(mask), float("-inf"))
    elif mask is not None:
        tm = torch.tensor(mask, dtype=torch.float64, requires_grad=True)
        s = s + tm
        ts.append(tm)
    dead = (s == float("-inf")).all(-1, keepdim=True)
    probs = torch.where(dead, 0.0, torch.softmax(torch.where(dead, 0.0, s), -1))
    y = (probs * torch.tensor(keep) / (1 - p)) @ tv
    (y * torch.tensor(cot, dtype=torch.float64)).sum().backward()
    return [y.detach().numpy()] + [t.grad.numpy() for t in ts]


def _check(q, k, v, mask=None, compiled=False, p=0.3, **kw):
    rng = np.random.default_rng(3)
    heads = q.shape[:-1]
    cot = rng.standard_normal(heads + (v.shape[-1],)).astype(np.float32)
    got = _flame(q, k, v, mask, cot, compiled, p, **kw)
    keep = _keep(heads + (k.shape[-2],), p)
    assert 0 < keep.mean() < 1  # some dropped, some kept
    want = _torch_ref(q, k, v, mask, cot, keep, p, **kw)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("kind", [None, "bool", "additive"])
def test_values_and_gradients_follow_the_drawn_mask(kind, compiled):
    rng = np.random.default_rng(0)
    q, k, v = _inputs(rng)
    _check(q, k, v, _mask(rng, kind, (5, 7)), compiled)


@pytest.mark.parametrize("compiled", [False, True])
def test_causal_gqa_and_scale_follow_the_drawn_mask(compiled):
    rng = np.random.default_rng(1)
    _check(*_inputs(rng, length=6, keys=4), compiled=compiled, is_causal=True, p=0.5)
    _check(*_inputs(rng, h=4, hkv=2), compiled=compiled, enable_gqa=True, scale=0.3)


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("kind", [None, "bool", "additive", "causal"])
def test_tiny_dropout_equals_the_fused_op(kind, compiled):
    """p = 1e-12 drops nothing here and scales by 1: the written-out attention gives the fused op's
    values and gradients (and p = 0 is the fused op itself)."""
    rng = np.random.default_rng(2)
    q, k, v = _inputs(rng)
    mask = None if kind == "causal" else _mask(rng, kind, (5, 7))
    kw = {"is_causal": True} if kind == "causal" else {}
    cot = rng.standard_normal((2, 4, 5, 6)).astype(np.float32)
    fused = _flame(q, k, v, mask, cot, compiled, 0.0, **kw)
    for got in (_flame(q, k, v, mask, cot, compiled, 1e-12, **kw), _flame(q, k, v, mask, cot, compiled, 0, **kw)):
        for g, w in zip(got, fused):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("compiled", [False, True])
def test_fraction_dropped_and_expectation(compiled):
    """With v = I the result is the dropped-out probabilities: a fraction p of them is 0, the others
    are the softmax's divided by 1 - p, and their mean is the softmax's mean."""
    p, n = 0.3, 128
    rng = np.random.default_rng(4)
    q = flame.tensor(rng.standard_normal((2, 2, n, 16)).astype(np.float32))
    k = flame.tensor(rng.standard_normal((2, 2, n, 16)).astype(np.float32))
    eye = flame.tensor(np.broadcast_to(np.eye(n, dtype=np.float32), (2, 2, n, n)).copy())

    def attend(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, dropout_p=p)

    flame.manual_seed(SEED)
    got = (flame.compile(attend) if compiled else attend)(q, k, eye).numpy()
    probs = F.scaled_dot_product_attention(q, k, eye).numpy()
    dropped = got == 0
    assert abs(dropped.mean() - p) < 0.01  # 65536 draws: the standard deviation is 0.0018
    np.testing.assert_allclose(got[~dropped], probs[~dropped] / (1 - p), rtol=1e-5)
    assert abs(got.mean() - probs.mean()) < 0.02 * probs.mean()
    np.testing.assert_allclose(got.sum(-1).mean(), 1.0, atol=0.02)  # rows still sum to 1 on average


@pytest.mark.parametrize("compiled", [False, True])
def test_draws_repeat_under_manual_seed(compiled):
    q, k, v = (flame.tensor(x) for x in _inputs(np.random.default_rng(5)))

    def attend(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, dropout_p=0.5)

    f = flame.compile(attend) if compiled else attend
    flame.manual_seed(7)
    a, b = f(q, k, v).numpy(), f(q, k, v).numpy()
    flame.manual_seed(7)
    np.testing.assert_array_equal(f(q, k, v).numpy(), a)
    assert not np.array_equal(a, b)  # each call draws afresh


def test_dropout_of_everything_gives_zeros_like_torch():
    q, k, v = (flame.tensor(x, requires_grad=True) for x in _inputs(np.random.default_rng(6)))
    y = F.scaled_dot_product_attention(q, k, v, dropout_p=1.0)
    y.sum().backward()
    assert not y.numpy().any() and not any(x.grad.numpy().any() for x in (q, k, v))


@pytest.mark.parametrize("p", [1.5, -0.1])
def test_probability_outside_zero_one_raises(p):
    """torch raises for p > 1 with this message; for p < 0 it raises or ignores p depending on the
    kernel it picks (its flash path raises), flame always raises."""
    q, k, v = (flame.tensor(x) for x in _inputs(np.random.default_rng(8)))
    with pytest.raises(RuntimeError, match="between 0 and 1"):
        F.scaled_dot_product_attention(q, k, v, dropout_p=p)
    if p > 1:
        with pytest.raises(RuntimeError, match="between 0 and 1"):
            torch.nn.functional.scaled_dot_product_attention(*(torch.tensor(x.numpy()) for x in (q, k, v)),
                                                             dropout_p=p)


def test_shape_errors_are_the_fused_ops():
    q, k, v = (flame.tensor(x) for x in _inputs(np.random.default_rng(9)))
    with pytest.raises(flame.FlameError, match="heads"):
        F.scaled_dot_product_attention(q, k[:, :3], v[:, :3], enable_gqa=True, dropout_p=0.1)
    with pytest.raises(flame.FlameError, match="not both"):
        F.scaled_dot_product_attention(q, k, v, attn_mask=flame.tensor(np.ones((5, 7), bool)), is_causal=True,
                                       dropout_p=0.1)


@pytest.mark.parametrize("dt", ["f16", "bf16"])
def test_half_types_compute_in_f32(dt):
    rng = np.random.default_rng(10)
    q, k, v = _inputs(rng)
    args = [flame.tensor(x).to(dt).requires_grad_() for x in (q, k, v)]
    flame.manual_seed(SEED)
    y = F.scaled_dot_product_attention(*args, dropout_p=0.25)
    y.float().sum().backward()
    assert y.dtype == args[0].dtype and all(x.grad.dtype == args[0].dtype for x in args)
    keep = _keep((2, 4, 5, 7), 0.25)
    cot = np.ones((2, 4, 5, 6), np.float32)
    want = _torch_ref(*(flame.tensor(x).to(dt).float().numpy() for x in (q, k, v)), None, cot, keep, 0.25)
    tol = 2e-3 if dt == "f16" else 1.6e-2
    np.testing.assert_allclose(y.float().numpy(), want[0], rtol=tol, atol=tol)
    for x, w in zip(args, want[1:]):
        np.testing.assert_allclose(x.grad.float().numpy(), w, rtol=4 * tol, atol=4 * tol)


def test_autocast_runs_in_the_autocast_dtype():
    q, k, v = (flame.tensor(x) for x in _inputs(np.random.default_rng(11)))
    with flame.autocast(dtype=flame.bf16):
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=0.2)
    assert y.dtype == flame.bf16


def test_a_dropout_attention_step_plans_for_the_gpu_and_its_kernels_compile(cuda_target):
    """A training step through attention with dropout, planned for the CUDA target: the reference
    executor's values and gradients follow the mask drawn, and every kernel compiles for sm_90."""
    from flame.codegen.nvrtc import compile_cubin

    rng = np.random.default_rng(12)
    q, k, v = _inputs(rng)
    mask = _mask(rng, "additive", (5, 7))
    cot = rng.standard_normal((2, 4, 5, 6)).astype(np.float32)
    args = [flame.tensor(x, requires_grad=True) for x in (q, k, v)]

    @flame.compile
    def step(q, k, v):
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=flame.tensor(mask), dropout_p=0.3)
        (y * flame.tensor(cot)).sum().backward()
        return y

    flame.manual_seed(SEED)
    got = [step(*args).numpy()] + [x.grad.numpy() for x in args]
    want = _torch_ref(q, k, v, mask, cot, _keep((2, 4, 5, 7), 0.3), 0.3)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
    sources = {kernel.source for kernel in step._last.plan.kernels()}
    assert sources
    for source in sources:
        assert compile_cubin(source, "sm_90")[:4] == b"\x7fELF"
