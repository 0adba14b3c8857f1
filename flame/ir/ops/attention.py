"""Fused attention: scaled_dot_product_attention and its backward, one op each (DESIGN.md §9).

softmax(q @ k^T * scale + mask) @ v with PyTorch's semantics: q [..., H, L, E], k [..., Hkv, S, E],
v [..., Hkv, S, Ev] (equal leading dimensions; Hkv divides H when enable_gqa), an optional 4th input
`mask` that broadcasts to [..., H, L, S] — bool (True = takes part) or additive in q's dtype — and
is_causal (PyTorch's top-left aligned tril(ones(L, S)), never together with a mask). `scale` is always
explicit in the IR (the frontend fills in 1/sqrt(E)). A row that every key is masked out of gives 0,
as torch's math path does.

The IR has single-result ops, so the backward is ONE op whose result packs dq, dk, dv flat
([numel(q) + numel(k) + numel(v)]); the VJP slices and reshapes it. A GPU lowering computes all three
with one library call (cuDNN's sdpa_backward). The mask gets no gradient. References compute in f32
(f64 for f64 inputs) with a max-shifted softmax."""

from __future__ import annotations

import numpy as np

from flame.errors import DTypeError, ShapeError
from flame.ir.ops._shapes import broadcast_shapes
from flame.ir.registry import Attr, OpDef, check_dtype, register
from flame.ir.types import TensorType

ATTRS = {"scale": Attr("float"), "is_causal": Attr("bool", False), "enable_gqa": Attr("bool", False)}
NO_SECOND_ORDER = "second derivatives of attention are not implemented (its backward is one fused op)"


def mask_of(op):
    """The optional mask input of an attention op: after q, k, v (forward) or after q, k, v, out,
    grad_out (backward); None without one."""
    n = 3 if op.name == "scaled_dot_product_attention" else 5
    return op.inputs[n] if len(op.inputs) > n else None


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


def _forward_infer(types, scale, is_causal, enable_gqa):
    if len(types) not in (3, 4):
        raise ShapeError(f"scaled_dot_product_attention: expected q, k, v[, mask], got {len(types)} inputs")
    q, k, v = types[:3]
    _check_qkv("scaled_dot_product_attention", q, k, v, enable_gqa)
    _check_mask("scaled_dot_product_attention", q, k, types[3] if len(types) == 4 else None, is_causal)
    return TensorType(q.shape[:-1] + (v.shape[-1],), q.dtype)


def _backward_infer(types, scale, is_causal, enable_gqa):
    name = "scaled_dot_product_attention_backward"
    if len(types) not in (5, 6):
        raise ShapeError(f"{name}: expected q, k, v, out, grad_out[, mask], got {len(types)} inputs")
    q, k, v, out, gout = types[:5]
    _check_qkv(name, q, k, v, enable_gqa)
    _check_mask(name, q, k, types[5] if len(types) == 6 else None, is_causal)
    want = TensorType(q.shape[:-1] + (v.shape[-1],), q.dtype)
    if out != want or gout != want:
        raise ShapeError(f"{name}: out {out} and grad_out {gout} must both be {want}")
    return TensorType((q.numel + k.numel + v.numel,), q.dtype)


# ---- NumPy references ---------------------------------------------------------------------------------

def _acc(x):
    return x.astype(np.float64 if x.dtype == np.float64 else np.float32)


def _scalar(q, scale):
    """The scale in q's compute dtype, so f32 references multiply by exactly what the op states."""
    return q.dtype.type(scale)


def _repeat_heads(x, h):
    """k or v with its heads repeated to h (grouped-query attention: head i reads kv head i // group)."""
    return x if x.shape[-3] == h else np.repeat(x, h // x.shape[-3], axis=-3)


def _probabilities(q, k, mask, scale, is_causal):
    """softmax(q k^T * scale + mask) with a max shift; rows with no key taking part are 0."""
    s = np.matmul(q, np.swapaxes(k, -1, -2)) * _scalar(q, scale)
    keep = None
    if is_causal:
        keep = np.tril(np.ones(s.shape[-2:], bool))
    elif mask is not None and mask.dtype == bool:
        keep = mask
    elif mask is not None:
        s = s + _acc(mask)
    if keep is not None:
        s = np.where(keep, s, -np.inf)
    m = s.max(-1, keepdims=True)
    e = np.exp(s - np.where(np.isfinite(m), m, 0))
    total = e.sum(-1, keepdims=True)
    return np.where(total > 0, e / np.where(total > 0, total, 1), 0)


def _sdpa_ref(q, k, v, *mask, scale, is_causal, enable_gqa):
    q, k, v = _acc(q), _acc(k), _acc(v)
    h = q.shape[-3] if q.ndim >= 3 else 1
    k, v = (_repeat_heads(k, h), _repeat_heads(v, h)) if enable_gqa else (k, v)
    p = _probabilities(q, k, mask[0] if mask else None, scale, is_causal)
    return np.matmul(p, v)


def _sum_groups(dx, hkv):
    """Gradients of the repeated kv heads summed back onto each kv head."""
    if dx.shape[-3] == hkv:
        return dx
    return dx.reshape(dx.shape[:-3] + (hkv, dx.shape[-3] // hkv) + dx.shape[-2:]).sum(-3)


def _sdpa_backward_ref(q, k, v, out, gout, *mask, scale, is_causal, enable_gqa):
    """dq, dk, dv packed flat. Uses D = rowsum(grad_out * out), as FlashAttention and cuDNN do."""
    q, k0, v0, out, gout = (_acc(x) for x in (q, k, v, out, gout))
    h = q.shape[-3] if q.ndim >= 3 else 1
    k, v = (_repeat_heads(k0, h), _repeat_heads(v0, h)) if enable_gqa else (k0, v0)
    p = _probabilities(q, k, mask[0] if mask else None, scale, is_causal)
    dp = np.matmul(gout, np.swapaxes(v, -1, -2))
    ds = p * (dp - (gout * out).sum(-1, keepdims=True))
    dq = np.matmul(ds, k) * _scalar(q, scale)
    dk = np.matmul(np.swapaxes(ds, -1, -2), q) * _scalar(q, scale)
    dv = np.matmul(np.swapaxes(p, -1, -2), gout)
    if enable_gqa:
        dk, dv = _sum_groups(dk, k0.shape[-3]), _sum_groups(dv, v0.shape[-3])
    return np.concatenate([dq.ravel(), dk.ravel(), dv.ravel()])


def _sdpa_vjp(b, g, q, k, v, *rest, scale, is_causal, enable_gqa):
    """One backward op, then dq, dk, dv as slices of its packed result; no gradient for the mask."""
    mask, out = rest[:-1], rest[-1]
    packed = b.emit("scaled_dot_product_attention_backward", q, k, v, out, g, *mask, scale=scale,
                    is_causal=is_causal, enable_gqa=enable_gqa)
    grads, start = [], 0
    for x in (q, k, v):
        part = b.slice(packed, starts=[start], stops=[start + x.type.numel], steps=[1])
        grads.append(b.reshape(part, shape=x.shape))
        start += x.type.numel
    return (*grads, *(None for _ in mask))


register(OpDef("scaled_dot_product_attention", "library", -1, _forward_infer, _sdpa_ref, dict(ATTRS),
               _sdpa_vjp, compute_f32=True, library="attention", doc="softmax(q k^T * scale + mask) v, one fused op",
               autocast="lower"))
register(OpDef("scaled_dot_product_attention_backward", "library", -1, _backward_infer, _sdpa_backward_ref,
               dict(ATTRS), nondiff=NO_SECOND_ORDER, compute_f32=True, library="attention",
               doc="dq, dk, dv of scaled_dot_product_attention, packed flat in that order"))
