"""The Llama-style block case builds and agrees with PyTorch on the reference executor (f32: tightly;
bf16: within the case's tolerance), torch.compile's max-autotune mode is a peer of every torch case with
its compile time recorded, and the report gives each case's fraction of the matmul ceiling."""

import dataclasses
import importlib.util

import pytest

from flame.bench import report, suite
from flame.bench.cases_llama import LLAMA
from flame.bench.run import select
from flame.bench.spec import MAX_AUTOTUNE
from flame.bench.suite import Context, run_case

HAVE_TORCH = importlib.util.find_spec("torch") is not None
needs_torch = pytest.mark.skipif(not HAVE_TORCH, reason="needs torch (the oracle)")
CASE = LLAMA[0]


@needs_torch
def test_llama_block_in_f32_matches_torch():
    quick = CASE.sizes(True)
    f32 = dataclasses.replace(CASE, sizes=lambda q: {**quick, "dtype": "f32"}, tol=1e-5, state_tol=1e-3)
    res = run_case(f32, Context("reference", True, 1, 0, ["torch"]))
    f = res["flame"]
    assert f["status"] == "ok", f
    assert f["rel_error"] < 1e-5 and f["rel_error_state"] < 1e-3
    assert res["oracle"] == "torch eager" and f["library_calls"] >= 7  # the seven projections at least


@needs_torch
def test_llama_block_in_bf16_runs_and_is_in_the_table():
    assert select("llama_block_train") == [CASE]
    res = run_case(CASE, Context("reference", True, 1, 0, ["torch"]))
    assert res["flame"]["status"] == "ok", res["flame"]


def test_llama_block_shape_is_the_documented_one():
    s = CASE.sizes(False)
    assert s["T"] >= 2048 and s["d"] // s["heads"] == 128 and (s["heads"], s["kv_heads"]) == (16, 4)
    ins = CASE.inputs(s)
    assert all(i.dtype == "bf16" for i in ins.values()) and not any("b" == n[0] for n in ins)  # no biases


def test_llama_block_flops_count_every_matmul():
    s = {"batch": 3, "T": 8, "d": 32, "heads": 4, "kv_heads": 2, "hidden": 48}
    tokens, d, kv = 24, 32, 2 * 8
    proj = d * d + 2 * d * kv + d * d + 3 * d * 48  # q, k, v, o, gate, up, down
    attention = 2 * (8 / 2) * d * 2  # per token: q k^T and att v over T/2 keys on average, 2 flops each
    assert CASE.min_flops(s) == 3 * tokens * (2 * proj + attention)


def test_max_autotune_is_a_peer_of_every_torch_case():
    for case in select(None):
        peers = case.peers()
        if case.torch is not None:
            assert peers[MAX_AUTOTUNE] == ("torch", case.torch, "max-autotune")


@needs_torch
def test_max_autotune_peer_compiles_with_that_mode(monkeypatch):
    import torch

    seen = []
    monkeypatch.setattr(torch, "compile", lambda f, **kw: seen.append(kw) or f)
    wrapped = suite.wrapper("torch", "max-autotune")(lambda x: x + 1)
    suite.wrapper("torch", "compiled")(lambda x: x)
    assert wrapped(1) == 2 and seen == [{"mode": "max-autotune"}, {}]


def _run(mode: str, flame_ms: float, peer: dict) -> dict:
    case = {
        "name": "c",
        "min_bytes": 10**9,
        "min_flops": 4 * 10**12,
        "flame": {"status": "ok", "median_ms": flame_ms, "b2b_ms": flame_ms / 2},
        "peers": {MAX_AUTOTUNE: peer},
        "input_sets": 1,
    }
    ceilings = {"copy": {"gbs": 4000.0, "how": "x"}, "matmul": {"tflops": 800.0, "how": "y"}}
    report.derive(case, ceilings)
    env = {"gpu": "G", "date": "d", "flame": "v", "flame_device": "cuda"}
    return {
        "env": env,
        "ceilings": ceilings,
        "cases": [case],
        "mode": mode,
        "settings": {"repeat": 1, "warmup": 0},
        "timers": {},
    }


def test_report_gives_the_fraction_of_the_matmul_ceiling_and_peer_compile_time():
    run = _run("measurement", 10.0, {"status": "ok", "median_ms": 8.0, "compile_s": 170.0})
    case = run["cases"][0]
    # 4 TFLOP in 10 ms = 400 TFLOP/s = 50 % of 800; back to back 5 ms = 100 %; the peer 8 ms = 62.5 %
    assert case["flame"]["pct_matmul"] == pytest.approx(50.0) and case["flame"]["pct_matmul_b2b"] == pytest.approx(100)
    md = report.markdown(run)
    assert "Fraction of the matmul ceiling" in md
    row = next(line for line in md.splitlines() if line.startswith("| c | 4000 |"))
    assert row.rstrip(" |").split(" | ")[2:5] == ["50%", "100%", "62%"]  # 62.5 rounds to even
    assert "8 (compile 170 s)" in md


@needs_torch
def test_llama_fp8_case_runs_against_the_bf16_step_with_torchao_as_a_peer():
    fp8 = LLAMA[1]
    assert select("llama_block_train_fp8") == [fp8] and fp8.name == "llama_block_train_fp8"
    assert fp8.sizes(False) == CASE.sizes(False) and fp8.torch is CASE.torch  # the two compare
    assert fp8.peers()["torchao float8"][0] == "torch"
    res = run_case(fp8, Context("reference", True, 1, 0, ["torch", "torchao float8"]))
    f = res["flame"]
    assert f["status"] == "ok", f
    assert f["rel_error"] < fp8.tol and f["rel_error_state"] < fp8.state_tol
    ao = res["peers"]["torchao float8"]["status"]
    if importlib.util.find_spec("torchao") is None:  # skipped with a note saying why
        assert ao.startswith("n/a") and "torchao is not installed" in ao, ao
