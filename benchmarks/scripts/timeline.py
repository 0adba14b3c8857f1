"""The kernel timeline of one step of a suite case on the GPU: every kernel of the last of four
replays with its stream, its start (us after the step's first kernel) and its duration, from the
CUPTI trace torch.profiler records (it sees CuPy's and cuBLASLt's kernels too, and copies and memsets
on the device: a library's workspace clears, an output copied out). It shows what
`flame profile` cannot: which kernels overlap, and the gaps between them.

    python3 -m benchmarks.scripts.timeline CASE        # e.g. mlp_bf16_train (full sizes)
    FLAME_SIDE_STREAM=1 python3 -m benchmarks.scripts.timeline CASE

The first line gives the spans of the four replays (first kernel's start to last kernel's end) and
the time from each replay's first kernel to the next's (the calls are issued back to back)."""

from __future__ import annotations

import json
import os
import sys
import tempfile

import flame
from flame.bench.spec import flame_inputs
from flame.bench.table import CASES

REPLAYS = 4
GPU_WORK = ("kernel", "gpu_memcpy", "gpu_memset")  # the trace's categories of work on the GPU


def main(argv: list[str]) -> None:
    if not argv or argv[0].startswith("-"):
        raise SystemExit(__doc__)
    import cupy
    from torch.profiler import ProfilerActivity, profile

    case = next(c for c in CASES if c.name == argv[0])
    sizes = case.sizes(False)
    a = flame_inputs(case, sizes)
    bound = case.flame(sizes, a, flame.compile)
    data = [a[n] for n, inp in case.inputs(sizes).items() if not inp.state]
    for _ in range(5):
        bound.call(*data)
    cupy.cuda.Device().synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(REPLAYS):
            bound.call(*data)
        cupy.cuda.Device().synchronize()
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "trace.json")
        prof.export_chrome_trace(path)
        with open(path) as f:
            events = [e for e in json.load(f)["traceEvents"] if e.get("cat") in GPU_WORK]
    events.sort(key=lambda e: e["ts"])
    n = len(events) // REPLAYS
    steps = [events[i * n:(i + 1) * n] for i in range(REPLAYS)]
    spans = [round(s[-1]["ts"] + s[-1]["dur"] - s[0]["ts"], 1) for s in steps]
    side = os.environ.get("FLAME_SIDE_STREAM", "0")
    periods = [round(b[0]["ts"] - a[0]["ts"], 1) for a, b in zip(steps, steps[1:])]
    print(f"{case.name} FLAME_SIDE_STREAM={side}: {n} kernels per step, spans of the replays (us): {spans}, "
          f"from one replay's start to the next: {periods}")
    t0 = steps[-1][0]["ts"]
    for e in steps[-1]:
        print(f"  stream {e['tid']:>4} {e['ts'] - t0:9.1f} {e['dur']:8.1f}  {e['name'][:70]}")


if __name__ == "__main__":
    main(sys.argv[1:])
