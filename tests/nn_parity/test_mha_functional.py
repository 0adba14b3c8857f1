"""F.multi_head_attention_forward against torch's from the same f64 weights (packed and separate
projections, bias_kv, zero_attn, static keys and values, masks, unbatched inputs; outputs and gradients,
eager and compiled), and nn.MultiheadAttention's use of out_proj's parameters rather than its forward."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import flame
from tests.nn_parity.common import check, rng

E, H, L, S, N = 6, 2, 3, 5, 2


def _arrays(separate: bool, bias_kv: bool, static: bool, seed: int = 0) -> dict:
    r = rng(seed)
    a = dict(q=r.standard_normal((L, N, E)), k=r.standard_normal((S, N, 4 if separate else E)),
             v=r.standard_normal((S, N, 3 if separate else E)), in_b=r.standard_normal(3 * E),
             out_w=r.standard_normal((E, E)), out_b=r.standard_normal(E))
    if separate:
        a.update(qw=r.standard_normal((E, E)), kw=r.standard_normal((E, 4)), vw=r.standard_normal((E, 3)))
    else:
        a.update(in_w=r.standard_normal((3 * E, E)))
    if bias_kv:
        a.update(bk=r.standard_normal((1, 1, E)), bv=r.standard_normal((1, 1, E)))
    if static:
        a.update(sk=r.standard_normal((N * H, S, E // H)), sv=r.standard_normal((N * H, S, E // H)))
    a["kpm"] = np.zeros((N, S), bool)
    a["kpm"][0, -2:] = True
    return a


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("need_weights,average", [(True, True), (True, False), (False, True)])
@pytest.mark.parametrize(
    "separate,bias_kv,zero_attn,static",
    [(False, False, False, False), (True, True, True, False), (False, True, False, False),
     (False, False, True, True), (True, False, False, True)],
)
def test_functional_mha(separate, bias_kv, zero_attn, static, need_weights, average, compiled):
    a = _arrays(separate, bias_kv, static)
    names = list(a)

    def call(m, *ts):
        t = dict(zip(names, ts))
        lib = flame if isinstance(ts[0], flame.Tensor) else torch
        return lib.nn.functional.multi_head_attention_forward(
            t["q"], t["k"], t["v"], E, H, t.get("in_w"), t["in_b"], t.get("bk"), t.get("bv"), zero_attn, 0.0,
            t["out_w"], t["out_b"], key_padding_mask=t["kpm"], need_weights=need_weights,
            use_separate_proj_weight=separate, q_proj_weight=t.get("qw"), k_proj_weight=t.get("kw"),
            v_proj_weight=t.get("vw"), static_k=t.get("sk"), static_v=t.get("sv"),
            average_attn_weights=average)

    check(lambda lib: lib.nn.Identity(), call, list(a.values()), compiled)


def test_functional_mha_unbatched_with_mask():
    a = _arrays(False, False, False, seed=1)
    am = rng(2).standard_normal((H, L, S))

    def call(m, q, k, v, w, b, ow, ob, am):
        lib = flame if isinstance(q, flame.Tensor) else torch
        return lib.nn.functional.multi_head_attention_forward(q, k, v, E, H, w, b, None, None, False, 0.0, ow, ob,
                                                              attn_mask=am)

    check(lambda lib: lib.nn.Identity(), call,
          [a["q"][:, 0], a["k"][:, 0], a["v"][:, 0], a["in_w"], a["in_b"], a["out_w"], a["out_b"], am], False)


def test_out_proj_forward_is_not_called():
    """torch's MultiheadAttention reads out_proj's weight and bias: a forward hook on out_proj never runs."""
    x = np.ones((L, N, E))
    for lib in (torch, flame):
        m = lib.nn.MultiheadAttention(E, H).double()
        seen = []
        m.out_proj.register_forward_hook(lambda *args, seen=seen: seen.append(1))
        m(lib.tensor(x), lib.tensor(x), lib.tensor(x))
        assert seen == [], lib.__name__


def test_mismatched_mask_dtypes_warn():
    """A bool key_padding_mask with a float attn_mask (any two dtypes): torch's deprecation warning."""
    x = np.zeros((L, N, E))
    for lib in (torch, flame):
        m = lib.nn.MultiheadAttention(E, H).double()
        kpm, am = lib.tensor(np.zeros((N, L), bool)), lib.tensor(np.zeros((L, L)))
        with pytest.warns(UserWarning, match="mismatched key_padding_mask and attn_mask is deprecated"):
            m(lib.tensor(x), lib.tensor(x), lib.tensor(x), key_padding_mask=kpm, attn_mask=am)


@pytest.mark.parametrize("kpm,am", [(None, None), ("bool", None), ("bool", 2), ("float", 3), (None, 2)])
def test_merge_masks(kpm, am):
    r = rng(3)
    q = r.standard_normal((N, L, E))
    kp = None if kpm is None else (r.random((N, L)) < 0.5 if kpm == "bool" else r.standard_normal((N, L)))
    a = None if am is None else (r.random((L, L)) < 0.5 if am == 2 else r.standard_normal((N * H, L, L)))
    got = []
    for lib in (torch, flame):
        m = lib.nn.MultiheadAttention(E, H).double()
        merged, kind = m.merge_masks(*(None if x is None else lib.tensor(x) for x in (a, kp, q)))
        got.append((None if merged is None else merged.detach().numpy() if lib is torch else merged.numpy(), kind))
    (want, want_kind), (mine, my_kind) = got
    assert my_kind == want_kind
    assert (mine is None) == (want is None)
    if want is not None:
        assert mine.dtype == want.dtype
        np.testing.assert_array_equal(mine, want)
