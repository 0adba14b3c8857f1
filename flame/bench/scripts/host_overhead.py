"""The host time of a compiled call: what flame's Python costs per call of a compiled step on the
steady-state path (same signature, cache hit, replay), with the plan's execution replaced by a no-op.

    PYTHONPATH=. python3 -m flame.bench.scripts.host_overhead [CASE ...] [--calls N]
    PYTHONPATH=. python3 -m flame.bench.scripts.host_overhead --gpu   # on a GPU machine, see gpu_profile

The default mode needs no GPU: each case (adamw_multi_tensor, gpt_block_train and sdpa_fwd_bwd unless
named) is built at its quick sizes on the reference executor, called a few times for real, then its
compiled entry's `run` is swapped for one that returns the last real call's outputs at once, so the
timed calls measure argument checks, cache lookup, guards, binding resolution, aliases, .grad
hand-off and output wrapping, and nothing of the plan. Prints the median microseconds per call over
rounds of calls. The executor's own per-call host work (runtime/cuda.py CompiledPlan: input checks,
staging, replay) is not in these numbers; `--gpu` measures the whole call.

Measured on the 2-core CPU dev machine (median us per call; noisy to +-10%):

    case                  before   after
    adamw_multi_tensor     119.6     ...
    gpt_block_train         22.5     ...
    sdpa_fwd_bwd             9.9     ...
"""

from __future__ import annotations

import argparse
import statistics
import time

import flame

DEFAULT = ("adamw_multi_tensor", "gpt_block_train", "sdpa_fwd_bwd")


def no_op_step(name: str) -> tuple:
    """(compiled step, its data arguments) of case `name` at its quick sizes, called for real a few
    times, then with its plan's run replaced by one returning the last real outputs."""
    from flame.bench.scripts.gpt_step import arrays
    from flame.bench.table import CASES

    case = next(c for c in CASES if c.name == name)
    sizes = case.sizes(True)
    a = arrays(case, sizes)
    bound = case.flame(sizes, a, flame.compile)
    data = [a[n] for n, inp in case.inputs(sizes).items() if not inp.state]
    for _ in range(3):
        bound.call(*data)
    compiled = bound.call
    (entry,) = compiled._entries()
    real = entry.run
    outs = []

    def record(arrays):
        outs[:] = real(arrays)
        return outs

    entry.run = record
    bound.call(*data)
    entry.run = lambda arrays: outs  # aliased outputs are the inputs' own arrays: nothing is copied back
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


def gpu_profile(n: int = 1000) -> None:
    """On a GPU: wall time per call of a small MLP training step, GPU time of one CUDA-graph replay of
    it, and a cProfile of the host side."""
    import cProfile
    import pstats

    import cupy
    import numpy as np

    import flame.nn as nn
    import flame.nn.functional as F

    flame.set_device("cuda")
    flame.manual_seed(0)
    model = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))
    opt = flame.optim.AdamW(model.parameters(), lr=1e-3)

    @flame.compile
    def step(x, y):
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss

    rng = np.random.default_rng(0)
    x = flame.tensor(rng.standard_normal((128, 784)).astype(np.float32))
    y = flame.tensor(rng.integers(0, 10, 128))
    for _ in range(50):
        step(x, y)
    cupy.cuda.Device().synchronize()
    t = time.perf_counter()
    for _ in range(n):
        step(x, y)
    cupy.cuda.Device().synchronize()
    print(f"wall per step: {(time.perf_counter() - t) / n * 1e6:.1f} us")

    (entry,) = step._entries()
    run = entry.run
    if getattr(run, "_graph", None) is not None:
        s = run._stream
        start, stop = cupy.cuda.Event(), cupy.cuda.Event()
        start.record(s)
        for _ in range(n):
            run._graph.launch(s)
        stop.record(s)
        stop.synchronize()
        print(f"GPU per replay of the step's graph: {cupy.cuda.get_elapsed_time(start, stop) / n * 1e3:.1f} us")
    else:
        print("no CUDA graph:", run.why_no_graph)

    prof = cProfile.Profile()
    prof.enable()
    for _ in range(n):
        step(x, y)
    cupy.cuda.Device().synchronize()
    prof.disable()
    pstats.Stats(prof).sort_stats("tottime").print_stats(22)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("cases", nargs="*", default=list(DEFAULT))
    p.add_argument("--calls", type=int, default=200, help="calls per timed round (25 rounds)")
    p.add_argument("--gpu", action="store_true", help="time whole calls and profile on the GPU instead")
    args = p.parse_args(argv)
    if args.gpu:
        gpu_profile()
        return
    flame.set_device("reference")
    for name in args.cases:
        median, best = host_us(name, args.calls)
        print(f"{name:24s} {median:8.1f} us per call (min {best:.1f}; host only, plan run skipped)")


if __name__ == "__main__":
    main()
