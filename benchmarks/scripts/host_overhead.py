"""The host time of a compiled call: what flame's Python costs per call of a compiled step on the
steady-state path (same signature, cache hit, replay), with the plan's execution replaced by a no-op.

    PYTHONPATH=. python3 -m benchmarks.scripts.host_overhead [CASE ...] [--calls N]
    PYTHONPATH=. python3 -m benchmarks.scripts.host_overhead --gpu [--profile] [CASE ...]  # on a GPU

The default mode needs no GPU: each case (adamw_multi_tensor, gpt_block_train and sdpa_fwd_bwd unless
named) is built at its quick sizes on the reference executor, called a few times for real, then its
compiled entry's `run` is swapped for one that returns the last real call's outputs at once, so the
timed calls measure argument checks, cache lookup, guards, binding resolution, aliases, .grad
hand-off and output wrapping, and nothing of the plan. Prints the median microseconds per call over
rounds of calls. The executor's own per-call host work (runtime/cuda.py CompiledPlan: input checks,
staging, replay) is not in these numbers; `--gpu` times whole calls at the cases' full sizes against
the GPU time of one replay of the step's CUDA graph (a call is host-bound where the first is larger).

Measured on the shared 2-core CPU dev machine (load ~3.5; median of 25 rounds of 200 calls, CPU
time; the least loaded of 3 alternating runs; runs vary by up to 1.5x under load):

    case                  before (main)   after (h/hostcall)
    adamw_multi_tensor        212 us          65 us   (52 arguments, 208 captured tensors updated in place)
    gpt_block_train            51 us          19 us
    sdpa_fwd_bwd               11 us           9 us
"""

from __future__ import annotations

import argparse
import statistics
import time

import flame

DEFAULT = ("adamw_multi_tensor", "gpt_block_train", "sdpa_fwd_bwd")


def _built(name: str, quick: bool) -> tuple:
    """(compiled step, its data arguments) of case `name`, inputs drawn as the suite draws them."""
    from flame.bench.spec import flame_inputs
    from flame.bench.table import CASES

    case = next(c for c in CASES if c.name == name)
    sizes = case.sizes(quick)
    a = flame_inputs(case, sizes)
    bound = case.flame(sizes, a, flame.compile)
    return bound.call, [a[n] for n, inp in case.inputs(sizes).items() if not inp.state]


def no_op_step(name: str) -> tuple:
    """(compiled step, its data arguments) of case `name` at its quick sizes, called for real a few
    times, then with its plan's run replaced by one returning the last real outputs."""
    compiled, data = _built(name, quick=True)
    for _ in range(3):
        compiled(*data)
    (variant,) = compiled.variants()
    real = variant.run
    outs = []

    def record(arrays):
        outs[:] = real(arrays)
        return outs

    variant.run = record
    compiled(*data)
    variant.run = lambda arrays: outs  # aliased outputs are the inputs' own arrays: nothing is copied back
    return compiled, data


def host_us(name: str, calls: int = 200, rounds: int = 25) -> tuple[float, float]:
    """(median, min) over rounds of the microseconds of flame's Python per steady-state call of case
    `name` (plan run: a no-op), in CPU time of this process: on a shared machine, the time others
    take the core from it is left out."""
    compiled, data = no_op_step(name)
    times = []
    for _ in range(rounds):
        t = time.process_time()
        for _ in range(calls):
            compiled(*data)
        times.append((time.process_time() - t) / calls * 1e6)
    assert compiled.stats().traces == 1, compiled.stats()
    return statistics.median(times), min(times)


def gpu_times(name: str, calls: int = 500, profile: bool = False) -> tuple[float, float | None]:
    """On a GPU, case `name` at its full sizes: (wall microseconds per call issued back to back, GPU
    microseconds of one replay of its CUDA graph, None without one); profile: print the host's top
    functions over those calls."""
    import cProfile
    import pstats

    import cupy

    compiled, data = _built(name, quick=False)
    for _ in range(5):
        compiled(*data)
    cupy.cuda.Device().synchronize()
    prof = cProfile.Profile() if profile else None
    if prof is not None:
        prof.enable()
    t = time.perf_counter()
    for _ in range(calls):
        compiled(*data)
    cupy.cuda.Device().synchronize()
    wall = (time.perf_counter() - t) / calls * 1e6
    if prof is not None:
        prof.disable()
        pstats.Stats(prof).sort_stats("tottime").print_stats(15)
    run = compiled.variants()[0].run
    slots = next(reversed(getattr(run, "_graphs", {}).values()), {})  # the last call's input pointers
    graph = next(iter(slots.values()), None)
    if graph is None:
        return wall, None
    start, stop = cupy.cuda.Event(), cupy.cuda.Event()
    start.record(run._stream)
    for _ in range(calls):
        graph.launch(run._stream)
    stop.record(run._stream)
    stop.synchronize()
    return wall, cupy.cuda.get_elapsed_time(start, stop) / calls * 1e3


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("cases", nargs="*", default=list(DEFAULT))
    p.add_argument("--calls", type=int, default=200, help="calls per timed round (25 rounds)")
    p.add_argument("--gpu", action="store_true", help="on a GPU: whole calls at full sizes, and one graph replay")
    p.add_argument("--profile", action="store_true", help="with --gpu: the host's top functions per case")
    args = p.parse_args(argv)
    if args.gpu:
        flame.set_device("cuda")
        for name in args.cases:
            wall, gpu = gpu_times(name, profile=args.profile)
            replay = "no CUDA graph" if gpu is None else f"one graph replay {gpu:.1f} us on the GPU"
            print(f"{name:24s} {wall:8.1f} us per call back to back; {replay}")
        return
    flame.set_device("reference")
    for name in args.cases:
        median, best = host_us(name, args.calls)
        print(f"{name:24s} {median:8.1f} us per call (min {best:.1f}; host only, plan run skipped)")


if __name__ == "__main__":
    main()
