"""flame.nn.attention.sdpa_kernel, torch's backend choice for scaled_dot_product_attention: each set of
SDPBackends selects flame's nearest attention lowering inside the block (and only there); a compiled
step calling scaled_dot_product_attention is traced again under another choice (the choice is a guard),
and its plan for the CUDA target follows the choice (MATH: no attention call, the unfused graph)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import flame
import flame.nn.functional as F
from flame import compiler
from flame.nn.attention import SDPBackend, sdpa_kernel
from flame.plan.steps import AttentionCall
from flame.runtime.backend import attention_lowering


@pytest.mark.parametrize("backends,lowering", [
    (SDPBackend.MATH, "decomposed"),
    (SDPBackend.FLASH_ATTENTION, "flash"),
    (SDPBackend.EFFICIENT_ATTENTION, "flash"),
    ([SDPBackend.MATH, SDPBackend.EFFICIENT_ATTENTION], "flash"),
    (SDPBackend.CUDNN_ATTENTION, "cudnn"),
    ([SDPBackend.CUDNN_ATTENTION, SDPBackend.MATH], "cudnn"),
    ([SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION], "auto"),
])
def test_backends_choose_flames_lowering_inside_the_block(backends, lowering, monkeypatch):
    monkeypatch.delenv("FLAME_ATTENTION", raising=False)
    with sdpa_kernel(backends, set_priority=True):
        assert attention_lowering() == lowering
        with sdpa_kernel(SDPBackend.MATH):
            assert attention_lowering() == "decomposed"
        assert attention_lowering() == lowering
    assert attention_lowering() == "auto"


def test_bad_backends_are_refused():
    with pytest.raises(ValueError, match="is a backend flame has"):
        with sdpa_kernel([SDPBackend.ERROR]):
            pass
    with pytest.raises(TypeError, match="SDPBackend"):
        with sdpa_kernel("math"):
            pass


def test_a_compiled_step_is_traced_again_under_another_choice_and_planned_with_it(monkeypatch):
    cuda = compiler.capabilities
    monkeypatch.setattr(compiler, "_target", lambda *settings: cuda("cuda"))  # the CUDA target, read per compile
    monkeypatch.setattr(compiler, "_CACHE", type(compiler._CACHE)())
    rng = np.random.default_rng(0)
    q, k, v = (flame.tensor(rng.standard_normal((2, 3, 8, 64)).astype(np.float32)).bfloat16() for _ in range(3))

    @flame.compile
    def attend(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    fused = attend(q, k, v).float().numpy()
    assert any(isinstance(s, AttentionCall) for s in attend._last.plan.steps)
    compiler._CACHE.clear()  # (the two traces print alike: the reference executor's key has no lowering)
    with sdpa_kernel(SDPBackend.MATH), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        unfused = attend(q, k, v).float().numpy()
    assert len(attend.variants()) == 2
    assert any("attention backend" in str(w.message) for w in caught)
    assert not any(isinstance(s, AttentionCall) for s in attend._last.plan.steps)
    np.testing.assert_allclose(unfused, fused, rtol=2e-2, atol=2e-2)
    attend(q, k, v)  # outside the block again: the first trace
    assert len(attend.variants()) == 2
