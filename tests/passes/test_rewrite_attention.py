"""rewrite_attention: attention written by hand (matmul with a transposed key, scaling, a mask,
softmax, matmul with the value) becomes ONE scaled_dot_product_attention op, forward-only and before
autodiff, and computes what torch's SDPA computes (values and gradients, float32 tolerance 1e-5)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import flame
import flame.nn.functional as F
from flame.ir import parse, print_graph
from flame.passes.rewrite_attention import REWRITE_NOTE, rewrite_attention

SDPA, BACKWARD = "scaled_dot_product_attention", "scaled_dot_product_attention_backward"
B, H, L, S, E = 2, 3, 5, 5, 8


def _causal_bool(length, keys):
    return flame.tril(flame.ones(length, keys)) == 1


def _scaled_after(q, k):
    return q @ k.transpose(-1, -2) * (1.0 / math.sqrt(q.shape[-1]))


def _divided(q, k):
    return (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])


def _scaled_before(q, k):
    return (q * (1.0 / math.sqrt(q.shape[-1]))) @ k.transpose(-1, -2)


# name -> (scores, mask step, torch kwargs(mask array)); masks built inside the function (constants)
def _plain(att, length, keys, mask):
    return att


def _additive(att, length, keys, mask):
    return att + mask


def _where_keep(att, length, keys, mask):
    return flame.where(mask, att, float("-inf"))


def _where_drop(att, length, keys, mask):
    return flame.where(~mask, float("-inf"), att)


def _causal_tril(att, length, keys, mask):
    return flame.where(_causal_bool(length, keys), att, float("-inf"))


def _causal_eq0(att, length, keys, mask):
    return flame.where(flame.tril(flame.ones(length, keys)) == 0, float("-inf"), att)


def _causal_triu(att, length, keys, mask):
    return att + flame.triu(flame.full((length, keys), float("-inf")), 1)


PATTERNS = {
    "plain": (_scaled_after, _plain, None),
    "divided": (_divided, _plain, None),
    "scaled-before": (_scaled_before, _plain, None),
    "additive": (_scaled_after, _additive, "additive"),
    "where-keep": (_scaled_after, _where_keep, "bool"),
    "where-drop": (_divided, _where_drop, "bool"),
    "causal-tril": (_scaled_after, _causal_tril, "causal"),
    "causal-eq0": (_scaled_before, _causal_eq0, "causal"),
    "causal-triu": (_scaled_after, _causal_triu, "causal"),
}


def _hand_written(name, mask):
    scores, masked, _ = PATTERNS[name]

    def attention(q, k, v):
        att = masked(scores(q, k), q.shape[-2], k.shape[-2], mask)
        return F.softmax(att, -1) @ v
    return attention


def _data(length=L, keys=S, kind=None, seed=0):
    rng = np.random.default_rng(seed)
    q, k, v = (rng.standard_normal((B, H, n, E)).astype(np.float32) for n in (length, keys, keys))
    mask = None
    if kind == "bool":
        mask = rng.random((length, keys)) < 0.7
        mask[:, 0] = True
    elif kind == "additive":
        mask = rng.standard_normal((H, length, keys)).astype(np.float32)
    return q, k, v, mask


def _torch(q, k, v, mask, kind, cot):
    ts = [torch.tensor(x, requires_grad=True) for x in (q, k, v)]
    m = None if mask is None else torch.tensor(mask)
    y = torch.nn.functional.scaled_dot_product_attention(*ts, attn_mask=m, is_causal=kind == "causal")
    (y * torch.tensor(cot)).sum().backward()
    return [y.detach().numpy()] + [t.grad.numpy() for t in ts]


def _ops(g):
    return [op.name for op in g.ops]


def _train_step(fn, cot):
    c = flame.tensor(cot)

    def step(q, k, v):
        return flame.value_and_grad(lambda *a: (fn(*a) * c).sum(), (0, 1, 2))(q, k, v)
    return step


@pytest.mark.parametrize("length,keys", [(L, S), (4, 7), (7, 4)])
@pytest.mark.parametrize("name", sorted(PATTERNS))
def test_forward_becomes_one_op_and_matches_torch(name, length, keys):
    kind = PATTERNS[name][2]
    q, k, v, mask = _data(length, keys, kind)
    fn = flame.compile(_hand_written(name, None if mask is None else flame.tensor(mask)))
    args = [flame.tensor(x) for x in (q, k, v)]
    g = fn.optimized(*args)
    assert _ops(g).count(SDPA) == 1 and not {"matmul", "exp"} & set(_ops(g)), print_graph(g)
    # a reduce_max reads the mask's rows (NaN where one keeps no key), never the scores
    assert all(o.inputs[0].type.rank < 4 for o in g.ops if o.name == "reduce_max"), print_graph(g)
    (op,) = [o for o in g.ops if o.name == SDPA]
    assert op.attrs["is_causal"] == (kind == "causal") and REWRITE_NOTE in op.loc
    assert op.attrs["scale"] == pytest.approx(1 / math.sqrt(E), rel=1e-7)
    cot = np.zeros((B, H, length, E), np.float32)
    want = _torch(q, k, v, mask, kind, cot)[0]
    np.testing.assert_allclose(fn(*args).numpy(), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", sorted(PATTERNS))
def test_backward_uses_the_attention_backward_op(name):
    kind = PATTERNS[name][2]
    q, k, v, mask = _data(4, 6, kind, seed=1)
    cot = np.random.default_rng(2).standard_normal((B, H, 4, E)).astype(np.float32)
    fn = _hand_written(name, None if mask is None else flame.tensor(mask))
    want = _torch(q, k, v, mask, kind, cot)
    step = flame.compile(_train_step(fn, cot))
    args = [flame.tensor(x) for x in (q, k, v)]
    g = step.optimized(*args)
    assert _ops(g).count(SDPA) == 1 and _ops(g).count(BACKWARD) == 1 and "exp" not in _ops(g), print_graph(g)
    _, grads = step(*args)
    for got, w, what in zip(grads, want[1:], ("dq", "dk", "dv")):
        np.testing.assert_allclose(got.numpy(), w, rtol=1e-5, atol=1e-5, err_msg=what)


def test_eager_backward_of_hand_written_attention_matches_torch():
    q, k, v, _ = _data(kind="causal", seed=3)
    cot = np.random.default_rng(4).standard_normal((B, H, L, E)).astype(np.float32)
    ts = [flame.tensor(x, requires_grad=True) for x in (q, k, v)]
    y = _hand_written("causal-tril", None)(*ts)
    (y * flame.tensor(cot)).sum().backward()
    want = _torch(q, k, v, None, "causal", cot)
    np.testing.assert_allclose(y.numpy(), want[0], rtol=1e-5, atol=1e-5)
    for t, w in zip(ts, want[1:]):
        np.testing.assert_allclose(t.grad.numpy(), w, rtol=1e-5, atol=1e-5)


def test_probabilities_read_elsewhere_are_not_rewritten():
    def attention(q, k, v):
        p = F.softmax(_scaled_after(q, k), -1)
        return p @ v, p

    args = [flame.tensor(x) for x in _data()[:3]]
    g = flame.compile(attention).optimized(*args)
    assert SDPA not in _ops(g) and "matmul" in _ops(g)


def test_non_causal_constant_mask_becomes_the_score_modifications_keep_mask():
    def attention(q, k, v):
        keep = flame.tril(flame.ones(L, S), 1) == 1  # one diagonal more than causal
        return F.softmax(flame.where(keep, _scaled_after(q, k), float("-inf")), -1) @ v

    args = [flame.tensor(x) for x in _data()[:3]]
    g = flame.compile(attention).optimized(*args)
    (op,) = [o for o in g.ops if o.name == SDPA]
    assert not op.attrs["is_causal"] and len(op.inputs) == 3  # computed from positions, never stored
    sub = op.attrs["score_mod"].graph
    assert len(sub.outputs) == 2 and sub.outputs[1].dtype.kind == "bool" and sub.outputs[0] is sub.inputs[0]
    keep = np.tril(np.ones((L, S), bool), 1)
    q, k, v = (torch.tensor(a.numpy()) for a in args)
    want = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=torch.tensor(keep))
    np.testing.assert_allclose(flame.compile(attention)(*args).numpy(), want.numpy(), rtol=1e-5, atol=1e-5)


def test_rewritten_graph_prints_and_parses_back():
    fn = flame.compile(_hand_written("causal-tril", None))
    g = rewrite_attention(fn.trace(*[flame.tensor(x) for x in _data()[:3]]))
    text = print_graph(g)
    assert text.count(SDPA) == 1 and print_graph(parse(text)) == text
    assert REWRITE_NOTE in print_graph(g, locs=True)


def test_softmax_in_float32_between_casts_is_rewritten():
    def attention(q, k, v):
        att = _scaled_after(q, k) + flame.triu(flame.full((L, S), float("-inf")), 1).to("bf16")
        return F.softmax(att.float(), -1).to("bf16") @ v

    q, k, v, _ = _data(kind="causal", seed=5)
    args = [flame.tensor(x).to("bf16") for x in (q, k, v)]
    fn = flame.compile(attention)
    g = fn.optimized(*args)
    assert _ops(g) == [SDPA] and g.ops[0].attrs["is_causal"], print_graph(g)
    rounded = [a.float().numpy() for a in args]  # the bf16 inputs, exactly, in f32
    want = _torch(*rounded, None, "causal", np.zeros((B, H, L, E), np.float32))[0]
    np.testing.assert_allclose(fn(*args).float().numpy(), want, rtol=1.6e-2, atol=1.6e-2)


def _band(att, length, keys, mask):
    """A sliding window of two keys (not causal: the score modification's keep mask)."""
    return flame.where(
        flame.tril(flame.ones(length, keys)) - flame.tril(flame.ones(length, keys), -2) == 1, att, float("-inf")
    )


def _torch_hand_written(name, q, k, v, mask):
    """PATTERNS[name] (or the band) written by hand in torch."""
    s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    length, keys = s.shape[-2:]
    tril = torch.ones(length, keys).tril() == 1
    m = None if mask is None else torch.tensor(mask)
    masked = {
        "additive": lambda: s + m,
        "where-keep": lambda: torch.where(m, s, float("-inf")),
        "where-drop": lambda: s.masked_fill(~m, float("-inf")),
        "causal-tril": lambda: torch.where(tril, s, float("-inf")),
        "causal-eq0": lambda: torch.where(~tril, float("-inf"), s),
        "causal-triu": lambda: s + torch.full((length, keys), float("-inf")).triu(1),
        "band": lambda: torch.where(tril & ~(torch.ones(length, keys).tril(-2) == 1), s, float("-inf")),
    }.get(name, lambda: s)()
    return masked.softmax(-1) @ v


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("name", sorted(PATTERNS) + ["band"])
def test_a_non_finite_gradient_reaches_dropped_scores_as_in_torch(name, compiled):
    """The result's gradient holds NaNs. torch's where(keep, s, -inf) (and masked_fill) gives a
    dropped score gradient 0, so a key no query with such a gradient sees gets a finite dk; an added -inf
    mask gives p * (dP - D) = 0 * NaN = NaN there. The attention op the hand-written attention becomes
    (a bool mask, is_causal or a score modification's keep) gives torch's values, NaNs and infinities,
    eagerly and compiled."""
    kind = PATTERNS[name][2] if name in PATTERNS else None
    q, k, v, mask = _data(4, 6, kind, seed=6)
    if kind == "bool":
        mask[:2, 3:] = False  # keys 3.. dropped for the rows whose gradient is not finite
    cot = np.random.default_rng(7).standard_normal((B, H, 4, E)).astype(np.float32)
    cot[0, 1, 0, :2] = np.nan  # (an inf makes dP - D inf or NaN by the order of the sums: torch's softmax
    cot[1, 2, 1, 3] = np.nan  # backward sums p * dP where the attention backward sums dO * O)
    ts = [torch.tensor(x, requires_grad=True) for x in (q, k, v)]
    want = _torch_hand_written(name, *ts, mask)
    (want * torch.tensor(cot)).sum().backward()
    fn = _band if name == "band" else PATTERNS[name][1]
    scores = PATTERNS[name][0] if name in PATTERNS else _scaled_after
    m = None if mask is None else flame.tensor(mask)

    def attention(q, k, v):
        return F.softmax(fn(scores(q, k), q.shape[-2], k.shape[-2], m), -1) @ v

    step = _train_step(attention, cot)
    args = [flame.tensor(x) for x in (q, k, v)]
    if compiled:
        step = flame.compile(step)
        assert _ops(step.optimized(*args)).count(BACKWARD) == 1
    out, grads = step(*args)
    for got, w, what in zip(grads, [t.grad for t in ts], ("dq", "dk", "dv")):
        np.testing.assert_allclose(got.numpy(), w.numpy(), rtol=1e-5, atol=1e-5, equal_nan=True, err_msg=what)


@pytest.mark.parametrize("compare", ["gt", "ge"])
def test_a_mask_of_positions_too_large_to_evaluate_whole_is_checked_a_block_of_rows_at_a_time(monkeypatch, compare):
    """A causal mask compared from query and key positions (j > i) is is_causal at any length: when
    the whole mask is above the evaluation limit, it is compared with tril a block of rows at a time;
    one diagonal off (j >= i) stays a score modification."""
    import flame.passes.rewrite_attention as ra

    monkeypatch.setattr(ra, "MAX_MASK_EVAL", 64)  # the positions fit, the mask (48 x 48) does not
    monkeypatch.setattr(ra, "ROWS_AT_ONCE", 100)  # two rows of 48 keys at a time
    length = 48

    def attention(q, k, v):
        i, j = flame.arange(length)[:, None], flame.arange(length)[None, :]
        drop = j > i if compare == "gt" else j >= i
        return F.softmax(_scaled_after(q, k).masked_fill(drop, float("-inf")), -1) @ v

    rng = np.random.default_rng(0)
    args = [flame.tensor(rng.standard_normal((B, H, length, E)).astype(np.float32)) for _ in range(3)]
    (op,) = [o for o in flame.compile(attention).optimized(*args).ops if o.name == SDPA]
    assert op.attrs["is_causal"] == (compare == "gt")
    assert (op.attrs.get("score_mod") is None) == (compare == "gt")
    q, k, v = (torch.tensor(a.numpy()) for a in args)
    keep = torch.tril(torch.ones(length, length, dtype=torch.bool), -1 if compare == "ge" else 0)
    want = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=keep)
    got = flame.compile(attention)(*args).numpy()
    if compare == "ge":  # row 0 keeps no key: torch gives NaN there, as flame's fully masked row
        got, want = got[..., 1:, :], want[..., 1:, :]
    np.testing.assert_allclose(got, want.numpy(), rtol=1e-5, atol=1e-5)
