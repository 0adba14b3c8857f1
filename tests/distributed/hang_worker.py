"""One rank that joins the process group, writes its pid to OUT/rank{r}.ready, then runs small
all_reduces (eager, through the store), --steps of them, 20 ms apart, or fewer: all stop after the
step at which rank 0 sees the file --stop-file; the tests stop one rank (SIGSTOP) and check that the
others fail with a timeout error instead of hanging."""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import flame
import flame.distributed as dist


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--steps", type=int, default=3000)
    p.add_argument("--stop-file", default=None)
    a = p.parse_args()
    dist.init_process_group("store")
    Path(a.out, f"rank{dist.get_rank()}.ready").write_text(str(os.getpid()))
    for _ in range(a.steps):
        stop = dist.get_rank() == 0 and a.stop_file is not None and os.path.exists(a.stop_file)
        x = flame.tensor([float(stop), 1.0])
        dist.all_reduce(x, dist.ReduceOp.MAX)
        if x.numpy()[0] > 0:
            break
        time.sleep(0.02)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
