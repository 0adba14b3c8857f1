"""The Llama-style block training case (`llama_block_train`): one decoder block as Llama 2/3 build it,
bf16 parameters and activations, no biases, AdamW:

    h = x + wo(sdpa(rope(wq(rms_norm(x))), rope(wk(rms_norm(x))), wv(rms_norm(x)), causal, GQA))
    y = h + w_down(silu(w_gate(rms_norm(h))) * w_up(rms_norm(h)))

Shape (full): batch 4, T 2048, d 2048, 16 query heads and 4 key/value heads of head dim 128
(grouped-query attention, 4 query heads per key/value head), SwiGLU hidden 5632 (8/3 d rounded up to
a multiple of 256, as Llama does). `llama7b_block_train` is the same step at Llama 2 7B's widths (d 4096,
32 query heads, hidden 11008) with 8 key/value heads, T 2048, batch 2. Each has an `_fp8` twin whose
Linear GEMMs run in FP8. --quick: batch 2, T 16, d 64, 4 / 2 heads of 16, hidden 128.
RoPE is the rotate-half form (`x * cos + rotate_half(x) * sin`, base 10000) with the tables computed
inside the step from positions, as a model's forward computes them; every framework writes the same
math. Attention goes through each framework's scaled_dot_product_attention with is_causal and
enable_gqa (key/value heads shared by groups of query heads). The loss is mean(y.float()**2).

Matmul flops (`_flops`, what "% of the matmul ceiling" counts): forward + backward are 3x the
forward; the forward does 2 flops per weight per token in the projections and, per token, 2 * T/2 * d
in each of q k^T and att v under the causal mask (half the keys on average)."""

from __future__ import annotations

from flame.bench.cases_gpt import _bytes
from flame.bench.cases_train import BF16_UPDATE_TOL, LR, WD
from flame.bench.spec import Bound, Case, Input

# FP8 against the bf16 peer: the loss within FP8's rounding (e4m3 has 3 mantissa bits); one AdamW step's
# change of a weight element is about lr * sign(g), and FP8 gradients flip the sign of the smallest ones
FP8_TOL, FP8_UPDATE_TOL = 5e-2, 0.5
WEIGHTS = ("wq", "wk", "wv", "wo", "w_gate", "w_up", "w_down")  # the matmul weights, compared after a step
ROPE_BASE = 10000.0


def _sizes(quick: bool) -> dict:
    if quick:
        return {"batch": 2, "T": 16, "d": 64, "heads": 4, "kv_heads": 2, "hidden": 128}
    return {"batch": 4, "T": 2048, "d": 2048, "heads": 16, "kv_heads": 4, "hidden": 5632}


def _sizes_7b(quick: bool) -> dict:
    """The Llama 2 7B block's widths (d 4096, 32 query heads, hidden 11008) with 8 key/value heads,
    T 2048, batch 2: where FP8 GEMMs are large enough to pay for their casts."""
    if quick:
        return _sizes(quick)
    return {"batch": 2, "T": 2048, "d": 4096, "heads": 32, "kv_heads": 8, "hidden": 11008}


def _shapes(s) -> dict[str, tuple[int, ...]]:
    d, kv = s["d"], s["kv_heads"] * (s["d"] // s["heads"])
    return {
        "attn_norm": (d,),
        "wq": (d, d),
        "wk": (kv, d),
        "wv": (kv, d),
        "wo": (d, d),
        "mlp_norm": (d,),
        "w_gate": (s["hidden"], d),
        "w_up": (s["hidden"], d),
        "w_down": (d, s["hidden"]),
    }


def _inputs(s) -> dict[str, Input]:
    """The data x and the block's parameters (state): N(0, 0.02) weights, norm weights near 1."""
    dt = s.get("dtype", "bf16")
    ins = {"x": Input((s["batch"], s["T"], s["d"]), dt)}
    for n, shape in _shapes(s).items():
        norm = n.endswith("norm")
        ins[n] = Input(shape, dt, scale=0.02, mean=1.0 if norm else 0.0, state=True)
    return ins


def _flops(s) -> int:
    """Matmul flops of one step (module docstring)."""
    tokens, T, d = s["batch"] * s["T"], s["T"], s["d"]
    weights = sum(a * b for n, (a, b) in ((n, sh) for n, sh in _shapes(s).items() if len(sh) == 2))
    return 6 * tokens * weights + 6 * tokens * T * d


# ---- flame -----------------------------------------------------------------------------------------


def _flame_rope(s):
    """(cos, sin) [T, head_dim] in the case's dtype, computed from positions."""
    import flame

    hd = s["d"] // s["heads"]
    inv = 1.0 / (ROPE_BASE ** (flame.arange(0, hd, 2).float() / hd))
    ang = flame.arange(s["T"]).float().reshape(-1, 1) * inv.reshape(1, -1)
    ang = flame.cat([ang, ang], dim=-1)
    dt = flame.bf16 if s.get("dtype", "bf16") == "bf16" else flame.f32
    return ang.cos().to(dt), ang.sin().to(dt)


def _rotate(x, cos, sin):
    """Rotary embedding, rotate-half form; works on flame and torch tensors alike."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    rotated = _cat(x, -x2, x1)
    return x * cos + rotated * sin


def _cat(like, a, b):
    if type(like).__module__.startswith("torch"):
        import torch

        return torch.cat([a, b], dim=-1)
    import flame

    return flame.cat([a, b], dim=-1)


def _block(F, x, p, s, cos, sin, linear):
    """The block (module docstring) in framework F's functional API (flame.nn.functional or
    torch.nn.functional: the same names); `linear(h, name)` is the projection without bias."""
    B, T, C = x.shape
    H, KV = s["heads"], s["kv_heads"]
    D = C // H
    h = F.rms_norm(x, (C,), p["attn_norm"], 1e-5)
    q = linear(h, "wq").reshape(B, T, H, D).transpose(1, 2)
    k = linear(h, "wk").reshape(B, T, KV, D).transpose(1, 2)
    v = linear(h, "wv").reshape(B, T, KV, D).transpose(1, 2)
    q, k = _rotate(q, cos, sin), _rotate(k, cos, sin)
    y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    x = x + linear(y.transpose(1, 2).reshape(B, T, C), "wo")
    h = F.rms_norm(x, (C,), p["mlp_norm"], 1e-5)
    return x + linear(F.silu(linear(h, "w_gate")) * linear(h, "w_up"), "w_down")


def _flame_llama(s, a, wrap, fp8: bool = False):
    """The block's step; fp8: its forward under flame.amp.Float8Recipe() (current scaling: the Linear
    GEMMs in e4m3, their gradients in e5m2)."""
    import contextlib

    import flame
    import flame.nn as nn
    import flame.nn.functional as F

    p = {n: nn.Parameter(a[n]) for n in _shapes(s)}
    opt = flame.optim.AdamW(list(p.values()), lr=LR, weight_decay=WD)

    def step(x):
        with flame.autocast(dtype=flame.amp.Float8Recipe()) if fp8 else contextlib.nullcontext():
            cos, sin = _flame_rope(s)
            y = _block(F, x, p, s, cos, sin, lambda h, n: F.linear(h, p[n]))
            loss = (y.float() ** 2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss

    return Bound(wrap(step), lambda: [p[n] for n in WEIGHTS])


def _flame_llama_fp8(s, a, wrap):
    return _flame_llama(s, a, wrap, fp8=True)


# ---- torch -----------------------------------------------------------------------------------------


def _torch_rope(s, device):
    import torch

    hd = s["d"] // s["heads"]
    inv = 1.0 / (ROPE_BASE ** (torch.arange(0, hd, 2, device=device).float() / hd))
    ang = torch.arange(s["T"], device=device).float().reshape(-1, 1) * inv.reshape(1, -1)
    ang = torch.cat([ang, ang], dim=-1)
    dt = torch.bfloat16 if s.get("dtype", "bf16") == "bf16" else torch.float32
    return ang.cos().to(dt), ang.sin().to(dt)


def _torch_llama(s, a, wrap):
    import torch
    import torch.nn.functional as F

    p = {n: torch.nn.Parameter(a[n]) for n in _shapes(s)}
    return _torch_bound(s, p, wrap, lambda h, n: F.linear(h, p[n]))


def _torch_bound(s, p: dict, wrap, project):
    """The block's torch step (AdamW over p, the loss of the suite's Llama case) with its projections
    computed by project(h, weight name)."""
    import torch
    import torch.nn.functional as F

    opt = torch.optim.AdamW(list(p.values()), lr=LR, weight_decay=WD)

    def step(x):
        cos, sin = _torch_rope(s, x.device)
        y = _block(F, x, p, s, cos, sin, project)
        loss = (y.float() ** 2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.detach()

    return Bound(wrap(step), lambda: [p[n] for n in WEIGHTS])


def _torchao_llama(s, a, wrap):
    """The block's step with torchao's float8 training (convert_to_float8_training: dynamic per-tensor
    scaling, e4m3 forward, e5m2 gradients) on its projections as bias-free nn.Linear modules."""
    try:
        from torchao.float8 import convert_to_float8_training
    except ImportError:
        raise RuntimeError("torchao is not installed (the float8 training peer needs it)") from None
    import torch

    p = {n: torch.nn.Parameter(a[n]) for n in _shapes(s)}
    mods = torch.nn.ModuleDict()
    for n in WEIGHTS:
        out_f, in_f = p[n].shape
        mods[n] = torch.nn.Linear(in_f, out_f, bias=False, device=p[n].device, dtype=p[n].dtype)
        mods[n].weight = p[n]
    convert_to_float8_training(mods)
    return _torch_bound(s, p, wrap, lambda h, n: mods[n](h))


def _cases(name: str, sizes, shape: str) -> list[Case]:
    """The bf16 case and its FP8 twin at one shape."""
    return [
        Case(
            name,
            "bf16 Llama-style block training step: RMSNorm, RoPE, grouped-query causal attention "
            f"through SDPA, SwiGLU MLP, no biases, {shape}, loss mean(y.float()**2), AdamW",
            sizes=sizes,
            inputs=_inputs,
            min_bytes=_bytes(_inputs),
            min_flops=_flops,
            flame=_flame_llama,
            torch=_torch_llama,
            tol=2e-2,
            state_tol=BF16_UPDATE_TOL,
        ),
        Case(
            f"{name}_fp8",
            f"{name} (same sizes) with its Linear GEMMs in FP8 (flame.amp.Float8Recipe(): current "
            "scaling, e4m3 forward, e5m2 gradients); peers: the torch bf16 step, and torchao's float8 training "
            "(torch.compile'd) where torchao is installed",
            sizes=sizes,
            inputs=_inputs,
            min_bytes=_bytes(_inputs),
            min_flops=_flops,
            flame=_flame_llama_fp8,
            torch=_torch_llama,
            extra={"torchao float8": ("torch", _torchao_llama, "compiled")},
            tol=FP8_TOL,
            state_tol=FP8_UPDATE_TOL,
        ),
    ]


LLAMA = _cases(
    "llama_block_train", _sizes, "16 query / 4 key-value heads of 128, hidden 5632, d 2048, T 2048, batch 4"
) + _cases(
    "llama7b_block_train", _sizes_7b, "32 query / 8 key-value heads of 128, hidden 11008, d 4096, T 2048, batch 2"
)
