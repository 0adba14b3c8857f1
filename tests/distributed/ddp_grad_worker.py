"""One rank of the DistributedDataParallel .grad check, against torch's semantics: the reducer writes
the averaged bucket back into the existing .grad (torch's copy of a bucket into its gradients), so a
reference held to a parameter's .grad before a step is still its .grad after it and holds the average
over the ranks, which equals the gradient of the whole batch in one process (torch, f64, computed here
from the parameters before the step). Gradients accumulate over micro-batches under no_sync(); the
backward after the last one averages the sum. Exits non-zero (an AssertionError) on a mismatch; run
under the launcher (`python3 -m flame.distributed.run --nproc-per-node 2 ...`)."""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np
import torch

import flame
import flame.distributed as dist
import flame.nn as nn
import flame.nn.functional as F
from flame.nn.parallel import DistributedDataParallel

BATCH, STEPS = 8, 3


def parse(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--eager", action="store_true", help="no @flame.compile")
    p.add_argument("--accum", type=int, default=1, help="micro-batches per step (no_sync for all but the last)")
    p.add_argument("--set-to-none", action="store_true", help="zero_grad(set_to_none=True) before a step")
    return p.parse_args(argv)


def torch_grads(params: list[np.ndarray], x: np.ndarray, y: np.ndarray) -> list[np.ndarray]:
    """The gradient of the whole batch's loss in one process (torch, f64)."""
    w1, b1, w2, b2 = (torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in params)
    h = torch.tanh(torch.tensor(x, dtype=torch.float64) @ w1.T + b1)
    torch.nn.functional.mse_loss(h @ w2.T + b2, torch.tensor(y, dtype=torch.float64)).backward()
    return [t.grad.numpy() for t in (w1, b1, w2, b2)]


def main(argv=None) -> int:
    a = parse(argv)
    dist.init_process_group()
    rank, world = dist.get_rank(), dist.get_world_size()
    gen = flame.Generator(rank)  # ranks start apart: the wrap-time broadcast gives them rank 0's weights
    model = nn.Sequential(nn.Linear(6, 8, generator=gen), nn.Tanh(), nn.Linear(8, 3, generator=gen))
    ddp = DistributedDataParallel(model, bucket_cap_mb=200 / 2**20)  # several buckets, one of several params
    assert len(ddp.buckets) >= 2
    params = list(model.parameters())
    opt = flame.optim.SGD(params, lr=0.1)

    def micro(x, y, first: bool, last: bool):
        if first:
            opt.zero_grad(set_to_none=a.set_to_none)
        loss = F.mse_loss(ddp(x), y) / a.accum
        if last:
            loss.backward()
            opt.step()
        else:
            with ddp.no_sync():
                loss.backward()

    step = micro if a.eager else flame.compile(micro)
    rng = np.random.default_rng(7)
    per_rank = BATCH // world
    per_micro = per_rank // a.accum
    for i in range(STEPS):
        x, y = rng.standard_normal((BATCH, 6)).astype(np.float32), rng.standard_normal((BATCH, 3)).astype(np.float32)
        before = [p.numpy().astype(np.float64) for p in params]
        held = [p.grad for p in params]
        for k in range(a.accum):
            s = slice(rank * per_rank + k * per_micro, rank * per_rank + (k + 1) * per_micro)
            step(flame.tensor(x[s]), flame.tensor(y[s]), k == 0, k == a.accum - 1)
        want = torch_grads(before, x, y)
        for j, (p, g, w) in enumerate(zip(params, held, want)):
            what = f"rank {rank} step {i} param {j}"
            np.testing.assert_allclose(p.grad.numpy(), w, rtol=1e-5, atol=1e-6, err_msg=what)
            if g is not None and not a.set_to_none:  # torch's DDP: the same tensor, holding the average
                assert p.grad is g, f"{what}: .grad is a new tensor"
                np.testing.assert_allclose(g.numpy(), w, rtol=1e-5, atol=1e-6, err_msg=what)
            if a.set_to_none:
                assert g is None or p.grad is not g, what
            np.testing.assert_allclose(p.numpy(), before[j] - 0.1 * p.grad.numpy(), rtol=1e-5, atol=1e-6, err_msg=what)
    print(f"rank {rank}: ok")
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    sys.exit(main())
