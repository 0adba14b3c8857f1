"""How the CUDA target runs each attention op (FLAME_ATTENTION, runtime/backend.AttentionLowering): cuDNN
where it supports the op, the unfused graph where it does not (the generated flash-attention kernel stays
off until a GPU test passes it, and `flame explain` says so), the generated kernels when forced (the plan's
launches, run here by the reference executor against torch, their sources compiled for sm_90; with
FLAME_FLASH_PIPELINE=1, their dynamic shared memory)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import flame
from flame.codegen.nvrtc import compile_cubin
from flame.errors import ArgumentError
from flame.explain import attention_lines
from flame.ir.ops.attention import BACKWARD, FORWARD
from tests.passes.test_score_mod import MODS, _attention, _extras

B, H = 2, 3
ELF = b"\x7fELF"


@pytest.fixture
def attention_target(monkeypatch):
    """Plan for the CUDA backend under a FLAME_ATTENTION setting (the reference executor runs the plan)."""
    from flame import compiler

    def use(setting):
        monkeypatch.setenv("FLAME_ATTENTION", setting)
        cuda = compiler.capabilities("cuda")
        monkeypatch.setattr(compiler, "capabilities", lambda name: cuda)
        monkeypatch.setattr(compiler, "_target", lambda *settings: cuda)
        monkeypatch.setattr(compiler, "_CACHE", type(compiler._CACHE)())

    return use


def _step(mod, length=8, dim=64, seed=0):
    rng = np.random.default_rng(seed)
    qkv = [rng.standard_normal((B, H, length, dim)).astype(np.float32) for _ in range(3)]
    extras = {n: a for n, a in _extras(length, length).items() if n in ("seg_q", "seg_k")}
    cot = rng.standard_normal((B, H, length, dim)).astype(np.float32)
    fn, names, c = _attention(flame, mod), list(extras), flame.tensor(cot)
    step = flame.compile(
        flame.value_and_grad(lambda q, k, v, *xs: (fn(q, k, v, dict(zip(names, xs))) * c).sum(), (0, 1, 2))
    )
    args = [flame.tensor(a) for a in (*qkv, *extras.values())]
    ts = [torch.tensor(a.astype(np.float64), requires_grad=True) for a in qkv]
    y = _attention(torch, mod)(*ts, {n: torch.tensor(a) for n, a in extras.items()})
    (y * torch.tensor(cot, dtype=torch.float64)).sum().backward()
    return step, args, [t.grad.numpy() for t in ts]


def _score_sized(plan, length=8):
    return [b for b in plan.buffers.values() if b.shape[-2:] == (length, length)]


def _checked(mod):
    """(step, args, plan) of the attention step with modification mod, its gradients checked."""
    step, args, want = _step(mod)
    _, grads = step(*args)
    for got, w in zip(grads, want):
        np.testing.assert_allclose(got.numpy(), w, rtol=1e-4, atol=1e-5)
    return step, args, step._last.plan


def test_forced_flash_plans_the_generated_kernels_and_runs_on_the_reference(attention_target):
    attention_target("flash")
    step, args, plan = _checked(MODS["causal+document+softcap"])
    names = [k.name for k in plan.kernels()]
    assert sum(n.startswith("flash_attention_fwd") for n in names) == 1
    assert sum(n.startswith("flash_attention_backward") for n in names) == 3
    for source in {k.source for k in plan.kernels()}:
        assert compile_cubin(source, "sm_90")[:4] == ELF
    assert not _score_sized(plan)  # no L x S buffer: the scores live in the kernels' registers
    lines = attention_lines(step.optimized(*args), plan)
    assert len(lines) == 3 and all("generated flash-attention kernel" in x for x in lines[1:])


@pytest.mark.parametrize(
    "setting,says",
    [
        ("cudnn", "FLAME_ATTENTION=cudnn leaves the generated flash-attention kernel off"),
        ("decomposed", "FLAME_ATTENTION=decomposed: every attention op runs as primitive ops"),
    ],
)
def test_explain_says_why_a_modification_is_decomposed(attention_target, setting, says):
    attention_target(setting)
    step, args, want = _step(MODS["window+document"])
    _, grads = step(*args)
    np.testing.assert_allclose(grads[0].numpy(), want[0], rtol=1e-4, atol=1e-5)
    g = step.optimized(*args)
    assert not any(op.name in (FORWARD, BACKWARD) for op in g.ops)
    lines = attention_lines(g, step._last.plan)
    assert len(lines) == 2 and "primitive ops" in lines[1] and says in lines[1], lines
    assert _score_sized(step._last.plan)  # the unfused graph stores the scores


def test_auto_runs_what_cudnn_cannot_as_the_generated_kernel(attention_target):
    attention_target("auto")
    step, args, plan = _checked(MODS["window+document"])
    assert any(k.name.startswith("flash_attention_fwd") for k in plan.kernels()) and not _score_sized(plan)
    lines = attention_lines(step.optimized(*args), plan)
    assert len(lines) == 3 and all("generated flash-attention kernel" in x for x in lines[1:]), lines


def test_explain_says_cudnn_runs_plain_causal_attention(attention_target):
    attention_target("auto")

    def attention(q, k, v):
        return flame.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)

    args = [flame.tensor(np.ones((B, H, 8, 64), np.float32)).to("bf16") for _ in range(3)]
    fn = flame.compile(attention)
    fn(*args)
    lines = attention_lines(fn.optimized(*args), fn._last.plan)
    assert lines[1:] == [lines[1]] and "one fused attention call (cuDNN on the CUDA executor" in lines[1]


def test_explain_on_the_reference_executor_says_what_runs_there():
    step, args, _ = _step(MODS["causal+document+softcap"])
    step(*args)
    lines = attention_lines(step.optimized(*args), step._last.plan)
    assert len(lines) == 3 and all("NumPy reference" in x and "FLAME_ATTENTION" in x for x in lines[1:])


def test_an_unknown_setting_is_an_argument_error(monkeypatch):
    from flame.runtime.backend import attention_lowering

    monkeypatch.setenv("FLAME_ATTENTION", "fastest")
    with pytest.raises(ArgumentError, match="FLAME_ATTENTION='fastest': expected one of auto, cudnn, flash"):
        attention_lowering()


def test_the_pipelined_flash_kernels_take_their_dynamic_shared_memory_into_the_plan(attention_target, monkeypatch):
    """FLAME_FLASH_PIPELINE=1: the bf16 forward and main backward kernels are launched with the dynamic shared
    memory they lay out (the CUDA executor allows a kernel more than 48 KiB of it); the reference executor runs
    the same plan against torch."""
    monkeypatch.setenv("FLAME_FLASH_PIPELINE", "1")
    attention_target("flash")
    rng = np.random.default_rng(3)
    qkv = [flame.tensor(rng.standard_normal((B, H, 40, 64)).astype(np.float32)).to("bf16") for _ in range(3)]
    fn = _attention(flame, MODS["causal+document+softcap"])
    extras = {n: a for n, a in _extras(40, 40).items() if n in ("seg_q", "seg_k")}
    names = list(extras)
    step = flame.compile(
        flame.value_and_grad(lambda q, k, v, *xs: fn(q, k, v, dict(zip(names, xs))).float().sum(), (0, 1, 2))
    )
    _, grads = step(*qkv, *(flame.tensor(a) for a in extras.values()))
    ts = [torch.tensor(x.float().numpy().astype(np.float64), requires_grad=True) for x in qkv]
    _attention(torch, MODS["causal+document+softcap"])(
        *ts, {n: torch.tensor(a) for n, a in extras.items()}
    ).sum().backward()
    for got, t in zip(grads, ts):
        want = t.grad.numpy()
        assert np.abs(got.float().numpy() - want).max() <= 3e-2 * np.abs(want).max()
    by_stem = {k.name.rsplit("_", 1)[0]: k for k in step._last.plan.kernels() if k.name.startswith("flash")}
    row = (64 + 8) * 2
    # the forward's 128 query rows (2 m tiles per warp at head dim 64), two key and two value tiles of 128 keys
    assert by_stem["flash_attention_fwd_bf16_d64"].smem == 128 * row + 4 * 128 * row > 48 * 1024
    # K, V, two Q and two dO tiles, dS^T, the statistics
    assert by_stem["flash_attention_backward_mma_bf16_d64"].smem == 6 * 64 * row + 64 * 72 * 2 + 4 * 64 * 4 > 48 * 1024
    assert by_stem["flash_attention_backward_prep_bf16_d64"].smem == 0
    assert all(
        "cp.async.cg.shared.global" in by_stem[s].source
        for s in ("flash_attention_fwd_bf16_d64", "flash_attention_backward_mma_bf16_d64")
    )
