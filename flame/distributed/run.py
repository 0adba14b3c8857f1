"""flame's launcher, for users without torchrun:

    python3 -m flame.distributed.run --nproc-per-node N script.py [script args]
    python3 -m flame.distributed.run --nnodes 2 --node-rank K --master-addr HOST --master-port PORT \\
        --nproc-per-node N script.py [script args]

starts N processes (one per GPU) with the variables torchrun sets (RANK, LOCAL_RANK, WORLD_SIZE,
LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR, MASTER_PORT) on top of the caller's environment, which
every rank gets unchanged otherwise: NCCL settings (NCCL_NVLS_ENABLE=0, NCCL_SOCKET_IFNAME, ...)
reach NCCL as given, and the launcher turns on no NVLink multicast or symmetric-memory feature
itself. The launcher of node 0 serves the process group's store (port 0: a free port) on
--master-addr's address only, and hands every rank the job's secret, FLAME_DIST_SECRET (the
caller's, or a fresh random one per job): only processes that know it may use the store (auth.py).
With several hosts every launcher must be given the same secret, so FLAME_DIST_SECRET is required.

When a rank exits with an error, the launcher posts an abort naming it to the store (the other
ranks stop with that message: their collectives fail, NCCL is aborted), gives them `--grace`
seconds to exit, then terminates (and finally kills) the rest, and exits with the failing rank's code."""

from __future__ import annotations

import argparse
import math
import os
import signal
import subprocess
import sys
import time

from flame.distributed import env
from flame.distributed.auth import SECRET_VAR, job_secret, new_secret
from flame.distributed.store import DistributedError, StoreClient, StoreServer


def _parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python3 -m flame.distributed.run", description=__doc__.split("\n\n")[0])
    p.add_argument("--nproc-per-node", "--nproc_per_node", type=int, default=1, help="ranks on this host")
    p.add_argument("--nnodes", type=int, default=1, help="hosts taking part")
    p.add_argument("--node-rank", "--node_rank", type=int, default=0, help="this host's index")
    p.add_argument("--master-addr", "--master_addr", default="127.0.0.1", help="the host of node 0")
    p.add_argument(
        "--master-port",
        "--master_port",
        type=int,
        default=0,
        help="the store's port on node 0 (0: a free one; needed with --nnodes > 1)",
    )
    p.add_argument(
        "--grace",
        type=float,
        default=10.0,
        help="seconds the other ranks get to exit after one failed, before they are terminated",
    )
    p.add_argument("-m", dest="module", action="store_true", help="run the script argument as a module")
    p.add_argument("script", help="the training script (or module, with -m)")
    p.add_argument("args", nargs=argparse.REMAINDER, help="its arguments")
    a = p.parse_args(argv)
    if a.nproc_per_node < 1 or a.nnodes < 1 or not 0 <= a.node_rank < a.nnodes:
        p.error("need --nproc-per-node >= 1, --nnodes >= 1 and 0 <= --node-rank < --nnodes")
    if not 0 <= a.master_port <= 65535:
        p.error(f"--master-port {a.master_port} is not a TCP port number (0 to 65535; 0: a free one)")
    if not (math.isfinite(a.grace) and a.grace >= 0):
        p.error(f"--grace {a.grace} is not a number of seconds >= 0")
    if a.nnodes > 1 and a.master_port == 0:
        p.error("--master-port is required with --nnodes > 1 (every host must name the same port)")
    if a.nnodes > 1 and not os.environ.get(SECRET_VAR):
        p.error(
            f"{SECRET_VAR} must be set, to the same random value on every host, with --nnodes > 1 (the ranks "
            f"prove to the store that they belong to the job with it)"
        )
    return a


def rank_env(
    base: dict[str, str],
    *,
    rank: int,
    local_rank: int,
    nproc: int,
    world: int,
    node_rank: int,
    addr: str,
    port: int,
    secret: str,
) -> dict[str, str]:
    """The caller's environment plus the variables torchrun sets for one rank and the job's secret;
    nothing else changes."""
    env = dict(base)
    env.update(
        RANK=str(rank),
        LOCAL_RANK=str(local_rank),
        WORLD_SIZE=str(world),
        LOCAL_WORLD_SIZE=str(nproc),
        GROUP_RANK=str(node_rank),
        MASTER_ADDR=addr,
        MASTER_PORT=str(port),
        FLAME_AGENT_STORE="1",
    )
    env[SECRET_VAR] = secret
    return env


class Launcher:
    """The ranks of this host and, on node 0, the store they meet in."""

    def __init__(self, a: argparse.Namespace):
        self.a = a
        self.world = a.nproc_per_node * a.nnodes
        self.server = None
        port = env.port("FLAME_STORE_PORT", low=0) if "FLAME_STORE_PORT" in os.environ else a.master_port
        self.secret = job_secret() or new_secret().encode()
        if a.node_rank == 0:
            self.server = StoreServer(os.environ.get("FLAME_STORE_BIND") or a.master_addr, port, self.secret)
            port = self.server.port
        self.port = port
        self.procs: list[subprocess.Popen] = []

    def start(self) -> None:
        a = self.a
        cmd = [sys.executable] + (["-m", a.script] if a.module else [a.script]) + list(a.args)
        for local in range(a.nproc_per_node):
            rank = a.node_rank * a.nproc_per_node + local
            env = rank_env(
                os.environ,
                rank=rank,
                local_rank=local,
                nproc=a.nproc_per_node,
                world=self.world,
                node_rank=a.node_rank,
                addr=a.master_addr,
                port=self.port,
                secret=self.secret.decode(),
            )
            self.procs.append(subprocess.Popen(cmd, env=env))

    def _abort(self, message: str) -> None:
        try:
            store = StoreClient(self.a.master_addr, self.port, 5.0, 5.0, secret=self.secret)
            store.abort(message)
            store.close()
        except DistributedError:
            pass  # the store is gone already: the ranks notice that themselves

    def _stop(self, grace: float) -> None:
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and any(p.poll() is None for p in self.procs):
            time.sleep(0.05)
        for sig in (signal.SIGTERM, signal.SIGKILL):
            live = [p for p in self.procs if p.poll() is None]
            for p in live:
                p.send_signal(sig)
                if sig == signal.SIGTERM:
                    p.send_signal(signal.SIGCONT)  # a stopped rank acts on SIGTERM only once continued
            end = time.monotonic() + 5.0
            while time.monotonic() < end and any(p.poll() is None for p in live):
                time.sleep(0.05)

    def wait(self) -> int:
        """Wait for every rank; on the first failure stop the others. Returns the exit code."""
        a = self.a
        while True:
            codes = [p.poll() for p in self.procs]
            failed = [(i, c) for i, c in enumerate(codes) if c not in (None, 0)]
            if failed:
                local, code = failed[0]
                rank = a.node_rank * a.nproc_per_node + local
                why = f"signal {-code}" if code < 0 else f"exit code {code}"
                print(
                    f"flame.distributed.run: rank {rank} failed ({why}); stopping the other ranks",
                    file=sys.stderr,
                    flush=True,
                )
                self._abort(f"rank {rank} failed ({why})")
                self._stop(a.grace)
                return code if code > 0 else 128 - code
            if all(c == 0 for c in codes):
                return 0
            time.sleep(0.05)

    def close(self) -> None:
        if self.server is not None:
            self.server.close()


def main(argv: list[str] | None = None) -> int:
    a = _parse(sys.argv[1:] if argv is None else argv)
    try:
        launcher = Launcher(a)
    except DistributedError as e:
        print(f"flame.distributed.run: {e}", file=sys.stderr)
        return 2

    def forward(sig, frame):
        for p in launcher.procs:
            if p.poll() is None:
                p.send_signal(sig)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    try:
        launcher.start()
        return launcher.wait()
    finally:
        launcher.close()


if __name__ == "__main__":
    sys.exit(main())
