"""The transformer training cases agree with PyTorch tightly when run in f32 (bf16 only shows rounding),
and every framework's peak-memory figure is recorded (n/a with a reason off the GPU)."""

import dataclasses
import importlib.util

import pytest

from flame.bench.cases_gpt import GPT
from flame.bench.run import select
from flame.bench.suite import Context, run_case

pytestmark = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch (the oracle)")


@pytest.mark.parametrize("case", GPT, ids=lambda c: c.name)
def test_gpt_case_in_f32_matches_torch(case):
    quick = case.sizes(True)
    f32 = dataclasses.replace(case, sizes=lambda q: {**quick, "dtype": "f32"}, tol=1e-5, state_tol=1e-3)
    res = run_case(f32, Context("reference", True, 1, 0, ["torch"]))
    f = res["flame"]
    assert f["status"] == "ok", f
    assert (f["rel_error"] is None or f["rel_error"] < 1e-5) and f["rel_error_state"] < 1e-3  # None: no outputs
    assert res["oracle"] == "torch eager"


def test_new_cases_record_memory_for_every_framework():
    for case in select("reduce_all,reduce_columns,sdpa_fwd_bwd,gpt_block_train"):
        res = run_case(case, Context("reference", True, 1, 0, ["torch"]))
        assert res["flame"]["status"] == "ok", res["flame"]
        assert res["flame"]["planned_bytes"] > 0
        assert res["flame"]["peak_memory"] == "n/a: flame is not on a GPU"
        assert res["peers"]["torch"]["peak_memory"] == "n/a: torch is not on a GPU"


@pytest.mark.gpu
def test_peak_memory_is_measured_on_the_gpu():
    res = run_case(select("gpt_block_train")[0], Context("cuda", True, 2, 1, ["torch"]))
    f, t = res["flame"], res["peers"]["torch"]
    assert f["status"] == "ok", f
    # the pool's growth can be below the peak in use: blocks freed by earlier work in this process are reused
    assert 0 < f["peak_memory_bytes"] and f["pool_total_peak_bytes"] >= 0 and "CuPy" in f["peak_memory_how"]
    if t.get("device") == "cuda":
        # both are growths over what the process held before: torch's reserve may already hold free blocks
        assert t["peak_memory_bytes"] > 0 and t["reserved_peak_bytes"] >= 0
