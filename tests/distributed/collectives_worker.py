"""One rank of the collectives check: every collective, eager and inside @flame.compile, and gradients
through all_reduce / all_gather / reduce_scatter, against NumPy on what every rank holds (rank r's
data is a known function of r). Exits non-zero (an AssertionError) on a mismatch. Run under the
launcher with any number of ranks; also used by the GPU test."""

from __future__ import annotations

import sys

import numpy as np

import flame
import flame.distributed as dist


def data(rank: int, shape=(4, 3)) -> np.ndarray:
    return (np.arange(np.prod(shape), dtype=np.float32).reshape(shape) * (rank + 1) + rank).astype(np.float32)


def check(got, want, what: str) -> None:
    np.testing.assert_allclose(np.asarray(got.numpy() if isinstance(got, flame.Tensor) else got), want,
                               rtol=1e-6, atol=1e-6, err_msg=f"rank {dist.get_rank()}: {what}")


def run_all(compiled: bool) -> None:
    r, n = dist.get_rank(), dist.get_world_size()
    xs = [data(k) for k in range(n)]
    tag = "compiled" if compiled else "eager"

    def body(x):
        s, a, m, b = x * 1, x * 1, x * 1, x * 1
        dist.all_reduce(s)
        dist.all_reduce(a, dist.ReduceOp.AVG)
        dist.all_reduce(m, "max")
        dist.broadcast(b, src=n - 1)
        g = flame.zeros(4 * n, 3)
        dist.all_gather_into_tensor(g, x)
        rs = flame.zeros(4 // n if 4 % n == 0 else 1, 3) if 4 % n == 0 else None
        if rs is not None:
            dist.reduce_scatter_tensor(rs, x)
        return s, a, m, b, g, rs

    fn = flame.compile(body) if compiled else body
    s, a, m, b, g, rs = fn(flame.tensor(xs[r]))
    total = sum(xs)
    check(s, total, f"{tag} all_reduce sum")
    check(a, total / n, f"{tag} all_reduce avg")
    check(m, np.maximum.reduce(xs), f"{tag} all_reduce max")
    check(b, xs[n - 1], f"{tag} broadcast")
    check(g, np.concatenate(xs), f"{tag} all_gather_into_tensor")
    if rs is not None:
        k = 4 // n
        check(rs, total[r * k: (r + 1) * k], f"{tag} reduce_scatter_tensor")
    parts = [flame.zeros(2, 2) for _ in range(n)]
    dist.all_gather(parts, flame.tensor(data(r, (2, 2))))
    for k in range(n):
        check(parts[k], data(k, (2, 2)), f"all_gather into a list, part {k}")
    out = flame.zeros(2, 2)
    dist.reduce_scatter(out, [flame.tensor(data(r, (2, 2)) + k) for k in range(n)])
    check(out, sum(data(j, (2, 2)) + r for j in range(n)), "reduce_scatter of a list")


def run_gradients() -> None:
    """d/dx of sum(w_r * all_reduce(x)) is the sum of every rank's w; of sum(c_r * all_gather(x)) rank
    r's slot of the sum of the c's; of sum(c_r * reduce_scatter(x, avg)) the c of the slot's owner / N."""
    r, n = dist.get_rank(), dist.get_world_size()
    from flame.frontend.dispatch import apply

    w = [np.full((4, 3), k + 1.0, np.float32) for k in range(n)]
    c = [np.arange(4 * n * 3, dtype=np.float32).reshape(4 * n, 3) * (k + 1) for k in range(n)]

    def ar(x):
        return (apply("all_reduce", x, op="sum", world_size=n) * flame.tensor(w[r])).sum()

    def ag(x):
        return (apply("all_gather", x, world_size=n) * flame.tensor(c[r])).sum()

    def rs(x):
        return (apply("reduce_scatter", x, op="avg", world_size=n) * flame.tensor(c[r][:4])).sum()

    x = flame.tensor(data(r))
    for compiled in (False, True):
        g = flame.grad(ar)(x) if not compiled else flame.compile(flame.grad(ar))(x)
        check(g, sum(w), f"grad through all_reduce (compiled={compiled})")
        g = flame.grad(ag)(x)
        check(g, sum(c)[r * 4: (r + 1) * 4], f"grad through all_gather (compiled={compiled})")
    big = flame.tensor(np.tile(data(r), (n, 1)))
    g = flame.grad(rs)(big)
    want = np.concatenate([c[k][:4] / n for k in range(n)])
    check(g, want, "grad through reduce_scatter avg")
    # eager backward() through an all_reduce
    xt = flame.tensor(data(r), requires_grad=True)
    ar(xt).backward()
    check(xt.grad, sum(w), "loss.backward() through all_reduce")


def main() -> int:
    dist.init_process_group()
    run_all(compiled=False)
    run_all(compiled=True)
    run_gradients()
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
