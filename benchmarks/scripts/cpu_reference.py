"""The CPU path (flame on the NumPy reference executor) against PyTorch eager on the CPU, for two
training steps: the digits MLP of examples/train_mlp.py (64-128-128-10, batch 64, AdamW) and the tiny
GPT of examples/train_gpt.py --tiny (d 32, 2 blocks, 2 heads, T 32, batch 8, AdamW). Both frameworks
start from the same weights and see the same batches; the first losses are printed side by side as
a check that they run the same computation. A benchmark, not a test:

    PYTHONPATH=. python3 -m benchmarks.scripts.cpu_reference [--steps 200] [--threads N]

--threads sets torch's intra-op threads; NumPy's BLAS threads are whatever the environment says
(OMP_NUM_THREADS / OPENBLAS_NUM_THREADS): flame leaves them to the user, so set both alike to compare."""

from __future__ import annotations

import argparse
import math
import os
import sys
import time

import numpy as np
import torch

import flame
import flame.nn as nn
import flame.nn.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def _rates(step, batches, tstep, tbatches, steps: int, rounds: int = 5) -> tuple[float, float]:
    """Steps per second of flame's and torch's step: after 5 warm-up calls each (traces, compiles),
    `rounds` alternating blocks of steps/rounds calls, the best block of each (a shared machine's
    noise only ever slows a block down)."""
    for i in range(5):
        step(*batches[i % len(batches)])
        tstep(*tbatches[i % len(tbatches)])
    n = max(1, steps // rounds)
    best = [0.0, 0.0]
    for _ in range(rounds):
        for k, (fn, bs) in enumerate(((step, batches), (tstep, tbatches))):
            t = time.perf_counter()
            for i in range(n):
                fn(*bs[i % len(bs)])
            best[k] = max(best[k], n / (time.perf_counter() - t))
    return best[0], best[1]


def _compare(step, tstep, batches: list, steps: int) -> tuple[float, float, float, float]:
    """flame's and torch's steps per second (_rates) and their first losses, on the same NumPy batches."""
    fb = [(flame.tensor(x), flame.tensor(y)) for x, y in batches]
    tb = [(torch.from_numpy(x), torch.from_numpy(y)) for x, y in batches]
    first = step(*fb[0]).item(), tstep(*tb[0]).item()
    return *_rates(step, fb, tstep, tb, steps), *first


def _to_torch(model: nn.Module, tmodel: torch.nn.Module) -> None:
    """Copy flame's weights into the same-named torch parameters."""
    params = dict(tmodel.named_parameters())
    with torch.no_grad():
        for name, t in model.state_dict().items():
            params[name].copy_(torch.from_numpy(t.numpy().copy()))


# ---- the digits MLP ------------------------------------------------------------------------------


def mlp(steps: int) -> tuple[float, float, float, float]:
    rng = np.random.default_rng(0)
    batches = [(rng.random((64, 64), dtype=np.float32), rng.integers(0, 10, 64)) for _ in range(8)]
    gen = flame.Generator(0)
    model = nn.Sequential(nn.Linear(64, 128, generator=gen), nn.ReLU(), nn.Linear(128, 128, generator=gen),
                          nn.ReLU(), nn.Linear(128, 10, generator=gen))
    opt = flame.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=1e-4)

    @flame.compile
    def step(x, y):
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss

    tm = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 128),
                             torch.nn.ReLU(), torch.nn.Linear(128, 10))
    _to_torch(model, tm)
    topt = torch.optim.AdamW(tm.parameters(), lr=1e-2, weight_decay=1e-4)

    def tstep(x, y):
        loss = torch.nn.functional.cross_entropy(tm(x), y)
        loss.backward()
        topt.step()
        topt.zero_grad()
        return loss

    return _compare(step, tstep, batches, steps)


# ---- the tiny GPT --------------------------------------------------------------------------------


class TorchBlock(torch.nn.Module):
    """examples/train_gpt.py's Block in PyTorch (same names, same hand-written causal attention)."""

    def __init__(self, d: int, heads: int):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.qkv, self.proj = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)
        self.fc, self.out = torch.nn.Linear(d, 4 * d), torch.nn.Linear(4 * d, d)

    def forward(self, x, mask):
        B, T, C = x.shape
        H, D = self.heads, C // self.heads
        qkv = self.qkv(self.ln1(x)).reshape(B, T, 3, H, D).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        att = torch.softmax(q @ k.transpose(-1, -2) * (D**-0.5) + mask, dim=-1)
        x = x + self.proj((att @ v).transpose(1, 2).reshape(B, T, C))
        return x + self.out(torch.nn.functional.gelu(self.fc(self.ln2(x))))


class TorchGPT(torch.nn.Module):
    def __init__(self, vocab: int, d: int, layers: int, heads: int, T: int):
        super().__init__()
        self.wte = torch.nn.Embedding(vocab, d)
        self.wpe = torch.nn.Parameter(torch.zeros(T, d))
        self.blocks = torch.nn.ModuleList([TorchBlock(d, heads) for _ in range(layers)])
        self.ln_f = torch.nn.LayerNorm(d)
        self.register_buffer("mask", torch.full((T, T), float("-inf")).triu(1))

    def loss(self, idx, targets):
        x = self.wte(idx) + self.wpe
        for block in self.blocks:
            x = block(x, self.mask)
        logits = self.ln_f(x) @ self.wte.weight.T
        return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def gpt(steps: int) -> tuple[float, float, float, float]:
    sys.path.insert(0, os.path.join(ROOT, "examples"))
    from train_gpt import GPT, TINY

    vocab, d, layers, heads, T, B = 96, TINY["d"], TINY["layers"], TINY["heads"], TINY["T"], TINY["batch"]
    rng = np.random.default_rng(0)
    batches = []
    for _ in range(8):
        seq = rng.integers(0, vocab, (B, T + 1))
        batches.append((seq[:, :-1].copy(), seq[:, 1:].copy()))
    model = GPT(vocab, d, layers, heads, T, flame.f32, 0)
    opt = flame.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1, betas=(0.9, 0.95))

    @flame.compile
    def step(x, y):
        loss = model.loss(x, y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss

    tm = TorchGPT(vocab, d, layers, heads, T)
    _to_torch(model, tm)
    topt = torch.optim.AdamW(tm.parameters(), lr=1e-2, weight_decay=0.1, betas=(0.9, 0.95))

    def tstep(x, y):
        loss = tm.loss(x, y)
        loss.backward()
        topt.step()
        topt.zero_grad()
        return loss

    return _compare(step, tstep, batches, steps)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=200, help="timed steps per case")
    ap.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's own)")
    args = ap.parse_args(argv)
    flame.set_device("reference")
    if args.threads:
        torch.set_num_threads(args.threads)
    blas = {k: os.environ[k] for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS") if k in os.environ}
    print(f"flame reference executor (NumPy {np.__version__}) vs torch {torch.__version__} eager, CPU; "
          f"torch threads {torch.get_num_threads()}, BLAS env {blas or 'unset'}, {os.cpu_count()} cores")
    print(f"{'case':10s} {'flame steps/s':>14s} {'torch steps/s':>14s} {'torch/flame':>12s}  first loss flame / torch")
    for name, case in (("mlp", mlp), ("tiny_gpt", gpt)):
        f, t, lf, lt = case(args.steps)
        ok = "" if math.isclose(lf, lt, rel_tol=1e-4, abs_tol=1e-5) else "  (LOSSES DIFFER)"
        print(f"{name:10s} {f:14.1f} {t:14.1f} {t / f:11.2f}x  {lf:.5f} / {lt:.5f}{ok}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
