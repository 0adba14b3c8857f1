"""Rank 0 of two joins while rank 1 is not there yet: init_process_group fails after its timeout
with an error naming rank 1, and leaves the process uninitialised; rank 0 then starts rank 1 (this
script with RANK=1) and joins again, on the same port, and both all-reduce. Rank 0 writes what it
saw to OUT/retry.json."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

import flame
import flame.distributed as dist
from flame.runtime import communicator


def all_reduce_once() -> list[float]:
    x = flame.tensor(np.array([1.0, 2.0], np.float32) * (dist.get_rank() + 1))
    dist.all_reduce(x)
    return x.numpy().tolist()


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    a = p.parse_args()
    if os.environ["RANK"] == "1":
        dist.init_process_group("store")
        all_reduce_once()
        dist.destroy_process_group()
        return 0
    report = {}
    try:
        dist.init_process_group("store", timeout=1.0)
    except dist.DistributedError as e:
        report["first"] = str(e)
    report["initialised_after_failure"] = dist.is_initialized()
    report["world_after_failure"] = communicator.communicator().world_size
    rank1 = subprocess.Popen(
        [sys.executable, __file__, *sys.argv[1:]], env={**os.environ, "RANK": "1", "LOCAL_RANK": "1"}
    )
    try:
        dist.init_process_group("store")
        report["result"] = all_reduce_once()
        dist.destroy_process_group()
        report["rank1"] = rank1.wait(timeout=60)
    finally:
        if rank1.poll() is None:
            rank1.kill()
    Path(a.out, "retry.json").write_text(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
