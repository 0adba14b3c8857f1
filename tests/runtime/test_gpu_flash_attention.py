"""The generated flash-attention kernels (FLAME_ATTENTION=flash) on a GPU against torch in float64 on the
same (rounded) inputs: values and gradients of hand-written attention with its score modification, at
lengths that are not a multiple of the tile, with L != S, head dims 64 and 128, bf16 / f16 (tensor cores)
and f32 (plain path), and rows that every key is masked out of (zeros, finite gradients); each in both forms
of FLAME_FLASH_PIPELINE (pipelined: the default, cp.async double buffering and ldmatrix, f16 / bf16;
sync: FLAME_FLASH_PIPELINE=0)."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

import flame
from flame.codegen.kernel import FLASH_PIPELINE_ENV
from tests.passes.test_score_mod import MODS, _attention, _causal, _chain, _document, _positions, _softcap

pytestmark = pytest.mark.gpu
B, H = 2, 4
TOL = {"bf16": 3e-2, "f16": 1e-2, "f32": 1e-4}  # |got - want| <= TOL * max|want|


def _alibi_const(lib, s, x):  # fixed slopes, from positions alone: the backward has no float operand
    i, j = _positions(lib, s)
    return s + ((j - i) * 0.25).to(s.dtype)


CASES = {
    "causal+softcap+alibi": _chain(_softcap, _alibi_const, _causal),
    "window+document": MODS["window+document"],
    "softcap": MODS["softcap"],
    "document": _document,
}


@pytest.fixture(autouse=True, params=["0", "1"], ids=["sync", "pipelined"])
def pipeline(request, monkeypatch):
    """Every test in each FLAME_FLASH_PIPELINE setting."""
    monkeypatch.setenv(FLASH_PIPELINE_ENV, request.param)
    return request.param == "1"


def _segments(length, keys, seed, holes):
    rng = np.random.default_rng(seed)
    seg_q = np.sort(rng.integers(0, 3, (B, length)), -1)
    seg_k = np.sort(rng.integers(0, 3, (B, keys)), -1)
    if holes:  # query segment 3 has no key: those rows are fully masked
        seg_q[:, -5:] = 3
    return {"seg_q": seg_q, "seg_k": seg_k if length != keys or holes else seg_q}


def _run(name, dtype, dim, length, keys, monkeypatch, holes=False, seed=0):
    monkeypatch.setenv("FLAME_ATTENTION", "flash")
    rng = np.random.default_rng(seed)
    qkv = [rng.standard_normal((B, H, n, dim)).astype(np.float32) for n in (length, keys, keys)]
    cot = rng.standard_normal((B, H, length, dim)).astype(np.float32)
    extras = _segments(length, keys, seed, holes)
    mod, names = CASES[name], list(extras)
    fn = _attention(flame, mod)
    c = flame.tensor(cot).to(dtype)

    def loss(q, k, v, *xs):
        return (fn(q, k, v, dict(zip(names, xs))) * c).float().sum()

    step = flame.compile(flame.value_and_grad(loss, (0, 1, 2)))
    forward = flame.compile(lambda q, k, v, *xs: fn(q, k, v, dict(zip(names, xs))))
    args = [flame.tensor(a).to(dtype) for a in qkv] + [flame.tensor(a) for a in extras.values()]
    out = forward(*args).float().numpy()
    _, grads = step(*args)
    launches = step._last.plan.kernels()
    kernels = [k.name for k in launches]
    assert any(n.startswith("flash_attention_fwd") for n in kernels), kernels
    pipelined = os.environ[FLASH_PIPELINE_ENV] == "1" and dtype != "f32"
    flash = [k for k in launches if k.name.startswith(("flash_attention_fwd", "flash_attention_backward_mma"))]
    assert all(("cp.async" in k.source) == pipelined for k in flash), kernels  # the form asked for ran
    rounded = [a.float().numpy().astype(np.float64) for a in args[:3]]
    want, want_grads = _torch(mod, rounded, extras, c.float().numpy().astype(np.float64))
    return out, [g.float().numpy() for g in grads], want, want_grads, kernels


def _torch(mod, qkv, extras, cot):
    ts = [torch.tensor(a, requires_grad=True) for a in qkv]
    y = _attention(torch, mod)(*ts, {n: torch.tensor(a) for n, a in extras.items()})
    (y * torch.tensor(cot)).sum().backward()
    return y.detach().numpy(), [t.grad.numpy() for t in ts]


def _close(got, want, dtype, what):
    got, want = np.asarray(got, np.float64), np.nan_to_num(np.asarray(want, np.float64))
    err = np.abs(got - want).max() / max(np.abs(want).max(), 1e-30)
    assert err <= TOL[dtype], f"{what}: max error {err:.3g} of max |want|"


@pytest.mark.parametrize("dim", [64, 128])
@pytest.mark.parametrize("dtype", ["bf16", "f16", "f32"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_flash_kernel_matches_torch_at_odd_lengths(name, dtype, dim, monkeypatch):
    length = 100  # not a multiple of the 64-row or 32/64-key tiles
    out, grads, want, want_grads, kernels = _run(name, dtype, dim, length, length, monkeypatch)
    assert sum(n.startswith("flash_attention_backward") for n in kernels) == 3
    _close(out, want, dtype, "out")
    for got, w, what in zip(grads, want_grads, ("dq", "dk", "dv")):
        _close(got, w, dtype, what)


@pytest.mark.parametrize("length,keys", [(70, 130), (130, 70), (1, 65)])
@pytest.mark.parametrize("dtype", ["bf16", "f32"])
def test_flash_kernel_with_more_or_fewer_keys_than_queries(length, keys, dtype, monkeypatch):
    out, grads, want, want_grads, _ = _run("softcap", dtype, 64, length, keys, monkeypatch, seed=1)
    _close(out, want, dtype, "out")
    for got, w, what in zip(grads, want_grads, ("dq", "dk", "dv")):
        _close(got, w, dtype, what)


@pytest.mark.parametrize("dtype", ["bf16", "f32"])
def test_fully_masked_rows_give_zeros_and_finite_gradients(dtype, monkeypatch):
    """The last 5 query rows see no key: torch's hand-written softmax gives NaN there (and NaN gradients
    everywhere); flame gives zeros. The other rows are compared with torch run on them alone (query rows
    are independent; the masked ones add nothing to dK and dV)."""
    out, grads, want, _, _ = _run("document", dtype, 64, 77, 77, monkeypatch, holes=True, seed=2)
    assert np.isnan(want[:, :, -5:]).all()
    assert (out[:, :, -5:] == 0).all() and np.isfinite(out).all()
    assert all(np.isfinite(g).all() for g in grads) and (grads[0][:, :, -5:] == 0).all()
    rng = np.random.default_rng(2)
    qkv = [rng.standard_normal((B, H, 77, 64)).astype(np.float32) for _ in range(3)]
    cot = rng.standard_normal((B, H, 77, 64)).astype(np.float32)
    qkv = [flame.tensor(a).to(dtype).float().numpy().astype(np.float64) for a in qkv]
    cot = flame.tensor(cot).to(dtype).float().numpy().astype(np.float64)
    extras = _segments(77, 77, 2, True)
    extras["seg_q"] = extras["seg_q"][:, :-5]
    want, want_grads = _torch(_document, [qkv[0][:, :, :-5], *qkv[1:]], extras, cot[:, :, :-5])
    _close(out[:, :, :-5], want, dtype, "out")
    _close(grads[0][:, :, :-5], want_grads[0], dtype, "dq")
    _close(grads[1], want_grads[1], dtype, "dk")
    _close(grads[2], want_grads[2], dtype, "dv")
