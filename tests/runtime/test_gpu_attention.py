"""cuDNN fused attention (runtime/cudnn_attention.py) on CuPy memory against the ops' NumPy references
(f32 compute on the same bf16 inputs) and, where a CUDA build of torch is installed, torch's SDPA:
forward with its softmax statistics (the log-sum-exp the backward reads) and packed backward, causal
and not, with an additive mask and grouped-query heads; a forward that keeps no statistics and the
statistics alone agree with it; replayed from a CuPy CUDA-graph capture. Device arrays hold bf16 bits
as uint16 (cuDNN takes pointers), so the test does not depend on CuPy's own bfloat16 support."""

from __future__ import annotations

import numpy as np
import pytest

from flame.ir import REGISTRY
from flame.ir.dtypes import bf16

B, H, T, D = 2, 4, 128, 64
TOL = 2e-2  # bf16 results: |got - want| <= TOL * max|want|


def _setup(causal, hkv=H, mask=False, seed=0):
    cupy = pytest.importorskip("cupy")
    pytest.importorskip("cudnn")
    from flame.runtime.cudnn_attention import AttentionSpec, cudnn_attention

    rng = np.random.default_rng(seed)
    host = {n: rng.standard_normal(s).astype(bf16.np_dtype) for n, s in
            (("q", (B, H, T, D)), ("k", (B, hkv, T, D)), ("v", (B, hkv, T, D)), ("do", (B, H, T, D)))}
    if mask:
        host["mask"] = rng.standard_normal((1, H, T, T)).astype(bf16.np_dtype)
    dev = {n: cupy.asarray(a.view(np.uint16)) for n, a in host.items()}
    spec = AttentionSpec.of((B, H, T, D), (B, hkv, T, D), (B, hkv, T, D), "bf16", D**-0.5, causal, hkv != H,
                            (1, H, T, T) if mask else None)
    return cupy, host, dev, cudnn_attention(spec)


def _reference(host, causal, gqa):
    attrs = {"scale": D**-0.5, "is_causal": causal, "enable_gqa": gqa}
    f32 = {n: a.astype(np.float32) for n, a in host.items()}
    mask = [f32["mask"]] if "mask" in f32 else []
    qkv = (f32["q"], f32["k"], f32["v"])
    out = REGISTRY["scaled_dot_product_attention"].ref(*qkv, *mask, **attrs)
    stats = REGISTRY["scaled_dot_product_attention_stats"].ref(*qkv, *mask, **attrs)
    grads = REGISTRY["scaled_dot_product_attention_backward"].ref(
        *qkv, out.astype(bf16.np_dtype).astype(np.float32), f32["do"], stats, *mask, **attrs)
    return out, stats, grads


def _host(cupy, a) -> np.ndarray:
    """bf16 bits on the device -> float32 on the host."""
    return cupy.asnumpy(a).view(bf16.np_dtype).astype(np.float32)


def _close(got, want, what):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    err = np.abs(got - want).max() / max(np.abs(want).max(), 1e-30)
    assert err <= TOL, f"{what}: max error {err:.3g} of max |want|"


def _run(cupy, dev, att):
    out = cupy.empty(dev["q"].shape[:-1] + (D,), dtype=np.uint16)
    stats = cupy.empty(dev["q"].shape[:-1], dtype=np.float32)
    grads = cupy.empty(dev["q"].size + dev["k"].size + dev["v"].size, dtype=np.uint16)
    ws = cupy.empty(max(att.forward_workspace, att.backward_workspace, 1), dtype=np.uint8)
    mask = dev.get("mask")
    att.forward(dev["q"], dev["k"], dev["v"], out, stats, mask, ws)
    att.backward(dev["q"], dev["k"], dev["v"], out, dev["do"], stats, grads, mask, ws)
    return out, stats, grads, ws


@pytest.mark.gpu
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("variant", ["mha", "gqa", "mask"])
def test_cudnn_attention_matches_reference(causal, variant):
    if variant == "mask" and causal:
        pytest.skip("a mask and is_causal are exclusive (as in PyTorch)")
    hkv = 2 if variant == "gqa" else H
    cupy, host, dev, att = _setup(causal, hkv, mask=variant == "mask")
    out, stats, grads, _ = _run(cupy, dev, att)
    want_out, want_stats, want_grads = _reference(host, causal, hkv != H)
    _close(_host(cupy, out), want_out, "out")
    # cuDNN's Stats: the natural-log log-sum-exp of the scaled, masked scores, as the stats op's reference
    np.testing.assert_allclose(cupy.asnumpy(stats), want_stats, rtol=1e-3, atol=1e-3, err_msg="stats")
    got = _host(cupy, grads)
    n = [host["q"].size, host["k"].size, host["v"].size]
    for name, lo, hi in (("dq", 0, n[0]), ("dk", n[0], n[0] + n[1]), ("dv", n[0] + n[1], sum(n))):
        _close(got[lo:hi], want_grads[lo:hi], name)


@pytest.mark.gpu
@pytest.mark.parametrize("causal", [False, True])
def test_cudnn_attention_matches_torch_sdpa(causal):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA here")
    cupy, host, dev, att = _setup(causal)
    out, _, grads, _ = _run(cupy, dev, att)
    ts = [torch.tensor(host[n].astype(np.float32), device="cuda", dtype=torch.bfloat16).requires_grad_()
          for n in ("q", "k", "v")]
    y = torch.nn.functional.scaled_dot_product_attention(*ts, is_causal=causal)
    y.backward(torch.tensor(host["do"].astype(np.float32), device="cuda", dtype=torch.bfloat16))
    _close(_host(cupy, out), y.detach().float().cpu().numpy(), "out vs torch")
    want = np.concatenate([t.grad.float().cpu().numpy().ravel() for t in ts])
    _close(_host(cupy, grads), want, "grads vs torch")


@pytest.mark.gpu
@pytest.mark.parametrize("causal", [False, True])
def test_forward_without_stats_and_stats_alone_agree(causal):
    """stats=None (inference: written to the workspace and dropped) and out=None (the statistics
    alone: the output goes to the workspace) give the same bits as the forward that keeps both."""
    cupy, host, dev, att = _setup(causal, seed=2)
    want_out, want_stats, _, _ = _run(cupy, dev, att)
    kept = 4 * want_stats.size + 2 * want_out.size + 2 * 256  # both, each aligned to 256 bytes
    ws = cupy.empty(att.forward_workspace + kept, dtype=np.uint8)
    out, stats = cupy.zeros_like(want_out), cupy.zeros_like(want_stats)
    att.forward(dev["q"], dev["k"], dev["v"], out, None, None, ws)
    att.forward(dev["q"], dev["k"], dev["v"], None, stats, None, ws)
    np.testing.assert_array_equal(cupy.asnumpy(out), cupy.asnumpy(want_out))
    np.testing.assert_array_equal(cupy.asnumpy(stats), cupy.asnumpy(want_stats))


@pytest.mark.gpu
def test_cudnn_attention_replays_inside_a_cuda_graph():
    cupy, host, dev, att = _setup(True, seed=1)
    want_out, want_stats, want_grads, ws = _run(cupy, dev, att)  # the first (eager) call builds and warms up
    want_out, want_grads = cupy.asnumpy(want_out), cupy.asnumpy(want_grads)
    out = cupy.zeros_like(dev["q"])
    stats = cupy.zeros_like(want_stats)
    grads = cupy.zeros(want_grads.size, dtype=np.uint16)
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        stream.begin_capture()
        att.forward(dev["q"], dev["k"], dev["v"], out, stats, None, ws)
        att.backward(dev["q"], dev["k"], dev["v"], out, dev["do"], stats, grads, None, ws)
        graph = stream.end_capture()
    assert not out.any()  # captured, not run
    graph.launch(stream)
    stream.synchronize()
    np.testing.assert_array_equal(cupy.asnumpy(out), want_out)
    np.testing.assert_array_equal(cupy.asnumpy(stats), cupy.asnumpy(want_stats))
    np.testing.assert_array_equal(cupy.asnumpy(grads), want_grads)


def test_unsupported_specs_say_why():
    from flame.runtime.cudnn_attention import AttentionSpec, unsupported_reason

    def spec(dtype="bf16", d=64, hkv=4, mask=None):
        return AttentionSpec.of((2, 4, 8, d), (2, hkv, 8, d), (2, hkv, 8, d), dtype, 0.1, False, hkv != 4, mask)

    assert unsupported_reason(spec()) == ""
    assert "f16/bf16" in unsupported_reason(spec("f32"))
    assert "multiples of 8" in unsupported_reason(spec(d=12))
    assert "do not divide" in unsupported_reason(spec(hkv=3))
    assert "broadcast over query" in unsupported_reason(spec(mask=(2, 1, 1, 8)))
    assert spec(mask=(8, 8)).mask_dims == (1, 1, 8, 8) and spec(mask=(2, 4, 8, 8)).mask_dims == (2, 4, 8, 8)


@pytest.mark.gpu
def test_strided_operands_of_a_gpt_block_match_the_reference_executor():
    """The GPT block's attention with no copy around it (q, k, v, grad_out read and the output written
    through strides, tests/plan/test_attention_views.py): the CUDA executor, first call and CUDA-graph
    replays, against the reference executor running the same plan."""
    pytest.importorskip("cupy")
    pytest.importorskip("cudnn")
    from flame.runtime.cuda import CudaExecutor
    from flame.runtime.reference import ReferenceExecutor
    from tests.plan.test_attention_views import _arrays, _block, _compiled, _copies, _packed_grads_graph

    for g in (_block(bf16, 2, 128, 4, 64), _packed_grads_graph(bf16)):
        _, plan = _compiled(g, "cuda")
        assert not _copies(plan)
        arrays = _arrays(g, 4)
        want = ReferenceExecutor().compile(plan)(arrays)
        ex = CudaExecutor()
        run = ex.compile(plan)
        for _ in range(3):  # plain launches, capture, replay
            got = run([ex.asarray(a) for a in arrays])
            for a, w in zip(got, want):
                _close(ex.to_numpy(a).astype(np.float32), np.asarray(w, np.float32), g.name)
