"""One rank of the same data-parallel script under torch (DistributedDataParallel over gloo) or flame
(over the TCP store), for test_dist_torch_parity.py. Started as torchrun starts ranks (RANK,
WORLD_SIZE, MASTER_ADDR, MASTER_PORT: init_process_group("gloo", init_method="env://") reads them;
--init-method tcp://HOST:PORT names the store's address instead). Every rank writes what it saw
to OUT/rank{r}.npz (arrays, float64 unless the dtype is the point) and OUT/rank{r}.json (facts), so
the test compares the two libraries rank by rank.

Ranks start from different weights, buffers and frozen parameters (wrapping must broadcast rank 0's)
and get different data and uneven batch sizes, so an unaveraged or wrongly weighted gradient shows."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def parse(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--lib", choices=["torch", "flame"], required=True)
    p.add_argument("--compile", action="store_true", help="flame: the training steps under @flame.compile")
    p.add_argument("--init-method", default="env://")
    p.add_argument("--out", required=True)
    return p.parse_args(argv)


class Lib:
    """The few names the script needs, from torch or flame (flame's API has torch's names)."""

    def __init__(self, name: str, compiled: bool):
        self.name = name
        if name == "torch":
            import torch
            import torch.distributed as dist
            from torch.nn.parallel import DistributedDataParallel

            torch.set_num_threads(1)
            self.L, self.dist, self.DDP, self.compile = torch, dist, DistributedDataParallel, lambda f: f
        else:
            import flame
            import flame.distributed as dist
            from flame.nn.parallel import DistributedDataParallel

            self.L, self.dist, self.DDP = flame, dist, DistributedDataParallel
            self.compile = flame.compile if compiled else (lambda f: f)
        self.nn = self.L.nn

    def arr(self, t) -> np.ndarray:
        return t.detach().numpy().copy() if self.name == "torch" else t.numpy().copy()

    def t(self, a: np.ndarray):
        return self.L.tensor(np.asarray(a))

    def no_grad(self):
        return self.L.no_grad()


def load(lib: Lib, module, rng: np.random.Generator) -> None:
    """Every parameter and floating buffer <- values drawn from rng (the same on both libraries)."""
    with lib.no_grad():
        for _, p in module.named_parameters():
            p.copy_(lib.t(rng.standard_normal(tuple(p.shape)) * 0.5))


def mlp(lib: Lib, rank: int, frozen: bool = True):
    nn = lib.nn
    model = nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 3)).double()
    load(lib, model, np.random.default_rng(10 + rank))  # rank 1 differs: the wrap broadcasts rank 0's
    if frozen:
        model[0].bias.requires_grad_(False)
    return model


def data(rank: int, step: int, n_extra: int = 0):
    rng = np.random.default_rng(100 * step + rank)
    n = 3 + 2 * rank + n_extra  # uneven batches: rank 1 has more rows
    return rng.standard_normal((n, 4)), rng.standard_normal((n, 3))


def loss_of(out, y, rank: int):
    return ((out - y) ** 2).sum() * (rank + 1.0)  # uneven losses: rank 1's counts double


def averaging(lib: Lib, rank: int, res: dict) -> None:
    """SGD with momentum over 3 steps; the frozen bias (different on each rank) is broadcast once."""
    model = mlp(lib, rank)
    ddp = lib.DDP(model)
    opt = lib.L.optim.SGD([p for p in ddp.parameters() if p.requires_grad], lr=0.05, momentum=0.9)
    res["avg/frozen_bias_after_wrap"] = lib.arr(model[0].bias)

    def step(x, y):
        loss = loss_of(ddp(x), y, rank)
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss

    step = lib.compile(step)
    for i in range(3):
        x, y = data(rank, i)
        step(lib.t(x), lib.t(y))
        for n, p in model.named_parameters():
            res[f"avg/step{i}/{n}"] = lib.arr(p)
    res["avg/frozen_grad_is_none"] = np.array(model[0].bias.grad is None)


def accumulation(lib: Lib, rank: int, res: dict) -> None:
    """Two micro-batches under no_sync, a third synced; the gradient after the synced backward."""
    model = mlp(lib, rank, frozen=False)
    ddp = lib.DDP(model)
    opt = lib.L.optim.SGD(ddp.parameters(), lr=0.05)

    def micro(x, y, last: bool):
        loss = loss_of(ddp(x), y, rank)
        if last:
            loss.backward()
            grads = [p.grad * 1.0 for p in model.parameters()]
            opt.step()
            opt.zero_grad()
            return grads
        with ddp.no_sync():
            loss.backward()
        return []

    micro = lib.compile(micro)
    for i in range(2):
        for k in range(3):
            x, y = data(rank, 10 * i + k)
            grads = micro(lib.t(x), lib.t(y), k == 2)
        for j, g in enumerate(grads):
            res[f"accum/step{i}/grad{j}"] = lib.arr(g)
        for n, p in model.named_parameters():
            res[f"accum/step{i}/{n}"] = lib.arr(p)


def buffers(lib: Lib, rank: int, res: dict) -> None:
    """BatchNorm's running statistics: rank 0's broadcast before every forward (training and eval)."""
    nn = lib.nn
    model = nn.Sequential(nn.Linear(4, 5), nn.BatchNorm1d(5), nn.Linear(5, 2)).double()
    load(lib, model, np.random.default_rng(20 + rank))
    with lib.no_grad():
        model[1].running_mean.copy_(lib.t(np.full(5, float(rank))))  # differs per rank before the wrap
    ddp = lib.DDP(model)
    opt = lib.L.optim.SGD(ddp.parameters(), lr=0.1)

    def step(x):
        loss = (ddp(x) ** 2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss

    step = lib.compile(step)
    for i in range(3):
        x, _ = data(rank, 30 + i)
        step(lib.t(x * (rank + 1)))
        res[f"bn/step{i}/running_mean"] = lib.arr(model[1].running_mean)
        res[f"bn/step{i}/running_var"] = lib.arr(model[1].running_var)
        res[f"bn/step{i}/weight"] = lib.arr(model[0].weight)
    ddp.eval()
    with lib.no_grad():
        res["bn/eval_out"] = lib.arr(ddp(lib.t(data(rank, 40)[0])))
    res["bn/eval_running_mean"] = lib.arr(model[1].running_mean)


def sync_flags(lib: Lib, rank: int, res: dict) -> None:
    """What init_sync, forward_sync_buffers and the deprecated broadcast_buffers broadcast, and when."""
    nn = lib.nn
    for name, kwargs in {"no_init_sync": {"init_sync": False}, "no_forward_sync": {"forward_sync_buffers": False},
                         "no_broadcast_buffers": {"broadcast_buffers": False}}.items():
        model = nn.Sequential(nn.Linear(4, 5), nn.BatchNorm1d(5)).double()
        load(lib, model, np.random.default_rng(40 + rank))
        with lib.no_grad():
            model[1].running_mean.copy_(lib.t(np.full(5, float(rank))))
        ddp = lib.DDP(model, **kwargs)
        res[f"flags/{name}/wrapped_weight"] = lib.arr(model[0].weight)
        res[f"flags/{name}/wrapped_running_mean"] = lib.arr(model[1].running_mean)
        ddp(lib.t(data(rank, 70)[0]))
        res[f"flags/{name}/running_mean"] = lib.arr(model[1].running_mean)


def unused(lib: Lib, rank: int, res: dict, facts: dict) -> None:
    """find_unused_parameters=True: a layer only rank 0 uses gets the average (rank 1 adds zeros), a
    layer no rank uses keeps .grad None; with the flag off, the forward after such a backward raises."""
    nn = lib.nn

    class Branches(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b, self.c = nn.Linear(4, 3), nn.Linear(4, 3), nn.Linear(4, 3)

        def forward(self, x, use_b):
            y = self.a(x)
            return y + self.b(x) if use_b else y

    model = Branches().double()
    load(lib, model, np.random.default_rng(30))
    ddp = lib.DDP(model, find_unused_parameters=True)
    # weight decay moves a parameter whose .grad is zero, not one whose .grad is None
    opt = lib.L.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9, weight_decay=0.1)
    for i in range(2):
        x, y = data(rank, 50 + i)
        loss_of(ddp(lib.t(x), rank == 0), lib.t(y), rank).backward()
        for n, p in model.named_parameters():
            res[f"unused/step{i}/grad/{n}"] = np.array(np.nan) if p.grad is None else lib.arr(p.grad)
        opt.step()
        opt.zero_grad()
        for n, p in model.named_parameters():
            res[f"unused/step{i}/{n}"] = lib.arr(p)

    strict = lib.DDP(Branches().double())
    x, y = data(rank, 60)
    loss_of(strict(lib.t(x), False), lib.t(y), rank).backward()
    facts["strict_grad_of_unused"] = repr(strict.module.b.weight.grad)
    try:
        strict(lib.t(x), False)
        facts["strict_next_forward"] = "ok"
    except Exception as e:  # noqa: BLE001 - the kind of error is what is compared
        facts["strict_next_forward"] = f"RuntimeError={isinstance(e, RuntimeError)}"


def wrapper(lib: Lib, rank: int, facts: dict) -> None:
    """What the wrapper looks like: .module, state_dict keys, train()/eval()."""
    model = mlp(lib, rank)
    ddp = lib.DDP(model)
    facts["module_is_model"] = ddp.module is model
    facts["state_dict_keys"] = list(ddp.state_dict())
    facts["module_state_dict_keys"] = list(ddp.module.state_dict())
    facts["named_parameters"] = [n for n, _ in ddp.named_parameters()]
    ddp.eval()
    facts["eval"] = [ddp.training, model.training, model[0].training]
    ddp.train()
    facts["train"] = [ddp.training, model.training, model[0].training]


def collectives(lib: Lib, rank: int, world: int, res: dict, facts: dict) -> None:
    """all_reduce (each op, each dtype), broadcast, all_gather, reduce_scatter (each under
    @flame.compile with --compile), barrier."""
    d = lib.dist
    facts["rank"], facts["world"], facts["backend"] = d.get_rank(), d.get_world_size(), d.get_backend()

    def all_reduce(t, op):
        d.all_reduce(t, op=getattr(d.ReduceOp, op))
        return t

    def broadcast(t):
        d.broadcast(t, src=1)
        return t

    def all_gather(t):
        outs = [t * 0 for _ in range(world)]
        d.all_gather(outs, t)
        return tuple(outs)

    def reduce_scatter(t):
        out = t * 0
        d.reduce_scatter(out, [t * (r + 1) for r in range(world)])
        return out

    for dt in ("float32", "float64", "int32", "int64"):
        base = (np.arange(1, 5) * (rank + 2) - 3 * rank).astype(dt)
        ops = ["SUM", "MAX", "MIN", "PRODUCT"] + (["AVG"] if dt.startswith("float") else [])
        for op in ops:
            res[f"coll/all_reduce/{op}/{dt}"] = lib.arr(lib.compile(all_reduce)(lib.t(base), op))
        res[f"coll/broadcast/{dt}"] = lib.arr(lib.compile(broadcast)(lib.t(base)))
        res[f"coll/all_gather/{dt}"] = np.stack([lib.arr(o) for o in lib.compile(all_gather)(lib.t(base))])
        res[f"coll/reduce_scatter/{dt}"] = lib.arr(lib.compile(reduce_scatter)(lib.t(base)))
    d.barrier()


def main(argv=None) -> int:
    a = parse(argv)
    lib = Lib(a.lib, a.compile)
    lib.dist.init_process_group("gloo", init_method=a.init_method)
    rank, world = lib.dist.get_rank(), lib.dist.get_world_size()
    res: dict = {}
    facts: dict = {}
    averaging(lib, rank, res)
    accumulation(lib, rank, res)
    buffers(lib, rank, res)
    if not a.compile:  # eager-only behaviour (module docstring of flame.nn.parallel)
        sync_flags(lib, rank, res)
        unused(lib, rank, res, facts)
        wrapper(lib, rank, facts)
    collectives(lib, rank, world, res, facts)
    out = Path(a.out)
    np.savez(out / f"rank{rank}.npz", **res)
    (out / f"rank{rank}.json").write_text(json.dumps(facts))
    lib.dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    sys.exit(main())
