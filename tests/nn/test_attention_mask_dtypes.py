"""scaled_dot_product_attention's mask dtypes against torch's: an f32 additive mask is taken for a query
of any floating dtype (f16 and bf16: values and query/key/value gradients within their rounding, f64:
exact, the mask's own gradient included), eager and inside @flame.compile; a mask of another dtype than
bool, f32 or the query's is torch's RuntimeError, with its message."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import flame

R = np.random.default_rng(0)
Q, K, V = R.standard_normal((1, 2, 3, 4)), R.standard_normal((1, 2, 5, 4)), R.standard_normal((1, 2, 5, 4))
MASK = R.standard_normal((3, 5))
MASK[1, 2:] = -1e9  # a large finite "masked out", beyond f16's range
G = R.standard_normal((1, 2, 3, 4))
TOL = {"float16": 2e-3, "bfloat16": 2e-2, "float64": 1e-12}


def _run(lib, qdt: str, compiled: bool):
    q, k, v = (lib.tensor(a, dtype=getattr(lib, qdt), requires_grad=True) for a in (Q, K, V))
    m = lib.tensor(MASK, dtype=lib.float32, requires_grad=qdt == "float64")
    g = lib.tensor(G, dtype=getattr(lib, qdt))

    def step(q, k, v, m):
        out = lib.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=m)
        (out * g).sum().backward()
        return out.detach()

    out = (flame.compile(step) if compiled else step)(q, k, v, m)
    grads = [t.grad for t in (q, k, v, m) if t.grad is not None]
    return [t.float().numpy() if lib is flame else t.float().numpy() for t in (out, *grads)]


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("qdt", ["float16", "bfloat16", "float64"])
def test_f32_mask_for_any_floating_query(qdt, compiled):
    want, got = _run(torch, qdt, False), _run(flame, qdt, compiled)
    assert len(want) == len(got)
    for a, b in zip(want, got):
        np.testing.assert_allclose(b, a, rtol=TOL[qdt], atol=TOL[qdt])


@pytest.mark.parametrize("qdt, mdt", [("float32", "bfloat16"), ("float32", "float64"), ("bfloat16", "float16"),
                                      ("float16", "float64"), ("float32", "int64")])
def test_other_mask_dtypes_are_torchs_error(qdt, mdt):
    messages = []
    for lib in (torch, flame):
        q, k, v = (lib.tensor(a, dtype=getattr(lib, qdt)) for a in (Q, K, V))
        with pytest.raises(RuntimeError, match="Expected attn_mask dtype to be bool or float or to match query "
                                               "dtype") as e:
            lib.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=lib.tensor(MASK).to(getattr(lib, mdt)))
        messages.append(str(e.value).split(", but got")[0])
    assert messages[0] == messages[1]
