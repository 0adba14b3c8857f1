"""One rank of a data-parallel training run, for the distributed tests (CPU: the reference executor
with the store exchange; GPU: NCCL). Run it alone (world size 1, the whole batch) or under the
launcher (`python3 -m flame.distributed.run --nproc-per-node 2 tests/distributed/ddp_worker.py ...`):
every rank takes its rows of the same global batch, and rank 0 writes the parameters after each step
to OUT/step{i}.npz, so a test compares the runs step by step.

Ranks other than 0 start from different weights (their own seed): the wrap-time broadcast must fix that."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples"))

import flame  # noqa: E402
import flame.distributed as dist  # noqa: E402
import flame.nn as nn  # noqa: E402
import flame.nn.functional as F  # noqa: E402
from flame.distributed.optim import ZeroRedundancyOptimizer  # noqa: E402
from flame.nn.parallel import DistributedDataParallel  # noqa: E402


def parse(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--model", choices=["mlp", "gpt"], default="mlp")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--batch", type=int, default=8, help="the global batch")
    p.add_argument("--accum", type=int, default=1, help="micro-batches per step (no_sync for all but the last)")
    p.add_argument("--zero", action="store_true", help="ZeroRedundancyOptimizer(AdamW)")
    p.add_argument("--clip", type=float, default=0.0, help="clip the gradient norm to this (0: no clipping)")
    p.add_argument("--eager", action="store_true", help="no @flame.compile")
    p.add_argument("--bucket-mb", type=float, default=0.002, help="small: several buckets")
    p.add_argument("--fail-rank", type=int, default=-1, help="this rank raises at --fail-step")
    p.add_argument("--fail-step", type=int, default=1)
    p.add_argument("--checkpoint", default="", help="save a checkpoint here after the last step, then load it")
    p.add_argument("--out", required=True)
    return p.parse_args(argv)


def build(kind: str, seed: int):
    if kind == "mlp":
        gen = flame.Generator(seed)
        model = nn.Sequential(nn.Linear(12, 32, generator=gen), nn.GELU(), nn.LayerNorm(32),
                              nn.Linear(32, 32, generator=gen), nn.ReLU(), nn.Linear(32, 5, generator=gen))

        def loss_fn(m, x, y):
            return F.cross_entropy(m(x), y)

        def data(rng, n):
            return (flame.tensor(rng.standard_normal((n, 12)).astype(np.float32)),
                    flame.tensor(rng.integers(0, 5, n)))

        return model, loss_fn, data
    from train_gpt import GPT

    vocab, T = 40, 8
    model = GPT(vocab, 32, 2, 4, T, flame.f32, seed=seed)

    def loss_fn(m, idx, targets):
        logits = m(idx).float()
        return F.cross_entropy(logits.reshape(-1, vocab), targets.reshape(-1))

    def data(rng, n):
        return flame.tensor(rng.integers(0, vocab, (n, T))), flame.tensor(rng.integers(0, vocab, (n, T)))

    return model, loss_fn, data


def main(argv=None) -> int:
    a = parse(argv)
    dist.init_process_group()
    rank, world = dist.get_rank(), dist.get_world_size()
    model, loss_fn, data = build(a.model, seed=rank)
    ddp = DistributedDataParallel(model, bucket_cap_mb=a.bucket_mb)
    params = list(ddp.parameters())
    # eps 1e-6, not 1e-8: the attention's key bias has a gradient that is exactly zero in exact
    # arithmetic (softmax ignores a constant added to a row of scores), so in f32 it is rounding noise
    # of ~1e-9, which AdamW with eps 1e-8 turns into +-lr steps whose sign no two summation orders
    # agree on; 1e-6 keeps those elements from dominating the comparison
    hyper = dict(lr=1e-2, weight_decay=0.1, eps=1e-6)
    if a.zero:
        opt = ZeroRedundancyOptimizer(params, flame.optim.AdamW, **hyper)
    else:
        opt = flame.optim.AdamW(params, **hyper)

    def clip():
        if a.clip > 0:
            if a.zero:
                opt.clip_grad_norm_(a.clip)
            else:
                nn.utils.clip_grad_norm_(params, a.clip)

    def micro(x, y, last: bool):
        loss = loss_fn(ddp, x, y) / a.accum
        if last:
            loss.backward()
            clip()
            opt.step()
            opt.zero_grad()
        else:
            with ddp.no_sync():
                loss.backward()
        return loss

    step = micro if a.eager else flame.compile(micro)
    out = Path(a.out)
    rng = np.random.default_rng(123)
    per_rank = a.batch // world
    per_micro = per_rank // a.accum
    for i in range(a.steps):
        x, y = data(rng, a.batch)
        if rank == a.fail_rank and i == a.fail_step:
            raise ValueError("boom")
        lo = rank * per_rank
        for k in range(a.accum):
            s = slice(lo + k * per_micro, lo + (k + 1) * per_micro)
            step(x[s], y[s], k == a.accum - 1)
        if rank == 0:
            np.savez(out / f"step{i}.npz", **{n: p.numpy() for n, p in model.named_parameters()})
    if a.checkpoint:
        from flame.checkpoint import load_checkpoint, save_checkpoint

        save_checkpoint(a.checkpoint, ddp, opt)
        load_checkpoint(a.checkpoint, ddp, opt)
        if rank == world - 1:
            np.savez(out / "loaded.npz", **{n: p.numpy() for n, p in model.named_parameters()})
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    sys.exit(main())
