"""Fused attention: scaled_dot_product_attention, its softmax statistics and its backward (ARCHITECTURE.md
"Patterns become ops").

softmax(q @ k^T * scale + mask) @ v with PyTorch's semantics: q [..., H, L, E], k [..., Hkv, S, E],
v [..., Hkv, S, Ev] (equal leading dimensions; Hkv divides H when enable_gqa), an optional 4th input
`mask` that broadcasts to [..., H, L, S] — bool (True = takes part) or additive in q's dtype — and
is_causal (PyTorch's top-left aligned tril(ones(L, S)), never together with a mask). `scale` is always
explicit in the IR (the frontend fills in 1/sqrt(E)). A row that every key is masked out of gives 0,
as torch's math path does.

The IR has single-result ops, so the backward is ONE op whose result packs dq, dk, dv flat
([numel(q) + numel(k) + numel(v)]); the VJP slices and reshapes it. A GPU lowering computes all three
with one library call (cuDNN's sdpa_backward). An additive (float) mask is an attention bias and gets
a gradient, as in PyTorch: scaled_dot_product_attention_bias_grad (same inputs as the backward, the
mask required) is dS = p * (dP - rowsum(dO * O)), the gradient of the scores, summed to the mask's
shape over the dimensions it broadcasts along; autodiff drops it when the mask needs no gradient. A
bool mask and is_causal get none. References compute in f32 (f64 for f64 inputs) with a
max-shifted softmax. With no keys (S = 0) the result is zeros, the statistics -inf, dq zeros, as
torch's hand-written attention gives; there (and with no queries) the mask gets no gradient, as in torch.
(torch's scaled_dot_product_attention adds 0 * (q.sum() + k.sum() + v.sum()) to those zeros, which
turns them, and dq, NaN where an input or the result's gradient is not finite: flame's
F.scaled_dot_product_attention adds the same around this op.)

The backward reads the forward's softmax statistics: scaled_dot_product_attention_stats (same inputs
and attributes as the forward) is the log-sum-exp of each query row's scaled, masked scores,
logsumexp_j(q k^T * scale + mask)[..., H, L] in natural log — cuDNN's "Stats" — in f32 (f64 for f64
inputs); -inf for a row no key takes part in. It is a separate op with a separate value rather than
a second result (the IR has one result per op, and the two have different dtypes): the autodiff
emits it right after the forward (OpDef.residuals) and the fusion pass joins it to its forward, so
one library call writes both; an inference graph has no stats op (DCE), so nothing keeps them. The
backward takes them as its 6th input (q, k, v, out, grad_out, stats[, mask]) and computes the
probabilities as exp(scores - stats), as cuDNN does.

How a mask drops a score decides its gradient where the result's gradient is not finite (elsewhere
both give 0): torch's scaled_dot_product_attention adds -inf (is_causal, a bool mask), so a dropped
score's gradient is p * (dP - D) with p = 0, NaN where dP - D is inf or NaN; attention written by hand
drops scores with where(keep, s, -inf) (or masked_fill), whose gradient there is exactly 0. The bool
attribute `where_mask` says which: False (the default, torch's scaled_dot_product_attention) or True
(is_causal and a bool mask drop scores as a where does: the attention-recognition pass sets it for a
mask it found in a where). A score_mod's keep is a where (below) either way; an additive mask adds.
The references and the decomposition follow it; cuDNN and the flash kernels compute p * (dP - D) at
the scores of the key tiles they visit and nothing for those they skip, whichever it says.

A score modification (what the attention-recognition pass finds between `q @ k^T * scale` and the
softmax of hand-written attention: soft-capping, ALiBi, relative-position biases, sliding windows,
document masks ...) is the graph-valued attribute `score_mod` (a flame.ir.graph.SubGraph) with the
values it reads as the op's inputs after q, k, v (then there is no mask input):

    score_mod(s, *extras) -> score[, keep]     s: the scaled scores [..., H, L, S] in the dtype the user
                                               computed them in; score: the modified scores (same shape,
                                               a float dtype); keep: bool, broadcasting to the scores
                                               (True = takes part)
    scores = where(keep, score, -inf), then is_causal as above (a dropped score's gradient is 0)

`score_mod_grad` is its vector-Jacobian product, made by the autodiff pass from the registry's VJPs:
(s, *extras, g) -> (ds, *one gradient per float extra). The backward op takes the extras after its
six inputs and packs, after dq, dk, dv, the gradient of each float extra (in q's dtype); the VJP
slices them out. The references evaluate the modification on the scores as the unfused graph would,
dropping each intermediate after its last use."""

from __future__ import annotations

import numpy as np

from flame.errors import DTypeError, FlameError, ShapeError
from flame.ir.dtypes import f32
from flame.ir.evaluate import evaluate_outputs
from flame.ir.memo import exact_memo
from flame.ir.ops._shapes import broadcast_shapes
from flame.ir.registry import Attr, OpDef, check_dtype, register
from flame.ir.types import TensorType

ATTRS = {"scale": Attr("float"), "is_causal": Attr("bool", False), "enable_gqa": Attr("bool", False),
         "score_mod": Attr("graph", None), "score_mod_grad": Attr("graph", None), "where_mask": Attr("bool", False)}
NO_SECOND_ORDER = "second derivatives of attention are not implemented (its backward is one fused op)"


FORWARD = "scaled_dot_product_attention"
STATS = "scaled_dot_product_attention_stats"
BACKWARD = "scaled_dot_product_attention_backward"
BIAS_GRAD = "scaled_dot_product_attention_bias_grad"


def _first_after(op) -> int:
    return 6 if op.name in (BACKWARD, BIAS_GRAD) else 3


def mask_of(op):
    """The optional mask input of an attention op: after q, k, v (forward, stats) or after q, k, v,
    out, grad_out, stats (backward, bias gradient); None without one (always with a score_mod)."""
    n = _first_after(op)
    return op.inputs[n] if len(op.inputs) > n and op.attrs.get("score_mod") is None else None


def extras_of(op) -> tuple:
    """The inputs an attention op's score_mod reads (where the mask would be); () without one."""
    return tuple(op.inputs[_first_after(op):]) if op.attrs.get("score_mod") is not None else ()


def float_extras(extras) -> list:
    """The extras (Values or types) that get a gradient: the floating-point ones."""
    return [e for e in extras if (e.type if hasattr(e, "type") else e).dtype.is_float]


def stats_type(q: TensorType) -> TensorType:
    """The statistics' type for query q [..., H, L, E]: [..., H, L] in f32 (f64 for f64 q)."""
    return TensorType(q.shape[:-1], q.dtype if q.dtype.name == "f64" else f32)


def _check_qkv(name, q, k, v, enable_gqa):
    shown = f"{name} q {q}, k {k}, v {v}"
    for t in (q, k, v):
        if t.dtype != q.dtype:
            raise DTypeError(f"{shown}: dtypes differ")
        if t.rank < 2:
            raise ShapeError(f"{shown}: q, k and v need rank >= 2 ([..., L, E])")
    check_dtype(name, q, ("float",))
    if not (q.rank == k.rank == v.rank):
        raise ShapeError(f"{shown}: ranks differ")
    if q.shape[-1] != k.shape[-1] or k.shape[-2] != v.shape[-2]:
        raise ShapeError(f"{shown}: expected q [..., L, E], k [..., S, E], v [..., S, Ev]")
    lead = q.rank - 3 if enable_gqa else q.rank - 2
    if enable_gqa and (q.rank < 3 or k.shape[-3] != v.shape[-3] or k.shape[-3] == 0
                       or q.shape[-3] % k.shape[-3]):
        raise ShapeError(f"{shown}: enable_gqa needs [..., H, L, E] with k and v heads dividing H")
    if q.shape[:lead] != k.shape[:lead] or q.shape[:lead] != v.shape[:lead]:
        raise ShapeError(f"{shown}: leading (batch, head) dimensions differ")


def _check_mask(name, q, k, mask, is_causal):
    if mask is None:
        return
    if is_causal:
        raise ShapeError(f"{name}: give either a mask or is_causal=True, not both (as in PyTorch)")
    if mask.dtype.kind != "bool" and mask.dtype != q.dtype:
        raise DTypeError(f"{name}: mask {mask} must be bool or {q.dtype} like q")
    scores = q.with_shape(q.shape[:-1] + (k.shape[-2],))
    if broadcast_shapes(f"{name}: mask vs scores", [scores, mask]) != scores.shape:
        raise ShapeError(f"{name}: mask {mask} does not broadcast to the scores {scores}")


def _check_mod(name, q, k, extras, score_mod, score_mod_grad):
    """A score modification's graph matches the scores and the extras it reads (module docstring)."""
    sub = score_mod.graph
    scores = q.shape[:-1] + (k.shape[-2],)
    ins, outs = [v.type for v in sub.inputs], [v.type for v in sub.outputs]
    if len(ins) != 1 + len(extras) or list(extras) != ins[1:]:
        raise ShapeError(f"{name}: score_mod reads {ins[1:]} besides the scores, the op gives {list(extras)}")
    if ins[0].shape != scores or not ins[0].dtype.is_float:
        raise ShapeError(f"{name}: score_mod's scores input {ins[0]} must be a float [{', '.join(map(str, scores))}]")
    if not 1 <= len(outs) <= 2 or outs[0].shape != scores or not outs[0].dtype.is_float:
        raise ShapeError(f"{name}: score_mod must give the modified scores (float, shape {scores}) "
                         f"and optionally a bool keep mask, not {outs}")
    if len(outs) == 2 and (outs[1].dtype.kind != "bool"
                           or broadcast_shapes(f"{name}: keep mask", [ins[0], outs[1]]) != scores):
        raise ShapeError(f"{name}: score_mod's keep mask {outs[1]} must be bool and broadcast to {scores}")
    if score_mod_grad is not None:
        grad = score_mod_grad.graph
        want_in, want_out = [*ins, outs[0]], [ins[0], *float_extras(ins[1:])]
        if [v.type for v in grad.inputs] != want_in or [v.type for v in grad.outputs] != want_out:
            raise ShapeError(f"{name}: score_mod_grad must map {want_in} to {want_out}")


def _check_forward(name, types, is_causal, enable_gqa, score_mod=None, score_mod_grad=None):
    q, k, v = types[:3]
    if score_mod is None and len(types) not in (3, 4):
        raise ShapeError(f"{name}: expected q, k, v[, mask], got {len(types)} inputs")
    _check_qkv(name, q, k, v, enable_gqa)
    if score_mod is not None:
        _check_mod(name, q, k, types[3:], score_mod, score_mod_grad)
    else:
        _check_mask(name, q, k, types[3] if len(types) == 4 else None, is_causal)
    return q, v


def _forward_infer(types, scale, is_causal, enable_gqa, where_mask=False, **mod):
    q, v = _check_forward(FORWARD, types, is_causal, enable_gqa, **mod)
    return TensorType(q.shape[:-1] + (v.shape[-1],), q.dtype)


def _stats_infer(types, scale, is_causal, enable_gqa, where_mask=False, **mod):
    q, _ = _check_forward(STATS, types, is_causal, enable_gqa, **mod)
    return stats_type(q)


def _check_saved(name, types):
    """The checks shared by the backward and the bias gradient: q, k, v, out, grad_out, stats[, mask]."""
    q, _, v, out, gout, stats = types[:6]
    want = TensorType(q.shape[:-1] + (v.shape[-1],), q.dtype)
    if out != want or gout != want:
        raise ShapeError(f"{name}: out {out} and grad_out {gout} must both be {want}")
    if stats != stats_type(q):
        raise ShapeError(f"{name}: stats {stats} must be {stats_type(q)} (the forward's log-sum-exp)")


def _backward_infer(types, scale, is_causal, enable_gqa, score_mod=None, score_mod_grad=None, where_mask=False):
    if len(types) < 6 or (score_mod is None and len(types) > 7):
        raise ShapeError(f"{BACKWARD}: expected q, k, v, out, grad_out, stats[, mask], got {len(types)} inputs")
    q, k, v = types[:3]
    _check_qkv(BACKWARD, q, k, v, enable_gqa)
    extra = 0
    if score_mod is not None:
        if score_mod_grad is None:
            raise ShapeError(f"{BACKWARD}: a score_mod needs its score_mod_grad")
        _check_mod(BACKWARD, q, k, types[6:], score_mod, score_mod_grad)
        extra = sum(t.numel for t in float_extras(types[6:]))
    else:
        _check_mask(BACKWARD, q, k, types[6] if len(types) == 7 else None, is_causal)
    _check_saved(BACKWARD, types)
    return TensorType((q.numel + k.numel + v.numel + extra,), q.dtype)


def _bias_grad_infer(types, scale, is_causal, enable_gqa, score_mod=None, score_mod_grad=None, where_mask=False):
    if score_mod is not None:
        raise ShapeError(f"{BIAS_GRAD}: an attention with a score_mod has no mask (its extras get their "
                         f"gradients from the backward)")
    if len(types) != 7:
        raise ShapeError(f"{BIAS_GRAD}: expected q, k, v, out, grad_out, stats, mask, got {len(types)} inputs")
    q, k, v, mask = types[0], types[1], types[2], types[6]
    _check_qkv(BIAS_GRAD, q, k, v, enable_gqa)
    _check_mask(BIAS_GRAD, q, k, mask, is_causal)
    if mask.dtype.kind == "bool":
        raise DTypeError(f"{BIAS_GRAD}: a bool mask {mask} has no gradient (only an additive one does)")
    _check_saved(BIAS_GRAD, types)
    return mask


# ---- NumPy references ---------------------------------------------------------------------------------

def _acc(x):
    return x.astype(np.float64 if x.dtype == np.float64 else np.float32)


def _scalar(q, scale):
    """The scale in q's compute dtype, so f32 references multiply by exactly what the op states."""
    return q.dtype.type(scale)


def _repeat_heads(x, h):
    """k or v with its heads repeated to h (grouped-query attention: head i reads kv head i // group)."""
    return x if x.shape[-3] == h else np.repeat(x, h // x.shape[-3], axis=-3)


def _run_mod(sub, s, extras) -> list:
    """A score modification's graph (or its gradient's) on the scores and extras, inputs cast to the
    dtypes the graph declares."""
    args = [a.astype(v.type.dtype.np_dtype, copy=False) for v, a in zip(sub.inputs, (s, *extras))]
    return evaluate_outputs(sub, args)


@exact_memo
def _scores(q, k, mask, scale, is_causal, score_mod=None, *extras):
    """(s, kept, masked): q k^T * scale + mask (or the score modification of it), -inf where a key takes
    no part; where the score_mod's keep and where is_causal or a bool mask let the score take part
    (bool, broadcasting to s): the first drops as a where, the second as where_mask says."""
    s = np.matmul(q, np.swapaxes(k, -1, -2)) * _scalar(q, scale)
    kept = masked = np.ones((), bool)
    if score_mod is not None:
        outs = _run_mod(score_mod.graph, s, extras)
        s = outs[0].astype(s.dtype)
        if len(outs) > 1:
            s, kept = np.where(outs[1], s, -np.inf), outs[1]
    keep = None
    if is_causal:
        keep = np.tril(np.ones(s.shape[-2:], bool))
    elif mask is not None and mask.dtype == bool:
        keep = mask
    elif mask is not None:
        s = s + _acc(mask)
    if keep is not None:
        s, masked = np.where(keep, s, -np.inf), keep
    return s, kept, masked


@exact_memo
def _softmax_terms(q, k, mask, scale, is_causal, score_mod=None, *extras):
    """The row shift (max, 0 for a row of -inf), exp(scores - shift) and its row sums: what the
    forward's probabilities and its statistics share (kept, so the second reads them)."""
    s = _scores(q, k, mask, scale, is_causal, score_mod, *extras)[0]
    m = s.max(-1, keepdims=True, initial=-np.inf)  # no keys (S = 0): -inf, as a row with every key masked
    shift = np.where(np.isfinite(m), m, 0)
    e = np.exp(s - shift)
    return shift, e, e.sum(-1, keepdims=True)


def _probabilities(q, k, mask, scale, is_causal, score_mod=None, *extras):
    """softmax(q k^T * scale + mask) with a max shift; rows with no key taking part are 0."""
    _, e, total = _softmax_terms(q, k, mask, scale, is_causal, score_mod, *extras)
    return np.where(total > 0, e / np.where(total > 0, total, 1), 0)


def _operands(q, k, v, enable_gqa):
    """q, k, v in the compute dtype, k and v repeated over the query heads under enable_gqa."""
    q, k, v = _acc(q), _acc(k), _acc(v)
    h = q.shape[-3] if q.ndim >= 3 else 1
    return (q, *((_repeat_heads(k, h), _repeat_heads(v, h)) if enable_gqa else (k, v)))


def _mask_and_mod(rest, score_mod):
    """(mask, score_mod, *extras) from the inputs after q, k, v (or after the backward's six)."""
    if score_mod is not None:
        return (None, score_mod, *rest)
    return (rest[0] if rest else None,)


def _sdpa_ref(q, k, v, *rest, scale, is_causal, enable_gqa, score_mod=None, score_mod_grad=None,
              where_mask=False):
    q, k, v = _operands(q, k, v, enable_gqa)
    mask, *mod = _mask_and_mod(rest, score_mod)
    return np.matmul(_probabilities(q, k, mask, scale, is_causal, *mod), v)


def _stats_ref(q, k, v, *rest, scale, is_causal, enable_gqa, score_mod=None, score_mod_grad=None,
               where_mask=False):
    """log(sum(exp(s))) per row with a max shift; -inf for a row with no key taking part."""
    q, k, _ = _operands(q, k, v, enable_gqa)
    mask, *mod = _mask_and_mod(rest, score_mod)
    shift, _, total = _softmax_terms(q, k, mask, scale, is_causal, *mod)
    return (shift + np.log(total))[..., 0]


def _sum_groups(dx, hkv):
    """Gradients of the repeated kv heads summed back onto each kv head."""
    if dx.shape[-3] == hkv:
        return dx
    return dx.reshape(dx.shape[:-3] + (hkv, dx.shape[-3] // hkv) + dx.shape[-2:]).sum(-3)


def _score_grad(q, k, v, out, gout, stats, mask, scale, is_causal, where_mask, *mod):
    """p = exp(s - stats) and dS = p * (dP - D) with dP = grad_out v^T and D = rowsum(grad_out * out):
    the probabilities and the gradient of the scaled, masked (modified) scores, as FlashAttention and
    cuDNN compute them (so wrong statistics give wrong gradients here too), 0 where a where drops the
    score. q, k, v: the operands; mod: (score_mod, *extras) or ()."""
    out, gout, stats = _acc(out), _acc(gout), _acc(stats)[..., None]
    s, kept, masked = _scores(q, k, mask, scale, is_causal, *mod)
    held = kept & masked if where_mask else kept
    p = np.exp(s - np.where(np.isfinite(stats), stats, 0))  # -inf scores (and rows) give 0
    dp = np.matmul(gout, np.swapaxes(v, -1, -2))
    ds = p * (dp - (gout * out).sum(-1, keepdims=True))
    return p, ds if held.ndim == 0 else np.where(held, ds, ds.dtype.type(0))


def _through_mod(q, k, ds, scale, score_mod_grad, extras) -> tuple:
    """The gradient of the scaled scores and of the float extras from that of the modified ones,
    through the score modification's VJP graph."""
    s = np.matmul(q, np.swapaxes(k, -1, -2)) * _scalar(q, scale)
    outs = _run_mod(score_mod_grad.graph, s, (*extras, ds))
    return outs[0].astype(ds.dtype), outs[1:]


def _sdpa_backward_ref(q, k0, v0, out, gout, stats, *rest, scale, is_causal, enable_gqa, score_mod=None,
                       score_mod_grad=None, where_mask=False):
    """dq, dk, dv (then the float extras' gradients) packed flat, from the probabilities and the
    scores' gradient (_score_grad)."""
    q, k, v = _operands(q, k0, v0, enable_gqa)
    mask, *mod = _mask_and_mod(rest, score_mod)
    p, ds = _score_grad(q, k, v, out, gout, stats, mask, scale, is_causal, where_mask, *mod)
    extra_grads = ()
    if score_mod is not None:
        ds, extra_grads = _through_mod(q, k, ds, scale, score_mod_grad, rest)
    gout = _acc(gout)
    dq = np.matmul(ds, k) * _scalar(q, scale)
    dk = np.matmul(np.swapaxes(ds, -1, -2), q) * _scalar(q, scale)
    dv = np.matmul(np.swapaxes(p, -1, -2), gout)
    if enable_gqa:
        dk, dv = _sum_groups(dk, k0.shape[-3]), _sum_groups(dv, v0.shape[-3])
    return np.concatenate([dq.ravel(), dk.ravel(), dv.ravel(), *(g.ravel().astype(dq.dtype) for g in extra_grads)])


def _sum_to(x, shape):
    """x summed over the dimensions along which an array of `shape` broadcasts to x's shape."""
    x = x.sum(axis=tuple(range(x.ndim - len(shape)))) if x.ndim > len(shape) else x
    axes = tuple(i for i, n in enumerate(shape) if n == 1 and x.shape[i] != 1)
    return x.sum(axis=axes, keepdims=True) if axes else x


def _sdpa_bias_grad_ref(q, k, v, out, gout, stats, mask, *, scale, is_causal, enable_gqa, **mod):
    """The additive mask's gradient: dS summed to the mask's shape, in the mask's dtype."""
    q, k, v = _operands(q, k, v, enable_gqa)
    _, ds = _score_grad(q, k, v, out, gout, stats, mask, scale, is_causal, False)
    return _sum_to(ds, mask.shape).astype(mask.dtype)


def _sdpa_residuals(b, q, k, v, *rest, **attrs):
    """What the backward reads besides the inputs and the result: the forward's statistics."""
    return (b.emit(STATS, q, k, v, *rest[:-1], **attrs),)


def _unpack(b, packed, xs) -> list:
    """The parts of a backward's packed result: one gradient per value of xs, in its shape and dtype."""
    grads, start = [], 0
    for x in xs:
        part = b.slice(packed, starts=[start], stops=[start + x.type.numel], steps=[1])
        part = b.reshape(part, shape=x.shape)
        grads.append(part if part.dtype == x.dtype else b.cast(part, dtype=x.dtype))
        start += x.type.numel
    return grads


def _sdpa_vjp(b, g, q, k, v, *rest, **attrs):
    """One backward op, then dq, dk, dv (and a score modification's float extras' gradients) as slices
    of its packed result; an additive mask's gradient from the bias-gradient op (autodiff drops it when
    the mask needs none), none for a bool mask. rest: [mask | *extras,] out, stats (the residual)."""
    mask, out, stats = rest[:-2], rest[-2], rest[-1]
    if attrs["score_mod"] is not None and attrs["score_mod_grad"] is None:
        raise FlameError("scaled_dot_product_attention: this score modification has no gradient graph "
                         "(score_mod_grad); differentiate the hand-written attention instead")
    packed = b.emit(BACKWARD, q, k, v, out, g, stats, *mask, **attrs)
    if attrs["score_mod"] is not None:
        floats = float_extras(mask)
        grads = iter(_unpack(b, packed, (q, k, v, *floats)))
        return (*(next(grads) for _ in range(3)), *(next(grads) if e in floats else None for e in mask))
    grads = _unpack(b, packed, (q, k, v))
    if mask and mask[0].dtype.is_float and q.shape[-2] and k.shape[-2]:  # torch: none when L or S is 0
        return (*grads, b.emit(BIAS_GRAD, q, k, v, out, g, stats, mask[0], **attrs))
    return (*grads, *(None for _ in mask))


register(OpDef(FORWARD, "library", -1, _forward_infer, _sdpa_ref, dict(ATTRS), _sdpa_vjp, compute_f32=True,
               library="attention", doc="softmax(q k^T * scale + mask) v, one fused op", autocast="lower",
               residuals=_sdpa_residuals))
register(OpDef(STATS, "library", -1, _stats_infer, _stats_ref, dict(ATTRS), nondiff=NO_SECOND_ORDER,
               compute_f32=True, library="attention",
               doc="log-sum-exp of each query row of q k^T * scale + mask (the backward's softmax statistics)"))
register(OpDef(BACKWARD, "library", -1, _backward_infer, _sdpa_backward_ref, dict(ATTRS), nondiff=NO_SECOND_ORDER,
               compute_f32=True, library="attention",
               doc="dq, dk, dv of scaled_dot_product_attention from its out and stats, packed flat in that order"))
register(OpDef(BIAS_GRAD, "library", 7, _bias_grad_infer, _sdpa_bias_grad_ref, dict(ATTRS), nondiff=NO_SECOND_ORDER,
               compute_f32=True, library="attention",
               doc="the additive mask's gradient of scaled_dot_product_attention (dS summed to the mask's shape)"))
