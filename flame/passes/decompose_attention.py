"""Attention the backend cannot run as one call becomes the unfused graph again (ARCHITECTURE.md "Patterns become ops").

scaled_dot_product_attention and its backward are one op each so that the GPU can run them as one
cuDNN call; cuDNN does not take every case (f32, odd head sizes, some mask broadcasts ...). For such an
op, `supported(op)` gives the reason and this pass replaces the op by primitive ops computing what its
NumPy reference computes (flame/ir/ops/attention.py):

    s = (q @ k^T) * scale                      in the compute dtype (f32; f64 for f64 inputs)
    s = where(keep, score, -inf)               with a score_mod: its graph's ops, inlined (score, keep)
    s = s + mask | where(keep, s, -inf)        additive or bool mask; is_causal: keep = tril(ones(L, S))
    p = exp(s - max s) / sum                   a row with no key taking part gives 0, as the reference
    out = p @ v
    stats = max s + log(sum)                   the statistics op: -inf for a row with no key

f16/bf16 matmuls stay in the input dtype (cuBLAS accumulates in f32); the scores, the softmax and the
backward's dS are computed in f32 between casts. Grouped-query attention repeats each key/value head
over its group of query heads (reshape, broadcast_to, reshape); the backward sums the group back.
The statistics op reuses the row max and sums of the decomposed forward of the same attention (it
comes right after it) instead of computing the scores again. The backward recomputes p from the
scores and the statistics, p = exp(s - stats), and packs dq, dk, dv flat, as the op does:

    dV = p^T @ dO    dP = dO @ V^T    dS = p * (dP - rowsum(dO * O)) * scale    dQ = dS @ K    dK = dS^T @ Q

where dS is 0 at a score a where drops (a score_mod's keep; is_causal or a bool mask under where_mask).

With a score_mod, dS goes through its VJP graph (score_mod_grad, inlined) before the scale, which also
gives the extras' gradients, packed after dv.

The bias gradient (an additive mask's) is dS before the scale, summed to the mask's shape. No library
call computes it (cuDNN's dBias output is not wired), so it is always decomposed: for a backend that
runs every attention op (the reference executor) with the reason NO_BIAS_CALL; the CUDA target gives
its own. With no keys (S = 0), no queries or no batch the forward is zeros, the statistics -inf and
the gradients zeros (or empty), as torch gives, without a reduction over an empty axis.

Every op that replaces an attention op carries the op's source line with `[decompose_attention:
<reason>]` appended (so dumps and `flame explain` say why the attention is not one call), and each
reason is logged at info level once per process."""

from __future__ import annotations

from functools import partial

from flame.ir.builder import Builder
from flame.ir.dtypes import DType, boolean, f32, f64, finfo
from flame.ir.graph import Graph, Op, Value
from flame.ir.ops.attention import BACKWARD, BIAS_GRAD, FORWARD, STATS, extras_of, mask_of
from flame.passes._rewrite import DECOMPOSE_ALL, Supported, decompose  # noqa: F401  (DECOMPOSE_ALL: re-exported)

ATTENTION_OPS = (FORWARD, STATS, BACKWARD, BIAS_GRAD)
NO_BIAS_CALL = "no library call computes the attention bias's gradient: it runs as primitive ops"


def all_supported(op: Op) -> str:
    """The reference executor runs every attention op as it is (its reference is NumPy); the bias
    gradient, which no backend runs as one call, is decomposed whatever this says (NO_BIAS_CALL)."""
    return ""


def note(reason: str) -> str:
    """The text appended to the source line of the ops that replace an attention op."""
    return f"[decompose_attention: {reason}]"  # as passes._rewrite.decompose writes it


def _compute_dtype(dtype: DType) -> DType:
    return f64 if dtype == f64 else f32


def _cast(b: Builder, x: Value, dtype: DType) -> Value:
    return x if x.dtype == dtype else b.cast(x, dtype=dtype)


def _repeat_heads(b: Builder, x: Value, heads: int) -> Value:
    """k or v [..., Hkv, S, E] with each head repeated over its group: query head i reads kv head
    i // (heads // Hkv), as the reference's np.repeat."""
    hkv = x.shape[-3]
    if hkv == heads:
        return x
    lead, tail = x.shape[:-3], x.shape[-2:]
    x = b.reshape(x, shape=(*lead, hkv, 1, *tail))
    x = b.broadcast_to(x, shape=(*lead, hkv, heads // hkv, *tail))
    return b.reshape(x, shape=(*lead, heads, *tail))


def _sum_groups(b: Builder, dx: Value, hkv: int) -> Value:
    """The gradient of the repeated heads [..., H, S, E] summed back onto the kv heads."""
    heads = dx.shape[-3]
    if heads == hkv:
        return dx
    lead, tail = dx.shape[:-3], dx.shape[-2:]
    dx = b.reshape(dx, shape=(*lead, hkv, heads // hkv, *tail))
    return b.reduce_sum(dx, axes=[len(lead) + 1], keepdim=False)


def _keys_for(b: Builder, op: Op) -> tuple[Value, Value]:
    """k and v as every query head reads them (repeated over the groups under enable_gqa)."""
    q, k, v = op.inputs[:3]
    if not op.attrs["enable_gqa"]:
        return k, v
    return _repeat_heads(b, k, q.shape[-3]), _repeat_heads(b, v, q.shape[-3])


def _inline(b: Builder, sub: Graph, args: list[Value]) -> list[Value]:
    """A score modification's graph (or its VJP's) emitted with `args` as its inputs (cast to the
    dtypes it declares); its outputs."""
    env = {x: _cast(b, a, x.dtype) for x, a in zip(sub.inputs, args)}
    for o in sub.ops:
        env[o.out] = b.emit(o.name, *(env[v] for v in o.inputs), **o.attrs)
    return [env[v] for v in sub.outputs]


def _base_scores(b: Builder, q: Value, k: Value, attrs: dict) -> Value:
    return b.mul(_cast(b, b.matmul(q, b.transpose_last(k)), _compute_dtype(q.dtype)), attrs["scale"])


def _scores(b: Builder, q: Value, k: Value, mask: Value | None, attrs: dict,
            extras: tuple = ()) -> tuple[Value, Value | None]:
    """q k^T * scale + mask (or its score modification) in the compute dtype, -inf where a key takes no
    part; and where a where lets the score take part (None: everywhere), as the reference's held: a
    score_mod's keep, is_causal or a bool mask under where_mask."""
    acc = _compute_dtype(q.dtype)
    s = _base_scores(b, q, k, attrs)
    held = None
    if attrs.get("score_mod") is not None:
        score, *keep = _inline(b, attrs["score_mod"].graph, [s, *extras])
        s = _cast(b, score, acc)
        s, held = (b.where(keep[0], s, float("-inf")), keep[0]) if keep else (s, None)
    keep = None
    if attrs["is_causal"]:  # PyTorch's top-left aligned tril(ones(L, S)): key j takes part in row i iff j <= i
        keep = b.tril(b.const(True, boolean, s.shape[-2:]))
    elif mask is not None and mask.dtype == boolean:
        keep = mask
    elif mask is not None:
        s = b.add(s, _cast(b, mask, acc))
    if keep is not None:
        s = b.where(keep, s, float("-inf"))
        if attrs.get("where_mask"):
            held = keep if held is None else b.logical_and(held, keep)
    return s, held


def _empty(op: Op) -> bool:
    """No queries, no keys or no batch: every result is a constant (zeros; -inf statistics)."""
    q, k = op.inputs[:2]
    return 0 in (q.shape[-2], k.shape[-2]) or 0 in q.shape[:-2]


def _shift(b: Builder, m: Value) -> Value:
    """A row's max (or log-sum-exp) as the shift of its exponentials: a row with every key masked has
    -inf there; the lowest finite number instead keeps exp at 0 (not NaN from -inf - -inf) and changes
    nothing elsewhere."""
    return b.maximum(m, float(finfo(m.dtype).min))


def _softmax_rows(b: Builder, op: Op, k: Value) -> tuple[Value, Value, Value]:
    """exp(s - shift), the row shift (keepdim) and the row sums of the scores of attention op `op`
    (k: its keys as every query head reads them)."""
    s, _ = _scores(b, op.inputs[0], k, mask_of(op), op.attrs, extras_of(op))
    shift = _shift(b, b.reduce_max(s, axes=[-1], keepdim=True))
    e = b.exp(b.sub(s, shift))
    return e, shift, b.reduce_sum(e, axes=[-1], keepdim=True)


def _forward(rows: dict, b: Builder, op: Op) -> Value:
    """softmax(scores) @ v; a row whose keys are all masked out sums to 0 and gives the reference's 0.
    Keeps the row shift and sums in `rows` for the statistics op of the same attention."""
    if _empty(op):
        return b.const(0.0, op.out.dtype, op.out.shape)  # zeros (empty without queries), as torch
    k, v = _keys_for(b, op)
    e, shift, total = _softmax_rows(b, op, k)
    rows[_key(op)] = shift, total
    p = b.div(e, b.where(b.gt(total, 0.0), total, 1.0))
    return b.matmul(_cast(b, p, op.inputs[0].dtype), v)


def _stats(rows: dict, b: Builder, op: Op) -> Value:
    """shift + log(sum exp(s - shift)) per row (-inf for a row with no key), from the rows of the
    decomposed forward of the same attention when there is one (the scores are not computed twice)."""
    if _empty(op):
        return b.const(float("-inf"), op.out.dtype, op.out.shape)  # log of an empty sum
    shift, total = rows.get(_key(op)) or _softmax_rows(b, op, _keys_for(b, op)[0])[1:]
    lse = b.add(shift, b.log(total))
    return b.reshape(lse, shape=lse.shape[:-1])


def _key(op: Op) -> tuple:
    return op.inputs, tuple(sorted(op.attrs.items()))


def _score_grad(b: Builder, op: Op, k: Value, v: Value) -> tuple[Value, Value]:
    """p = exp(s - stats) and dS = p * (dP - rowsum(dO * O)) in the compute dtype (0 where a where drops
    the score), of backward or bias-gradient op `op` (k, v: as every query head reads them), as the
    reference (and cuDNN) use."""
    q, _, _, out, gout, stats = op.inputs[:6]
    acc = _compute_dtype(q.dtype)
    s, held = _scores(b, q, k, mask_of(op), op.attrs, extras_of(op))
    p = b.exp(b.sub(s, _shift(b, b.reshape(stats, shape=(*stats.shape, 1)))))
    dp = _cast(b, b.matmul(gout, b.transpose_last(v)), acc)
    d = b.reduce_sum(b.mul(_cast(b, gout, acc), _cast(b, out, acc)), axes=[-1], keepdim=True)
    ds = b.mul(p, b.sub(dp, d))
    return p, ds if held is None else b.where(held, ds, 0.0)


def _backward(b: Builder, op: Op) -> Value:
    """dq, dk, dv packed flat."""
    q, k0, v0, _, gout = op.inputs[:5]
    if _empty(op):
        return b.const(0.0, q.dtype, op.out.shape)  # zeros (dk, dv empty without keys; dq without queries)
    k, v = _keys_for(b, op)
    p, ds = _score_grad(b, op, k, v)
    extra_grads = []
    if op.attrs["score_mod"] is not None:  # through the score modification's VJP graph
        ds, *extra_grads = _inline(b, op.attrs["score_mod_grad"].graph,
                                   [_base_scores(b, q, k, op.attrs), *extras_of(op), ds])
        ds = _cast(b, ds, _compute_dtype(q.dtype))
    dv = b.matmul(b.transpose_last(_cast(b, p, q.dtype)), gout)
    # the scale goes into dS once instead of onto dQ and dK separately
    ds = _cast(b, b.mul(ds, op.attrs["scale"]), q.dtype)
    dq = b.matmul(ds, k)
    dk = b.matmul(b.transpose_last(ds), q)
    if op.attrs["enable_gqa"]:
        dk, dv = _sum_groups(b, dk, k0.shape[-3]), _sum_groups(b, dv, v0.shape[-3])
    flat = [b.reshape(_cast(b, x, q.dtype), shape=(x.type.numel,)) for x in (dq, dk, dv, *extra_grads)]
    return b.concat(*flat, axis=0)


def _bias_grad(b: Builder, op: Op) -> Value:
    """The additive mask's gradient: dS (before the scale) summed to the mask's shape."""
    mask = mask_of(op)
    if _empty(op):
        return b.const(0.0, mask.dtype, mask.shape)  # no score, so nothing flows back
    _, ds = _score_grad(b, op, *_keys_for(b, op))
    return _cast(b, b.sum_to(ds, mask.shape), mask.dtype)


def decompose_attention(g: Graph, supported: Supported | None = None) -> Graph:
    """Replace each attention op (forward and backward) that `supported(op)` gives a non-empty reason
    for by the primitive ops computing the same (None: every attention op, reason DECOMPOSE_ALL).

    Before: a verified graph. After: the same function; the attention ops the backend cannot run are
    gone, and the ops replacing one carry its loc with note(reason) appended. g is not modified (it
    is returned as it is when no op needs decomposing)."""
    rows: dict = {}  # a decomposed forward's row shift and sums, which its statistics op reuses
    rules = {FORWARD: partial(_forward, rows), STATS: partial(_stats, rows), BACKWARD: _backward, BIAS_GRAD: _bias_grad}

    def reason(op: Op) -> str:
        why = DECOMPOSE_ALL if supported is None else supported(op)
        return why or (NO_BIAS_CALL if op.name == BIAS_GRAD else "")

    return decompose(g, rules, reason, "decompose_attention",
                     "attention runs as the unfused graph (matmul, softmax, matmul)")
