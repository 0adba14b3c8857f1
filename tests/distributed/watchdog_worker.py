"""One rank of an NCCL process group (runtime/nccl.py over the recording stand-in of fake_nccl.py)
with the process group's watchdog; after writing OUT/rank{r}.ready it sleeps, as a rank blocked in an
NCCL wait would, until the watchdog ends it (a peer stopped) or --sleeps[r] seconds pass (then it
leaves the group)."""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import flame.distributed as dist
from flame.distributed import env
from flame.distributed import process_group as pg
from flame.runtime import communicator
from tests.distributed.fake_nccl import install_fake_nccl


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--sleeps", type=float, nargs="+", default=[120.0, 120.0])
    a = p.parse_args()
    dist.init_process_group("store")
    install_fake_nccl()
    g = pg._group[0]
    g.comm = pg._nccl_communicator(g.store, g.rank, g.world_size, "test/nccl")
    communicator.set_communicator(g.comm)
    pg.start_watchdog(g, env.master_addr(), env.port("MASTER_PORT"), float(os.environ["FLAME_DIST_TIMEOUT"]))
    Path(a.out, f"rank{g.rank}.ready").write_text(str(os.getpid()))
    time.sleep(a.sleeps[g.rank])
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
