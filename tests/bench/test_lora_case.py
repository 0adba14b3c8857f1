"""gpt_lora_train: in f32 it agrees with the hand-written torch LoRA tightly and leaves the frozen base
untouched, and its compiled plan has no weight-gradient GEMM of the frozen base, where gpt_train's
plan at the same sizes has one per projection and one for the tied head."""

import dataclasses
import importlib.util

import numpy as np
import pytest

from flame import debug
from flame.bench.cases_gpt import GPT
from flame.bench.cases_lora import LORA
from flame.bench.spec import convert, generate
from flame.bench.suite import Context, run_case, wrapper
from flame.plan.steps import MatmulCall

HAVE_TORCH = importlib.util.find_spec("torch") is not None
# distinct sizes: no activation ([batch * T, ...]) has a weight's shape
SIZES = {"batch": 2, "T": 8, "d": 24, "heads": 4, "layers": 2, "vocab": 40, "rank": 4, "alpha": 8, "dtype": "f32"}


@pytest.mark.skipif(not HAVE_TORCH, reason="needs torch (the oracle)")
def test_lora_case_in_f32_matches_torch():
    case = LORA[0]
    quick = case.sizes(True)
    f32 = dataclasses.replace(case, sizes=lambda q: {**quick, "dtype": "f32"}, tol=1e-5, state_tol=1e-3)
    res = run_case(f32, Context("reference", True, 1, 0, ["torch"]))
    f = res["flame"]
    assert f["status"] == "ok", f
    assert f["rel_error"] < 1e-5 and f["rel_error_state"] < 1e-3
    assert res["oracle"] == "torch eager"


def _matmul_shapes(case, sizes) -> tuple[list[tuple[int, ...]], list]:
    """The result shapes of the cuBLASLt calls in the plan of one compiled step, and the Bound's state
    before and after that step (as NumPy arrays)."""
    spec = case.inputs(sizes)
    arrays = generate(spec, np, seed=0)
    flame_arrays = {n: convert("flame", arrays[n], i.dtype, i.state) for n, i in spec.items()}
    bound = case.flame(sizes, flame_arrays, wrapper("flame", "compiled"))
    before = [p.numpy().copy() for p in bound.state()]
    records = []
    with debug.observe(records.append):
        bound.call(*[flame_arrays[n] for n, i in spec.items() if not i.state])
    plan = records[-1].plan
    shapes = [plan.buffers[s.out].shape for s in plan.steps if isinstance(s, MatmulCall)]
    return shapes, list(zip(before, [p.numpy() for p in bound.state()]))


@pytest.mark.parametrize("device", ["reference", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_lora_step_computes_no_weight_gradient_of_the_frozen_base(device):
    d, v = SIZES["d"], SIZES["vocab"]
    frozen = {(3 * d, d), (d, d), (4 * d, d), (d, 4 * d), (v, d)}
    frozen |= {(b, a) for a, b in frozen}
    lora_shapes, states = _matmul_shapes(LORA[0], SIZES)
    gpt_train = next(c for c in GPT if c.name == "gpt_train")
    full_shapes, _ = _matmul_shapes(gpt_train, {k: SIZES[k] for k in ("batch", "T", "d", "heads", "layers", "vocab")})
    assert sum(s in frozen for s in full_shapes) == 4 * SIZES["layers"] + 1  # full fine-tuning: every dW
    assert not [s for s in lora_shapes if s in frozen]
    # per projection: base forward and input gradient, adapter forward (2) and backward (dA, dB, d(xA),
    # input gradient); block 0's qkv needs no input gradient; the head: forward and input gradient
    projections = 4 * SIZES["layers"]
    if device == "reference":  # (the GPU's plan runs f32 attention as batched GEMMs: more calls)
        assert len(lora_shapes) == 8 * projections - 2 + 2
    for (before, after), name in zip(states, ["adapter"] * 16 + ["wte", "h0.w_fc"]):
        assert np.array_equal(before, after) == (name != "adapter"), name


@pytest.mark.gpu
def test_lora_case_on_the_gpu_agrees_with_torch():
    """bf16 at --quick sizes on the GPU: flame's LoRA step (and gpt_train's, for comparison) agrees with
    torch and is timed."""
    from flame.bench.run import select

    ctx = Context("cuda", True, 3, 1, ["torch"])
    lora_res, full_res = (run_case(select(n)[0], ctx)["flame"] for n in ("gpt_lora_train", "gpt_train"))
    assert lora_res["status"] == "ok", lora_res
    assert full_res["status"] == "ok", full_res
    assert lora_res["library_calls"] > 0 and lora_res["median_ms"] > 0
