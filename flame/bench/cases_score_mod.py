"""Attention with score modifications written by hand, forward + backward (out, dq, dk, dv from dout),
bf16 [8, 16, T, 64], T 1024 and 4096:

- `attn_causal`: plain causal attention;
- `attn_softcap_alibi`: causal, soft-capping tanh(s / 50) * 50 and ALiBi (slope 2^(-8 (h + 1) / H) per head
  times j - i);
- `attn_window_doc`: a sliding window of 256 keys (i - 256 < j <= i) and a document mask from segment ids
  (tokens attend within their document; the ids are the running count of the `doc` input's zeros, so
  documents are contiguous runs of about 256 tokens).

flame runs the code as written: the attention-recognition pass makes it one scaled_dot_product_attention
op with the modification recorded (cuDNN runs the plain causal case, the generated flash-attention kernel
a modification; FLAME_ATTENTION=decomposed runs it as the unfused graph). torch runs the same code
eagerly (the T x T scores materialised) and under torch.compile; `flex_attention` is
torch.nn.attention.flex_attention compiled, with the equivalent score_mod and a block mask made in the
step (create_block_mask, so its cost is counted, as the document ids are data).
"""

from __future__ import annotations

import math

from flame.bench.cases import _stateless
from flame.bench.spec import Case, Input

CAP, WINDOW = 50.0, 256


def _positions(lib, s):
    """Query and key positions of scores s, made where s is (a user's torch code runs on the GPU)."""
    length = s.shape[-1]
    return lib.arange(length, device=s.device)[:, None], lib.arange(length, device=s.device)[None, :]


def _slopes(lib, heads, device=None):
    return 2.0 ** (-8.0 * (lib.arange(heads, device=device) + 1.0) / heads)


def _softcap_alibi(lib, s, seg):
    i, j = _positions(lib, s)
    s = (s / CAP).tanh() * CAP
    s = s + (_slopes(lib, s.shape[-3], s.device)[:, None, None] * (j - i)).to(s.dtype)
    return s.masked_fill(j > i, float("-inf"))


def _causal(lib, s, seg):
    i, j = _positions(lib, s)
    return s.masked_fill(j > i, float("-inf"))


def _window_doc(lib, s, seg):
    i, j = _positions(lib, s)
    keep = (j <= i) & (i - j < WINDOW) & (seg[:, None, :, None] == seg[:, None, None, :])
    return s.masked_fill(~keep, float("-inf"))


MODS = {"attn_causal": _causal, "attn_softcap_alibi": _softcap_alibi, "attn_window_doc": _window_doc}


def hand_written(lib, softmax, mod):
    """softmax(mod(q k^T / sqrt(D))) v as a user writes it, for flame and torch alike (lib: the module,
    softmax: its softmax), the softmax in f32."""

    def attention(q, k, v, doc):
        seg = (doc == 0).cumsum(-1)
        s = q @ k.transpose(-1, -2) * (1.0 / math.sqrt(q.shape[-1]))
        return softmax(mod(lib, s, seg).float(), -1).to(q.dtype) @ v

    return attention


def _flame(mod):
    def make(s):
        import flame
        import flame.nn.functional as F

        fn = hand_written(flame, F.softmax, mod)

        def loss(q, k, v, dout, doc):
            return (fn(q, k, v, doc) * dout).float().sum()

        grads = flame.value_and_grad(loss, (0, 1, 2))

        def fwd_bwd(q, k, v, dout, doc):
            out = fn(q, k, v, doc)  # CSE shares it with the loss's
            _, (dq, dk, dv) = grads(q, k, v, dout, doc)
            return out, dq, dk, dv

        return fwd_bwd

    return make


def _torch(mod):
    def make(s):
        import torch

        fn = hand_written(torch, torch.softmax, mod)

        def fwd_bwd(q, k, v, dout, doc):
            q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
            out = fn(q, k, v, doc)
            dq, dk, dv = torch.autograd.grad(out, (q, k, v), dout)
            return out.detach(), dq, dk, dv

        return fwd_bwd

    return make


def flex_mods(name: str, seg, heads: int):
    """(score_mod, mask_mod) of FlexAttention equivalent to modification `name` (seg: [B, T] ids)."""
    import torch

    slopes = _slopes(torch, heads).to(seg.device)

    def causal(b, h, i, j):
        return j <= i

    def window_doc(b, h, i, j):
        return (j <= i) & (i - j < WINDOW) & (seg[b, i] == seg[b, j])

    def softcap_alibi(score, b, h, i, j):
        return torch.tanh(score / CAP) * CAP + slopes[h] * (j - i)

    return {
        "attn_causal": (None, causal),
        "attn_softcap_alibi": (softcap_alibi, causal),
        "attn_window_doc": (None, window_doc),
    }[name]


def _flex(name: str):
    def make(s):
        import torch
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention

        flex = torch.compile(flex_attention)

        def forward(q, k, v, doc):
            seg = (doc == 0).cumsum(-1)
            score_mod, mask_mod = flex_mods(name, seg, q.shape[1])
            mask = create_block_mask(mask_mod, q.shape[0], None, q.shape[2], k.shape[2], device=q.device)
            return flex(q, k, v, score_mod=score_mod, block_mask=mask)

        def fwd_bwd(q, k, v, dout, doc):
            q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
            out = forward(q, k, v, doc)
            dq, dk, dv = torch.autograd.grad(out, (q, k, v), dout)
            return out.detach(), dq, dk, dv

        fwd_bwd.forward = forward
        return fwd_bwd

    return make


def _sizes(T: int):
    def sizes(quick: bool) -> dict:
        return {"batch": 1, "heads": 2, "T": 40, "D": 64} if quick else {"batch": 8, "heads": 16, "T": T, "D": 64}

    return sizes


def _inputs(s) -> dict[str, Input]:
    shape = (s["batch"], s["heads"], s["T"], s["D"])
    out = {n: Input(shape, "bf16") for n in ("q", "k", "v", "dout")}
    out["doc"] = Input((s["batch"], s["T"]), "i64", high=WINDOW)  # a zero starts a document: ~256 tokens each
    return out


def _bytes(s) -> int:
    """Read q, k, v and dout once, write out, dq, dk and dv once (bf16); read the document ids."""
    return 8 * s["batch"] * s["heads"] * s["T"] * s["D"] * 2 + s["batch"] * s["T"] * 8


def _flops(name: str):
    def flops(s) -> int:
        """Forward 4 B H D per attended (i, j) pair; the backward 2.5x the forward. Causal: half the
        pairs; the window: at most WINDOW keys per query (the document mask only removes more)."""
        t = s["T"]
        pairs = t * (t + 1) // 2 if name != "attn_window_doc" else sum(min(i + 1, WINDOW) for i in range(t))
        forward = 4 * s["batch"] * s["heads"] * pairs * s["D"]
        return forward + forward * 5 // 2

    return flops


WHAT = {
    "attn_causal": "causal",
    "attn_softcap_alibi": "causal + soft-capping tanh(s/50)*50 + ALiBi",
    "attn_window_doc": "sliding window 256 + document mask from segment ids",
}


def _case(name: str, T: int) -> Case:
    suffix = "" if T == 1024 else "_4k"
    return Case(
        name + suffix,
        f"hand-written attention, {WHAT[name]}, forward + backward (out, dq, dk, dv), "
        f"bf16 [8, 16, {T}, 64]; flex_attention: torch's, compiled, with the same score_mod / block mask",
        sizes=_sizes(T),
        inputs=_inputs,
        min_bytes=_bytes,
        min_flops=_flops(name),
        flame=_stateless(_flame(MODS[name])),
        torch=_stateless(_torch(MODS[name])),
        extra={"flex_attention": ("torch", _stateless(_flex(name)), "eager")},
        tol=3e-2,
    )


SCORE_MOD = [_case(name, T) for T in (1024, 4096) for name in MODS]
