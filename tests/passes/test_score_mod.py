"""Score modifications written by hand between `q @ k^T * scale` and the softmax (soft-capping, ALiBi,
relative-position biases, sliding windows, document masks, per-head scales, causal with any of them,
random elementwise chains) become ONE scaled_dot_product_attention op with a score_mod graph; it
computes what PyTorch computes in float64 (values and gradients, eager and compiled) and what the
unfused graph computes, and plans for the CUDA target as the decomposed graph whose kernels compile."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import flame
from flame.ir import parse, print_graph
from flame.ir.evaluate import evaluate_graph
from flame.ir.ops.attention import BACKWARD, FORWARD
from flame.passes import autodiff as autodiff_pass

B, H, E = 2, 3, 8
CAP, WINDOW = 2.0, 3


def _positions(lib, s):
    length, keys = s.shape[-2:]
    return lib.arange(length)[:, None], lib.arange(keys)[None, :]


def _softcap(lib, s, x):
    return (s / CAP).tanh() * CAP


def _alibi(lib, s, x):
    i, j = _positions(lib, s)
    return s + x["slopes"][:, None, None] * (j - i)


def _relpos(lib, s, x):
    i, j = _positions(lib, s)
    return s + x["table"][:, j - i + s.shape[-2] - 1]


def _head_scale(lib, s, x):
    return s * x["head_scale"][:, None, None]


def _window(lib, s, x):
    i, j = _positions(lib, s)
    return s.masked_fill(~((i - j < WINDOW) & (j <= i)), float("-inf"))


def _document(lib, s, x):
    seg_q, seg_k = x["seg_q"], x["seg_k"]
    return s.masked_fill(seg_q[:, None, :, None] != seg_k[:, None, None, :], float("-inf"))


def _causal(lib, s, x):
    i, j = _positions(lib, s)
    return lib.where(j <= i, s, float("-inf"))


def _chain(*mods):
    def apply(lib, s, x):
        for mod in mods:
            s = mod(lib, s, x)
        return s

    return apply


MODS = {
    "softcap": _softcap,
    "alibi": _alibi,
    "relpos": _relpos,
    "head-scale": _head_scale,
    "window": _window,
    "document": _document,
    "causal+softcap+alibi": _chain(_softcap, _alibi, _causal),
    "causal+relpos": _chain(_relpos, _causal),
    "causal+head-scale": _chain(_head_scale, _causal),
    "window+document": _chain(_window, _document),
    "causal+document+softcap": _chain(_softcap, _causal, _document),
}
LEARNED = ("slopes", "table", "head_scale")  # extras that get gradients


def _extras(length, keys, seed=0):
    rng = np.random.default_rng(seed)
    seg_q = np.sort(rng.integers(0, 2, (B, length)), -1)
    return {
        "slopes": rng.random(H) + 0.1,
        "table": rng.standard_normal((H, length + keys - 1)),
        "head_scale": rng.random(H) + 0.5,
        "seg_q": seg_q,
        "seg_k": seg_q[:, :keys]
        if keys <= length
        else np.concatenate([seg_q, np.full((B, keys - length), seg_q[:, -1:])], -1),
    }


def _qkv(length, keys, seed=1):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((B, H, n, E)) for n in (length, keys, keys)]


def _attention(lib, mod):
    softmax = flame.nn.functional.softmax if lib is flame else torch.softmax

    def attention(q, k, v, x):
        s = q @ k.transpose(-1, -2) * (1.0 / math.sqrt(E))
        return softmax(mod(lib, s, x), -1) @ v

    return attention


def _torch(mod, arrays, extras, cot):
    ts = [torch.tensor(a, requires_grad=True) for a in arrays]
    tx = {n: torch.tensor(a, requires_grad=n in LEARNED) for n, a in extras.items()}
    y = _attention(torch, mod)(*ts, tx)
    (y * torch.tensor(cot)).sum().backward()
    return y.detach().numpy(), [t.grad.numpy() for t in ts], {n: tx[n].grad for n in LEARNED}


def _flame_fn(mod, names):
    fn = _attention(flame, mod)

    def run(q, k, v, *xs):
        return fn(q, k, v, dict(zip(names, xs)))

    return run


def _loss_and_grads(mod, extras, cot, compiled):
    names = list(extras)
    fn = _flame_fn(mod, names)
    c = flame.tensor(cot)

    def loss(*args):
        return (fn(*args) * c).sum()

    learned = [3 + names.index(n) for n in LEARNED]
    step = flame.value_and_grad(loss, (0, 1, 2, *learned))
    return (flame.compile(step) if compiled else step), names


def _args(arrays, extras):
    return [flame.tensor(a) for a in arrays] + [flame.tensor(a) for a in extras.values()]


@pytest.mark.parametrize("length,keys", [(6, 6), (5, 7)])
@pytest.mark.parametrize("name", sorted(MODS))
def test_modification_becomes_one_op_and_matches_torch_f64(name, length, keys):
    mod = MODS[name]
    arrays, extras = _qkv(length, keys), _extras(length, keys)
    if name.startswith("causal") or name.startswith("window"):
        keys = length
        arrays, extras = _qkv(length, length), _extras(length, length)
    cot = np.random.default_rng(2).standard_normal((B, H, length, E))
    want, want_grads, want_extra = _torch(mod, arrays, extras, cot)
    fn = flame.compile(_flame_fn(mod, list(extras)))
    args = _args(arrays, extras)
    g = fn.optimized(*args)
    ops = [op.name for op in g.ops]
    assert ops.count(FORWARD) == 1 and "matmul" not in ops and "exp" not in ops, print_graph(g)
    (op,) = [o for o in g.ops if o.name == FORWARD]
    assert op.attrs["is_causal"] == ("causal" in name or name.startswith("window"))
    assert op.attrs["score_mod"] is not None
    np.testing.assert_allclose(fn(*args).numpy(), want, rtol=1e-10, atol=1e-12)
    for compiled in (False, True):
        step, names = _loss_and_grads(mod, extras, cot, compiled)
        _, grads = step(*args)
        for got, w, what in zip(grads, want_grads, ("dq", "dk", "dv")):
            np.testing.assert_allclose(got.numpy(), w, rtol=1e-9, atol=1e-11, err_msg=f"{what} compiled={compiled}")
        for got, n in zip(grads[3:], LEARNED):
            w = want_extra[n]
            w = np.zeros(extras[n].shape) if w is None else w.numpy()
            np.testing.assert_allclose(got.numpy(), w, rtol=1e-9, atol=1e-11, err_msg=f"d{n} compiled={compiled}")


@pytest.mark.parametrize("name", ["causal+softcap+alibi", "window+document", "relpos", "head-scale"])
def test_rewritten_op_matches_the_unfused_graph(name, monkeypatch):
    mod, length = MODS[name], 6
    arrays, extras = _qkv(length, length, seed=5), _extras(length, length, seed=6)
    args = _args(arrays, extras)
    fn = flame.compile(_flame_fn(mod, list(extras)))
    traced = fn.trace(*args)
    unfused = evaluate_graph(traced, [a.numpy() for a in args])[traced.outputs[0]]
    np.testing.assert_allclose(fn(*args).numpy(), unfused, rtol=1e-12, atol=1e-13)
    cot = np.random.default_rng(7).standard_normal((B, H, length, E))
    fused, _ = _loss_and_grads(mod, extras, cot, compiled=True)
    got = fused(*args)[1]
    monkeypatch.setattr(autodiff_pass, "rewrite_attention_in_place", lambda *a, **k: 0)
    plain, _ = _loss_and_grads(mod, extras, cot, compiled=True)
    g = plain.optimized(*args)
    assert BACKWARD not in [op.name for op in g.ops]
    for a, b in zip(got, plain(*args)[1]):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-10, atol=1e-12)


def test_the_modification_prints_and_parses_back_with_its_gradient_graph():
    arrays, extras = _qkv(4, 4), _extras(4, 4)
    cot = np.ones((B, H, 4, E))
    step, _ = _loss_and_grads(MODS["causal+softcap+alibi"], extras, cot, compiled=True)
    g = step.optimized(*_args(arrays, extras))
    text = print_graph(g)
    assert "score_mod=graph score_mod(" in text and "score_mod_grad=graph score_mod_grad(" in text
    assert print_graph(parse(text)) == text
    (bwd,) = [op for op in g.ops if op.name == BACKWARD]
    grad = bwd.attrs["score_mod_grad"].graph
    assert [v.type for v in grad.outputs][0] == grad.inputs[0].type  # d scores, then d slopes
    assert "tanh" in [o.name for o in grad.ops]  # the chain's own VJPs, from the autodiff pass


def test_fully_masked_rows_give_zeros_where_torch_gives_nan():
    """Queries whose segment no key has: every score of the row is masked out. The compiled attention op
    gives zeros there (values and gradients), as torch's scaled_dot_product_attention does for a row of
    False; the hand-written softmax gives NaN there, in torch and in flame's eager mode (which runs the
    ops one by one, as written). The other rows agree."""
    length, keys = 5, 4
    arrays = _qkv(length, keys, seed=8)
    extras = _extras(length, keys, seed=9)
    extras["seg_q"] = np.array([[0, 0, 1, 1, 2], [0, 1, 1, 2, 2]])
    extras["seg_k"] = np.array([[0, 0, 1, 1], [0, 0, 1, 1]])
    empty = (extras["seg_q"][:, :, None] != extras["seg_k"][:, None, :]).all(-1)  # [B, L]
    rows = np.broadcast_to(empty[:, None, :, None], (B, H, length, E))
    cot = np.random.default_rng(10).standard_normal((B, H, length, E))
    want, want_grads, _ = _torch(MODS["document"], arrays, extras, cot)
    assert np.isnan(want[rows]).all() and not np.isnan(want[~rows]).any()
    keep = torch.tensor(extras["seg_q"][:, None, :, None] == extras["seg_k"][:, None, None, :])
    sdpa = torch.nn.functional.scaled_dot_product_attention(*(torch.tensor(a) for a in arrays), attn_mask=keep)
    assert (sdpa.numpy()[rows] == 0).all()
    fn = _flame_fn(MODS["document"], list(extras))
    np.testing.assert_allclose(fn(*_args(arrays, extras)).numpy(), want, rtol=1e-10, atol=1e-12)  # NaN rows too
    got = flame.compile(fn)(*_args(arrays, extras)).numpy()
    assert not np.isnan(got).any() and (got[rows] == 0).all()
    np.testing.assert_allclose(got, sdpa.numpy(), rtol=1e-10, atol=1e-12)
    step, _ = _loss_and_grads(MODS["document"], extras, cot, compiled=True)
    _, grads = step(*_args(arrays, extras))
    assert all(np.isfinite(g.numpy()).all() for g in grads)
    assert (grads[0].numpy()[rows] == 0).all()  # dq of a row no key takes part in
    np.testing.assert_allclose(grads[0].numpy()[~rows], want_grads[0][~rows], rtol=1e-9, atol=1e-11)


def test_a_causal_part_of_an_or_of_dropped_positions_becomes_is_causal():
    def attention(q, k, v):
        s = q @ k.transpose(-1, -2) * 0.5
        i, j = flame.arange(6)[:, None], flame.arange(6)[None, :]
        return flame.nn.functional.softmax(s.masked_fill((j > i) | (i - j >= 2), float("-inf")), -1) @ v

    args = _args(_qkv(6, 6), {})
    fn = flame.compile(attention)
    (op,) = [o for o in fn.optimized(*args).ops if o.name == FORWARD]
    assert op.attrs["is_causal"] and len(op.attrs["score_mod"].graph.outputs) == 2
    i, j = np.arange(6)[:, None], np.arange(6)[None, :]
    keep = torch.tensor((j <= i) & (i - j < 2))
    want = torch.nn.functional.scaled_dot_product_attention(
        *(torch.tensor(a) for a in _qkv(6, 6)), attn_mask=keep, scale=0.5
    )
    np.testing.assert_allclose(fn(*args).numpy(), want.numpy(), rtol=1e-10, atol=1e-12)


def test_a_score_sized_operand_is_a_mask_input_not_a_modification():
    """An additive bias the size of the scores stays the op's mask input (cuDNN takes it)."""
    arrays = _qkv(4, 4)
    bias = np.random.default_rng(3).standard_normal((H, 4, 4))

    def attention(q, k, v, bias):
        return flame.nn.functional.softmax(q @ k.transpose(-1, -2) * 0.5 + bias, -1) @ v

    g = flame.compile(attention).optimized(*_args(arrays, {"bias": bias}))
    (op,) = [o for o in g.ops if o.name == FORWARD]
    assert op.attrs["score_mod"] is None and len(op.inputs) == 4


def test_scores_read_by_a_reduction_are_not_a_modification():
    def attention(q, k, v):
        s = q @ k.transpose(-1, -2)
        return flame.nn.functional.softmax(s - s.mean(-1, keepdim=True), -1) @ v

    g = flame.compile(attention).optimized(*_args(_qkv(4, 4), {}))
    assert FORWARD not in [op.name for op in g.ops]


# ---- random elementwise chains (hypothesis) ---------------------------------------------------------

UNARY = ("tanh", "sigmoid", "sin", "neg", "abs")
OPERANDS = ("head", "query", "key", "batch", "position", "constant")
MASKS = ("none", "causal", "window", "document")


def _operand(lib, kind, s, x):
    i, j = _positions(lib, s)
    return {
        "head": x["head"][:, None, None],
        "query": x["query"][:, None],
        "key": x["key"],
        "batch": x["batch"][:, None, None, None],
        "position": (j - i) * 0.25,
        "constant": 0.75,
    }[kind]


def _random_mod(steps, mask):
    def mod(lib, s, x):
        for op, kind in steps:
            if op in UNARY:
                s = getattr(s, op)()
            elif op == "add":
                s = s + _operand(lib, kind, s, x)
            elif op == "mul":
                s = s * _operand(lib, kind, s, x)
            else:
                s = s - _operand(lib, kind, s, x)
        masks = {"causal": _causal, "window": _window, "document": _document}
        return masks[mask](lib, s, x) if mask in masks else s

    return mod


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    steps=st.lists(
        st.tuples(st.sampled_from(UNARY + ("add", "mul", "sub")), st.sampled_from(OPERANDS)), min_size=1, max_size=4
    ),
    mask=st.sampled_from(MASKS),
    compiled=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_random_chains_match_torch_f64(steps, mask, compiled, seed):
    length = 5
    rng = np.random.default_rng(seed)
    arrays = [rng.standard_normal((B, H, length, E)) for _ in range(3)]
    extras = {
        "head": rng.standard_normal(H),
        "query": rng.standard_normal(length),
        "key": rng.standard_normal(length),
        "batch": rng.standard_normal(B),
        "seg_q": np.sort(rng.integers(0, 2, (B, length)), -1),
    }
    extras["seg_k"] = extras["seg_q"]
    mod = _random_mod(steps, mask)
    cot = rng.standard_normal((B, H, length, E))
    ts = [torch.tensor(a, requires_grad=True) for a in arrays]
    tx = {n: torch.tensor(a, requires_grad=a.dtype.kind == "f") for n, a in extras.items()}
    y = _attention(torch, mod)(*ts, tx)
    (y * torch.tensor(cot)).sum().backward()
    names = list(extras)
    fn = _flame_fn(mod, names)
    c = flame.tensor(cot)
    floats = [i for i, n in enumerate(names) if extras[n].dtype.kind == "f"]
    step = flame.value_and_grad(lambda *a: (fn(*a) * c).sum(), (0, 1, 2, *(3 + i for i in floats)))
    step = flame.compile(step) if compiled else step
    args = _args(arrays, extras)
    loss, grads = step(*args)
    np.testing.assert_allclose(loss.item(), (y * torch.tensor(cot)).sum().item(), rtol=1e-9, atol=1e-10)
    wants = [t.grad for t in ts] + [tx[names[i]].grad for i in floats]
    for got, w in zip(grads, wants):
        want = np.zeros(got.shape) if w is None else w.numpy()
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-8, atol=1e-10)
    if compiled:
        ops = [op.name for op in step.optimized(*args).ops]
        assert ops.count(FORWARD) == 1 and ops.count(BACKWARD) == 1


# ---- the CUDA target: cuDNN cannot express a modification, so it is decomposed ---------------------------


@pytest.mark.parametrize("name", ["causal+softcap+alibi", "window+document"])
def test_cuda_target_decomposes_a_modification_and_its_kernels_compile(name, cuda_target):
    from flame.codegen.nvrtc import compile_cubin

    mod, length = MODS[name], 8
    arrays = [a.astype(np.float32) for a in _qkv(length, length, seed=11)]
    extras = {n: (a.astype(np.float32) if a.dtype.kind == "f" else a) for n, a in _extras(length, length).items()}
    cot = np.random.default_rng(12).standard_normal((B, H, length, E)).astype(np.float32)
    step, _ = _loss_and_grads(mod, extras, cot, compiled=True)
    args = _args(arrays, extras)
    _, grads = step(*args)
    want = _torch(
        mod,
        [a.astype(np.float64) for a in arrays],
        {n: (a.astype(np.float64) if a.dtype.kind == "f" else a) for n, a in extras.items()},
        cot,
    )
    for got, w in zip(grads, want[1]):
        np.testing.assert_allclose(got.numpy(), w, rtol=1e-4, atol=1e-5)
    g = step.optimized(*args)
    assert not [op for op in g.ops if op.name in (FORWARD, BACKWARD)]
    assert any("cannot express a score modification" in (op.loc or "") for op in g.ops)
    sources = {k.source for k in step._last.plan.kernels()}
    assert sources
    for source in sources:
        assert compile_cubin(source, "sm_90")[:4] == b"\x7fELF"


def test_layers_sharing_one_mask_each_become_an_attention_op_and_match_torch():
    """A mask built once (arange comparisons) and read by two layers' soft-capped attentions: the side
    ops may be shared, each attention is rewritten, and values and gradients are torch's."""

    def layer(lib, q, k, v, keep):
        s = (q @ k.transpose(-2, -1)) * 0.35
        s = (s / 20.0).tanh() * 20.0
        return lib.where(keep, s, float("-inf")).softmax(-1) @ v

    def model(lib, q, k, v):
        i, j = lib.arange(6)[:, None], lib.arange(6)[None, :]
        keep = j <= i
        return layer(lib, layer(lib, q, k, v, keep), k, v, keep).sin().sum()

    rng = np.random.default_rng(3)
    arrays = [rng.standard_normal((2, 6, 8)) for _ in range(3)]
    ts = [torch.tensor(a, requires_grad=True) for a in arrays]
    model(torch, *ts).backward()
    fs = [flame.tensor(a, dtype=flame.float64, requires_grad=True) for a in arrays]

    @flame.compile
    def step(q, k, v):
        loss = model(flame, q, k, v)
        loss.backward()
        return loss

    step(*fs)
    attention = [op for op in step.optimized(*fs).ops if op.name == "scaled_dot_product_attention"]
    assert len(attention) == 2 and all(op.attrs["score_mod"] is not None for op in attention)
    for f, t in zip(fs, ts):
        np.testing.assert_allclose(f.grad.numpy(), t.grad.numpy(), rtol=1e-10, atol=1e-12)
