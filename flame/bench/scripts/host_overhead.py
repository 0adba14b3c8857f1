"""Where the time of a small compiled training step goes: wall time per call, GPU time of one CUDA-graph
replay of the step, and a cProfile of the host side. Run on a GPU machine:
`PYTHONPATH=. python3 -m flame.bench.scripts.host_overhead`."""

import cProfile
import pstats
import time

import numpy as np

import flame
import flame.nn as nn
import flame.nn.functional as F


def main() -> None:
    import cupy

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
    n = 1000
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


if __name__ == "__main__":
    main()
