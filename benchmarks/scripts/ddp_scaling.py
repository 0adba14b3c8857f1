"""Data-parallel scaling of the suite's `gpt_train` step (flame/bench/cases_gpt.py: bf16, 6 blocks,
d 768, T 1024, 32k vocabulary, AdamW; per-GPU batch 8): 1 GPU against N GPUs with the same per-GPU
batch, flame (DistributedDataParallel, with and without ZeRO-1, with and without the communication
stream) next to PyTorch (torch.nn.parallel.DistributedDataParallel + torch.compile) on the same GPUs
in the same run. One command on a host with N GPUs:

    NCCL_NVLS_ENABLE=0 python3 -m benchmarks.scripts.ddp_scaling --gpus 2 --out benchmarks/results/DIR

(NCCL_NVLS_ENABLE=0 keeps NVLink multicast off on shared hosts; every run gets the caller's
environment unchanged, so whatever NCCL settings are given reach NCCL, and nothing here sets any.)
It starts each configuration as its own job (flame's launcher; torchrun for PyTorch), each rank 0
writing one JSON line, and prints the table: ms per step, tokens/s, scaling against the same
framework on 1 GPU, peak memory per GPU, the time the step's gradient all-reduces take alone, and the
share of that time hidden behind computation: 1 - (t_N - t_1) / t_comm (t_N, t_1: step times on N
GPUs and on 1; 100% when the N-GPU step costs no more than the 1-GPU step).

`--quick` runs the suite's small sizes (a smoke test, also on the reference executor: --device reference).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

CONFIGS = {  # name -> (framework, extra worker arguments)
    "flame": ("flame", []),
    "flame zero1": ("flame", ["--zero"]),
    "flame no-overlap": ("flame", ["--no-overlap"]),
    "torch.compile": ("torch", []),
}


# ---- the worker: one rank of one configuration -----------------------------------------------------


def _flame_rank(a) -> dict:
    import flame
    import flame.distributed as dist
    from flame.bench.cases_gpt import GPT, gpt_loss, gpt_setup
    from flame.bench.spec import flame_inputs
    from flame.distributed.optim import ZeroRedundancyOptimizer
    from flame.nn.parallel import DistributedDataParallel

    dist.init_process_group()
    case = next(c for c in GPT if c.name == "gpt_train")
    s = case.sizes(a.quick)
    arr = flame_inputs(case, s, seed=dist.get_rank())
    p, opt = gpt_setup("flame", s, arr)
    holder = flame.nn.Module()
    for n, t in p.items():
        setattr(holder, n.replace(".", "_"), t)
    ddp = DistributedDataParallel(holder, bucket_cap_mb=a.bucket_mb)
    if a.zero:
        from flame.bench.cases_train import LR, WD

        opt = ZeroRedundancyOptimizer(list(p.values()), flame.optim.AdamW, lr=LR, weight_decay=WD)

    @flame.compile
    def step(idx, targets):
        loss = gpt_loss("flame", p, s, idx, targets)
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss

    data = [arr["idx"], arr["targets"]]
    sync = _flame_sync()
    ms = _time(lambda: step(*data), sync, a.warmup, a.steps, dist.barrier)
    comm = _flame_comm_ms(ddp, sync, a, dist.barrier) if dist.get_world_size() > 1 else 0.0
    report = step.memory_report(*data)
    out = dict(
        step_ms=ms,
        comm_ms=comm,
        loss=float(step(*data).item()),
        planned_peak_mib=report.peak / 2**20,
        state_mib=report.bound["state"] / 2**20,
        buckets=len(ddp.buckets),
        batch_per_gpu=s["batch"],
        tokens_per_step=s["batch"] * s["T"] * dist.get_world_size(),
    )
    out.update(_flame_pool())
    dist.destroy_process_group()
    return out


def _flame_sync():
    from flame.runtime.device import get_device

    if get_device() != "cuda":
        return lambda: None
    import cupy

    return lambda: cupy.cuda.Device().synchronize()


def _flame_pool() -> dict:
    from flame.runtime.device import get_device

    if get_device() != "cuda":
        return {}
    import cupy

    return {"pool_reserved_mib": cupy.get_default_memory_pool().total_bytes() / 2**20}


def _flame_comm_ms(ddp, sync, a, barrier) -> float:
    """The step's gradient collectives alone: one all_reduce per bucket of the same layout."""
    import flame
    from flame.frontend.dispatch import apply

    params = ddp.parameters_reduced
    grads = [flame.zeros(*q.shape, dtype=q.dtype) for q in params]
    n = ddp.world_size

    @flame.compile
    def comm(*gs):
        return [apply("all_reduce", *[gs[i] for i in b.params], op="avg", world_size=n) for b in ddp.buckets]

    return _time(lambda: comm(*grads), sync, a.warmup, a.steps, barrier)


def _time(call, sync, warmup: int, steps: int, barrier) -> float:
    for _ in range(warmup):
        call()
    sync()
    barrier()
    start = time.perf_counter()
    for _ in range(steps):
        call()
    sync()
    return (time.perf_counter() - start) * 1e3 / steps


def _torch_rank(a) -> dict:
    import torch
    import torch.distributed as tdist

    from flame.bench.cases_gpt import GPT, gpt_loss, gpt_setup
    from flame.bench.spec import generate

    local = int(os.environ.get("LOCAL_RANK", "0"))
    on_gpu = torch.cuda.is_available()
    if on_gpu:
        torch.cuda.set_device(local)
    tdist.init_process_group("nccl" if on_gpu else "gloo")
    device = f"cuda:{local}" if on_gpu else "cpu"
    case = next(c for c in GPT if c.name == "gpt_train")
    s = case.sizes(a.quick)
    inputs = case.inputs(s)
    raw = generate(inputs, np, seed=tdist.get_rank())
    arr = {n: torch.from_numpy(x).to(device) for n, x in raw.items()}
    arr = {n: x.to(torch.bfloat16) if inputs[n].dtype == "bf16" else x for n, x in arr.items()}
    p, opt = gpt_setup("torch", s, arr)

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.params = torch.nn.ParameterDict({n.replace(".", "_"): t for n, t in p.items()})

        def forward(self, idx, targets):
            return gpt_loss("torch", p, s, idx, targets)

    model = torch.nn.parallel.DistributedDataParallel(
        Model(), device_ids=[local] if on_gpu else None, bucket_cap_mb=a.bucket_mb
    )
    compiled = torch.compile(model)

    def step():
        loss = compiled(arr["idx"], arr["targets"])
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    sync = torch.cuda.synchronize if on_gpu else (lambda: None)
    if on_gpu:
        torch.cuda.reset_peak_memory_stats()
    ms = _time(step, sync, a.warmup, a.steps, tdist.barrier)
    out = dict(
        step_ms=ms,
        loss=float(step().item()),
        batch_per_gpu=s["batch"],
        tokens_per_step=s["batch"] * s["T"] * tdist.get_world_size(),
    )
    if on_gpu:
        out["peak_mib"] = torch.cuda.max_memory_allocated() / 2**20
    tdist.destroy_process_group()
    return out


def worker(a) -> int:
    if a.no_overlap:
        os.environ["FLAME_COMM_STREAM"] = "0"
    out = _flame_rank(a) if a.worker == "flame" else _torch_rank(a)
    if int(os.environ.get("RANK", "0")) == 0:
        with open(a.result, "a") as f:
            f.write(json.dumps({"config": a.config, "gpus": int(os.environ.get("WORLD_SIZE", "1")), **out}) + "\n")
    return 0


# ---- the driver --------------------------------------------------------------------------------------


def _job(framework: str, gpus: int, args: list[str], env: dict) -> list[str]:
    me = ["-m", "benchmarks.scripts.ddp_scaling"]
    if framework == "flame":
        return [sys.executable, "-m", "flame.distributed.run", "--nproc-per-node", str(gpus), *me, *args]
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(gpus), *me, *args]


def _table(rows: list[dict]) -> str:
    base = {r["config"]: r for r in rows if r["gpus"] == 1}
    lines = [
        "| config | GPUs | ms/step | tokens/s | scaling vs 1 GPU | peak MiB/GPU | comm alone ms | hidden |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in sorted(rows, key=lambda r: (r["config"], r["gpus"])):
        one = base.get(r["config"])
        tok = r["tokens_per_step"] / r["step_ms"] * 1e3
        scale = tok / (one["tokens_per_step"] / one["step_ms"] * 1e3) if one else float("nan")
        comm = r.get("comm_ms", 0.0)
        hidden = ""
        if comm and one:
            hidden = f"{100 * max(0.0, min(1.0, 1 - (r['step_ms'] - one['step_ms']) / comm)):.0f}%"
        peak = r.get("peak_mib", r.get("pool_reserved_mib", r.get("planned_peak_mib", float("nan"))))
        comm_cell = f"{comm:.2f}" if comm else ""
        lines.append(
            f"| {r['config']} | {r['gpus']} | {r['step_ms']:.2f} | {tok:,.0f} | {scale:.2f}x | {peak:.0f} | "
            f"{comm_cell} | {hidden} |"
        )
    return "\n".join(lines)


def driver(a) -> int:
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    result = out / "ddp_scaling.jsonl"
    result.unlink(missing_ok=True)
    env = dict(os.environ)  # unchanged: NCCL_* settings reach every rank as the caller gave them
    if a.device:
        env["FLAME_DEVICE"] = a.device
    common = [
        "--steps",
        str(a.steps),
        "--warmup",
        str(a.warmup),
        "--bucket-mb",
        str(a.bucket_mb),
        "--result",
        str(result),
    ] + (["--quick"] if a.quick else [])
    configs = [c for c in CONFIGS if c in a.configs]
    failures = []
    for name in configs:
        framework, extra = CONFIGS[name]
        for gpus in sorted({1, a.gpus}):
            if gpus == 1 and name in ("flame zero1", "flame no-overlap"):
                continue  # the same step as "flame" on one GPU
            cmd = _job(framework, gpus, ["--worker", framework, "--config", name, *extra, *common], env)
            print(f"== {name} on {gpus} GPU(s): {' '.join(cmd[1:])}", flush=True)
            proc = subprocess.run(cmd, env=env, timeout=a.timeout)
            if proc.returncode:
                failures.append(f"{name} x{gpus} (exit {proc.returncode})")
    rows = [json.loads(line) for line in result.read_text().splitlines()] if result.exists() else []
    for r in rows:  # zero1 / no-overlap scale against flame's 1-GPU step
        r.setdefault("config", "")
    one = {r["config"]: r for r in rows if r["gpus"] == 1}
    rows += [
        {**one["flame"], "config": c}
        for c in ("flame zero1", "flame no-overlap")
        if "flame" in one and any(r["config"] == c for r in rows)
    ]
    text = _table(rows)
    nvls = os.environ.get("NCCL_NVLS_ENABLE", "(unset)")
    sizes = "--quick" if a.quick else "gpt_train full"
    text += f"\n\nNCCL_NVLS_ENABLE={nvls}; steps timed {a.steps} after {a.warmup} warm-up; sizes: {sizes}\n"
    if failures:
        text += "FAILED: " + ", ".join(failures) + "\n"
    (out / "ddp_scaling.md").write_text(text)
    print(text)
    return 1 if failures else 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--gpus", type=int, default=2)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--bucket-mb", type=float, default=25.0)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--device", default="", help="FLAME_DEVICE for the flame runs (default: the GPU)")
    p.add_argument("--configs", nargs="*", default=list(CONFIGS), help=f"a subset of {list(CONFIGS)}")
    p.add_argument("--timeout", type=float, default=1800)
    p.add_argument("--out", default="ddp_scaling_out")
    p.add_argument("--worker", choices=["flame", "torch"], help=argparse.SUPPRESS)
    p.add_argument("--config", default="", help=argparse.SUPPRESS)
    p.add_argument("--zero", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--no-overlap", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--result", default="", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    return worker(a) if a.worker else driver(a)


if __name__ == "__main__":
    sys.exit(main())
