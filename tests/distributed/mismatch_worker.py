"""One rank of the mismatched-collectives check: rank r runs `--kind` on a tensor of `--numels[r]`
elements of `--dtypes[r]` with reduce op `--ops[r]` (eager, or inside @flame.compile), `--repeat`
times. It writes what happened to OUT/rank{r}.json: the results, or the error it raised (and then
raises it again, so the rank fails).

--nccl: the collectives go through runtime/nccl.py's NcclCommunicator (made by the process group's
own code) over a stand-in `cupy.cuda.nccl` that records each call instead of running it, so the
check that must come before every NCCL call runs on the CPU. --backend nccl (on GPUs): the process
group's real NCCL communicator."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

import flame
import flame.distributed as dist
from flame.distributed import process_group as pg
from flame.runtime import communicator
from tests.distributed.fake_nccl import NCCL_CALLS, install_fake_nccl


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--kind", default="all_reduce", choices=("all_reduce", "broadcast"))
    p.add_argument("--numels", type=int, nargs="+", required=True)
    p.add_argument("--dtypes", nargs="+", required=True)
    p.add_argument("--ops", nargs="+", default=None)
    p.add_argument("--compiled", action="store_true")
    p.add_argument("--nccl", action="store_true")
    p.add_argument("--backend", default="store")
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--out", required=True)
    a = p.parse_args()
    dist.init_process_group(a.backend)
    r, n = dist.get_rank(), dist.get_world_size()
    exchange = None
    if a.nccl:
        install_fake_nccl()
        comm = pg._nccl_communicator(pg._group[0].store, r, n, "test/nccl")
        exchange = comm._signatures.exchange
        communicator.set_communicator(comm)
    op = a.ops[r] if a.ops else "sum"

    def body(t):
        y = t * 1
        if a.kind == "all_reduce":
            dist.all_reduce(y, op)
        else:
            dist.broadcast(y, src=0)
        return y

    fn = flame.compile(body) if a.compiled else body
    x = flame.tensor((np.arange(a.numels[r]) + r).astype(a.dtypes[r]))
    report: dict = {"rank": r}
    try:
        report["results"] = [fn(x).numpy().tolist() for _ in range(a.repeat)]
    except dist.DistributedError as e:
        report["error"] = f"{type(e).__name__}: {e}"
        raise
    finally:
        report["nccl_calls"] = NCCL_CALLS
        report["signature_exchanges"] = None if exchange is None else exchange.calls
        Path(a.out, f"rank{r}.json").write_text(json.dumps(report))
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
