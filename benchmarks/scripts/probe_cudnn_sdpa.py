"""Probe cuDNN fused attention through flame.runtime.cudnn_attention on a GPU: max error against
torch's SDPA (when a CUDA torch is installed; else against flame's NumPy reference on one batch) and
forward / backward milliseconds (CUDA events, median of 20 after warm-up).

    python3 -m benchmarks.scripts.probe_cudnn_sdpa [--batch 8 --heads 16 --seq 1024 --dim 64] [--no-causal]

The forward writes the softmax statistics (log-sum-exp per row) that the backward reads (see
flame/runtime/cudnn_attention.py); the backward time is cuDNN's backward alone."""

from __future__ import annotations

import argparse

import numpy as np


def _ms(cupy, fn, reps=20) -> float:
    for _ in range(3):
        fn()
    times = []
    for _ in range(reps):
        start, stop = cupy.cuda.Event(), cupy.cuda.Event()
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(cupy.cuda.get_elapsed_time(start, stop))
    return float(np.median(times))


def _f32(cupy, a) -> np.ndarray:
    """bf16 bits (held as uint16 on the device) -> float32 on the host."""
    from flame.ir.dtypes import bf16

    return cupy.asnumpy(a).view(bf16.np_dtype).astype(np.float32)


def _torch_errors(cupy, dev, out, grads, causal):
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None

    def load(name):
        return torch.tensor(_f32(cupy, dev[name]), device="cuda", dtype=torch.bfloat16)
    ts = [load(n).requires_grad_() for n in ("q", "k", "v")]
    y = torch.nn.functional.scaled_dot_product_attention(*ts, is_causal=causal)
    y.backward(load("do"))
    want = torch.cat([t.grad.flatten() for t in ts]).float().cpu().numpy()
    return (float(np.abs(_f32(cupy, out) - y.detach().float().cpu().numpy()).max()),
            float(np.abs(_f32(cupy, grads) - want).max()))


def _reference_errors(cupy, dev, out, grads, causal, scale):
    from flame.ir import REGISTRY

    host = {n: _f32(cupy, a[:1]) for n, a in dev.items()}  # one batch: NumPy is slow
    attrs = {"scale": scale, "is_causal": causal, "enable_gqa": False}
    want = REGISTRY["scaled_dot_product_attention"].ref(host["q"], host["k"], host["v"], **attrs)
    got = _f32(cupy, out[:1])
    return float(np.abs(got - want).max()), None


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--no-causal", action="store_true")
    args = p.parse_args()

    import cupy

    from flame.ir.dtypes import bf16
    from flame.runtime.cudnn_attention import AttentionSpec, cudnn_attention

    causal = not args.no_causal
    shape = (args.batch, args.heads, args.seq, args.dim)
    scale = args.dim**-0.5
    rng = np.random.default_rng(0)  # bf16 bits travel as uint16: no reliance on CuPy's bfloat16 support
    dev = {n: cupy.asarray(rng.standard_normal(shape, np.float32).astype(bf16.np_dtype).view(np.uint16))
           for n in ("q", "k", "v", "do")}
    att = cudnn_attention(AttentionSpec.of(shape, shape, shape, "bf16", scale, causal, False))
    out = cupy.empty(shape, np.uint16)
    stats = cupy.empty(shape[:-1], np.float32)
    grads = cupy.empty(3 * out.size, np.uint16)
    ws = cupy.empty(max(att.forward_workspace, att.backward_workspace, 1), cupy.uint8)
    fwd = _ms(cupy, lambda: att.forward(dev["q"], dev["k"], dev["v"], out, stats, None, ws))
    bwd = _ms(cupy, lambda: att.backward(dev["q"], dev["k"], dev["v"], out, dev["do"], stats, grads, None, ws))
    errors = _torch_errors(cupy, dev, out, grads, causal)
    against = "torch SDPA"
    if errors is None:
        errors, against = _reference_errors(cupy, dev, out, grads, causal, scale), "NumPy reference (batch 0)"
    print(f"cuDNN SDPA bf16 B{args.batch} H{args.heads} T{args.seq} D{args.dim} causal={causal}")
    print(f"  workspace: forward {att.forward_workspace} B, backward {att.backward_workspace} B")
    print(f"  forward {fwd:.3f} ms, backward {bwd:.3f} ms (the forward writes the stats the backward reads)")
    print(f"  max |error| vs {against}: out {errors[0]:.3g}" + (f", grads {errors[1]:.3g}" if errors[1] is not None
                                                               else ""))


if __name__ == "__main__":
    main()
