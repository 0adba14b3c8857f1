"""The convolutional training cases: a stack of ResNet basic blocks with BatchNorm and SGD with momentum
(`resnet_block_train`), and a small diffusion U-Net with GroupNorm, SiLU, a sinusoidal time embedding,
down- and up-sampling, skip connections and one self-attention layer at the lowest resolution, trained
with AdamW on the DDPM noise-prediction loss (`unet_train`). bf16 throughout.

Each model is written ONCE, over a small table of functions (`Ops`) that each framework fills in: flame
and torch with their (identical) `nn.functional`, JAX with `lax.conv_general_dilated` and jnp. PyTorch
runs channels-last (activations and convolution weights), as its cuDNN path is fastest there; flame
and JAX get the user's NCHW arrays and choose their own layouts. BatchNorm's running statistics are
state each framework updates (torch and flame in place, JAX functionally); `Bound.state()` lists the
checked weights and the running statistics, whose one-step changes are compared with torch's."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from flame.bench.cases_train import LR, WD, _jax_adamw_update
from flame.bench.spec import Bound, Case, Input

SGD_LR, MOMENTUM, BN_MOMENTUM, EPS = 0.1, 0.9, 0.1, 1e-5
CLASSES = 10


@dataclass(frozen=True)
class Ops:
    """What the shared model code calls; each framework supplies its own."""

    conv2d: Callable  # (x, w, b=None, stride=1, padding=0) in PyTorch's semantics
    batch_norm: Callable  # (x, name) -> y: training-mode BatchNorm with the running statistics `name`
    group_norm: Callable  # (x, groups, w, b)
    linear: Callable
    relu: Callable
    silu: Callable
    up2: Callable  # nearest-neighbour upsampling by 2
    attention: Callable  # (q, k, v) [B, H, L, D] -> [B, H, L, D]
    cat: Callable  # (xs, dim)
    permute: Callable  # (x, dims)
    mean_hw: Callable  # [N, C, H, W] -> [N, C]
    f32: Callable  # x as f32
    like: Callable  # (x, ref): x in ref's dtype
    arange: Callable  # n -> f32 [n]
    sin: Callable
    cos: Callable
    exp: Callable
    cross_entropy: Callable  # (f32 logits, labels) -> mean loss


# ---- ResNet basic blocks ---------------------------------------------------------------------------------


def _resnet_inputs(s) -> dict[str, Input]:
    c, dt = s["c"], s["dtype"]
    ins = {"x": Input((s["batch"], c, s["hw"], s["hw"]), dt), "labels": Input((s["batch"],), "i64", high=CLASSES)}
    for i in range(s["blocks"]):
        for j in ("a", "b"):
            ins[f"b{i}.conv{j}"] = Input((c, c, 3, 3), dt, scale=(2 / (9 * c)) ** 0.5, state=True)
            ins[f"b{i}.bn{j}.w"] = Input((c,), dt, scale=0.1, mean=1.0, state=True)
            ins[f"b{i}.bn{j}.b"] = Input((c,), dt, scale=0.1, state=True)
    ins["fc.w"] = Input((CLASSES, c), dt, scale=c**-0.5, state=True)
    ins["fc.b"] = Input((CLASSES,), dt, scale=0.1, state=True)
    return ins


def _bn_names(s) -> list[str]:
    return [f"b{i}.bn{j}" for i in range(s["blocks"]) for j in ("a", "b")]


def _resnet_loss(ops: Ops, p: dict, s, x, labels):
    """Basic blocks (conv3x3-BN-ReLU-conv3x3-BN + x, ReLU), global average pool, linear, cross-entropy."""
    for i in range(s["blocks"]):
        h = ops.relu(ops.batch_norm(ops.conv2d(x, p[f"b{i}.conva"], padding=1), f"b{i}.bna"))
        h = ops.batch_norm(ops.conv2d(h, p[f"b{i}.convb"], padding=1), f"b{i}.bnb")
        x = ops.relu(h + x)
    return ops.cross_entropy(ops.f32(ops.linear(ops.mean_hw(x), p["fc.w"], p["fc.b"])), labels)


def _resnet_checked(s) -> list[str]:
    """The weights whose one-step update is compared (the first and last convolution, the head)."""
    last = s["blocks"] - 1
    return ["b0.conva", f"b{last}.convb", "fc.w"]


def _resnet_flops(s) -> int:
    """Convolutions forward + data and weight gradients (3x the forward)."""
    return 3 * 2 * s["blocks"] * 2 * s["batch"] * s["hw"] ** 2 * s["c"] * s["c"] * 9


def _resnet_bytes(s) -> int:
    """Read the batch once; read p, its gradient and momentum buffer, write p and the buffer."""
    ins = _resnet_inputs(s)
    return sum(i.nbytes for i in ins.values() if not i.state) + 5 * sum(i.nbytes for i in ins.values() if i.state)


def _resnet_sizes(quick: bool) -> dict:
    if quick:
        return {"batch": 4, "hw": 6, "c": 8, "blocks": 2, "dtype": "bf16"}
    return {"batch": 64, "hw": 64, "c": 128, "blocks": 4, "dtype": "bf16"}


# ---- a small diffusion U-Net -----------------------------------------------------------------------------


def _unet_layers(s) -> dict[str, tuple[tuple[int, ...], int]]:
    """Every parameter of the U-Net: name -> (shape, the resolution its convolution runs at, 0 if
    none). Levels at hw, hw/2, hw/4 with ch, 2ch, 4ch channels; attention at the lowest."""
    ch, hw, cin = s["ch"], s["hw"], s["channels"]
    temb = 4 * ch
    layers: dict[str, tuple[tuple[int, ...], int]] = {}

    def conv(name, co, ci, k, res):
        layers[name + ".w"] = ((co, ci, k, k), res)
        layers[name + ".b"] = ((co,), 0)

    def norm(name, c):
        layers[name + ".w"], layers[name + ".b"] = ((c,), 0), ((c,), 0)

    def res_block(name, ci, co, res):
        norm(name + ".n1", ci)
        conv(name + ".c1", co, ci, 3, res)
        layers[name + ".t.w"], layers[name + ".t.b"] = ((co, temb), 0), ((co,), 0)
        norm(name + ".n2", co)
        conv(name + ".c2", co, co, 3, res)
        if ci != co:
            conv(name + ".skip", co, ci, 1, res)

    layers["temb1.w"], layers["temb1.b"] = ((temb, ch), 0), ((temb,), 0)
    layers["temb2.w"], layers["temb2.b"] = ((temb, temb), 0), ((temb,), 0)
    conv("in", ch, cin, 3, hw)
    res_block("d0", ch, ch, hw)
    conv("down0", ch, ch, 3, hw // 2)
    res_block("d1", ch, 2 * ch, hw // 2)
    conv("down1", 2 * ch, 2 * ch, 3, hw // 4)
    res_block("d2", 2 * ch, 4 * ch, hw // 4)
    res_block("m0", 4 * ch, 4 * ch, hw // 4)
    norm("attn.n", 4 * ch)
    conv("attn.qkv", 12 * ch, 4 * ch, 1, hw // 4)
    conv("attn.out", 4 * ch, 4 * ch, 1, hw // 4)
    res_block("m1", 4 * ch, 4 * ch, hw // 4)
    res_block("u2", 8 * ch, 4 * ch, hw // 4)
    conv("up1", 4 * ch, 4 * ch, 3, hw // 2)
    res_block("u1", 6 * ch, 2 * ch, hw // 2)
    conv("up0", 2 * ch, 2 * ch, 3, hw)
    res_block("u0", 3 * ch, ch, hw)
    norm("out.n", ch)
    conv("out", cin, ch, 3, hw)
    return layers


def _unet_inputs(s) -> dict[str, Input]:
    dt, b, hw, c = s["dtype"], s["batch"], s["hw"], s["channels"]
    ins = {"x_t": Input((b, c, hw, hw), dt), "t": Input((b,), "i64", high=1000), "noise": Input((b, c, hw, hw), dt)}
    for name, (shape, _) in _unet_layers(s).items():
        fan_in = math.prod(shape[1:]) if len(shape) > 1 else 0
        if name.endswith(".b"):
            ins[name] = Input(shape, dt, scale=0.02, state=True)
        elif len(shape) == 1:  # a norm's weight
            ins[name] = Input(shape, dt, scale=0.02, mean=1.0, state=True)
        else:
            ins[name] = Input(shape, dt, scale=fan_in**-0.5, state=True)
    return ins


def _group_norm(ops: Ops, p, name, x, groups):
    return ops.group_norm(x, groups, p[name + ".w"], p[name + ".b"])


def _res_block(ops: Ops, p, name, x, temb, groups):
    h = ops.conv2d(ops.silu(_group_norm(ops, p, name + ".n1", x, groups)), p[name + ".c1.w"], p[name + ".c1.b"],
                   padding=1)
    t = ops.linear(temb, p[name + ".t.w"], p[name + ".t.b"])
    h = h + t.reshape(t.shape[0], t.shape[1], 1, 1)
    h = ops.conv2d(ops.silu(_group_norm(ops, p, name + ".n2", h, groups)), p[name + ".c2.w"], p[name + ".c2.b"],
                   padding=1)
    skip = ops.conv2d(x, p[name + ".skip.w"], p[name + ".skip.b"]) if name + ".skip.w" in p else x
    return h + skip


def _attention_block(ops: Ops, p, x, heads, groups):
    b, c, hh, ww = x.shape
    qkv = ops.conv2d(_group_norm(ops, p, "attn.n", x, groups), p["attn.qkv.w"], p["attn.qkv.b"])
    qkv = ops.permute(qkv.reshape(b, 3, heads, c // heads, hh * ww), (1, 0, 2, 4, 3))  # [3, B, H, L, D]
    y = ops.attention(qkv[0], qkv[1], qkv[2])
    y = ops.permute(y, (0, 1, 3, 2)).reshape(b, c, hh, ww)
    return x + ops.conv2d(y, p["attn.out.w"], p["attn.out.b"])


def _time_embedding(ops: Ops, p, t, ch, ref):
    """Sinusoidal features of the timestep (f32), then linear-SiLU-linear in the model's dtype."""
    half = ch // 2
    freqs = ops.exp(ops.arange(half) * (-math.log(10000.0) / half))
    args = ops.f32(t).reshape(t.shape[0], 1) * freqs.reshape(1, half)
    emb = ops.like(ops.cat([ops.sin(args), ops.cos(args)], 1), ref)
    return ops.linear(ops.silu(ops.linear(emb, p["temb1.w"], p["temb1.b"])), p["temb2.w"], p["temb2.b"])


def _unet_loss(ops: Ops, p: dict, s, x_t, t, noise):
    """mean((unet(x_t, t) - noise)^2) in f32: DDPM's noise-prediction loss over the whole image."""
    g, heads = s["groups"], s["heads"]
    temb = _time_embedding(ops, p, t, s["ch"], x_t)

    def conv(name, x, stride=1, padding=1):
        return ops.conv2d(x, p[name + ".w"], p[name + ".b"], stride=stride, padding=padding)

    d0 = _res_block(ops, p, "d0", conv("in", x_t), temb, g)
    d1 = _res_block(ops, p, "d1", conv("down0", d0, stride=2), temb, g)
    d2 = _res_block(ops, p, "d2", conv("down1", d1, stride=2), temb, g)
    h = _res_block(ops, p, "m0", d2, temb, g)
    h = _res_block(ops, p, "m1", _attention_block(ops, p, h, heads, g), temb, g)
    h = _res_block(ops, p, "u2", ops.cat([h, d2], 1), temb, g)
    h = _res_block(ops, p, "u1", ops.cat([conv("up1", ops.up2(h)), d1], 1), temb, g)
    h = _res_block(ops, p, "u0", ops.cat([conv("up0", ops.up2(h)), d0], 1), temb, g)
    out = conv("out", ops.silu(_group_norm(ops, p, "out.n", h, g)))
    diff = ops.f32(out) - ops.f32(noise)
    return (diff * diff).mean()


def _unet_checked(s) -> list[str]:
    return ["in.w", "d0.c1.w", "attn.qkv.w", "u0.c2.w", "out.w"]


def _unet_flops(s) -> int:
    """Convolutions and attention, forward + both gradients (3x the forward)."""
    b = s["batch"]
    conv = sum(2 * b * res * res * math.prod(shape) for shape, res in _unet_layers(s).values() if res)
    tokens, c = (s["hw"] // 4) ** 2, 4 * s["ch"]
    return 3 * (conv + 4 * b * tokens * tokens * c)


def _unet_bytes(s) -> int:
    """Read the data once; read and write each parameter, its gradient and its two AdamW moments."""
    ins = _unet_inputs(s)
    return sum(i.nbytes for i in ins.values() if not i.state) + 6 * sum(i.nbytes for i in ins.values() if i.state)


def _unet_sizes(quick: bool) -> dict:
    if quick:
        return {"batch": 2, "hw": 8, "channels": 3, "ch": 8, "groups": 4, "heads": 2, "dtype": "bf16"}
    return {"batch": 32, "hw": 64, "channels": 3, "ch": 64, "groups": 32, "heads": 4, "dtype": "bf16"}


# ---- flame and torch: nn.functional --------------------------------------------------------------------


def _functional_ops(F, cat, arange, batch_norm, permute) -> Ops:
    """Ops over a PyTorch-shaped nn.functional (flame's and torch's share every name used here)."""
    return Ops(conv2d=F.conv2d, batch_norm=batch_norm, group_norm=F.group_norm, linear=F.linear, relu=F.relu,
               silu=F.silu, up2=lambda x: F.interpolate(x, scale_factor=2, mode="nearest"),
               attention=F.scaled_dot_product_attention, cat=cat, permute=permute,
               mean_hw=lambda x: x.mean((2, 3)), f32=lambda x: x.float(), like=lambda x, ref: x.to(ref.dtype),
               arange=arange, sin=lambda x: x.sin(), cos=lambda x: x.cos(), exp=lambda x: x.exp(),
               cross_entropy=F.cross_entropy)


def _flame_ops(s, stats: dict) -> Ops:
    import flame
    import flame.nn.functional as F

    P = stats["__params__"]

    def batch_norm(x, name):
        return F.batch_norm(x, stats[name + ".mean"], stats[name + ".var"], P[name + ".w"], P[name + ".b"],
                            training=True, momentum=BN_MOMENTUM, eps=EPS)

    return _functional_ops(F, flame.cat, lambda n: flame.arange(n, dtype=flame.f32), batch_norm,
                           lambda x, dims: x.permute(*dims))


def _torch_ops(s, stats: dict) -> Ops:
    import torch
    import torch.nn.functional as F

    P = stats["__params__"]
    device = next(iter(P.values())).device

    def batch_norm(x, name):
        return F.batch_norm(x, stats[name + ".mean"], stats[name + ".var"], P[name + ".w"], P[name + ".b"],
                            training=True, momentum=BN_MOMENTUM, eps=EPS)

    return _functional_ops(F, torch.cat, lambda n: torch.arange(n, dtype=torch.float32, device=device),
                           batch_norm, lambda x, dims: x.permute(*dims))


def _running_stats(s, zeros, ones) -> dict:
    """BatchNorm's running statistics: mean 0 and variance 1 per channel, in the case's dtype."""
    out = {}
    for name in _bn_names(s) if "blocks" in s else ():
        out[name + ".mean"], out[name + ".var"] = zeros(s["c"]), ones(s["c"])
    return out


def resnet_state_names(s) -> list[str]:
    """The names of what resnet_block_train's Bound.state() lists at sizes s, in its order: the checked
    weights, then BatchNorm's running statistics."""
    return _resnet_checked(s) + list(_running_stats(s, lambda c: 0, lambda c: 1))


def _state(s, p: dict, stats: dict, checked) -> Callable[[], list]:
    names = [n for n in stats if not n.startswith("__")]
    return lambda: [p[n] for n in checked(s)] + [stats[n] for n in names]


def _flame_factory(loss_fn, inputs, checked, optimizer):
    def factory(s, a, wrap):
        import flame
        import flame.nn as nn

        p = {n: nn.Parameter(a[n]) for n, i in inputs(s).items() if i.state}
        dt = flame.bf16 if s["dtype"] == "bf16" else flame.f32
        stats = _running_stats(s, lambda c: flame.zeros(c, dtype=dt), lambda c: flame.ones(c, dtype=dt))
        stats["__params__"] = p
        ops = _flame_ops(s, stats)
        opt = optimizer(flame.optim, list(p.values()))

        def step(*data):
            loss = loss_fn(ops, p, s, *data)
            loss.backward()
            opt.step()
            opt.zero_grad()
            return loss

        return Bound(wrap(step), _state(s, p, stats, checked))

    return factory


def _torch_factory(loss_fn, inputs, checked, optimizer):
    def factory(s, a, wrap):
        import torch

        def param(x):
            return torch.nn.Parameter(x.contiguous(memory_format=torch.channels_last) if x.ndim == 4 else x)

        p = {n: param(a[n]) for n, i in inputs(s).items() if i.state}
        ref = next(iter(p.values()))
        stats = _running_stats(s, lambda c: torch.zeros(c, dtype=ref.dtype, device=ref.device),
                               lambda c: torch.ones(c, dtype=ref.dtype, device=ref.device))
        stats["__params__"] = p
        ops = _torch_ops(s, stats)
        opt = optimizer(torch.optim, list(p.values()))

        def run(*data):
            loss = loss_fn(ops, p, s, *data)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            return loss.detach()

        run = wrap(run)

        def step(*data):  # the user's NCHW batch, made channels-last as a torch user would
            return run(*(x.contiguous(memory_format=torch.channels_last) if x.ndim == 4 else x for x in data))

        return Bound(step, _state(s, p, stats, checked))

    return factory


def _sgd(optim, params):
    return optim.SGD(params, lr=SGD_LR, momentum=MOMENTUM)


def _adamw(optim, params):
    return optim.AdamW(params, lr=LR, weight_decay=WD)


# ---- JAX -----------------------------------------------------------------------------------------------


def _jax_ops(s, new_stats: dict, stats_in: dict, params: dict) -> Ops:
    """Ops in jnp/lax, NCHW as the others (XLA picks its layouts). batch_norm reads the running
    statistics from `stats_in` and records their new values in `new_stats`."""
    import jax
    import jax.numpy as jnp
    from jax import lax

    def conv2d(x, w, b=None, stride=1, padding=0):
        y = lax.conv_general_dilated(x, w, (stride, stride), [(padding, padding)] * 2,
                                     dimension_numbers=("NCHW", "OIHW", "NCHW"),
                                     preferred_element_type=jnp.float32).astype(x.dtype)
        return y if b is None else y + b.reshape(1, -1, 1, 1)

    def batch_norm(x, name):
        x32 = x.astype(jnp.float32)
        mu = jnp.mean(x32, axis=(0, 2, 3))
        var = jnp.mean(jnp.square(x32 - mu.reshape(1, -1, 1, 1)), axis=(0, 2, 3))
        n = x.size // x.shape[1]
        for key, batch in ((".mean", mu), (".var", var * (n / (n - 1)))):
            old = stats_in[name + key]
            new = old.astype(jnp.float32) * (1 - BN_MOMENTUM) + batch * BN_MOMENTUM
            new_stats[name + key] = new.astype(old.dtype)
        y = (x32 - mu.reshape(1, -1, 1, 1)) * lax.rsqrt(var.reshape(1, -1, 1, 1) + EPS)
        w, b = params[name + ".w"].astype(jnp.float32), params[name + ".b"].astype(jnp.float32)
        return (y * w.reshape(1, -1, 1, 1) + b.reshape(1, -1, 1, 1)).astype(x.dtype)

    def group_norm(x, groups, w, b):
        n, c, hh, ww = x.shape
        g = x.astype(jnp.float32).reshape(n, groups, c // groups, hh, ww)
        mu = jnp.mean(g, axis=(2, 3, 4), keepdims=True)
        var = jnp.mean(jnp.square(g - mu), axis=(2, 3, 4), keepdims=True)
        y = ((g - mu) * lax.rsqrt(var + EPS)).reshape(n, c, hh, ww)
        return (y * w.astype(jnp.float32).reshape(1, -1, 1, 1) + b.astype(jnp.float32).reshape(1, -1, 1, 1)
                ).astype(x.dtype)

    def attention(q, k, v):  # [B, H, L, D] -> dot_product_attention's [B, L, H, D] and back
        t = lambda z: jnp.transpose(z, (0, 2, 1, 3))  # noqa: E731
        return t(jax.nn.dot_product_attention(t(q), t(k), t(v)))

    def cross_entropy(logits, labels):
        logp = jax.nn.log_softmax(logits, axis=-1)
        return -jnp.mean(jnp.take_along_axis(logp, labels.reshape(-1, 1), axis=-1))

    return Ops(conv2d=conv2d, batch_norm=batch_norm, group_norm=group_norm,
               linear=lambda x, w, b=None: x @ w.T + (0 if b is None else b), relu=jax.nn.relu, silu=jax.nn.silu,
               up2=lambda x: jnp.repeat(jnp.repeat(x, 2, axis=2), 2, axis=3), attention=attention,
               cat=lambda xs, dim: jnp.concatenate(xs, axis=dim), permute=jnp.transpose,
               mean_hw=lambda x: jnp.mean(x.astype(jnp.float32), axis=(2, 3)).astype(x.dtype),
               f32=lambda x: x.astype(jnp.float32), like=lambda x, ref: x.astype(ref.dtype),
               arange=lambda n: jnp.arange(n, dtype=jnp.float32), sin=jnp.sin, cos=jnp.cos, exp=jnp.exp,
               cross_entropy=cross_entropy)


def _jax_sgd_update(params, grads, bufs, t):
    """SGD with momentum as torch: the buffer is the gradient on the first step, then m * b + g."""
    import jax.numpy as jnp

    new_p, new_b = [], []
    for p, g, b in zip(params, grads, bufs):
        g32 = g.astype(jnp.float32)
        b32 = jnp.where(t == 0, g32, b.astype(jnp.float32) * MOMENTUM + g32)
        new_p.append((p.astype(jnp.float32) - SGD_LR * b32).astype(p.dtype))
        new_b.append(b32.astype(b.dtype))
    return new_p, new_b


def _jax_factory(loss_fn, inputs, checked, adamw: bool):
    def factory(s, a, wrap):
        import jax
        import jax.numpy as jnp

        names = [n for n, i in inputs(s).items() if i.state]
        dt = jnp.bfloat16 if s["dtype"] == "bf16" else jnp.float32
        stats0 = _running_stats(s, lambda c: jnp.zeros(c, dt), lambda c: jnp.ones(c, dt))

        def loss_and_stats(params, stats, *data):
            p = dict(zip(names, params))
            new = {}
            loss = loss_fn(_jax_ops(s, new, stats, p), p, s, *data)
            return loss, new

        def train_step(params, stats, m, v, t, *data):
            (loss, new_stats), grads = jax.value_and_grad(loss_and_stats, has_aux=True)(params, stats, *data)
            if adamw:
                params, m, v, t = _jax_adamw_update(params, grads, m, v, t)
            else:
                params, m = _jax_sgd_update(params, grads, m, t)
                t = t + 1
            return loss, params, {**stats, **new_stats}, m, v, t

        update = wrap(train_step, donate_argnums=(0, 1, 2, 3))
        st = {"p": [a[n] for n in names], "stats": stats0, "m": [jnp.zeros_like(a[n]) for n in names],
              "v": [jnp.zeros_like(a[n]) for n in names] if adamw else [], "t": jnp.zeros((), jnp.float32)}

        def step(*data):
            loss, st["p"], st["stats"], st["m"], st["v"], st["t"] = update(st["p"], st["stats"], st["m"], st["v"],
                                                                        st["t"], *data)
            return loss

        def state():
            return [st["p"][names.index(n)] for n in checked(s)] + [st["stats"][n] for n in stats0]

        return Bound(step, state)

    return factory


# ---- the cases -----------------------------------------------------------------------------------------


# The U-Net's bf16 AdamW step: ~40 layers of bf16 rounding (each framework rounds in other places)
# before the gradient, and AdamW's first update is lr * sign(g), so small gradients flip sign between
# frameworks: JAX differs from torch by 0.22 on the --quick sizes, flame by 0.29. A wrong kernel gives
# 1 or more; in f32 all three agree to 1e-4 (tests/bench/test_conv_cases.py).
UNET_UPDATE_TOL = 0.5
# The ResNet's bf16 SGD step: the first update is lr * g, and the gradients of the first conv and the
# head pass through 8 bf16 BatchNorms. On an H100 at full sizes
# (benchmarks/results/2026-11-23-H100-models/) torch.compile differs from torch eager by 0.36 (0.36 and
# 0.22 on those two weights, <= 0.07 elsewhere), flame by 0.52 (0.38 and 0.52, <= 0.05 elsewhere); in
# f32 flame agrees with torch to 2e-3 (full) and 2e-6 (quick).
RESNET_UPDATE_TOL = 0.7


def _case(name, what, sizes, inputs, loss_fn, checked, flops, nbytes, adamw: bool, state_tol: float) -> Case:
    opt = _adamw if adamw else _sgd
    return Case(name, what, sizes=sizes, inputs=inputs, min_bytes=nbytes, min_flops=flops,
                flame=_flame_factory(loss_fn, inputs, checked, opt),
                torch=_torch_factory(loss_fn, inputs, checked, opt),
                jax=_jax_factory(loss_fn, inputs, checked, adamw), tol=2e-2, state_tol=state_tol)


CONV = [
    _case("resnet_block_train", "bf16 ResNet training step: 4 basic blocks (conv3x3-BN-ReLU-conv3x3-BN, + x, ReLU), "
          "128 channels, 64x64, batch 64, global average pool, linear head, cross-entropy, SGD momentum 0.9; "
          "BatchNorm running statistics updated; torch channels-last",
          _resnet_sizes, _resnet_inputs, _resnet_loss, _resnet_checked, _resnet_flops, _resnet_bytes, adamw=False,
          state_tol=RESNET_UPDATE_TOL),
    _case("unet_train", "bf16 diffusion U-Net training step (DDPM noise prediction, MSE over the image): 64x64x3, "
          "batch 32, levels 64/128/256 channels, GroupNorm 32, SiLU, sinusoidal time embedding, stride-2 down, "
          "nearest up, skip concatenation, self-attention (4 heads) at 16x16, AdamW; torch channels-last",
          _unet_sizes, _unet_inputs, _unet_loss, _unet_checked, _unet_flops, _unet_bytes, adamw=True,
          state_tol=UNET_UPDATE_TOL),
]
