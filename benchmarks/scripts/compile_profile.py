"""Where compile time goes, on any host (no GPU needed): per `flame bench` case, the seconds a fresh
@flame.compile spends tracing, in each pass, planning (kernel rendering included) for the CUDA target,
and compiling the plan's distinct kernel sources with NVRTC, cold (an empty temporary FLAME_CACHE_DIR)
and warm (the same directory again). Also a GPT of N identical blocks at the suite's quick sizes on
the reference executor, to see how compile time grows with depth.

    PYTHONPATH=. python3 -m benchmarks.scripts.compile_profile case gpt_train unet_train [--full] [--profile]
    PYTHONPATH=. python3 -m benchmarks.scripts.compile_profile depth 2 6 12 [--cuda] [--profile]

--profile prints the top functions of a cProfile of the compile (cumulative time); --cuda plans the
depth runs for the CUDA target instead of the reference executor's. FLAME_BALANCED_SCALARS=0 in the
environment shows NVRTC with a branch per segment in scalar horizontal kernels instead of the balanced form.

Planning runs on the reference executor (no GPU needed), so the CUDA executor's own work (cuDNN and
cuBLASLt plans, loading modules) is not in these numbers, nor NVRTC overlapped with planning
(codegen.nvrtc.compile_ahead starts only for a GPU's architecture)."""

from __future__ import annotations

import cProfile
import io
import os
import pstats
import sys
import tempfile
import time
from collections import defaultdict

import flame
from benchmarks.scripts.plan_snapshot import _arrays
from flame import compiler, debug
from flame.bench.table import CASES
from flame.runtime import device

REPEAT = 3  # depth runs: the fastest of this many compiles (the host may be shared)


def _bound(case, sizes: dict):
    a = _arrays(case, sizes)
    bound = case.flame(sizes, a, flame.compile)
    data = [a[n] for n, inp in case.inputs(sizes).items() if not inp.state]
    return bound.call, data


def _for_target(target: str):
    """Make compile_graph plan for `target`'s backend ("cuda" or "reference") on the reference executor."""
    device._chosen[:] = ["reference"]
    device.executor.cache_clear()
    chosen = compiler.capabilities(target)
    compiler.capabilities = lambda name: chosen
    compiler._target.cache_clear()
    compiler._CACHE.clear()


def compile_once(call, data: list, profile: bool = False) -> dict:
    """Trace, optimise and plan a fresh copy of `call` on `data`: total seconds, seconds per stage
    (passes summed over rounds), the plan, and the cProfile stats when asked."""
    compiler._CACHE.clear()
    fresh = type(call)(call.fn, call.name, memory_budget=call.memory_budget)
    traced = [0.0]  # seconds running the body (the trace), apart from what follows it

    def timed_trace(args, trace=fresh._trace):
        t0 = time.perf_counter()
        try:
            return trace(args)
        finally:
            traced[0] += time.perf_counter() - t0

    fresh._trace = timed_trace
    records: list = []
    prof = cProfile.Profile() if profile else None
    with debug.observe(records.append):
        t0, c0 = time.perf_counter(), time.process_time()
        if prof:
            prof.enable()
        fresh.optimized(*data)
        if prof:
            prof.disable()
        total, cpu = time.perf_counter() - t0, time.process_time() - c0
    stages: dict[str, float] = defaultdict(float)
    record = records[-1]
    for stage, _, sec in record.stages:
        stages[stage.split(" (round")[0]] += sec
    stages["plan"] = record.plan_seconds
    stages["trace"] = traced[0]
    stages["print, executor"] = total - sum(stages.values())
    return {"total": total, "cpu": cpu, "stages": dict(stages), "plan": record.plan, "prof": prof}


def nvrtc_seconds(plan, arch: str = "sm_90") -> dict:
    """NVRTC over the plan's distinct kernel sources in an empty temporary cache directory: each
    compiled in turn (their sum: the CPU time; the longest: the critical path on a host with a core
    per kernel), then all again through codegen.nvrtc.compile_many (the warm cache)."""
    from flame.codegen import nvrtc

    kernels = {k.source: k.name for k in plan.kernels()}
    old = os.environ.get("FLAME_CACHE_DIR")
    with tempfile.TemporaryDirectory(prefix="flame-profile-cache-") as d:
        os.environ["FLAME_CACHE_DIR"] = d
        try:
            each = []
            for source, name in kernels.items():
                t0 = time.perf_counter()
                nvrtc.compile_cubin(source, arch, name)
                each.append((time.perf_counter() - t0, name, source.count("\n")))
            t0 = time.perf_counter()
            nvrtc.compile_many(list(kernels), arch)
            warm = time.perf_counter() - t0
        finally:
            if old is None:
                os.environ.pop("FLAME_CACHE_DIR", None)
            else:
                os.environ["FLAME_CACHE_DIR"] = old
    each.sort(reverse=True)
    return {
        "sources": len(kernels),
        "total": sum(t for t, *_ in each),
        "longest": each[0] if each else None,
        "warm": warm,
    }


def _top(prof, n: int = 30) -> str:
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("cumulative").print_stats(n)
    return out.getvalue()


def _report(label: str, r: dict) -> None:
    stages = sorted(r["stages"].items(), key=lambda kv: -kv[1])
    shown = ", ".join(f"{s} {sec:.3f}" for s, sec in stages[:8])
    print(f"{label}: {r['total']:.2f} s, CPU {r['cpu']:.2f} s (passes and plan: {shown})", flush=True)


def run_cases(names: list[str], full: bool, profile: bool) -> None:
    _for_target("cuda")
    for case in CASES:
        if case.name not in names:
            continue
        call, data = _bound(case, case.sizes(not full))
        r = compile_once(call, data, profile)
        _report(case.name, r)
        nv = nvrtc_seconds(r["plan"])
        t, name, lines = nv["longest"]
        print(
            f"  NVRTC: {nv['sources']} kernel sources, cold {nv['total']:.2f} s in turn, the longest {t:.2f} s "
            f"({name}, {lines} lines); warm cache {nv['warm']:.3f} s",
            flush=True,
        )
        if profile:
            print(_top(r["prof"]))


def run_depth(depths: list[int], cuda: bool, profile: bool) -> None:
    _for_target("cuda" if cuda else "reference")
    case = next(c for c in CASES if c.name == "gpt_train")
    first = None
    for n in depths:
        sizes = dict(case.sizes(True), layers=n)
        call, data = _bound(case, sizes)
        compile_once(call, data)  # warm the process (first-use imports, lru caches outside the compile cache)
        r = min((compile_once(call, data, profile) for _ in range(1 if profile else REPEAT)), key=lambda r: r["cpu"])
        first = first or r["cpu"]
        reused = sum(n for _, n in getattr(r["plan"], "reused", ()))
        _report(f"gpt {n} blocks (CPU {r['cpu'] / first:.2f}x; {reused} kernel renderings reused)", r)
        if profile:
            print(_top(r["prof"]))


if __name__ == "__main__":
    argv = sys.argv[1:]
    if len(argv) < 2 or argv[0] not in ("case", "depth"):
        raise SystemExit(__doc__)
    args = [a for a in argv[1:] if not a.startswith("-")]
    if argv[0] == "case":
        run_cases(args, "--full" in argv, "--profile" in argv)
    else:
        run_depth([int(a) for a in args], "--cuda" in argv, "--profile" in argv)
