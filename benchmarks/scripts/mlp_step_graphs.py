"""Per-step time of a 784-256-256-10 MLP training step (batch 128, f32, SGD) under @flame.compile
with and without CUDA graphs, and PyTorch eager for the same step when torch has CUDA. CUDA events,
warm-up, median of repeats. Run on a GPU: `PYTHONPATH=. python3 -m benchmarks.scripts.mlp_step_graphs`."""

from __future__ import annotations

import os
import statistics

import numpy as np


def _time(fn, warm=20, reps=200) -> float:
    import cupy

    for _ in range(warm):
        fn()
    cupy.cuda.Device().synchronize()
    times = []
    for _ in range(5):
        start, end = cupy.cuda.Event(), cupy.cuda.Event()
        start.record()
        for _ in range(reps):
            fn()
        end.record()
        end.synchronize()
        times.append(cupy.cuda.get_elapsed_time(start, end) * 1000 / reps)
    return statistics.median(times)


def flame_step(graphs: bool) -> float:
    os.environ["FLAME_CUDA_GRAPHS"] = "1" if graphs else "0"
    import flame
    import flame.nn as nn
    import flame.nn.functional as F
    import flame.optim as optim

    g = flame.Generator(0)
    model = nn.Sequential(
        nn.Linear(784, 256, generator=g),
        nn.ReLU(),
        nn.Linear(256, 256, generator=g),
        nn.ReLU(),
        nn.Linear(256, 10, generator=g),
    )
    opt = optim.SGD(model.parameters(), lr=0.01)
    rng = np.random.default_rng(0)
    x = flame.tensor(rng.standard_normal((128, 784)).astype(np.float32))
    y = flame.tensor(rng.integers(0, 10, 128))

    @flame.compile
    def step(x, y):
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss

    t = _time(lambda: step(x, y))
    run = step.variants()[0].run
    print(
        f"flame graphs={graphs}: {t:.1f} us/step (captures={getattr(run, 'captures', '?')}, "
        f"why_no_graph={getattr(run, 'why_no_graph', '?')!r}, steps={len(run.plan.steps)}, "
        f"loss={float(step(x, y)):.4f})"
    )
    if graphs:
        print(step.memory_report(x, y))
    return t


def torch_step() -> float | None:
    try:
        import torch
    except ImportError:
        print("torch: not installed")
        return None
    if not torch.cuda.is_available():
        print("torch: no CUDA")
        return None
    model = torch.nn.Sequential(
        torch.nn.Linear(784, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10)
    ).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(128, 784, device="cuda")
    y = torch.randint(0, 10, (128,), device="cuda")

    def step():
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()

    t = _time(step)
    print(f"torch eager: {t:.1f} us/step")
    return t


if __name__ == "__main__":
    flame_step(False)
    flame_step(True)
    torch_step()
