"""Running the distributed workers from the tests: alone (world size 1) or under flame's launcher,
on the reference executor (the CPU tests) or CUDA (the multigpu tests). Short timeouts: a hang
fails the test instead of stalling the suite."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
_RANK_VARS = (
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
    "FLAME_AGENT_STORE",
    "TORCHELASTIC_USE_AGENT_STORE",
    "FLAME_STORE_PORT",
    "FLAME_DIST_SECRET",
    "FLAME_STORE_BIND",
)


def env(device: str = "reference", **extra: str) -> dict[str, str]:
    e = {k: v for k, v in os.environ.items() if k not in _RANK_VARS}
    e.update(
        FLAME_DEVICE=device,
        OPENBLAS_NUM_THREADS="1",
        OMP_NUM_THREADS="1",
        FLAME_DIST_TIMEOUT="60",
        PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
    )
    e.update(extra)
    return e


def run(
    script: str,
    *args: str,
    nproc: int = 0,
    device: str = "reference",
    timeout: float = 240,
    launcher: tuple[str, ...] = ("--grace", "5"),
    **extra: str,
) -> subprocess.CompletedProcess:
    """script (a file in tests/distributed, or a path) with args: alone when nproc is 0, else under
    `python3 -m flame.distributed.run --nproc-per-node nproc`."""
    path = str(HERE / script) if not os.path.isabs(script) else script
    cmd = [sys.executable, path, *args]
    if nproc:
        cmd = [sys.executable, "-m", "flame.distributed.run", "--nproc-per-node", str(nproc), *launcher, *cmd[1:]]
    return subprocess.run(cmd, capture_output=True, text=True, env=env(device, **extra), timeout=timeout, cwd=str(ROOT))


def ok(proc: subprocess.CompletedProcess) -> str:
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    return out


def relative_errors(single: Path, multi: Path) -> list[float]:
    """Per step: |params(multi) - params(single)| / |params(single)| over all parameters together."""
    errs = []
    steps = sorted(single.glob("step*.npz"), key=lambda p: int(p.stem[4:]))
    assert steps, f"no steps written to {single}"
    for s in steps:
        a, b = np.load(s), np.load(multi / s.name)
        assert sorted(a) == sorted(b)
        num = sum(float(((a[k].astype(np.float64) - b[k]) ** 2).sum()) for k in a)
        den = sum(float((a[k].astype(np.float64) ** 2).sum()) for k in a)
        errs.append((num / den) ** 0.5)
    return errs


def free_port() -> int:
    """A port nothing listens on right now (for a store that rank 0 serves)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_ranks(
    script: str, *args: str, world: int, out: Path, port: int | None = None, **extra: str
) -> list[subprocess.Popen]:
    """world processes of script, started as torchrun starts them (rank 0 serves the store on
    MASTER_PORT: `port`, else a free one), each with its output in out/rank{r}.log; the caller waits
    for them (bounded) and kills what is left (kill_all)."""
    port = str(port or free_port())
    procs = []
    for r in range(world):
        e = env(
            **{
                "RANK": str(r),
                "LOCAL_RANK": str(r),
                "WORLD_SIZE": str(world),
                "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": port,
                **extra,
            }
        )
        log = open(out / f"rank{r}.log", "w")
        procs.append(
            subprocess.Popen(
                [sys.executable, str(HERE / script), *args], stdout=log, stderr=subprocess.STDOUT, env=e, cwd=str(ROOT)
            )
        )
        log.close()
    return procs


def wait_for_files(paths: list[Path], timeout: float) -> None:
    """Wait until every path exists (AssertionError after timeout seconds)."""
    deadline = time.monotonic() + timeout
    while not all(p.exists() for p in paths):
        assert time.monotonic() < deadline, f"not written within {timeout} s: {[str(p) for p in paths]}"
        time.sleep(0.05)


def kill_all(procs: list[subprocess.Popen]) -> None:
    """SIGKILL every process still running (stopped ones too) and reap them."""
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait(timeout=10)
