"""The stateless cases: one function of its inputs per framework, written as each framework's users
would write it. The torch function is what both `torch` (eager) and `torch.compile` run; the JAX
function is jitted. The table `CASES` (in flame.bench.table) lists these with the training cases.
"""

from __future__ import annotations

from flame.bench.spec import Bound, Case, Input

F32 = 4
BF16 = 2


def _stateless(make):
    """A factory from make(sizes) -> fn: Bound(wrap(fn)). make imports its framework lazily."""
    return lambda sizes, arrays, wrap: Bound(wrap(make(sizes)))


# ---- elementwise chain: gelu(x*1.5+0.5)*sigmoid(x) -------------------------------------------


def _flame_chain(s):
    import flame.nn.functional as F

    return lambda x: F.gelu(x * 1.5 + 0.5) * F.sigmoid(x)


def _torch_chain(s):
    import torch
    import torch.nn.functional as F

    return lambda x: F.gelu(x * 1.5 + 0.5) * torch.sigmoid(x)


def _jax_chain(s):
    import jax

    return lambda x: jax.nn.gelu(x * 1.5 + 0.5, approximate=False) * jax.nn.sigmoid(x)


# ---- bias + gelu -----------------------------------------------------------------------------


def _flame_bias_gelu(s):
    import flame.nn.functional as F

    return lambda x, b: F.gelu(x + b)


def _torch_bias_gelu(s):
    import torch.nn.functional as F

    return lambda x, b: F.gelu(x + b)


def _jax_bias_gelu(s):
    import jax

    return lambda x, b: jax.nn.gelu(x + b, approximate=False)


# ---- softmax ---------------------------------------------------------------------------------


def _flame_softmax(s):
    import flame.nn.functional as F

    return lambda x: F.softmax(x, dim=-1)


def _torch_softmax(s):
    import torch

    return lambda x: torch.softmax(x, dim=-1)


def _jax_softmax(s):
    import jax

    return lambda x: jax.nn.softmax(x, axis=-1)


# ---- layer_norm / rms_norm -------------------------------------------------------------------


def _flame_layer_norm(s):
    import flame.nn.functional as F

    return lambda x, w, b: F.layer_norm(x, (s["cols"],), w, b, eps=1e-5)


def _torch_layer_norm(s):
    import torch.nn.functional as F

    return lambda x, w, b: F.layer_norm(x, (s["cols"],), w, b, eps=1e-5)


def _jax_ln(x, w, b):
    import jax.numpy as jnp

    mu = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(x - mu), axis=-1, keepdims=True)
    return (x - mu) * (1.0 / jnp.sqrt(var + 1e-5)) * w + b


def _jax_layer_norm(s):
    return _jax_ln


def _flame_rms_norm(s):
    import flame.nn.functional as F

    return lambda x, w: F.rms_norm(x, (s["cols"],), w, eps=1e-6)


def _torch_rms_norm(s):
    import torch
    import torch.nn.functional as F

    if hasattr(F, "rms_norm"):
        return lambda x, w: F.rms_norm(x, (s["cols"],), w, eps=1e-6)
    return lambda x, w: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w


def _jax_rms_norm(s):
    import jax.numpy as jnp

    return lambda x, w: x * (1.0 / jnp.sqrt(jnp.mean(jnp.square(x), axis=-1, keepdims=True) + 1e-6)) * w


# ---- layer_norm forward + backward -----------------------------------------------------------


def _flame_layer_norm_bwd(s):
    import flame
    import flame.nn.functional as F

    def fwd_bwd(x, w, b, dy):
        y = F.layer_norm(x, (s["cols"],), w, b, eps=1e-5)
        vjp = flame.value_and_grad(lambda x, w, b: (F.layer_norm(x, (s["cols"],), w, b, eps=1e-5) * dy).sum(),
                                   (0, 1, 2))
        _, (dx, dw, db) = vjp(x, w, b)
        return y, dx, dw, db

    return fwd_bwd


def _torch_layer_norm_bwd(s):
    import torch
    import torch.nn.functional as F

    def fwd_bwd(x, w, b, dy):
        x, w, b = (t.detach().requires_grad_() for t in (x, w, b))
        y = F.layer_norm(x, (s["cols"],), w, b, eps=1e-5)
        dx, dw, db = torch.autograd.grad(y, (x, w, b), dy)
        return y.detach(), dx, dw, db

    return fwd_bwd


def _jax_layer_norm_bwd(s):
    import jax

    def fwd_bwd(x, w, b, dy):
        y, vjp = jax.vjp(_jax_ln, x, w, b)
        return (y, *vjp(dy))

    return fwd_bwd


# ---- cross-entropy forward + backward --------------------------------------------------------


def _flame_xent(s):
    import flame
    import flame.nn.functional as F

    def fwd_bwd(logits, labels):
        return flame.value_and_grad(lambda z: F.cross_entropy(z, labels))(logits)

    return fwd_bwd


def _torch_xent(s):
    import torch
    import torch.nn.functional as F

    def fwd_bwd(logits, labels):
        z = logits.detach().requires_grad_()
        loss = F.cross_entropy(z, labels)
        (dz,) = torch.autograd.grad(loss, (z,))
        return loss.detach(), dz

    return fwd_bwd


def _jax_xent(s):
    import jax
    import jax.numpy as jnp

    def loss(z, labels):
        logp = jax.nn.log_softmax(z, axis=-1)
        return -jnp.mean(jnp.take_along_axis(logp, labels[:, None], axis=-1))

    return jax.value_and_grad(loss)


# ---- reductions: the mean of everything, a column sum ------------------------------------------


def _flame_mean(s):
    return lambda x: x.mean()


def _torch_mean(s):
    return lambda x: x.mean()


def _jax_mean(s):
    import jax.numpy as jnp

    return jnp.mean


def _flame_col_sum(s):
    return lambda x: x.sum(0)


def _torch_col_sum(s):
    return lambda x: x.sum(0)


def _jax_col_sum(s):
    import jax.numpy as jnp

    return lambda x: jnp.sum(x, axis=0, dtype=jnp.float32).astype(x.dtype)  # f32 accumulation, as torch


# ---- the specs -------------------------------------------------------------------------------


def _rows_cols(quick: bool) -> dict:
    return {"rows": 64, "cols": 256} if quick else {"rows": 8192, "cols": 8192}


def _matrix(s, *, extra=()) -> dict:
    ins = {"x": Input((s["rows"], s["cols"]))}
    for name in extra:
        ins[name] = Input((s["cols"],))
    return ins


def _rc(s) -> int:
    return s["rows"] * s["cols"]


STATELESS = [
    Case("elementwise", "gelu(x*1.5+0.5)*sigmoid(x), f32",
         sizes=lambda q: {"n": 4096 if q else 64 * 2**20},
         inputs=lambda s: {"x": Input((s["n"],))},
         min_bytes=lambda s: 2 * F32 * s["n"],
         flame=_stateless(_flame_chain), torch=_stateless(_torch_chain), jax=_stateless(_jax_chain)),
    Case("bias_gelu", "gelu(x + b), x f32[rows, cols], b f32[cols]",
         sizes=_rows_cols, inputs=lambda s: _matrix(s, extra=("b",)),
         min_bytes=lambda s: F32 * (2 * _rc(s) + s["cols"]),
         flame=_stateless(_flame_bias_gelu), torch=_stateless(_torch_bias_gelu), jax=_stateless(_jax_bias_gelu)),
    Case("softmax", "softmax over the last axis, f32[rows, cols]",
         sizes=_rows_cols, inputs=_matrix, min_bytes=lambda s: F32 * 2 * _rc(s),
         flame=_stateless(_flame_softmax), torch=_stateless(_torch_softmax), jax=_stateless(_jax_softmax)),
    Case("layer_norm", "layer_norm over the last axis with weight and bias, f32[rows, cols]",
         sizes=_rows_cols, inputs=lambda s: _matrix(s, extra=("w", "b")),
         min_bytes=lambda s: F32 * (2 * _rc(s) + 2 * s["cols"]),
         flame=_stateless(_flame_layer_norm), torch=_stateless(_torch_layer_norm), jax=_stateless(_jax_layer_norm)),
    Case("rms_norm", "rms_norm over the last axis with weight, f32[rows, cols]",
         sizes=_rows_cols, inputs=lambda s: _matrix(s, extra=("w",)),
         min_bytes=lambda s: F32 * (2 * _rc(s) + s["cols"]),
         flame=_stateless(_flame_rms_norm), torch=_stateless(_torch_rms_norm), jax=_stateless(_jax_rms_norm)),
    Case("layer_norm_fwd_bwd", "layer_norm forward + backward (y, dx, dw, db from dy), f32[rows, cols]",
         sizes=_rows_cols,
         inputs=lambda s: {**_matrix(s, extra=("w", "b")), "dy": Input((s["rows"], s["cols"]))},
         min_bytes=lambda s: F32 * (4 * _rc(s) + 4 * s["cols"]),
         flame=_stateless(_flame_layer_norm_bwd), torch=_stateless(_torch_layer_norm_bwd),
         jax=_stateless(_jax_layer_norm_bwd)),
    Case("cross_entropy_fwd_bwd", "mean cross-entropy of f32[rows, classes] logits and i64 labels: loss and "
         "d logits",
         sizes=lambda q: {"rows": 64, "classes": 1000} if q else {"rows": 8192, "classes": 32768},
         inputs=lambda s: {"logits": Input((s["rows"], s["classes"])),
                           "labels": Input((s["rows"],), "i64", high=s["classes"])},
         min_bytes=lambda s: F32 * 2 * s["rows"] * s["classes"] + 8 * s["rows"] + F32,
         flame=_stateless(_flame_xent), torch=_stateless(_torch_xent), jax=_stateless(_jax_xent)),
    Case("reduce_all", "mean of every element, f32[n] -> f32[]",
         sizes=lambda q: {"n": 4096 if q else 64 * 2**20},
         inputs=lambda s: {"x": Input((s["n"],))},
         min_bytes=lambda s: F32 * (s["n"] + 1),
         flame=_stateless(_flame_mean), torch=_stateless(_torch_mean), jax=_stateless(_jax_mean)),
    Case("reduce_columns", "column sum, bf16[rows, cols] -> bf16[cols]",
         sizes=lambda q: {"rows": 256, "cols": 128} if q else {"rows": 32768, "cols": 4096},
         inputs=lambda s: {"x": Input((s["rows"], s["cols"]), "bf16")},
         min_bytes=lambda s: BF16 * (_rc(s) + s["cols"]),
         flame=_stateless(_flame_col_sum), torch=_stateless(_torch_col_sum), jax=_stateless(_jax_col_sum),
         tol=1e-2),
]
