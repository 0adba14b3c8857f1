"""Where compile time goes, on any host (no GPU needed): per `flame bench` case, the seconds a fresh
@flame.compile spends tracing, in each pass, planning (kernel rendering included) for the CUDA target,
and compiling the plan's distinct kernel sources with NVRTC, cold (an empty temporary FLAME_CACHE_DIR)
and warm (the same directory again). Also a GPT of N identical blocks at the suite's quick sizes on
the reference executor, to see how compile time grows with depth.

    PYTHONPATH=. python3 -m benchmarks.scripts.compile_profile case gpt_train unet_train [--full] [--profile]
        [--threads=N]
    PYTHONPATH=. python3 -m benchmarks.scripts.compile_profile depth 2 6 12 [--cuda] [--profile]
    PYTHONPATH=. python3 -m benchmarks.scripts.compile_profile warm gpt_train unet_train [--full] [--profile]
        [--no-step] [--repeat=N]

`warm` times a new process's way to its first step with the persistent plan cache warm, on the
executor flame picks (the reference one on a host without a GPU): a first process fills an empty
temporary FLAME_CACHE_DIR, the next ones (the fastest of --repeat=N, phase by phase) trace, load the
entry (read and HMAC check, parse, plan rebuild), compile the plan for the executor and run the first
step (--no-step: not the step); --profile prints the first timed process's cProfile
(benchmarks/scripts/warm_start.py).

NVRTC is timed per kernel source by the compiling thread's CPU time (a shared host's load does not
inflate it): the sum, the slowest five, and when the last would finish on --threads cores (16, the
GPU hosts' count) taking the longest first. --profile prints the top functions of a cProfile of the
compile (cumulative time); --cuda plans the
depth runs for the CUDA target instead of the reference executor's. FLAME_BALANCED_SCALARS=0 in the
environment shows NVRTC with a branch per segment in scalar horizontal kernels instead of the balanced form.

Planning runs on the reference executor (no GPU needed) for an sm_90 target, so the CUDA executor's
own work (cuDNN and cuBLASLt plans, loading modules) is not in these numbers. The cases record the
CPU second at which the plan builder hands each kernel to codegen.nvrtc.compile_ahead (which compiles
nothing here) and report when the last of those compiles would end on --threads cores: on a GPU host,
the compile waits for that or for the planning, whichever ends later."""

from __future__ import annotations

import cProfile
import dataclasses
import heapq
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


def _for_target(target: str, arch: str = ""):
    """Make compile_graph plan for `target`'s backend ("cuda" or "reference") on the reference executor
    (with `arch`, for that GPU architecture: the plan builder then hands each kernel it renders to
    codegen.nvrtc.compile_ahead)."""
    device._chosen[:] = ["reference"]
    device.executor.cache_clear()
    chosen = compiler.capabilities(target)
    if arch:
        chosen = dataclasses.replace(chosen, arch=arch)
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
    return {"total": total, "cpu": cpu, "stages": dict(stages), "plan": record.plan, "prof": prof, "start": c0}


def nvrtc_seconds(plan, arch: str = "sm_90", threads: int = 16) -> dict:
    """NVRTC over the plan's distinct kernel sources in an empty temporary cache directory: each
    compiled in turn, timed by the CPU time of the compiling thread (NVRTC runs on the calling thread
    here, FLAME_NVRTC_PROCESSES=0, so this is what the compile costs on an idle core, however busy a
    shared host is; a compile process's would not be counted), then all again
    through codegen.nvrtc.compile_many (the warm cache). `critical`: when the last of them is done on
    `threads` cores taking them longest first (codegen.nvrtc.compile_many's order; compile_ahead
    starts them as planning renders them, which can only overlap them more with planning)."""
    from flame.codegen import nvrtc
    from flame.codegen.nvrtc_pool import PROCESSES_ENV

    kernels = {k.source: k.name for k in plan.kernels()}
    old = os.environ.get("FLAME_CACHE_DIR"), os.environ.get(PROCESSES_ENV)
    with tempfile.TemporaryDirectory(prefix="flame-profile-cache-") as d:
        os.environ["FLAME_CACHE_DIR"], os.environ[PROCESSES_ENV] = d, "0"
        try:
            nvrtc.compile_cubin('extern "C" __global__ void flame_profile_warm_up() {}', arch)  # NVRTC's first use
            each, cost = [], {}
            for source, name in kernels.items():
                t0 = time.thread_time()
                nvrtc.compile_cubin(source, arch, name)
                cost[source] = time.thread_time() - t0
                each.append((cost[source], name, source.count("\n")))
            t0 = time.perf_counter()
            nvrtc.compile_many(list(kernels), arch)
            warm = time.perf_counter() - t0
        finally:
            for name, value in zip(("FLAME_CACHE_DIR", PROCESSES_ENV), old):
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value
    each.sort(reverse=True)
    return {
        "sources": len(kernels),
        "total": sum(t for t, *_ in each),
        "longest": each[0] if each else None,
        "slowest": each[:5],
        "critical": longest_first(sorted((t for t, *_ in each), reverse=True), threads),
        "threads": threads,
        "warm": warm,
        "cost": cost,
    }


def ahead_finish(rendered: list[tuple[float, str]], cost: dict[str, float], threads: int) -> tuple[float, str]:
    """When the last compile started by compile_ahead ends on `threads` workers, each kernel queued at
    the CPU second of the compile it was rendered at and a free worker taking the longest source
    waiting (codegen.nvrtc's order); and that last kernel's source."""
    pending = sorted(rendered, key=lambda r: r[0])
    free = [0.0] * max(1, threads)
    waiting: list[tuple[int, int, str]] = []
    end, last, i = 0.0, "", 0
    while i < len(pending) or waiting:
        now = heapq.heappop(free)
        if not waiting:
            now = max(now, pending[i][0])
        while i < len(pending) and pending[i][0] <= now:
            heapq.heappush(waiting, (-len(pending[i][1]), i, pending[i][1]))
            i += 1
        source = heapq.heappop(waiting)[2]
        done = now + cost.get(source, 0.0)  # 0: a kernel rendered, then left out of the plan
        heapq.heappush(free, done)
        if done > end:
            end, last = done, source
    return end, last


def longest_first(seconds: list[float], threads: int) -> float:
    """When the last of these compiles ends on `threads` workers that each take the next one as
    they free up, in the order given."""
    free = [0.0] * max(1, threads)
    for t in seconds:
        heapq.heapreplace(free, free[0] + t)
    return max(free)


def _top(prof, n: int = 30) -> str:
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("cumulative").print_stats(n)
    return out.getvalue()


def _report(label: str, r: dict) -> None:
    stages = sorted(r["stages"].items(), key=lambda kv: -kv[1])
    shown = ", ".join(f"{s} {sec:.3f}" for s, sec in stages[:8])
    print(f"{label}: {r['total']:.2f} s, CPU {r['cpu']:.2f} s (passes and plan: {shown})", flush=True)


def run_cases(names: list[str], full: bool, profile: bool, threads: int = 16) -> None:
    from flame.codegen import nvrtc

    _for_target("cuda", arch="sm_90")
    rendered: list[tuple[float, str]] = []  # (the process's CPU second, source) of each kernel rendered
    nvrtc.compile_ahead = lambda source, arch, name_hint="": rendered.append((time.process_time(), source))
    for case in CASES:
        if case.name not in names:
            continue
        call, data = _bound(case, case.sizes(not full))
        rendered.clear()
        r = compile_once(call, data, profile)
        _report(case.name, r)
        nv = nvrtc_seconds(r["plan"], threads=threads)
        first = {}
        for at, source in rendered:
            first.setdefault(source, at - r["start"])
        ahead, last = ahead_finish([(at, s) for s, at in first.items()], nv["cost"], threads)
        last_name = next((k.name for k in r["plan"].kernels() if k.source == last), "?")
        print(
            f"  NVRTC (CPU seconds): {nv['sources']} kernel sources, cold {nv['total']:.2f} s in turn, "
            f"{nv['critical']:.2f} s on {nv['threads']} threads longest first; warm cache {nv['warm']:.3f} s\n"
            f"  started as rendered (compile_ahead) on {threads} threads: the last ends {ahead:.2f} s into the "
            f"compile ({last_name}; the planning: {r['cpu']:.2f} s CPU)\n"
            + "\n".join(f"    {t:.3f} s  {name} ({lines} lines)" for t, name, lines in nv["slowest"]),
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
    if len(argv) < 2 or argv[0] not in ("case", "depth", "warm", "warm-process"):
        raise SystemExit(__doc__)
    threads = next((int(a.split("=", 1)[1]) for a in argv if a.startswith("--threads=")), 16)
    args = [a for a in argv[1:] if not a.startswith("-")]
    if argv[0] == "case":
        run_cases(args, "--full" in argv, "--profile" in argv, threads)
    elif argv[0] == "warm":
        from benchmarks.scripts.warm_start import run_warm

        repeat = next((int(a.split("=")[1]) for a in argv if a.startswith("--repeat=")), 5)
        run_warm(args, "--full" in argv, "--profile" in argv, "--no-step" not in argv, repeat)
    elif argv[0] == "warm-process":
        from benchmarks.scripts.warm_start import warm_process

        warm_process(args[0], "--full" in argv, "--profile" in argv, "--no-step" not in argv)
    else:
        run_depth([int(a) for a in args], "--cuda" in argv, "--profile" in argv)
