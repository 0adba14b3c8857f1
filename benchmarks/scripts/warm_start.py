"""A new process's way to its first step with the persistent plan cache warm, on the executor flame
picks (the reference one on a host without a GPU): `compile_profile warm CASE...` runs, per `flame
bench` case, one process that fills an empty temporary FLAME_CACHE_DIR, then others, the ones timed,
which each trace the case's step, find its entry, load it and run the first step. They report their
phases (each the fastest of --repeat=N processes, 5 by default: the host may be shared), each
exclusive of those it calls:

    trace          the body run on tracers (Compiled._trace)
    trace rest     outputs, verification, guards of the trace (the rest of Compiled._build)
    key            the compile cache's and the plan cache's key texts (print_graph, locs.layout)
    read + HMAC    the entry read and its signature checked (codegen.nvrtc.read_signed)
    parse          the graph read back (ir.parser.graph_from_data)
    payload        the payload decompressed and decoded, locs and fusion groups set (the rest of serial.loads)
    plan rebuild   the Plan's buffers and steps made again (serial._unplan)
    executor       the executor's compile of the loaded plan
    first step     the rest of the first call: binding the inputs, running the plan, handing back

and, on a GPU, two parts of the last two: `kernels`, loading the kernels' modules
(runtime.cuda_kernels.load_kernels), and `cuDNN graphs`, making them (runtime.cudnn_cache.graph),
both counted in the look-up and load wherever they happen. Also the whole first call, from the call
to its result."""

from __future__ import annotations

import cProfile
import os
import subprocess
import sys
import tempfile
import time
from collections import defaultdict

PHASES = ("trace", "trace rest", "key", "read + HMAC", "parse", "payload", "plan rebuild", "executor", "first step")
GPU_PHASES = ("kernels", "cuDNN graphs")  # the CUDA executor's, wherever they happen (compile or first step)


class _Clock:
    """Exclusive seconds per phase of wrapped functions (a phase's time leaves out the wrapped
    functions it calls)."""

    def __init__(self):
        self.seconds: dict[str, float] = defaultdict(float)
        self._stack: list[list] = []

    def wrap(self, owner, attr: str, phase: str) -> None:
        fn = getattr(owner, attr)

        def timed(*args, **kwargs):
            frame = [0.0]  # seconds spent in wrapped callees
            self._stack.append(frame)
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                sec = time.perf_counter() - t0
                self._stack.pop()
                self.seconds[phase] += sec - frame[0]
                if self._stack:
                    self._stack[-1][0] += sec

        setattr(owner, attr, timed)


def _instrument(clock: _Clock) -> None:
    from flame import compiler
    from flame.codegen import nvrtc
    from flame.frontend import compile as frontend_compile
    from flame.plan import serial
    from flame.runtime import device

    compiled = frontend_compile.Compiled
    clock.wrap(compiled, "_build", "trace rest")
    clock.wrap(compiled, "_trace", "trace")
    clock.wrap(compiler, "compile_graph", "key")
    clock.wrap(nvrtc, "read_signed", "read + HMAC")
    clock.wrap(serial, "loads", "payload")
    reader = "graph_from_data" if hasattr(serial, "graph_from_data") else "parse"  # (the IR text, before)
    clock.wrap(serial, reader, "parse")
    clock.wrap(serial, "_unplan", "plan rebuild")
    ex = device.executor()
    clock.wrap(type(ex), "compile", "executor")
    if ex.name == "cuda":  # the executor's parts: its kernels' modules, cuDNN's graphs (built or read back)
        from flame.runtime import cuda, cudnn_cache

        clock.wrap(cuda, "load_kernels", "kernels")
        clock.wrap(cudnn_cache, "graph", "cuDNN graphs")
    frontend_compile.compile_graph = compiler.compile_graph  # the name Compiled calls


def warm_process(name: str, full: bool, profile: bool, step: bool = True) -> None:
    """One process's first call of case `name` (the plan cache as FLAME_CACHE_DIR holds it): prints
    one line `phase seconds` per phase, then `call`, `hits` and `rebuilt` (the plan cache's counts).
    step False: everything up to the first step, which is left out (Compiled.optimized for the call)."""
    import flame
    from benchmarks.scripts.plan_snapshot import _arrays
    from flame.bench.table import CASES
    from flame.plan import cache as plan_cache

    case = next(c for c in CASES if c.name == name)
    sizes = case.sizes(not full)
    a = _arrays(case, sizes)
    bound = case.flame(sizes, a, flame.compile)
    data = [a[n] for n, inp in case.inputs(sizes).items() if not inp.state]
    clock = _Clock()
    _instrument(clock)
    prof = cProfile.Profile() if profile else None
    if prof:
        prof.enable()
    t0 = time.perf_counter()
    if step:
        bound.call(*data)
    else:
        bound.call.optimized(*data)
    call = time.perf_counter() - t0
    if prof:
        prof.disable()
    clock.seconds["first step"] = call - sum(clock.seconds.values())
    for phase in PHASES + GPU_PHASES:
        print(f"phase {phase}\t{clock.seconds.get(phase, 0.0):.4f}")
    print(f"call\t{call:.4f}\nhits\t{plan_cache.COUNTS.hits}\nrebuilt\t{plan_cache.COUNTS.rebuilt}", flush=True)
    if prof:
        from benchmarks.scripts.compile_profile import _top

        print(_top(prof, 45), file=sys.stderr)


def _child(name: str, full: bool, profile: bool, folder: str, step: bool) -> dict:
    env = dict(os.environ, FLAME_CACHE_DIR=folder)
    cmd = [sys.executable, "-m", "benchmarks.scripts.compile_profile", "warm-process", name]
    cmd += ["--full"] * full + ["--profile"] * profile + ["--no-step"] * (not step)
    t0 = time.perf_counter()
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    if done.returncode:
        raise SystemExit(f"{name}: the process failed:\n{done.stderr}")
    out = {"process": wall, "profile": done.stderr}
    for line in done.stdout.splitlines():
        key, _, value = line.rpartition("\t")
        out[key] = float(value)
    return out


def _fastest(runs: list[dict]) -> dict:
    """Each number the smallest of the runs' (the host may be shared), the profile the first run's."""
    return {k: runs[0][k] if k == "profile" else min(r[k] for r in runs) for k in runs[0]}


def run_warm(names: list[str], full: bool, profile: bool, step: bool = True, repeat: int = 5) -> None:
    """Per case: fill a temporary plan cache in one process, then time `repeat` more processes' first
    calls, each phase the fastest of them (step False: up to the first step, left out: at full sizes
    the first step is NumPy's arithmetic)."""
    for name in names:
        with tempfile.TemporaryDirectory(prefix="flame-warm-start-") as folder:
            cold = _child(name, full, False, folder, step)
            warm = _fastest([_child(name, full, profile and i == 0, folder, step) for i in range(repeat)])
        if warm["hits"] < 1 or warm["rebuilt"]:
            print(
                f"{name}: the second process did not load its plan (hits {warm['hits']:.0f}, "
                f"rebuilt {warm['rebuilt']:.0f})"
            )
        load = sum(warm[f"phase {p}"] for p in PHASES[2:8] + GPU_PHASES)
        shown = ", ".join(
            f"{p} {warm[f'phase {p}']:.3f}" for p in PHASES + GPU_PHASES if p in PHASES or warm[f"phase {p}"]
        )
        label = name + (" (full sizes)" if full else "") + ("" if step else " (no step)")
        trace = warm["phase trace"] + warm["phase trace rest"]
        print(
            f"{label}: first call {warm['call']:.3f} s with the plan cache warm (cold {cold['call']:.3f} s); "
            f"trace {trace:.3f}, look-up and load {load:.3f}, first step {warm['phase first step']:.3f}; "
            f"process {warm['process']:.2f} s",
            flush=True,
        )
        print(f"  {shown}", flush=True)
        if profile:
            print(warm["profile"])
