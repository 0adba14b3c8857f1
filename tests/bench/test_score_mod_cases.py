"""The benchmark cases of hand-written attention with score modifications (flame/bench/cases_score_mod.py):
at --quick sizes on the reference executor flame runs each as one attention op (the modification recorded)
and agrees with PyTorch eager and torch.compile of the same code; FlexAttention's score_mod / mask_mod are
equivalent to it (forward: FlexAttention has no CPU backward); the full sizes and flop counts."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import flame
from flame.bench.cases_score_mod import MODS, SCORE_MOD, WINDOW, flex_mods, hand_written
from flame.bench.run import select
from flame.bench.spec import flame_inputs
from flame.bench.suite import Context, run_case
from flame.ir.ops.attention import FORWARD


@pytest.mark.parametrize("case", SCORE_MOD[:3], ids=lambda c: c.name)
def test_case_runs_on_the_reference_as_one_attention_op_and_matches_torch(case):
    res = run_case(case, Context("reference", True, 1, 0, ["torch", "torch.compile"]))
    f = res["flame"]
    assert f["status"] == "ok" and f["rel_error"] < case.tol and res["oracle"] == "torch eager", f
    assert res["peers"]["torch.compile"]["status"] == "ok"
    assert res["peers"]["torch.compile"]["rel_error_vs_torch"] < case.tol
    sizes = case.sizes(True)
    args = list(flame_inputs(case, sizes).values())
    fn = flame.compile(case.flame(sizes, {}, lambda f: f).call)
    g = fn.optimized(*args)
    (op,) = [o for o in g.ops if o.name == FORWARD]
    assert op.attrs["is_causal"]
    assert (op.attrs["score_mod"] is None) == (case.name == "attn_causal")


@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")  # the CPU forward, as a check
@pytest.mark.parametrize("name", sorted(MODS))
def test_flex_attention_mods_equal_the_hand_written_code(name):
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    rng = np.random.default_rng(0)
    b, h, t, d = 2, 4, 300, 16
    q, k, v = (torch.tensor(rng.standard_normal((b, h, t, d)), dtype=torch.float32) for _ in range(3))
    doc = torch.tensor(rng.integers(0, 64, (b, t)))
    seg = (doc == 0).cumsum(-1)
    score_mod, mask_mod = flex_mods(name, seg, h)
    mask = create_block_mask(mask_mod, b, None, t, t, device="cpu")
    got = flex_attention(q, k, v, score_mod=score_mod, block_mask=mask)
    want = hand_written(torch, torch.softmax, MODS[name])(q, k, v, doc)
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=2e-4, atol=2e-5)


def test_sizes_peers_and_flops():
    cases = select(",".join(c.name for c in SCORE_MOD))
    assert [c.name for c in cases] == [
        "attn_causal",
        "attn_softcap_alibi",
        "attn_window_doc",
        "attn_causal_4k",
        "attn_softcap_alibi_4k",
        "attn_window_doc_4k",
    ]
    s = cases[0].sizes(False)
    assert s == {"batch": 8, "heads": 16, "T": 1024, "D": 64} and cases[3].sizes(False)["T"] == 4096
    causal = 4 * 8 * 16 * (1024 * 1025 // 2) * 64
    assert cases[0].min_flops(s) == causal + causal * 5 // 2 == cases[1].min_flops(s)
    window = 4 * 8 * 16 * sum(min(i + 1, WINDOW) for i in range(1024)) * 64
    assert cases[2].min_flops(s) == window + window * 5 // 2
    assert set(cases[0].peers()) == {"torch", "torch.compile", "torch.compile max-autotune", "flex_attention"}


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(MODS))
def test_case_runs_on_the_gpu_with_every_peer(name):
    res = run_case(select(name)[0], Context("cuda", True, 2, 1, ["torch", "torch.compile", "flex_attention"]))
    assert res["flame"]["status"] == "ok", (res["flame"].get("error"), res["flame"].get("where"))
    assert res["peers"]["flex_attention"]["status"] == "ok", res["peers"]["flex_attention"].get("error")
    assert res["peers"]["flex_attention"]["rel_error_vs_torch"] < 3e-2
