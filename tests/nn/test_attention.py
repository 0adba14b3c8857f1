"""flame.nn.functional.scaled_dot_product_attention against torch's (values and the gradients of
query, key and value; float32 tolerance 1e-5), eager and inside @flame.compile, for every mask kind,
causal with equal and different query and key lengths, grouped-query attention, half types, and
attention with no keys or no queries (torch's zeros, eager, compiled and on the CUDA target; its NaN where an
input or the result's gradient is not finite)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import flame
import flame.nn.functional as F
from flame.errors import FlameError

TOL = {"f32": 1e-5, "f16": 2e-3, "bf16": 1.6e-2}
TORCH = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}


def _inputs(rng, b=2, h=4, hkv=4, length=5, keys=7, e=8, ev=6):
    q = rng.standard_normal((b, h, length, e)).astype(np.float32)
    k = rng.standard_normal((b, hkv, keys, e)).astype(np.float32)
    v = rng.standard_normal((b, hkv, keys, ev)).astype(np.float32)
    return q, k, v


def _mask(rng, kind, shape):
    if kind == "bool":
        m = rng.random(shape) < 0.7
        m[..., 0] = True  # every row keeps a key (a fully masked row is checked on its own)
        return m
    if kind == "additive":
        return rng.standard_normal(shape).astype(np.float32)
    return None


def _torch_ref(q, k, v, mask, cot, dt, **kw):
    ts = [torch.tensor(x, dtype=TORCH[dt], requires_grad=True) for x in (q, k, v)]
    m = None if mask is None else torch.tensor(mask if mask.dtype == bool else mask, dtype=None if mask.dtype == bool
                                               else TORCH[dt])
    y = torch.nn.functional.scaled_dot_product_attention(*ts, attn_mask=m, **kw)
    (y.float() * torch.tensor(cot)).sum().backward()
    return [y.detach().float().numpy()] + [t.grad.float().numpy() for t in ts]


def _loss(cot, mask, kw):
    def f(q, k, v):
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, **kw)
        return (y.float() * cot).sum()
    return f


def _flame(q, k, v, mask, cot, dt, compiled, **kw):
    args = [flame.tensor(x).to(dt) for x in (q, k, v)]
    m = None if mask is None else flame.tensor(mask) if mask.dtype == bool else flame.tensor(mask).to(dt)
    c = flame.tensor(cot)

    def step(q, k, v):
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=m, **kw)
        loss, grads = flame.value_and_grad(lambda *a: (F.scaled_dot_product_attention(
            *a, attn_mask=m, **kw).float() * c).sum(), (0, 1, 2))(q, k, v)
        return (y, *grads)
    outs = flame.compile(step)(*args) if compiled else step(*args)
    return [o.float().numpy() for o in outs]


def _check(q, k, v, mask=None, dt="f32", compiled=False, **kw):
    rng = np.random.default_rng(1)
    cot = rng.standard_normal(q.shape[:-1] + (v.shape[-1],)).astype(np.float32)
    want = _torch_ref(q, k, v, mask, cot, dt, **kw)
    got = _flame(q, k, v, mask, cot, dt, compiled, **kw)
    for name, a, b in zip(("out", "dq", "dk", "dv"), got, want):
        np.testing.assert_allclose(a, b, rtol=TOL[dt], atol=TOL[dt], err_msg=f"{name} {dt} {kw}")


MASKS = {"none": None, "bool": (2, 4, 5, 7), "additive": (2, 4, 5, 7), "bool-heads": (4, 1, 7),
         "additive-rows": (1, 5, 7), "bool-2d": (5, 7)}


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("kind", sorted(MASKS))
def test_masks_match_torch(kind, compiled):
    rng = np.random.default_rng(0)
    q, k, v = _inputs(rng)
    shape = MASKS[kind]
    mask = None if shape is None else _mask(rng, kind.split("-")[0], shape)
    _check(q, k, v, mask, compiled=compiled)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("length,keys", [(6, 6), (4, 9), (9, 4)])
def test_causal_matches_torch(length, keys, compiled):
    q, k, v = _inputs(np.random.default_rng(2), length=length, keys=keys)
    _check(q, k, v, is_causal=True, compiled=compiled)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_grouped_query_attention_matches_torch(compiled):
    q, k, v = _inputs(np.random.default_rng(3), h=6, hkv=2)
    _check(q, k, v, enable_gqa=True, compiled=compiled)
    _check(q, k, v, enable_gqa=True, is_causal=True, compiled=compiled)


@pytest.mark.parametrize("scale", [None, 0.3, 2.0])
def test_scale_matches_torch(scale):
    q, k, v = _inputs(np.random.default_rng(4))
    _check(q, k, v, scale=scale)


def test_three_dimensional_inputs_match_torch():
    q, k, v = (x[0] for x in _inputs(np.random.default_rng(5)))
    _check(q, k, v, is_causal=True)


@pytest.mark.parametrize("dt", ["f16", "bf16"])
def test_half_types_match_torch(dt):
    rng = np.random.default_rng(6)
    q, k, v = _inputs(rng)
    _check(q, k, v, _mask(rng, "additive", (5, 7)), dt=dt)
    _check(q, k, v, dt=dt, is_causal=True, compiled=True)


def test_fully_masked_row_gives_zero_like_torch():
    rng = np.random.default_rng(7)
    q, k, v = _inputs(rng)
    mask = _mask(rng, "bool", (5, 7))
    mask[2] = False
    _check(q, k, v, mask)


def test_errors_are_readable():
    q, k, v = (flame.tensor(x) for x in _inputs(np.random.default_rng(8)))
    with pytest.raises(RuntimeError, match="dropout probability has to be between 0 and 1, but got 1.5"):
        F.scaled_dot_product_attention(q, k, v, dropout_p=1.5)
    with pytest.raises(FlameError, match="not both"):
        F.scaled_dot_product_attention(q, k, v, attn_mask=flame.tensor(np.ones((5, 7), bool)), is_causal=True)
    with pytest.raises(FlameError, match="heads"):
        F.scaled_dot_product_attention(q, k[:, :3], v[:, :3], enable_gqa=True)
    with pytest.raises(FlameError, match="mask vs scores.*do not broadcast"):
        F.scaled_dot_product_attention(q, k, v, attn_mask=flame.tensor(np.ones((5, 6), bool)))


EMPTY = {"no-keys": (5, 0), "no-queries": (0, 7)}
EMPTY_MASKS = {"none": None, "causal": None, "bool": "bool", "additive": "float", "additive-broadcast": "float"}


def _empty_case(lengths, kind):
    rng = np.random.default_rng(9)
    length, keys = lengths
    q, k, v = _inputs(rng, length=length, keys=keys)
    shape = (1, 1) if kind == "additive-broadcast" else (length, keys)
    masks = {"bool": lambda: rng.random(shape) < 0.7, "float": lambda: rng.standard_normal(shape).astype(np.float32)}
    mask = None if EMPTY_MASKS[kind] is None else masks[EMPTY_MASKS[kind]]()
    return q, k, v, mask, rng.standard_normal((2, 4, length, 6)).astype(np.float32)


def _empty_torch(q, k, v, mask, cot, kind):
    ts = [torch.tensor(x, requires_grad=True) for x in (q, k, v)]
    m = None if mask is None else torch.tensor(mask, requires_grad=mask.dtype != bool)
    out = torch.nn.functional.scaled_dot_product_attention(*ts, attn_mask=m, is_causal=kind == "causal")
    (out * torch.tensor(cot)).sum().backward()
    return [out.detach().numpy()] + [t.grad.numpy() for t in ts] + [None if m is None else m.grad]


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("kind", sorted(EMPTY_MASKS))
@pytest.mark.parametrize("lengths", sorted(EMPTY), ids=str)
def test_empty_attention_matches_torch(lengths, kind, compiled):
    """No keys (S = 0): torch's zeros and zero dq; no queries: an empty result, zero dk and dv; the
    mask gets no gradient (None) in either, as in torch."""
    q, k, v, mask, cot = _empty_case(EMPTY[lengths], kind)
    want = _empty_torch(q, k, v, mask, cot, kind)
    xs = [flame.tensor(x, requires_grad=True) for x in (q, k, v)]
    m = None if mask is None else flame.tensor(mask, requires_grad=mask.dtype != bool)
    c = flame.tensor(cot)

    def step(q, k, v):
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=m, is_causal=kind == "causal")
        (out * c).sum().backward()
        return out

    out = (flame.compile(step) if compiled else step)(*xs)
    for name, got, w in zip(("out", "dq", "dk", "dv"), [out.numpy()] + [x.grad.numpy() for x in xs], want):
        assert got.shape == w.shape, name
        np.testing.assert_array_equal(got, w, err_msg=name)
    assert want[4] is None and (m is None or m.grad is None)


@pytest.mark.parametrize("lengths", sorted(EMPTY), ids=str)
def test_empty_attention_on_the_cuda_target(cuda_target, lengths):
    """The CUDA target does not ask cuDNN for an empty attention: its results are constants (the reason is
    on their source line) and the plan's kernels compile with NVRTC."""
    from flame.codegen.nvrtc import compile_cubin

    q, k, v, mask, cot = _empty_case(EMPTY[lengths], "additive")
    xs = [flame.tensor(x, dtype="bf16", requires_grad=True) for x in (q, k, v)]
    m, c = flame.tensor(mask, dtype="bf16"), flame.tensor(cot)

    @flame.compile
    def step(q, k, v):
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=m)
        (out.float() * c).sum().backward()
        return out

    out = step(*xs)
    want = _empty_torch(q, k, v, mask, cot, "additive")
    results = [out.float().numpy()] + [x.grad.float().numpy() for x in xs]
    for name, got, w in zip(("out", "dq", "dk", "dv"), results, want):
        np.testing.assert_array_equal(got, w, err_msg=name)
    assert any("an empty attention" in (op.loc or "") for op in step._last.graph.ops)
    for source in {kern.source for kern in step._last.plan.kernels()}:
        assert compile_cubin(source, "sm_90")[:4] == b"\x7fELF"


def _by_hand(q, k, v):
    """Attention written by hand (either library's tensors)."""
    return ((q @ k.transpose(-2, -1)) * q.shape[-1] ** -0.5).softmax(-1) @ v


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("hand_written", [False, True], ids=["sdpa", "hand-written"])
@pytest.mark.parametrize("where", ["query", "gradient"])
@pytest.mark.parametrize("lengths", sorted(EMPTY), ids=str)
def test_empty_attention_with_a_nan_or_inf_matches_torch(lengths, where, hand_written, compiled):
    """torch's scaled_dot_product_attention computes the no-key result as zeros + 0 * (q.sum() + k.sum() +
    v.sum()): an inf in the query makes the whole result NaN, a NaN in the result's gradient makes dq NaN
    (F.scaled_dot_product_attention does the same); attention written by hand gives zeros and zero dq
    there (an empty matmul), compiled into one attention op too."""
    q, k, v, _, cot = _empty_case(EMPTY[lengths], "none")
    if where == "query" and q.size:
        q[0, 1, 2, 3] = np.inf
    if where == "gradient" and cot.size:
        cot[1, 0, 2, 4] = np.nan
    ts = [torch.tensor(x, dtype=torch.float64, requires_grad=True) for x in (q, k, v)]
    want = (_by_hand if hand_written else torch.nn.functional.scaled_dot_product_attention)(*ts)
    (want * torch.tensor(cot, dtype=torch.float64)).sum().backward()
    xs = [flame.tensor(x, requires_grad=True) for x in (q, k, v)]
    c = flame.tensor(cot)

    def step(q, k, v):
        out = (_by_hand if hand_written else F.scaled_dot_product_attention)(q, k, v)
        (out * c).sum().backward()
        return out

    out = (flame.compile(step) if compiled else step)(*xs)
    results = [out.numpy()] + [x.grad.numpy() for x in xs]
    for name, got, w in zip(("out", "dq", "dk", "dv"), results, [want] + [t.grad for t in ts]):
        np.testing.assert_array_equal(got, w.detach().numpy().astype(np.float32), err_msg=name)
