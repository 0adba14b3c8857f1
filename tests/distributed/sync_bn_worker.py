"""One rank of the SyncBatchNorm check: each rank holds its part of one batch (the parts differ in
size), runs SyncBatchNorm forward and backward (eager or compiled), and compares with torch's
BatchNorm on the whole batch in one process (f64): the output and the input's gradient of its part,
the weight and bias gradients summed over the ranks (each rank holds its part's contribution, as
torch's SyncBatchNorm leaves them before DistributedDataParallel averages), and the running
statistics after each step. Exits non-zero (an AssertionError) on a mismatch; run under the launcher
(`python3 -m flame.distributed.run --nproc-per-node 2 ...`)."""

from __future__ import annotations

import argparse

import numpy as np
import torch

import flame
import flame.distributed as dist
import flame.nn as nn

SIZES = (3, 5)  # each rank's part of the batch
STEPS = 2


def parse(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--eager", action="store_true", help="no @flame.compile")
    p.add_argument("--rank-2d", action="store_true", help="[N, C] inputs (BatchNorm1d) instead of [N, C, H, W]")
    p.add_argument("--cumulative", action="store_true", help="momentum=None (cumulative moving average)")
    return p.parse_args(argv)


def main(argv=None) -> int:
    a = parse(argv)
    dist.init_process_group()
    rank, world = dist.get_rank(), dist.get_world_size()
    assert world == len(SIZES)
    c = 4
    momentum = None if a.cumulative else 0.3
    shape = (c,) if a.rank_2d else (c, 5, 3)
    bn = nn.SyncBatchNorm(c, momentum=momentum)
    ref = torch.nn.BatchNorm1d(c, momentum=momentum).double() if a.rank_2d else \
        torch.nn.BatchNorm2d(c, momentum=momentum).double()
    rng = np.random.default_rng(11)
    w, b = rng.standard_normal(c).astype(np.float32), rng.standard_normal(c).astype(np.float32)
    with flame.no_grad():
        bn.weight.copy_(flame.tensor(w))
        bn.bias.copy_(flame.tensor(b))
    with torch.no_grad():
        ref.weight.copy_(torch.tensor(w, dtype=torch.float64))
        ref.bias.copy_(torch.tensor(b, dtype=torch.float64))

    def step(x, g):
        y = bn(x)
        (y * g).sum().backward()
        return y

    run = step if a.eager else flame.compile(step)
    lo, hi = sum(SIZES[:rank]), sum(SIZES[: rank + 1])
    for i in range(STEPS):
        x = (rng.standard_normal((sum(SIZES), *shape)) * 3 + 7).astype(np.float32)
        g = rng.standard_normal((sum(SIZES), *shape)).astype(np.float32)
        bn.weight.grad = bn.bias.grad = None
        xf = flame.tensor(x[lo:hi], requires_grad=True)
        y = run(xf, flame.tensor(g[lo:hi]))
        xt = torch.tensor(x, dtype=torch.float64, requires_grad=True)
        ref.weight.grad = ref.bias.grad = None
        yt = ref(xt)
        (yt * torch.tensor(g, dtype=torch.float64)).sum().backward()
        what = f"rank {rank} step {i}"
        np.testing.assert_allclose(y.numpy(), yt.detach().numpy()[lo:hi], rtol=1e-4, atol=1e-4, err_msg=what)
        np.testing.assert_allclose(xf.grad.numpy(), xt.grad.numpy()[lo:hi], rtol=1e-4, atol=1e-4, err_msg=what)
        for name in ("weight", "bias"):
            total = getattr(bn, name).grad.clone()
            dist.all_reduce(total)
            want = getattr(ref, name).grad.numpy()
            np.testing.assert_allclose(total.numpy(), want, rtol=1e-4, atol=1e-4, err_msg=f"{what} {name}")
        for name in ("running_mean", "running_var"):
            got, want = getattr(bn, name).numpy(), getattr(ref, name).numpy()
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=f"{what} {name}")
        assert int(bn.num_batches_tracked.item()) == i + 1
    bn.eval()  # eval: the running statistics, no exchange
    x = rng.standard_normal((SIZES[rank], *shape)).astype(np.float32)
    ref.eval()
    np.testing.assert_allclose(bn(flame.tensor(x)).numpy(), ref(torch.tensor(x, dtype=torch.float64)).detach().numpy(),
                               rtol=1e-4, atol=1e-4)
    print(f"rank {rank}: ok", flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
