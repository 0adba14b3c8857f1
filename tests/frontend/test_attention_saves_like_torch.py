"""What scaled_dot_product_attention's node saves is torch's, by the kernel torch's CPU dispatch picks for
the shapes: its fused kernel saves query, key, value, a float mask and the result, so a counted write
into any of them raises torch's error at backward; the math path (another head size for value, 2-d, 3-d
or 5-d operands, batch or heads that broadcast, a mask that requires grad) saves only value (where
expanding it to the batch is a view of it), and no keys or an empty result nothing. Eager and inside
@flame.compile (backward inside), against torch in float64, for a write into each operand and the result."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import flame
from tests.frontend.test_saved_like_torch import _check

CONFIGS = {  # shapes of query, key, value; the mask: None, "bool", "float" (a constant) or "learned", or
    # instead is_causal ("causal") or enable_gqa ("gqa")
    "fused": ([(1, 1, 3, 2)] * 3, None),
    "value head size": ([(1, 1, 3, 2), (1, 1, 3, 2), (1, 1, 3, 4)], None),
    "value head size, causal, one key": ([(2, 1, 2, 1), (2, 1, 1, 1), (2, 1, 1, 4)], "causal"),
    "causal": ([(1, 1, 2, 2), (1, 1, 3, 2), (1, 1, 3, 2)], "causal"),
    "3-d": ([(1, 3, 2)] * 3, None),
    "2-d": ([(3, 2)] * 3, None),
    "5-d": ([(1, 1, 1, 3, 2)] * 3, None),
    "query's batch broadcasts": ([(2, 1, 3, 2), (1, 1, 3, 2), (1, 1, 3, 2)], None),
    "value's heads broadcast within the batch": ([(2, 2, 3, 2), (2, 2, 3, 2), (2, 1, 3, 2)], None),
    "key's heads broadcast": ([(2, 2, 3, 2), (2, 1, 3, 2), (2, 2, 3, 2)], None),
    "grouped query": ([(1, 2, 3, 2), (1, 1, 3, 2), (1, 1, 3, 2)], "gqa"),
    "grouped query, value head size": ([(1, 4, 3, 2), (1, 2, 3, 2), (1, 2, 3, 4)], "gqa"),
    "more keys": ([(1, 1, 3, 2), (1, 1, 5, 2), (1, 1, 5, 2)], None),
    "bool mask": ([(1, 1, 3, 2)] * 3, "bool"),
    "float mask": ([(1, 1, 3, 2)] * 3, "float"),
    "learned mask": ([(1, 1, 3, 2)] * 3, "learned"),
    "no queries": ([(1, 1, 0, 2), (1, 1, 3, 2), (1, 1, 3, 2)], None),
    "no keys": ([(1, 1, 3, 2), (1, 1, 0, 2), (1, 1, 0, 2)], None),
    "no head size": ([(1, 1, 3, 0), (1, 1, 2, 0), (1, 1, 2, 2)], None),
}
TARGETS = ["query", "key", "value", "mask", "result"]
CASES = [(c, t) for c, (_, mask) in CONFIGS.items() for t in TARGETS if t != "mask" or mask in ("bool", "float")]


def _body(lib, shapes, mask, target, leaves):
    q, k, v = (t * 1 for t in leaves)
    length, keys = shapes[0][-2], shapes[1][-2]
    m = None
    if mask == "bool":
        m = lib.ones(length, keys, dtype=lib.bool)
    elif mask in ("float", "learned"):
        m = lib.zeros(length, keys, dtype=lib.float64)
    if mask == "learned":
        m = m.requires_grad_() * 1
    attention = lib.nn.functional.scaled_dot_product_attention
    out = attention(q, k, v, attn_mask=m, is_causal=mask == "causal", enable_gqa=mask == "gqa")
    written = {"query": q, "key": k, "value": v, "mask": m, "result": out}[target]
    with lib.no_grad():
        written.logical_not_() if written.dtype == lib.bool else written.add_(1)
    (out * out).sum().backward()


def _run(lib, config, target, compiled=False):
    shapes, mask = CONFIGS[config]
    rng = np.random.default_rng(0)
    leaves = [lib.tensor(rng.standard_normal(s), dtype=lib.float64, requires_grad=True) for s in shapes]
    try:
        if compiled:
            flame.compile(lambda *xs: _body(lib, shapes, mask, target, xs))(*leaves)
        else:
            _body(lib, shapes, mask, target, leaves)
    except RuntimeError as e:
        assert "modified by an inplace operation" in str(e)
        return None
    return [np.asarray(t.grad.tolist()) for t in leaves]


@pytest.mark.parametrize("config,target", CASES, ids=[f"{c}-{t}" for c, t in CASES])
def test_eager(config, target):
    _check(_run(torch, config, target), _run(flame, config, target), rtol=1e-10)


COMPILED = [(c, t) for c, t in CASES
            if c in ("fused", "value head size, causal, one key", "3-d", "float mask", "bool mask")]


@pytest.mark.parametrize("config,target", COMPILED, ids=[f"{c}-{t}" for c, t in COMPILED])
def test_compiled(config, target):
    want, got = _run(torch, config, target), _run(flame, config, target, compiled=True)
    assert (want is None) == (got is None), f"torch {'raises' if want is None else 'runs'}, flame does not"
