"""An additive attention mask that requires grad (a learned attention bias: T5, Swin, ALiBi-learned)
gets its gradient, summed to its own shape as torch does, through F.scaled_dot_product_attention and
through hand-written softmax(q @ k^T * s + bias) @ v (which the attention rewrite makes one op):
values and the gradients of q, k, v and the bias against torch in float64, eager and compiled; an SGD
loop trains the bias as torch's does; on the CUDA target the bias gradient runs as primitive ops
(cuDNN's dBias is not wired) while the forward and dq, dk, dv stay cuDNN calls, and `flame explain`
says why."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import flame
import flame.nn.functional as F
from flame.explain import explain_plan
from flame.plan.steps import AttentionCall

B, H, L, S, E, EV = 2, 3, 5, 6, 8, 4
SCALE = 0.4
# bias shapes that broadcast to the scores [B, H, L, S]
BIASES = {
    "full": (B, H, L, S),
    "rows": (L, S),
    "heads": (1, H, L, S),
    "batch": (B, 1, L, S),
    "keys": (H, 1, S),
    "one": (1, 1, 1, 1),
}
MODES = ("eager", "compiled")


def _arrays(seed, bias_shape, h=H, hkv=H):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((B, h, L, E)).astype(np.float32)
    k = rng.standard_normal((B, hkv, S, E)).astype(np.float32)
    v = rng.standard_normal((B, hkv, S, EV)).astype(np.float32)
    bias = rng.standard_normal(bias_shape).astype(np.float32)
    cot = rng.standard_normal((B, h, L, EV)).astype(np.float32)
    return q, k, v, bias, cot


def _torch(fn, arrays, cot):
    """fn's value and the gradients of every input, in float64 (the oracle)."""
    ts = [torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in arrays]
    out = fn(*ts)
    (out * torch.tensor(cot, dtype=torch.float64)).sum().backward()
    return [out.detach().numpy()] + [t.grad.numpy() for t in ts]


def _flame(fn, arrays, cot, mode):
    """fn's value and the gradients of every input (leaf tensors with requires_grad), eager or compiled."""
    xs = [flame.tensor(a, requires_grad=True) for a in arrays]
    c = flame.tensor(cot)

    def body(*xs):
        out = fn(*xs)
        (out * c).sum().backward()
        return out

    step = flame.compile(body) if mode == "compiled" else body
    out = step(*xs)
    return [out.numpy()] + [x.grad.numpy() for x in xs], step


def _agree(got, want, what, tol=2e-5):
    assert len(got) == len(want)
    for name, g, w in zip(("out", "dq", "dk", "dv", "dbias"), got, want):
        assert g.shape == w.shape, f"{what} {name}: shape {g.shape} vs torch {w.shape}"
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol, err_msg=f"{what} {name}")


def _sdpa(lib):
    sdpa = F.scaled_dot_product_attention if lib is flame else torch.nn.functional.scaled_dot_product_attention
    return lambda q, k, v, bias: sdpa(q, k, v, attn_mask=bias, scale=SCALE)


def _by_hand(q, k, v, bias):
    return ((q @ k.mT) * SCALE + bias).softmax(-1) @ v


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("shape", sorted(BIASES))
def test_sdpa_bias_gradient_matches_torch(shape, mode):
    *arrays, cot = _arrays(0, BIASES[shape])
    got, _ = _flame(_sdpa(flame), arrays, cot, mode)
    _agree(got, _torch(_sdpa(torch), arrays, cot), f"sdpa bias {BIASES[shape]} {mode}")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("shape", ["full", "rows", "heads", "batch"])
def test_hand_written_attention_bias_gradient_matches_torch(shape, mode):
    *arrays, cot = _arrays(1, BIASES[shape])
    got, step = _flame(_by_hand, arrays, cot, mode)
    _agree(got, _torch(_by_hand, arrays, cot), f"hand-written bias {BIASES[shape]} {mode}")
    if mode == "compiled":  # the rewrite made it one attention op (and the bias still learns)
        assert any(isinstance(s, AttentionCall) for s in step._last.plan.steps)


@pytest.mark.parametrize("mode", MODES)
def test_grouped_query_attention_bias_gradient_matches_torch(mode):
    *arrays, cot = _arrays(2, (1, 4, L, S), h=4, hkv=2)

    def fn(lib):
        sdpa = F.scaled_dot_product_attention if lib is flame else torch.nn.functional.scaled_dot_product_attention
        return lambda q, k, v, bias: sdpa(q, k, v, attn_mask=bias, scale=SCALE, enable_gqa=True)

    got, _ = _flame(fn(flame), arrays, cot, mode)
    _agree(got, _torch(fn(torch), arrays, cot), f"gqa bias {mode}")


def test_bias_gradient_only_where_asked():
    """A mask that needs no gradient (data, frozen) costs no bias-gradient work; q, k, v still match."""
    *arrays, cot = _arrays(3, (L, S))
    q, k, v, bias = (flame.tensor(a, requires_grad=i < 3) for i, a in enumerate(arrays))
    c = flame.tensor(cot)

    @flame.compile
    def step(q, k, v, bias):
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=bias, scale=SCALE)
        (out * c).sum().backward()
        return out

    out = step(q, k, v, bias)
    assert bias.grad is None
    assert not any(
        op.name.endswith("bias_grad") or "decompose_attention" in (op.loc or "") for op in step._last.graph.ops
    )
    _agree(
        [out.numpy(), q.grad.numpy(), k.grad.numpy(), v.grad.numpy()],
        _torch(_sdpa(torch), arrays, cot)[:4],
        "frozen bias",
    )


def _train(lib, mode, fn, steps=6, lr=0.5):
    """SGD on a zero-initialised bias [B, L, L] of fn(q, k, v, bias), loss sum(out ** 2) (torch: f64,
    the step as it is; flame: f32, eager or compiled)."""
    rng = np.random.default_rng(4)
    q, k, v = (rng.standard_normal((B, L, E)).astype(np.float32) for _ in range(3))
    if lib is torch:
        bias = torch.nn.Parameter(torch.zeros(B, L, L, dtype=torch.float64))
        qkv = [torch.tensor(a, dtype=torch.float64) for a in (q, k, v)]
        opt = torch.optim.SGD([bias], lr=lr)
    else:
        bias = flame.nn.Parameter(flame.zeros(B, L, L))
        qkv = [flame.tensor(a) for a in (q, k, v)]
        opt = flame.optim.SGD([bias], lr=lr)

    def step(q, k, v):
        opt.zero_grad()
        loss = (fn(q, k, v, bias) ** 2).sum()
        loss.backward()
        opt.step()
        return loss

    step = flame.compile(step) if mode == "compiled" and lib is flame else step
    losses = [float(step(*qkv).detach().numpy()) if lib is torch else float(step(*qkv).numpy()) for _ in range(steps)]
    return np.array(losses), (bias.detach().numpy() if lib is torch else bias.numpy())


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("written", ["sdpa", "by_hand"])
def test_sgd_trains_the_bias_as_torch(written, mode):
    fns = {"sdpa": lambda lib: _sdpa(lib), "by_hand": lambda lib: _by_hand}
    want_losses, want_bias = _train(torch, mode, fns[written](torch))
    losses, bias = _train(flame, mode, fns[written](flame))
    assert want_losses[-1] < want_losses[0] * 0.9  # the bias does learn (the loss falls)
    np.testing.assert_allclose(losses, want_losses, rtol=1e-5)
    np.testing.assert_allclose(bias, want_bias, rtol=1e-5, atol=1e-6)
    assert np.abs(bias).max() > 1e-2


@pytest.mark.parametrize("shape", ["rows", "batch"])
def test_cuda_plan_computes_the_bias_gradient_unfused(cuda_target, shape):
    """On the CUDA target (bf16, head sizes cuDNN takes) the forward and dq, dk, dv stay cuDNN calls, the
    bias gradient is primitive ops whose source line says why; the plan's kernels compile with NVRTC
    and the reference executor running it gives the gradients the reference target's plan gives."""
    from flame.codegen.nvrtc import compile_cubin

    rng = np.random.default_rng(5)
    shapes = ((B, H, L, 8), (B, H, S, 8), (B, H, S, 8), BIASES[shape])
    arrays = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    xs = [flame.tensor(a, dtype="bf16", requires_grad=True) for a in arrays]
    cot = rng.standard_normal((B, H, L, 8)).astype(np.float32)
    c = flame.tensor(cot)

    @flame.compile
    def step(q, k, v, bias):
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=bias, scale=SCALE)
        (out.float() * c).sum().backward()
        return out

    step(*xs)
    plan, graph = step._last.plan, step._last.graph
    calls = [s.op.name for s in plan.steps if isinstance(s, AttentionCall)]
    assert "scaled_dot_product_attention" in calls and "scaled_dot_product_attention_backward" in calls
    report = explain_plan("step", graph, plan)
    assert "decompose_attention: the attention bias needs a gradient" in report
    for source in {k.source for k in plan.kernels()}:
        assert compile_cubin(source, "sm_90")[:4] == b"\x7fELF"
    want = _torch(_sdpa(torch), [x.float().numpy() for x in xs], cot)  # the bf16-rounded inputs, in f64
    for name, x, w in zip(("dq", "dk", "dv", "dbias"), xs, want[1:]):
        np.testing.assert_allclose(x.grad.float().numpy(), w, rtol=0.03, atol=0.03, err_msg=name)


@pytest.mark.gpu
@pytest.mark.parametrize("shape", ["rows", "batch", "full"])
def test_bias_trains_on_the_gpu_as_torch(shape):
    """On the GPU (bf16, head size 64: cuDNN runs the forward and dq, dk, dv; the bias gradient runs as
    kernels and GEMMs) the gradients of q, k, v and the bias match torch's on the same bf16 inputs."""
    pytest.importorskip("cupy")
    pytest.importorskip("cudnn")
    rng = np.random.default_rng(6)
    heads, length, keys, d = 4, 64, 80, 64
    shapes = {"rows": (length, keys), "batch": (B, 1, length, keys), "full": (B, heads, length, keys)}
    arrays = [
        rng.standard_normal(s).astype(np.float32)
        for s in ((B, heads, length, d), (B, heads, keys, d), (B, heads, keys, d), shapes[shape])
    ]
    xs = [flame.tensor(a, dtype="bf16", requires_grad=True) for a in arrays]
    cot = rng.standard_normal((B, heads, length, d)).astype(np.float32)
    c = flame.tensor(cot)

    @flame.compile
    def step(q, k, v, bias):
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
        (out.float() * c).sum().backward()
        return out

    out = step(*xs)
    calls = [s.op.name for s in step._last.plan.steps if isinstance(s, AttentionCall)]
    assert "scaled_dot_product_attention_backward" in calls
    sdpa = torch.nn.functional.scaled_dot_product_attention
    want = _torch(lambda q, k, v, b: sdpa(q, k, v, attn_mask=b), [x.float().numpy() for x in xs], cot)
    for name, got, w in zip(("out", "dq", "dk", "dv", "dbias"), [out] + [x.grad for x in xs], want):
        err = np.abs(got.float().numpy() - w).max() / np.abs(w).max()
        assert err < 2e-2, f"{name}: max error {err:.3g} of max |torch|"
