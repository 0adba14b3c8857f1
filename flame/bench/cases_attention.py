"""Fused attention forward + backward: causal scaled-dot-product attention, bf16, q, k, v and the output
gradient `dout` all [batch, heads, T, head_dim] (PyTorch's layout). One call returns the output and the
gradients of q, k and v, as a training step needs them. flame runs
`flame.nn.functional.scaled_dot_product_attention` (ONE op; cuDNN's fused attention on the GPU) and its
gradient through `flame.value_and_grad`; torch runs `torch.nn.functional.scaled_dot_product_attention`
with autograd (eager and torch.compile). JAX runs `jax.nn.dot_product_attention(is_causal=True)` with
`jax.vjp` in its DEFAULT implementation, which is XLA's (unfused: the T x T scores are materialised) in
the JAX versions this suite meets; the extra peer `jax.cudnn` asks for `implementation="cudnn"`, JAX's
own cuDNN fused attention. JAX takes [batch, T, heads, head_dim], so its function transposes in and out
inside the jitted call.
"""

from __future__ import annotations

from flame.bench.cases import _stateless
from flame.bench.spec import Case, Input


def _flame_sdpa(s):
    import flame
    import flame.nn.functional as F

    def loss(q, k, v, dout):  # d loss / d out = dout: the vjp of attention at dout
        return (F.scaled_dot_product_attention(q, k, v, is_causal=True) * dout).sum()

    grads = flame.value_and_grad(loss, (0, 1, 2))

    def fwd_bwd(q, k, v, dout):
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # CSE shares it with the loss's
        _, (dq, dk, dv) = grads(q, k, v, dout)
        return out, dq, dk, dv

    return fwd_bwd


def _torch_sdpa_on(backend: str | None):
    def make(s):
        import contextlib

        import torch
        import torch.nn.functional as F
        from torch.nn.attention import SDPBackend, sdpa_kernel

        def fwd_bwd(q, k, v, dout):
            q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
            with sdpa_kernel(getattr(SDPBackend, backend)) if backend else contextlib.nullcontext():
                out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            dq, dk, dv = torch.autograd.grad(out, (q, k, v), dout)
            return out.detach(), dq, dk, dv

        return fwd_bwd

    return make


_torch_sdpa = _torch_sdpa_on(None)


def _jax_sdpa(implementation: str | None):
    def make(s):
        import jax

        def attention(q, k, v):  # [B, H, T, D] <-> JAX's [B, T, H, D]
            q, k, v = (x.swapaxes(1, 2) for x in (q, k, v))
            out = jax.nn.dot_product_attention(q, k, v, is_causal=True, implementation=implementation)
            return out.swapaxes(1, 2)

        def fwd_bwd(q, k, v, dout):
            out, vjp = jax.vjp(attention, q, k, v)
            return (out, *vjp(dout))

        return fwd_bwd

    return make


def _sizes(T: int, D: int = 64, batch: int = 8):
    def sizes(quick: bool) -> dict:
        return {"batch": 1, "heads": 2, "T": 16, "D": 8} if quick else {"batch": batch, "heads": 16, "T": T, "D": D}

    return sizes


def _inputs(s) -> dict[str, Input]:
    shape, dt = (s["batch"], s["heads"], s["T"], s["D"]), s.get("dtype", "bf16")
    return {n: Input(shape, dt) for n in ("q", "k", "v", "dout")}


def _bytes(s) -> int:
    """Read q, k, v and dout once, write out, dq, dk and dv once."""
    return 8 * s["batch"] * s["heads"] * s["T"] * s["D"] * (2 if s.get("dtype", "bf16") == "bf16" else 4)


def _flops(s) -> int:
    """Forward 4*B*H*L*S*D (q k^T and att v, 2 flops a multiply-add), halved by the causal mask; the
    backward 2.5x the forward (dv, dp, dq, dk: four products, plus the forward's q k^T recomputed, half)."""
    forward = 4 * s["batch"] * s["heads"] * s["T"] * s["T"] * s["D"] // 2
    return forward + forward * 5 // 2


def _case(name: str, T: int, D: int = 64, batch: int = 8) -> Case:
    return Case(name, f"causal SDPA forward + backward (out, dq, dk, dv from dout), bf16 [{batch}, 16, {T}, {D}]; "
                "JAX: jax.nn.dot_product_attention's default implementation (XLA), jax.cudnn: its cuDNN one; "
                "torch.cudnn: torch's SDPA with its cuDNN backend chosen (torch's default picks its own)",
                sizes=_sizes(T, D, batch), inputs=_inputs, min_bytes=_bytes, min_flops=_flops,
                flame=_stateless(_flame_sdpa), torch=_stateless(_torch_sdpa), jax=_stateless(_jax_sdpa(None)),
                extra={"jax.cudnn": ("jax", _stateless(_jax_sdpa("cudnn")), "compiled"),
                       "torch.cudnn": ("torch", _stateless(_torch_sdpa_on("CUDNN_ATTENTION")), "eager")}, tol=2e-2)


ATTENTION = [_case("sdpa_fwd_bwd", 1024), _case("sdpa_fwd_bwd_4k", 4096), _case("sdpa_fwd_bwd_4k_d128", 4096, 128, 4)]
