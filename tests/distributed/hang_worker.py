"""One rank that joins the process group, writes its pid to OUT/rank{r}.ready, then runs small
all_reduces (eager, through the store) for up to --seconds; the tests stop one rank (SIGSTOP) and
check that the others fail with a timeout error instead of hanging."""

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
    p.add_argument("--seconds", type=float, default=60)
    a = p.parse_args()
    dist.init_process_group("store")
    Path(a.out, f"rank{dist.get_rank()}.ready").write_text(str(os.getpid()))
    x = flame.ones(2)
    end = time.monotonic() + a.seconds
    while time.monotonic() < end:
        dist.all_reduce(x, dist.ReduceOp.AVG)
        time.sleep(0.02)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
