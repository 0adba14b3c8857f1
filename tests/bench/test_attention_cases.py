"""The fused-attention cases: in f32 flame agrees with PyTorch tightly (bf16 only shows rounding), the
forward and backward are two attention calls in the plan (the forward shared by the output and the
gradient), and the flop count is the causal attention's."""

import dataclasses
import importlib.util

import pytest

from flame.bench.cases_attention import ATTENTION
from flame.bench.run import select
from flame.bench.suite import Context, run_case

needs_torch = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch (the oracle)")


@needs_torch
@pytest.mark.parametrize("case", ATTENTION, ids=lambda c: c.name)
def test_sdpa_case_in_f32_matches_torch(case):
    quick = case.sizes(True)
    f32 = dataclasses.replace(case, sizes=lambda q: {**quick, "dtype": "f32"}, tol=1e-5)
    res = run_case(f32, Context("reference", True, 1, 0, ["torch"]))
    f = res["flame"]
    assert f["status"] == "ok", f
    assert f["rel_error"] < 1e-5 and res["oracle"] == "torch eager"
    assert f["library_calls"] == 2  # forward and backward, the forward not traced twice


def test_sdpa_flops_and_sizes():
    small, large = select("sdpa_fwd_bwd,sdpa_fwd_bwd_4k")
    s = small.sizes(False)
    assert s == {"batch": 8, "heads": 16, "T": 1024, "D": 64} and large.sizes(False)["T"] == 4096
    forward = 4 * 8 * 16 * 1024 * 1024 * 64 // 2  # causal: half the scores
    assert small.min_flops(s) == forward + forward * 5 // 2
    assert small.min_bytes(s) == 8 * 2 * 8 * 16 * 1024 * 64  # q, k, v, dout in; out, dq, dk, dv out; bf16
    peers = {"torch", "torch.compile", "torch.compile max-autotune", "jax", "jax.cudnn", "torch.cudnn"}
    assert set(small.peers()) == peers


@pytest.mark.gpu
def test_sdpa_case_runs_fused_on_the_gpu():
    res = run_case(select("sdpa_fwd_bwd")[0], Context("cuda", True, 2, 1, ["torch"]))
    f = res["flame"]
    assert f["status"] == "ok", f
    assert f["library_calls"] == 2 and f["rel_error"] < 2e-2
