"""Attention the backend cannot run as one call becomes the unfused graph again (DESIGN.md §9).

scaled_dot_product_attention and its backward are one op each so that the GPU can run them as one
cuDNN call; cuDNN does not take every case (f32, odd head sizes, some mask broadcasts ...). For such an
op, `supported(op)` gives the reason and this pass replaces the op by primitive ops computing what its
NumPy reference computes (flame/ir/ops/attention.py):

    s = (q @ k^T) * scale                      in the compute dtype (f32; f64 for f64 inputs)
    s = s + mask | where(keep, s, -inf)        additive or bool mask; is_causal: keep = tril(ones(L, S))
    p = exp(s - max s) / sum                   a row with no key taking part gives 0, as the reference
    out = p @ v

f16/bf16 matmuls stay in the input dtype (cuBLAS accumulates in f32); the scores, the softmax and the
backward's dS are computed in f32 between casts. Grouped-query attention repeats each key/value head
over its group of query heads (reshape, broadcast_to, reshape); the backward sums the group back.
The backward recomputes p and packs dq, dk, dv flat, as the op does:

    dV = p^T @ dO    dP = dO @ V^T    dS = p * (dP - rowsum(dO * O)) * scale    dQ = dS @ K    dK = dS^T @ Q

Every op that replaces an attention op carries the op's source line with `[decompose_attention:
<reason>]` appended (so dumps and `flame explain` say why the attention is not one call), and each
reason is logged at info level once per process."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from flame.ir.builder import Builder
from flame.ir.dtypes import DType, boolean, f32, f64
from flame.ir.graph import Graph, Op, Value
from flame.ir.ops.attention import mask_of
from flame.passes._rewrite import DECOMPOSE_ALL, Supported, decompose  # noqa: F401  (DECOMPOSE_ALL: re-exported)

FORWARD, BACKWARD = "scaled_dot_product_attention", "scaled_dot_product_attention_backward"
ATTENTION_OPS = (FORWARD, BACKWARD)



def all_supported(op: Op) -> str:
    """The reference executor runs every attention op as it is (its reference is NumPy)."""
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


def _probabilities(b: Builder, q: Value, k: Value, mask: Value | None, attrs: dict) -> Value:
    """softmax(q k^T * scale + mask) in the compute dtype, as the reference: rows whose keys are all
    masked out are 0."""
    acc = _compute_dtype(q.dtype)
    s = b.mul(_cast(b, b.matmul(q, b.transpose_last(k)), acc), attrs["scale"])
    keep = None
    if attrs["is_causal"]:  # PyTorch's top-left aligned tril(ones(L, S)): key j takes part in row i iff j <= i
        keep = b.tril(b.const(True, boolean, s.shape[-2:]))
    elif mask is not None and mask.dtype == boolean:
        keep = mask
    elif mask is not None:
        s = b.add(s, _cast(b, mask, acc))
    if keep is not None:
        s = b.where(keep, s, float("-inf"))
    # a row with every key masked has max -inf; shifting by the lowest finite number instead keeps
    # exp at 0 there (not NaN from -inf - -inf) and changes nothing elsewhere
    shift = b.maximum(b.reduce_max(s, axes=[-1], keepdim=True), float(np.finfo(acc.np_dtype).min))
    e = b.exp(b.sub(s, shift))
    total = b.reduce_sum(e, axes=[-1], keepdim=True)
    # such a row sums to 0 and all its e are 0: dividing by 1 there gives the reference's 0
    return b.div(e, b.where(b.gt(total, 0.0), total, 1.0))


def _forward(b: Builder, op: Op) -> Value:
    q = op.inputs[0]
    k, v = _keys_for(b, op)
    p = _probabilities(b, q, k, mask_of(op), op.attrs)
    return b.matmul(_cast(b, p, q.dtype), v)


def _backward(b: Builder, op: Op) -> Value:
    """dq, dk, dv packed flat, with D = rowsum(dO * O) as the reference (and cuDNN) use."""
    q, k0, v0, out, gout = op.inputs[:5]
    acc = _compute_dtype(q.dtype)
    k, v = _keys_for(b, op)
    p = _probabilities(b, q, k, mask_of(op), op.attrs)
    dv = b.matmul(b.transpose_last(_cast(b, p, q.dtype)), gout)
    dp = _cast(b, b.matmul(gout, b.transpose_last(v)), acc)
    d = b.reduce_sum(b.mul(_cast(b, gout, acc), _cast(b, out, acc)), axes=[-1], keepdim=True)
    # the scale goes into dS once instead of onto dQ and dK separately
    ds = _cast(b, b.mul(b.mul(p, b.sub(dp, d)), op.attrs["scale"]), q.dtype)
    dq = b.matmul(ds, k)
    dk = b.matmul(b.transpose_last(ds), q)
    if op.attrs["enable_gqa"]:
        dk, dv = _sum_groups(b, dk, k0.shape[-3]), _sum_groups(b, dv, v0.shape[-3])
    flat = [b.reshape(x, shape=(x.type.numel,)) for x in (dq, dk, dv)]
    return b.concat(*flat, axis=0)


_DECOMPOSITIONS: dict[str, Callable[[Builder, Op], Value]] = {FORWARD: _forward, BACKWARD: _backward}




def decompose_attention(g: Graph, supported: Supported | None = None) -> Graph:
    """Replace each attention op (forward and backward) that `supported(op)` gives a non-empty reason
    for by the primitive ops computing the same (None: every attention op, reason DECOMPOSE_ALL).

    Before: a verified graph. After: the same function; the attention ops the backend cannot run are
    gone, and the ops replacing one carry its loc with note(reason) appended. g is not modified (it
    is returned as it is when no op needs decomposing)."""
    return decompose(g, _DECOMPOSITIONS, supported, "decompose_attention",
                     "attention runs as the unfused graph (matmul, softmax, matmul)")
