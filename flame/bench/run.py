"""`flame bench`: run the suite and write its files.

    flame bench [--cases a,b,...] [--out DIR] [--quick] [--repeat N] [--peers torch,jax,...]

On a GPU it first measures the two ceilings (device copy bandwidth, bf16 matmul rate), then runs
every case on flame and its peers in this one process. Without a GPU only --quick makes sense: it
runs the small sizes on the reference executor as a functional check, and says so in every file.
"""

from __future__ import annotations

import argparse
import os
import re
import sys

from flame.bench import report, timing
from flame.bench.suite import Context, run_case
from flame.bench.table import CASES


def select(names: str | None) -> list:
    """The cases named in a comma-separated list (all when None); unknown names raise ValueError."""
    if not names:
        return list(CASES)
    by_name = {c.name: c for c in CASES}
    wanted = [n.strip() for n in names.split(",") if n.strip()]
    unknown = [n for n in wanted if n not in by_name]
    if unknown:
        raise ValueError(f"unknown case(s) {', '.join(unknown)}; cases are: {', '.join(by_name)}")
    return [by_name[n] for n in wanted]


def default_out(env: dict) -> str:
    """benchmarks/results/<date>-<gpu-name>/ (with -2, -3 ... when that exists already)."""
    gpu = env["gpu"] if env["flame_device"] == "cuda" else "reference"
    base = os.path.join("benchmarks", "results", f"{env['date'][:10]}-{re.sub(r'[^A-Za-z0-9_.-]+', '-', gpu)}")
    path, k = base, 1
    while os.path.exists(path):
        k += 1
        path = f"{base}-{k}"
    return path


def _ceilings(ctx: Context) -> dict:
    if not ctx.on_gpu:
        note = {"status": "not measured: no GPU (reference executor)"}
        return {"copy": note, "matmul": note}
    out = {}
    for key, fn in (("copy", timing.copy_bandwidth), ("matmul", timing.matmul_rate)):
        try:
            out[key] = fn(ctx.quick, ctx.repeat)
        except Exception as e:
            out[key] = {"status": f"not measured: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"}
        timing.free_memory()
    return out


def run_suite(cases: list, *, quick: bool = False, repeat: int | None = None, out: str | None = None,
              peers: list[str] | None = None, log=print) -> tuple[dict, dict[str, str]]:
    """Run `cases`; write the files; return (the run as a dict, the paths written)."""
    timing.prepare_jax()
    from flame.runtime.device import get_device

    device = get_device()
    if device != "cuda" and not quick:
        log("flame bench: no GPU, so this can only be a functional check; running with --quick sizes")
        quick = True
    if repeat is None:
        repeat = 2 if quick else 30
    if peers is None and device != "cuda":
        peers = ["torch"]  # CPU torch eager is cheap at quick sizes; torch.compile/JAX on CPU are not
    ctx = Context(device, quick, repeat, 1 if quick else 5, peers)
    env = timing.environment(device)
    log(f"flame bench: {env['gpu']} ({'functional check' if device != 'cuda' else 'measurement'}, "
        f"{'quick' if quick else 'full'} sizes)")
    run = {"suite": "flame fusion benchmarks", "mode": "measurement" if device == "cuda" else "reference",
           "env": env, "settings": {"quick": quick, "repeat": repeat, "warmup": ctx.warmup,
                                    "peers": peers or "all", "cases": [c.name for c in cases]},
           "timers": timing.TIMERS, "notes": _notes(device)}
    run["ceilings"] = _ceilings(ctx)
    run["cases"] = []
    for case in cases:
        log(f"  {case.name} ...")
        res = run_case(case, ctx)
        report.derive(res, run["ceilings"])
        run["cases"].append(res)
        f = res["flame"]
        log(f"    flame: {f['status']} {f.get('median_ms', '')}")
    paths = report.write(run, out or default_out(env))
    return run, paths


def _notes(device: str) -> list[str]:
    notes = ["compile cold: a fresh @flame.compile object traced, optimised, planned and compiled with an empty "
             "temporary FLAME_CACHE_DIR and the executor's in-process kernel table hidden; warm: another fresh "
             "object on the same (now filled) kernel cache; warm plan: another fresh object whose compiled plan "
             "is loaded from the persistent plan cache (the in-process compile cache and cuDNN graphs hidden too), "
             "as a new process would; in brackets, the seconds of it spent making cuDNN graphs (built, or read "
             "back from their cache on disk). None includes running the step.",
             "planned memory: plan.arena_size plus the bound buffers (inputs, parameters, state, outputs); actual "
             "peak: the bound inputs plus the peak growth of CuPy's pool during the first call of the timed "
             "object.",
             "JAX runs f32 matmuls at 'highest' precision (no TF32), as flame and torch do by default."]
    if device != "cuda":
        notes.insert(0, "reference executor: no ceilings, no peak memory; times are CPU wall clock of NumPy code.")
    return notes


def main(argv: list[str] | None = None) -> int:
    """Command-line entry of `flame bench` (also `python3 -m flame bench`). Exit 2 if flame was WRONG or FAILED."""
    ap = argparse.ArgumentParser(prog="flame bench", description=__doc__.split("\n\n")[0])
    add_arguments(ap)
    return run_from_args(ap.parse_args(argv))


def add_arguments(ap: argparse.ArgumentParser) -> None:
    names = ", ".join(c.name for c in CASES)
    ap.add_argument("--cases", default=None, help=f"comma-separated subset of: {names}")
    ap.add_argument("--out", default=None, help="output directory (default benchmarks/results/<date>-<gpu>/)")
    ap.add_argument("--quick", action="store_true", help="small sizes, 2 repeats: a functional check")
    ap.add_argument("--repeat", type=int, default=None, help="timed calls per figure (default 30; 2 with --quick)")
    ap.add_argument("--peers", default=None, help="comma-separated peers to run (torch, torch.compile, jax, "
                    "'torch fused'); default all, or torch only without a GPU")


def run_from_args(a) -> int:
    try:
        cases = select(a.cases)
    except ValueError as e:
        print(f"flame bench: error: {e}", file=sys.stderr)
        return 1
    peers = [p.strip() for p in a.peers.split(",")] if a.peers else None
    run, paths = run_suite(cases, quick=a.quick, repeat=a.repeat, out=a.out, peers=peers)
    print(report.markdown(run))
    print("wrote " + ", ".join(paths.values()))
    bad = [c["name"] for c in run["cases"] if c["flame"]["status"] in ("WRONG", "FAILED")]
    return 2 if bad else 0
