"""Activation budgets on a GPT block and a Llama-style block (RMSNorm, SwiGLU MLP, causal attention),
one training step each: flame unconstrained and at activation_budget 0.5 and 0.2 against torch.compile
with torch._functorch.config.activation_memory_budget at the same fractions and torch.utils.checkpoint
per block. Prints per row the step time, flame's planned activation memory kept for the backward
(memory_report's saved bytes, the measure activation_budget bounds) with its fraction of the
unconstrained plan's, the planned peak (the larger of the step's two plans, before and after .grad
exists, which share one arena) and, on CUDA, flame's measured peak (the memory pool's growth from
before the model was made) with its ratio to the planned one, and torch's measured peak.

    python3 -m benchmarks.scripts.activation_budget            # the GPU sizes
    python3 -m benchmarks.scripts.activation_budget --tiny     # a tiny size, on the CPU / reference executor
    python3 -m benchmarks.scripts.activation_budget --kinds llama   # the Llama-style block only
"""

from __future__ import annotations

import argparse
import gc
import time

import numpy as np

import flame
import flame.nn as fnn
import flame.nn.functional as fF

BUDGETS = (None, 0.5, 0.2)


def flame_block(kind: str, d: int, heads: int, dtype):
    """One pre-norm block: GPT (LayerNorm, GELU MLP) or Llama (RMSNorm, SwiGLU MLP), causal attention."""
    flame.manual_seed(0)
    norm = (lambda: fnn.LayerNorm(d)) if kind == "gpt" else (lambda: fnn.RMSNorm(d))
    m = fnn.ModuleDict(
        {
            "n1": norm(),
            "qkv": fnn.Linear(d, 3 * d, bias=kind == "gpt"),
            "o": fnn.Linear(d, d, bias=False),
            "n2": norm(),
            "up": fnn.Linear(d, (8 if kind == "llama" else 4) * d, bias=kind == "gpt"),
            "down": fnn.Linear(4 * d, d, bias=kind == "gpt"),
        }
    ).to(dtype)

    def forward(x):
        b, t, _ = x.shape
        q, k, v = m["qkv"](m["n1"](x)).reshape(b, t, 3, heads, d // heads).permute(2, 0, 3, 1, 4).unbind(0)
        a = fF.scaled_dot_product_attention(q, k, v, is_causal=True).permute(0, 2, 1, 3).reshape(b, t, d)
        x = x + m["o"](a)
        u = m["up"](m["n2"](x))
        if kind == "llama":
            g, u = u.chunk(2, dim=-1)
            u = fF.silu(g) * u
        else:
            u = fF.gelu(u)
        return x + m["down"](u)

    return m, forward


def torch_block(kind: str, d: int, heads: int, dtype, device):
    import torch
    import torch.nn.functional as F

    torch.manual_seed(0)
    norm = (lambda: torch.nn.LayerNorm(d)) if kind == "gpt" else (lambda: torch.nn.RMSNorm(d))
    m = torch.nn.ModuleDict(
        {
            "n1": norm(),
            "qkv": torch.nn.Linear(d, 3 * d, bias=kind == "gpt"),
            "o": torch.nn.Linear(d, d, bias=False),
            "n2": norm(),
            "up": torch.nn.Linear(d, (8 if kind == "llama" else 4) * d, bias=kind == "gpt"),
            "down": torch.nn.Linear(4 * d, d, bias=kind == "gpt"),
        }
    ).to(device, dtype)

    def forward(x):
        b, t, _ = x.shape
        q, k, v = m["qkv"](m["n1"](x)).reshape(b, t, 3, heads, d // heads).permute(2, 0, 3, 1, 4).unbind(0)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True).permute(0, 2, 1, 3).reshape(b, t, d)
        x = x + m["o"](a)
        u = m["up"](m["n2"](x))
        u = F.silu(u.chunk(2, -1)[0]) * u.chunk(2, -1)[1] if kind == "llama" else F.gelu(u)
        return x + m["down"](u)

    return m, forward


def _timed(run, repeat: int, sync, warmup: int = 5) -> float:
    """Milliseconds per call, back to back, after `warmup` calls (a training step's second call
    re-traces once: its parameters' .grad exist from then on)."""
    for _ in range(warmup):
        run()
    sync()
    start = time.perf_counter()
    for _ in range(repeat):
        run()
    sync()
    return (time.perf_counter() - start) / repeat * 1e3


def flame_rows(kind, x_np, d, heads, dtype, layers, repeat):
    """(label, ms, saved bytes, planned peak, measured peak or None) per budget; the measured peak
    (CUDA only): the growth of the memory pool's bytes in use from before the model was made."""
    rows = []
    cuda = flame.get_device() == "cuda"
    for budget in BUDGETS:
        gc.collect()
        if cuda:
            flame.cuda.reset_peak_memory_stats()
            start = flame.cuda.memory_allocated()
        m, block = flame_block(kind, d, heads, dtype)

        def step(x, block=block):
            h = x
            for _ in range(layers):
                h = block(h)
            loss = (h.float() ** 2).mean()
            loss.backward()
            return loss

        f = flame.compile(step, name=f"{kind}_block_train", activation_budget=budget)
        x = flame.tensor(x_np).to(dtype)
        report = f.memory_report(x)
        ms = _timed(lambda f=f, x=x: f(x), repeat, flame.cuda.synchronize if cuda else _none)
        kept = report.saved_bytes  # what plan.activation_budget's kept and unconstrained measure
        measured = flame.cuda.max_memory_allocated() - start if cuda else None
        # the planned peak: the larger of the first call's plan (no .grad yet) and the steady one's,
        # which share one arena
        peak = max(report.peak, f.memory_report(x).peak)
        rows.append((f"flame activation_budget={budget}", ms, kept, peak, measured))
        del f, m, block, x
    return rows


def _none():
    return None


def torch_rows(kind, x_np, d, heads, layers, repeat, device):
    import torch
    import torch._functorch.config as fconfig
    from torch.utils.checkpoint import checkpoint

    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    sync = torch.cuda.synchronize if device == "cuda" else _none
    rows = []
    for name, budget, per_block in [("torch.compile", b, False) for b in BUDGETS] + [("torch checkpoint", None, True)]:
        m, block = torch_block(kind, d, heads, dtype, device)

        def step(x, block=block, per_block=per_block):
            h = x
            for _ in range(layers):
                h = checkpoint(block, h, use_reentrant=False) if per_block else block(h)
            loss = (h.float() ** 2).mean()
            loss.backward()
            return loss

        x = torch.from_numpy(x_np).to(device, dtype).requires_grad_(False)
        run = step
        if not per_block:
            torch._dynamo.reset()
            with fconfig.patch(activation_memory_budget=1.0 if budget is None else budget):
                run = torch.compile(step)
                run(x)
        if device == "cuda":
            torch.cuda.reset_peak_memory_stats()
        ms = _timed(lambda run=run, x=x: run(x), repeat, sync)
        peak = torch.cuda.max_memory_allocated() if device == "cuda" else 0
        label = f"{name} activation_memory_budget={budget}" if not per_block else name + " per block"
        rows.append((label, ms, None, peak, None))
    return rows


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tiny", action="store_true", help="a tiny size that runs on the CPU / reference executor")
    ap.add_argument("--no-torch", action="store_true", help="flame's rows only")
    ap.add_argument("--kinds", nargs="+", choices=("gpt", "llama"), default=["gpt", "llama"],
                    help="which blocks to measure (default: both)")
    args = ap.parse_args(argv)
    cuda = flame.get_device() == "cuda" and not args.tiny
    b, t, d, heads, layers, repeat = (2, 16, 32, 2, 2, 1) if args.tiny else (8, 1024, 1024, 16, 4, 10)
    dtype = flame.bf16 if cuda else flame.f32
    x_np = np.random.default_rng(0).standard_normal((b, t, d)).astype(np.float32)
    for kind in args.kinds:
        rows = flame_rows(kind, x_np, d, heads, dtype, layers, repeat)
        if not args.no_torch:
            rows += torch_rows(kind, x_np, d, heads, layers, repeat, "cuda" if cuda else "cpu")
        base, unconstrained = rows[0][1], rows[0][2]  # the unconstrained flame plan's time and saved bytes
        print(f"== {kind} block training step, {layers} blocks, batch {b} x {t} tokens, d {d} ==")
        for label, ms, kept, peak, measured in rows:
            act = "" if kept is None else f"activations kept {kept / 2**20:9.2f} MiB ({kept / unconstrained:5.3f})  "
            seen = "" if measured is None else f" (measured {measured / 2**20:9.2f} MiB, {measured / peak:5.3f})"
            print(f"  {label:<52} {ms:9.3f} ms ({ms / base:5.2f}x)  {act}peak {peak / 2**20:9.2f} MiB{seen}")


if __name__ == "__main__":
    main()
