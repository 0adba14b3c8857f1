"""The stateful cases: an AdamW step over one large parameter (cases_gpt.py: over a GPT's parameters),
and MLP training steps (forward, cross-entropy on f32 logits, backward, AdamW, zero_grad). Parameters
and optimizer state live in each framework's own copy; `Bound.state()` returns the parameters, so the
correctness check compares what one step changed (p_after - p_before) besides the step's outputs."""

from __future__ import annotations

from flame.bench.spec import Bound, Case, Input

LR, WD = 1e-3, 1e-2  # AdamW hyperparameters of every framework (betas 0.9/0.999, eps 1e-8)


# ---- AdamW over parameters given with their gradients -------------------------------------------
# A case's `pairs(sizes)` lists (parameter, gradient) input names: parameters are state inputs, the
# gradients data inputs in the same order, so `step(*grads)` sets each p.grad and takes one step.
# `checked(sizes)`, when given, names the parameters whose updates are compared (Bound.state()).


def _state(pairs, checked, s, ps):
    names = [p for p, _ in pairs(s)]
    keep = set(names if checked is None else checked(s))
    return lambda: [p for n, p in zip(names, ps) if n in keep]


def adamw_flame(pairs, checked=None):
    def factory(s, a, wrap):
        import flame
        import flame.nn as nn

        ps = [nn.Parameter(a[p]) for p, _ in pairs(s)]
        opt = flame.optim.AdamW(ps, lr=LR, weight_decay=WD)

        def step(*gs):
            for p, g in zip(ps, gs):
                p.grad = g
            opt.step()
            for p in ps:
                p.grad = None

        return Bound(wrap(step), _state(pairs, checked, s, ps))

    return factory


def adamw_torch(pairs, fused: bool, checked=None):
    """torch.optim.AdamW: its default on CUDA (foreach, a few multi-tensor kernels) or fused=True
    (one multi-tensor kernel per dtype group); wrap (torch.compile) compiles the update alone."""

    def factory(s, a, wrap):
        import torch

        ps = [torch.nn.Parameter(a[p]) for p, _ in pairs(s)]
        kw = {"fused": True} if fused else {}
        opt = torch.optim.AdamW(ps, lr=LR, weight_decay=WD, **kw)

        def update():
            opt.step()

        update = wrap(update)

        def step(*gs):
            for p, g in zip(ps, gs):
                p.grad = g
            update()
            for p in ps:
                p.grad = None

        return Bound(step, _state(pairs, checked, s, ps))

    return factory


def _jax_adamw_update(params, grads, m, v, t):
    """One AdamW step on lists of arrays (computed in f32, stored in each array's dtype)."""
    import jax.numpy as jnp

    b1, b2, eps = 0.9, 0.999, 1e-8
    t = t + 1
    new_p, new_m, new_v = [], [], []
    for p, g, mi, vi in zip(params, grads, m, v):
        p32, g32 = p.astype(jnp.float32), g.astype(jnp.float32)
        m32 = mi.astype(jnp.float32) * b1 + g32 * (1 - b1)
        v32 = vi.astype(jnp.float32) * b2 + g32 * g32 * (1 - b2)
        mhat = m32 / (1 - b1**t)
        vhat = v32 / (1 - b2**t)
        p32 = p32 * (1 - LR * WD) - LR * mhat / (jnp.sqrt(vhat) + eps)
        new_p.append(p32.astype(p.dtype))
        new_m.append(m32.astype(mi.dtype))
        new_v.append(v32.astype(vi.dtype))
    return new_p, new_m, new_v, t


def adamw_jax(pairs, checked=None):
    def factory(s, a, wrap):
        import jax.numpy as jnp

        ps = [a[p] for p, _ in pairs(s)]
        state = {"p": ps, "m": [jnp.zeros_like(p) for p in ps], "v": [jnp.zeros_like(p) for p in ps],
                 "t": jnp.zeros((), jnp.float32)}
        update = wrap(_jax_adamw_update, donate_argnums=(0, 2, 3))

        def step(*gs):
            state["p"], state["m"], state["v"], state["t"] = update(state["p"], list(gs), state["m"], state["v"],
                                                                    state["t"])

        names = [p for p, _ in pairs(s)]
        keep = set(names if checked is None else checked(s))
        return Bound(step, lambda: [p for n, p in zip(names, state["p"]) if n in keep])

    return factory


def _one(s):
    return [("p", "g")]


# ---- MLP training step -------------------------------------------------------------------------


def _param_names(s) -> list[tuple[str, str]]:
    return [(f"w{i}", f"b{i}") for i in range(len(s["dims"]) - 1)]


def _mlp_loss(F, layers, act, x, labels):
    """The MLP's cross-entropy in framework F's functional API (flame.nn.functional or torch.nn.functional:
    the same names): linear layers with act between them."""
    h = x
    for i, (w, b) in enumerate(layers):
        h = F.linear(h, w, b)
        h = act(h) if i < len(layers) - 1 else h
    return F.cross_entropy(h.float(), labels)


def _flame_mlp(s, a, wrap):
    import flame
    import flame.nn as nn
    import flame.nn.functional as F

    layers = [(nn.Parameter(a[w]), nn.Parameter(a[b])) for w, b in _param_names(s)]
    params = [p for pair in layers for p in pair]
    opt = flame.optim.AdamW(params, lr=LR, weight_decay=WD)
    act = F.gelu if s["act"] == "gelu" else F.relu

    def step(x, labels):
        loss = _mlp_loss(F, layers, act, x, labels)
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss

    return Bound(wrap(step), lambda: params)


def _torch_mlp(s, a, wrap):
    import torch
    import torch.nn.functional as F

    layers = [(torch.nn.Parameter(a[w]), torch.nn.Parameter(a[b])) for w, b in _param_names(s)]
    params = [p for pair in layers for p in pair]
    opt = torch.optim.AdamW(params, lr=LR, weight_decay=WD)
    act = F.gelu if s["act"] == "gelu" else F.relu

    def step(x, labels):
        loss = _mlp_loss(F, layers, act, x, labels)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.detach()

    return Bound(wrap(step), lambda: params)


def _jax_mlp(s, a, wrap):
    import jax
    import jax.numpy as jnp

    names = [n for pair in _param_names(s) for n in pair]
    act = (lambda h: jax.nn.gelu(h, approximate=False)) if s["act"] == "gelu" else jax.nn.relu

    def loss_fn(params, x, labels):
        h = x
        for i in range(0, len(params), 2):
            h = h @ params[i].T + params[i + 1]
            h = act(h) if i < len(params) - 2 else h
        logp = jax.nn.log_softmax(h.astype(jnp.float32), axis=-1)
        return -jnp.mean(jnp.take_along_axis(logp, labels[:, None], axis=-1))

    def train_step(params, m, v, t, x, labels):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, labels)
        params, m, v, t = _jax_adamw_update(params, grads, m, v, t)
        return loss, params, m, v, t

    update = wrap(train_step, donate_argnums=(0, 1, 2))
    st = {"p": [a[n] for n in names], "m": [jnp.zeros_like(a[n]) for n in names],
          "v": [jnp.zeros_like(a[n]) for n in names], "t": jnp.zeros((), jnp.float32)}

    def step(x, labels):
        loss, st["p"], st["m"], st["v"], st["t"] = update(st["p"], st["m"], st["v"], st["t"], x, labels)
        return loss

    return Bound(step, lambda: list(st["p"]))


def _mlp_inputs(s) -> dict[str, Input]:
    dims, dt = s["dims"], s["dtype"]
    ins = {"x": Input((s["batch"], dims[0]), dt), "labels": Input((s["batch"],), "i64", high=dims[-1])}
    for (w, b), (n_in, n_out) in zip(_param_names(s), zip(dims, dims[1:])):
        ins[w] = Input((n_out, n_in), dt, scale=n_in**-0.5, state=True)
        ins[b] = Input((n_out,), dt, scale=0.1, state=True)
    return ins


def _mlp_flops(s) -> int:
    """Forward (2 flops per multiply-add) plus backward (twice the forward) of the matmuls."""
    dims = s["dims"]
    return 6 * s["batch"] * sum(i * o for i, o in zip(dims, dims[1:]))


def _mlp_bytes(s) -> int:
    """Read the batch once; read and write each parameter and its two AdamW moments once."""
    ins = _mlp_inputs(s)
    state = sum(i.nbytes for i in ins.values() if i.state)
    return ins["x"].nbytes + ins["labels"].nbytes + 6 * state


def _mlp_case(name: str, what: str, full: dict, quick: dict, tol: float, state_tol: float | None = None) -> Case:
    return Case(name, what, sizes=lambda q: dict(quick if q else full), inputs=_mlp_inputs,
                min_bytes=_mlp_bytes, min_flops=_mlp_flops, flame=_flame_mlp, torch=_torch_mlp, jax=_jax_mlp,
                tol=tol, state_tol=state_tol)


# AdamW's first update is about lr * sign(g), so a parameter whose bf16 gradient is near zero can move
# the other way in another framework: that alone gives relative errors of the updates near 0.1. A
# wrong kernel (garbage, a missing update) gives about 1 or more, so 0.3 still separates them.
BF16_UPDATE_TOL = 0.3


TRAINING = [
    Case("adamw", "AdamW step (lr 1e-3, weight decay 0.01) over one f32 parameter with its gradient",
         sizes=lambda q: {"n": 4096 if q else 64 * 2**20},
         inputs=lambda s: {"g": Input((s["n"],), scale=1e-2), "p": Input((s["n"],), scale=0.1, state=True)},
         min_bytes=lambda s: 7 * 4 * s["n"],
         flame=adamw_flame(_one), torch=adamw_torch(_one, False), jax=adamw_jax(_one), tol=1e-3,
         extra={"torch fused": ("torch", adamw_torch(_one, True), "eager")}),
    _mlp_case("mlp_bf16_train", "bf16 MLP training step: 4 Linear 4096x4096 + GELU, 8192 tokens, "
              "cross-entropy on f32 logits, AdamW",
              full={"dims": [4096] * 5, "batch": 8192, "act": "gelu", "dtype": "bf16"},
              quick={"dims": [64] * 5, "batch": 32, "act": "gelu", "dtype": "bf16"}, tol=2e-2,
              state_tol=BF16_UPDATE_TOL),
    _mlp_case("mlp_small_train", "f32 MLP training step 784-256-256-10, ReLU, batch 128, cross-entropy, AdamW",
              full={"dims": [784, 256, 256, 10], "batch": 128, "act": "relu", "dtype": "f32"},
              quick={"dims": [64, 32, 32, 10], "batch": 16, "act": "relu", "dtype": "f32"}, tol=1e-3),
]
