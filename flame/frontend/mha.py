"""F.multi_head_attention_forward, torch's functional multi-head attention (nn.MultiheadAttention's
forward): the query, key and value projections, bias_k / bias_v and a zero key appended, the masks
merged, attention (the one fused op unless the weights are asked for or dropout is active, which need
the probabilities written out), the output projection. Inputs are sequence-first [L, N, E] or unbatched
[L, E]; the checks torch makes with `assert` raise AssertionErrors (flame.errors.Asserted*)."""

from __future__ import annotations

import math
import warnings

from flame.errors import AssertedDTypeError, AssertedShapeError, MissingArgumentError, ShapeError
from flame.frontend.context import user_location, user_stacklevel
from flame.frontend.creation import Generator, ones, zeros
from flame.frontend.functional import dropout, linear, scaled_dot_product_attention, softmax
from flame.frontend.losses import pad
from flame.frontend.ops import cat, where
from flame.frontend.tensor import Tensor
from flame.ir.dtypes import boolean

__all__ = ["multi_head_attention_forward"]


def masked_as_additive(mask: Tensor, dtype) -> Tensor:
    """PyTorch's attention masks: bool True = not allowed -> -inf; a float mask is added as it is."""
    if mask.dtype == boolean:
        return where(mask, float("-inf"), 0.0).to(dtype)
    return mask.to(dtype)


def canonical_mask(mask: Tensor | None, mask_name: str, other: Tensor | None, other_name: str, dtype) -> Tensor | None:
    """torch's F._canonical_mask, as the Transformer encoder's modules apply it to their masks: a bool
    mask as an additive one of `dtype` (True -> -inf), a float one as it is; a mask of another dtype
    than `other` (when given) warns as torch's."""
    if mask is None:
        return None
    if mask.dtype != boolean and not mask.dtype.is_floating_point:
        raise AssertedDTypeError(f"only bool and floating types of {mask_name} are supported\n  at {user_location()}")
    if other is not None and mask.dtype != other.dtype:
        warnings.warn(f"Support for mismatched {mask_name} and {other_name} is deprecated. Use same type for both "
                      f"instead.", UserWarning, stacklevel=user_stacklevel())
    return mask if mask.dtype != boolean else masked_as_additive(mask, dtype)


def _causal(length: int, s: int) -> Tensor:
    """True above the diagonal: the keys a query may not attend to under a causal mask."""
    return ones(length, s, dtype=boolean).triu(1)


def _fail(message: str, error: type = AssertedShapeError):
    raise error(f"MultiheadAttention: {message}\n  at {user_location()}")


def _check_inputs(query: Tensor, key: Tensor, value: Tensor, key_padding_mask, attn_mask, num_heads: int,
                  embed_dim: int, separate: bool) -> None:
    """torch's checks of the inputs' ranks, widths and mask dtypes, AssertionErrors as torch's asserts."""
    if query.ndim not in (2, 3) or key.ndim != query.ndim or value.ndim != query.ndim:
        _fail(f"query, key and value must all be 2-D (unbatched) or 3-D, got {list(query.shape)}, "
              f"{list(key.shape)}, {list(value.shape)}")
    for mask, what in ((key_padding_mask, "key_padding_mask"), (attn_mask, "attn_mask")):
        if mask is not None and mask.dtype != boolean and not mask.dtype.is_floating_point:
            _fail(f"only bool and floating types of {what} are supported, got {mask.dtype}", AssertedDTypeError)
    if key_padding_mask is not None and key_padding_mask.ndim != query.ndim - 1:
        _fail(f"key_padding_mask must be {'[S]' if query.ndim == 2 else '[N, S]'} for {query.ndim}-D query, got "
              f"{list(key_padding_mask.shape)}")
    if attn_mask is not None and attn_mask.ndim not in (2, 3):
        _fail(f"attn_mask must be 2-D [L, S] or 3-D [N * num_heads, L, S], got {list(attn_mask.shape)}")
    if attn_mask is not None and query.ndim == 2 and attn_mask.ndim == 3 and \
            tuple(attn_mask.shape) != (num_heads, query.shape[0], key.shape[0]):
        _fail(f"attn_mask {list(attn_mask.shape)} of unbatched query must be [num_heads, L, S] = "
              f"{[num_heads, query.shape[0], key.shape[0]]}")
    if query.shape[-1] != embed_dim:
        _fail(f"query has {query.shape[-1]} features, the module embed_dim {embed_dim}")
    if separate and key.shape[:-1] != value.shape[:-1] or not separate and key.shape != value.shape:
        _fail(f"key {list(key.shape)} and value {list(value.shape)} differ in "
              f"{'sequence and batch dimensions' if separate else 'shape'}")


def _mask(attn_mask, key_padding_mask, n: int, h: int, length: int, s: int, dtype, is_causal: bool):
    """attn_mask and key_padding_mask as one additive mask broadcasting to [N, H, L, S], or None."""
    mask = None
    if attn_mask is not None:
        if attn_mask.ndim == 2 and tuple(attn_mask.shape) == (length, s):
            mask = masked_as_additive(attn_mask, dtype)
        elif attn_mask.ndim == 3 and tuple(attn_mask.shape) == (n * h, length, s):
            mask = masked_as_additive(attn_mask, dtype).reshape(n, h, length, s)
        else:
            raise ShapeError(f"MultiheadAttention: attn_mask {list(attn_mask.shape)} must be [L, S] = "
                             f"{[length, s]} or [N * num_heads, L, S]\n  at {user_location()}")
    if key_padding_mask is not None:
        if tuple(key_padding_mask.shape) != (n, s):
            _fail(f"key_padding_mask {list(key_padding_mask.shape)} must be [N, S] = {[n, s]}")
        kpm = masked_as_additive(key_padding_mask, dtype).reshape(n, 1, 1, s)
        mask = kpm if mask is None else mask + kpm
    if mask is not None and is_causal and attn_mask is None:
        mask = mask + masked_as_additive(_causal(length, s), dtype)
    if mask is not None and mask.shape[-2] != length:
        # [N, 1, 1, S] (padding alone) spelled out over the queries: cuDNN's fused attention takes a
        # mask broadcast over heads, not over query positions
        mask = mask.broadcast_to((n, 1, length, s))
    return mask


def _static(x: Tensor, n: int, h: int, d: int, what: str) -> Tensor:
    """static_k / static_v [N * num_heads, S, head_dim] as [N, H, S, head_dim]."""
    if x.ndim != 3 or x.shape[0] != n * h or x.shape[2] != d:
        _fail(f"{what} must be [N * num_heads, S, head_dim] = [{n * h}, S, {d}], got {list(x.shape)}")
    return x.reshape(n, h, x.shape[1], d)


def multi_head_attention_forward(
        query: Tensor, key: Tensor, value: Tensor, embed_dim_to_check: int, num_heads: int,
        in_proj_weight: Tensor | None, in_proj_bias: Tensor | None, bias_k: Tensor | None, bias_v: Tensor | None,
        add_zero_attn: bool, dropout_p: float, out_proj_weight: Tensor, out_proj_bias: Tensor | None,
        training: bool = True, key_padding_mask: Tensor | None = None, need_weights: bool = True,
        attn_mask: Tensor | None = None, use_separate_proj_weight: bool = False, q_proj_weight: Tensor | None = None,
        k_proj_weight: Tensor | None = None, v_proj_weight: Tensor | None = None, static_k: Tensor | None = None,
        static_v: Tensor | None = None, average_attn_weights: bool = True, is_causal: bool = False,
        generator: Generator | None = None) -> tuple[Tensor, Tensor | None]:
    """torch.nn.functional.multi_head_attention_forward: (output [L, N, E] ([L, E] unbatched), weights
    [N, L, S] averaged over heads, [N, H, L, S] otherwise, or None with need_weights=False).
    in_proj_weight [3E, E] (or, with use_separate_proj_weight, q/k/v_proj_weight [E, E], [E, kdim],
    [E, vdim]), in_proj_bias [3E]; bias_k / bias_v [1, 1, E] append a learned key and value, add_zero_attn
    a zero one, every query allowed to attend to them; static_k / static_v [N * H, S, E / H] stand for the
    projected keys and values. key_padding_mask [N, S] and attn_mask [L, S] or [N * H, L, S]: True (bool)
    marks keys a query may not attend to, float masks are added. is_causal is torch's hint that attn_mask
    is the causal mask (without attn_mask, torch's RuntimeError): with need_weights=False and no
    key_padding_mask attn_mask is dropped and the top-left causal mask over every key (the appended ones
    too) applies. dropout_p applies when training (drawn from generator, flame's default one if None)."""
    if embed_dim_to_check % num_heads:
        _fail(f"embed_dim {embed_dim_to_check} not divisible by num_heads {num_heads}")
    _check_inputs(query, key, value, key_padding_mask, attn_mask, num_heads, embed_dim_to_check,
                  use_separate_proj_weight)
    if key_padding_mask is not None and attn_mask is not None and key_padding_mask.dtype != attn_mask.dtype:
        warnings.warn("Support for mismatched key_padding_mask and attn_mask is deprecated. Use same type for both "
                      "instead.", UserWarning, stacklevel=user_stacklevel())
    if is_causal and attn_mask is None:
        raise MissingArgumentError("Need attn_mask if specifying the is_causal hint. You may use the Transformer "
                                   "module method `generate_square_subsequent_mask` to create this mask.\n  at "
                                   f"{user_location()}")
    unbatched = query.ndim == 2
    if unbatched:
        query, key, value = query.unsqueeze(0), key.unsqueeze(0), value.unsqueeze(0)
        key_padding_mask = None if key_padding_mask is None else key_padding_mask.unsqueeze(0)
    else:
        query, key, value = (x.transpose(0, 1) for x in (query, key, value))
    n, length, e = query.shape
    if key.shape[0] != n:
        raise ShapeError(f"MultiheadAttention: query holds a batch of {n}, key and value of {key.shape[0]}"
                         f"\n  at {user_location()}")
    if use_separate_proj_weight:
        wq, wk, wv = q_proj_weight, k_proj_weight, v_proj_weight
    else:
        wq, wk, wv = in_proj_weight.chunk(3, 0)
    bq, bk, bv = (None, None, None) if in_proj_bias is None else in_proj_bias.chunk(3, 0)
    h, d = num_heads, e // num_heads

    def heads(x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
        return linear(x, weight, bias).reshape(n, x.shape[1], h, d).transpose(1, 2)

    q = heads(query, wq, bq)
    k = heads(key, wk, bk) if static_k is None else _static(static_k, n, h, d, "static_k")
    v = heads(value, wv, bv) if static_v is None else _static(static_v, n, h, d, "static_v")
    s = k.shape[2]
    if bias_k is not None and bias_v is not None:  # one more key and value, learned
        if static_k is not None or static_v is not None:
            _fail("bias_k and bias_v cannot be added to static keys and values")
        k = cat([k, bias_k.reshape(1, h, 1, d).expand(n, h, 1, d)], 2)
        v = cat([v, bias_v.reshape(1, h, 1, d).expand(n, h, 1, d)], 2)
    if add_zero_attn:  # and a zero one
        k = cat([k, zeros(n, h, 1, d, dtype=k.dtype)], 2)
        v = cat([v, zeros(n, h, 1, d, dtype=v.dtype)], 2)
    if is_causal and key_padding_mask is None and not need_weights:
        # torch's hint: is_causal stands for attn_mask (which is dropped), the causal mask then spanning
        # the appended keys too (bias_kv, zero_attn), top-left aligned as scaled_dot_product_attention's
        attn_mask = None
    mask = _mask(attn_mask, key_padding_mask, n, h, length, s, q.dtype, is_causal)
    extra = k.shape[2] - s
    if extra and mask is not None:  # every query may attend to the appended keys
        mask = pad(mask, (0, extra))
    p = dropout_p if training else 0.0
    if need_weights or p:
        scores = q @ k.transpose(-1, -2) * (1.0 / math.sqrt(d))
        if mask is not None:
            scores = scores + mask
        elif is_causal:
            scores = scores + masked_as_additive(_causal(length, k.shape[2]), scores.dtype)
        probs = softmax(scores, -1)
        if p:  # the weights handed back are the dropped-out ones, as PyTorch's
            probs = dropout(probs, p, True, generator=generator)
        out = probs @ v
    else:
        probs = None
        out = scaled_dot_product_attention(q, k, v, mask, is_causal=is_causal and mask is None)
    out = linear(out.transpose(1, 2).reshape(n, length, e), out_proj_weight, out_proj_bias)
    out = out.squeeze(0) if unbatched else out.transpose(0, 1)
    if not need_weights:
        return out, None
    weights = probs.mean(1) if average_attn_weights else probs
    return out, weights.squeeze(0) if unbatched else weights
