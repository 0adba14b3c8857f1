"""The transformer training cases: AdamW alone over a GPT's parameters (`adamw_multi_tensor`: one step
over 52 tensors of mixed sizes, against the copy ceiling and torch's foreach and fused AdamW), one GPT
block step (`gpt_block_train`) and a whole small GPT step (`gpt_train`), bf16, pre-LayerNorm, GELU MLP
(4x), AdamW. flame writes attention by hand (`q @ k^T * scale + causal additive mask`, softmax, `@ v`),
as users do; PyTorch runs
`scaled_dot_product_attention(is_causal=True)` and JAX `jax.nn.dot_product_attention(is_causal=True)`,
their fused attention, with the same math. The parameters are state inputs (each framework updates its
own copy); `Bound.state()` lists the matmul weights, whose one-step updates are compared (LayerNorm
weights near 1 are left out: a bf16 ulp there is larger than the learning rate)."""

from __future__ import annotations

from flame.bench.cases_train import BF16_UPDATE_TOL, LR, WD, _jax_adamw_update, adamw_flame, adamw_jax, adamw_torch
from flame.bench.spec import Bound, Case, Input

CHECKED = ("w_qkv", "w_o", "w_fc", "w_proj")  # the block weights whose updates are compared


def _block_inputs(s, pre: str = "") -> dict[str, Input]:
    """A block's 12 parameters (GPT-2's init: N(0, 0.02) weights, residual projections scaled down)."""
    d, proj = s["d"], 0.02 / (2 * s.get("layers", 1)) ** 0.5
    shapes = {"ln1_w": (d,), "ln1_b": (d,), "w_qkv": (3 * d, d), "b_qkv": (3 * d,), "w_o": (d, d), "b_o": (d,),
              "ln2_w": (d,), "ln2_b": (d,), "w_fc": (4 * d, d), "b_fc": (4 * d,), "w_proj": (d, 4 * d),
              "b_proj": (d,)}
    scale = {"w_qkv": 0.02, "w_fc": 0.02, "w_o": proj, "w_proj": proj}
    dt = s.get("dtype", "bf16")
    return {pre + n: Input(shape, dt, scale=scale.get(n, 0.02), mean=1.0 if n.endswith("_w") else 0.0, state=True)
            for n, shape in shapes.items()}


def _gpt_inputs(s) -> dict[str, Input]:
    dt = s.get("dtype", "bf16")
    ins = {"idx": Input((s["batch"], s["T"]), "i64", high=s["vocab"]),
           "targets": Input((s["batch"], s["T"]), "i64", high=s["vocab"]),
           "wte": Input((s["vocab"], s["d"]), dt, scale=0.02, state=True),
           "wpe": Input((s["T"], s["d"]), dt, scale=0.01, state=True)}
    for i in range(s["layers"]):
        ins.update(_block_inputs(s, f"h{i}."))
    ins["lnf_w"] = Input((s["d"],), dt, scale=0.02, mean=1.0, state=True)
    ins["lnf_b"] = Input((s["d"],), dt, scale=0.02, state=True)
    return ins


def _block_case_inputs(s) -> dict[str, Input]:
    return {"x": Input((s["batch"], s["T"], s["d"]), s.get("dtype", "bf16")), **_block_inputs(s)}


def _params(s) -> list[str]:
    """The parameter names of a case, in Input order (state inputs)."""
    return [n for n, i in (_gpt_inputs(s) if "vocab" in s else _block_case_inputs(s)).items() if i.state]


def _checked(s) -> list[str]:
    if "vocab" not in s:
        return list(CHECKED)
    last = s["layers"] - 1
    return ["wte", "wpe", *[f"h0.{n}" for n in CHECKED], *[f"h{last}.{n}" for n in CHECKED]]


# ---- flame: attention written by hand --------------------------------------------------------------


def _flame_linear(h, p, pre: str, name: str):
    """The block's projection `name` (qkv, o, fc, proj): h @ w.T + b."""
    import flame.nn.functional as F

    return F.linear(h, p[pre + "w_" + name], p[pre + "b_" + name])


def _flame_block(x, p, pre: str, s, mask, linear=_flame_linear):
    import flame.nn.functional as F

    B, T, C = x.shape
    H = s["heads"]
    D = C // H
    h = F.layer_norm(x, (C,), p[pre + "ln1_w"], p[pre + "ln1_b"])
    qkv = linear(h, p, pre, "qkv").reshape(B, T, 3, H, D).permute(2, 0, 3, 1, 4)
    q, k, v = qkv[0], qkv[1], qkv[2]
    att = F.softmax(q @ k.transpose(-1, -2) * (D**-0.5) + mask, dim=-1)
    y = (att @ v).transpose(1, 2).reshape(B, T, C)
    x = x + linear(y, p, pre, "o")
    h = F.layer_norm(x, (C,), p[pre + "ln2_w"], p[pre + "ln2_b"])
    return x + linear(F.gelu(linear(h, p, pre, "fc")), p, pre, "proj")


def _flame_mask(s):
    """The causal additive mask: 0 on and below the diagonal, -inf above, in the case's dtype. Built
    inside the step, as users write it (`full(...).triu(1)`): a constant of the graph, so the rewrite
    to fused attention sees that it is causal (a mask tensor captured from outside the step stays an
    additive-mask input of the attention op: cuDNN then reads it as a bias and skips no blocks)."""
    import flame

    m = flame.full((s["T"], s["T"]), float("-inf")).triu(1)
    return m.to(flame.bf16) if s.get("dtype", "bf16") == "bf16" else m


def _flame_setup(s, a):
    import flame
    import flame.nn as nn

    p = {n: nn.Parameter(a[n]) for n in _params(s)}
    opt = flame.optim.AdamW(list(p.values()), lr=LR, weight_decay=WD)
    return p, opt


def _flame_gpt_block(s, a, wrap):
    p, opt = _flame_setup(s, a)

    def step(x):
        y = _flame_block(x, p, "", s, _flame_mask(s))
        loss = (y.float() ** 2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss

    return Bound(wrap(step), lambda: [p[n] for n in _checked(s)])


def _flame_gpt_loss(p, s, idx, targets, linear=_flame_linear):
    """The whole GPT's cross-entropy; `linear` computes each block projection."""
    import flame.nn.functional as F

    mask = _flame_mask(s)
    x = F.embedding(idx, p["wte"]) + p["wpe"]
    for i in range(s["layers"]):
        x = _flame_block(x, p, f"h{i}.", s, mask, linear)
    x = F.layer_norm(x, (s["d"],), p["lnf_w"], p["lnf_b"])
    logits = x @ p["wte"].transpose(0, 1)  # the tied output head
    return F.cross_entropy(logits.float().reshape(-1, s["vocab"]), targets.reshape(-1))


def _flame_gpt(s, a, wrap):
    p, opt = _flame_setup(s, a)

    def step(idx, targets):
        loss = _flame_gpt_loss(p, s, idx, targets)
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss

    return Bound(wrap(step), lambda: [p[n] for n in _checked(s)])


# ---- torch: scaled_dot_product_attention ------------------------------------------------------------


def _torch_linear(h, p, pre: str, name: str):
    import torch.nn.functional as F

    return F.linear(h, p[pre + "w_" + name], p[pre + "b_" + name])


def _torch_block(x, p, pre: str, s, linear=_torch_linear):
    import torch.nn.functional as F

    B, T, C = x.shape
    H = s["heads"]
    h = F.layer_norm(x, (C,), p[pre + "ln1_w"], p[pre + "ln1_b"])
    qkv = linear(h, p, pre, "qkv").reshape(B, T, 3, H, C // H).permute(2, 0, 3, 1, 4)
    y = F.scaled_dot_product_attention(qkv[0], qkv[1], qkv[2], is_causal=True).transpose(1, 2).reshape(B, T, C)
    x = x + linear(y, p, pre, "o")
    h = F.layer_norm(x, (C,), p[pre + "ln2_w"], p[pre + "ln2_b"])
    return x + linear(F.gelu(linear(h, p, pre, "fc")), p, pre, "proj")


def _torch_setup(s, a):
    import torch

    p = {n: torch.nn.Parameter(a[n]) for n in _params(s)}
    return p, torch.optim.AdamW(list(p.values()), lr=LR, weight_decay=WD)


def _torch_gpt_block(s, a, wrap):
    p, opt = _torch_setup(s, a)

    def step(x):
        loss = (_torch_block(x, p, "", s).float() ** 2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.detach()

    return Bound(wrap(step), lambda: [p[n] for n in _checked(s)])


def _torch_gpt_loss(p, s, idx, targets, linear=_torch_linear):
    import torch.nn.functional as F

    x = F.embedding(idx, p["wte"]) + p["wpe"]
    for i in range(s["layers"]):
        x = _torch_block(x, p, f"h{i}.", s, linear)
    logits = F.layer_norm(x, (s["d"],), p["lnf_w"], p["lnf_b"]) @ p["wte"].T
    return F.cross_entropy(logits.float().reshape(-1, s["vocab"]), targets.reshape(-1))


def _torch_gpt(s, a, wrap):
    p, opt = _torch_setup(s, a)

    def step(idx, targets):
        loss = _torch_gpt_loss(p, s, idx, targets)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.detach()

    return Bound(wrap(step), lambda: [p[n] for n in _checked(s)])


# ---- JAX: jax.nn.dot_product_attention ---------------------------------------------------------------


def _jax_ln(x, w, b):
    """LayerNorm computed in f32 and returned in x's dtype (as torch's bf16 layer_norm does)."""
    import jax.numpy as jnp

    x32 = x.astype(jnp.float32)
    mu = jnp.mean(x32, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(x32 - mu), axis=-1, keepdims=True)
    return ((x32 - mu) / jnp.sqrt(var + 1e-5) * w.astype(jnp.float32) + b.astype(jnp.float32)).astype(x.dtype)


def _jax_block(x, p, pre: str, s):
    import jax

    B, T, C = x.shape
    H = s["heads"]
    qkv = (_jax_ln(x, p[pre + "ln1_w"], p[pre + "ln1_b"]) @ p[pre + "w_qkv"].T + p[pre + "b_qkv"]).reshape(
        B, T, 3, H, C // H)  # dot_product_attention takes [batch, length, heads, head_dim]
    y = jax.nn.dot_product_attention(qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2], is_causal=True).reshape(B, T, C)
    x = x + y @ p[pre + "w_o"].T + p[pre + "b_o"]
    h = _jax_ln(x, p[pre + "ln2_w"], p[pre + "ln2_b"])
    h = jax.nn.gelu(h @ p[pre + "w_fc"].T + p[pre + "b_fc"], approximate=False)
    return x + h @ p[pre + "w_proj"].T + p[pre + "b_proj"]


def _jax_block_loss(s, names):
    import jax.numpy as jnp

    def loss(params, x):
        y = _jax_block(x, dict(zip(names, params)), "", s)
        return jnp.mean(jnp.square(y.astype(jnp.float32)))

    return loss


def _jax_gpt_loss(s, names):
    import jax
    import jax.numpy as jnp

    def loss(params, idx, targets):
        p = dict(zip(names, params))
        x = p["wte"][idx] + p["wpe"]
        for i in range(s["layers"]):
            x = _jax_block(x, p, f"h{i}.", s)
        logits = (_jax_ln(x, p["lnf_w"], p["lnf_b"]) @ p["wte"].T).astype(jnp.float32)
        logp = jax.nn.log_softmax(logits.reshape(-1, s["vocab"]), axis=-1)
        return -jnp.mean(jnp.take_along_axis(logp, targets.reshape(-1, 1), axis=-1))

    return loss


def _jax_train(make_loss):
    def factory(s, a, wrap):
        import jax
        import jax.numpy as jnp

        names = _params(s)
        loss_fn = make_loss(s, names)

        def train_step(params, m, v, t, *data):
            loss, grads = jax.value_and_grad(loss_fn)(params, *data)
            params, m, v, t = _jax_adamw_update(params, grads, m, v, t)
            return loss, params, m, v, t

        update = wrap(train_step, donate_argnums=(0, 1, 2))
        st = {"p": [a[n] for n in names], "m": [jnp.zeros_like(a[n]) for n in names],
              "v": [jnp.zeros_like(a[n]) for n in names], "t": jnp.zeros((), jnp.float32)}

        def step(*data):
            loss, st["p"], st["m"], st["v"], st["t"] = update(st["p"], st["m"], st["v"], st["t"], *data)
            return loss

        return Bound(step, lambda: [st["p"][names.index(n)] for n in _checked(s)])

    return factory


# ---- sizes, bytes and flops ------------------------------------------------------------------------


def _flops(s) -> int:
    """Matmul flops of forward + backward (3x the forward): the Linear layers (and the tied head), plus
    causal attention (half of the T x T scores and their product with V)."""
    d, tokens, T = s["d"], s["batch"] * s["T"], s["T"]
    layers = s.get("layers", 1)
    linear = 12 * d * d * layers + (d * s["vocab"] if "vocab" in s else 0)
    attention = 2 * T * d * layers  # per token: (q k^T + att v) x 2 flops, halved by the causal mask
    return 6 * tokens * linear + 6 * tokens * attention


def _bytes(inputs):
    """Read the data once; read and write each parameter, its gradient and its two AdamW moments."""

    def count(s) -> int:
        ins = inputs(s)
        return sum(i.nbytes for i in ins.values() if not i.state) + 6 * sum(i.nbytes for i in ins.values() if i.state)

    return count


# ---- gpt_train's model for scripts that run it otherwise (benchmarks/scripts/ddp_scaling.py) ------------


def gpt_setup(framework: str, s, arrays) -> tuple[dict, object]:
    """(parameters by name, AdamW over them) of gpt_train's GPT at sizes s, made from `arrays` (the
    case's inputs in `framework`'s tensors: "flame" or "torch"), as the suite's step sets them up."""
    return (_flame_setup if framework == "flame" else _torch_setup)(s, arrays)


def gpt_loss(framework: str, p: dict, s, idx, targets):
    """gpt_train's loss of parameters p (from gpt_setup) on a batch: flame's with attention written by
    hand (its causal mask built in the step), torch's with scaled_dot_product_attention."""
    return (_flame_gpt_loss if framework == "flame" else _torch_gpt_loss)(p, s, idx, targets)


# ---- AdamW alone over a GPT's parameters (multi-tensor) ---------------------------------------------


def _adamw_inputs(s) -> dict[str, Input]:
    """The GPT's parameters (state) and a bf16 gradient for each (data, named `<param>.grad`)."""
    params = {n: i for n, i in _gpt_inputs(s).items() if i.state}
    return {**{f"{n}.grad": Input(i.shape, i.dtype, scale=1e-3) for n, i in params.items()}, **params}


def _adamw_pairs(s) -> list[tuple[str, str]]:
    return [(n, f"{n}.grad") for n, i in _adamw_inputs(s).items() if i.state]


def _adamw_bytes(s) -> int:
    """Read each gradient; read and write each parameter and its two moments (kept in its dtype)."""
    return 7 * sum(i.nbytes for i in _adamw_inputs(s).values() if i.state)


def _adamw_sizes(quick: bool) -> dict:
    if quick:
        return {"batch": 1, "T": 16, "d": 32, "layers": 4, "vocab": 64}
    return {"batch": 1, "T": 1024, "d": 768, "layers": 4, "vocab": 8192}  # batch: unused (no tokens)


def _block_sizes(quick: bool) -> dict:
    return {"batch": 2, "T": 16, "d": 32, "heads": 4} if quick else {"batch": 8, "T": 1024, "d": 1024, "heads": 16}


def _gpt_sizes(quick: bool) -> dict:
    if quick:
        return {"batch": 2, "T": 16, "d": 32, "heads": 4, "layers": 2, "vocab": 64}
    return {"batch": 8, "T": 1024, "d": 768, "heads": 12, "layers": 6, "vocab": 32768}


GPT = [
    Case("adamw_multi_tensor", "AdamW step (lr 1e-3, weight decay 0.01) over a GPT's 52 bf16 parameters of mixed "
         "sizes (d 768, 4 blocks, vocab 8192, T 1024: 35M elements) with bf16 gradients and moments",
         sizes=_adamw_sizes, inputs=_adamw_inputs, min_bytes=_adamw_bytes,
         flame=adamw_flame(_adamw_pairs, _checked), torch=adamw_torch(_adamw_pairs, False, _checked),
         jax=adamw_jax(_adamw_pairs, _checked), tol=1e-3, state_tol=BF16_UPDATE_TOL,
         extra={"torch fused": ("torch", adamw_torch(_adamw_pairs, True, _checked), "eager")}),
    Case("gpt_block_train", "bf16 GPT block training step: pre-LayerNorm, causal attention (flame by hand, peers "
         "fused SDPA), GELU MLP 4x, d 1024, 16 heads, T 1024, batch 8, loss mean(y.float()**2), AdamW",
         sizes=_block_sizes, inputs=_block_case_inputs, min_bytes=_bytes(_block_case_inputs), min_flops=_flops,
         flame=_flame_gpt_block, torch=_torch_gpt_block, jax=_jax_train(_jax_block_loss), tol=2e-2,
         state_tol=BF16_UPDATE_TOL),
    Case("gpt_train", "bf16 GPT training step: token + position embedding, 6 blocks (as gpt_block_train), d 768, "
         "12 heads, T 1024, batch 8, final LayerNorm, tied head, cross-entropy over 32k tokens, AdamW",
         sizes=_gpt_sizes, inputs=_gpt_inputs, min_bytes=_bytes(_gpt_inputs), min_flops=_flops,
         flame=_flame_gpt, torch=_torch_gpt, jax=_jax_train(_jax_gpt_loss), tol=2e-2, state_tol=BF16_UPDATE_TOL),
]
