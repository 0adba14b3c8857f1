"""The reduce_all case's whole-tensor mean (f32[64M] -> f32[]) as flame lowers it: the partial kernel
and the fold of its partials, each alone and as the pair, against a device copy and torch.mean on one
GPU, checked against NumPy in float64.

    PYTHONPATH=. python3 benchmarks/scripts/reduce_all.py [--reps 50]

Times: CUDA events, median of --reps after 5 warm-ups; "b2b": 20 calls issued back to back between
two events, per call. Inputs rotate over copies of at least 1 GiB in all, so nothing is served from L2.
"GB/s": the input's bytes read (the copy: read + written) over the b2b time.

H100, 2026-11-27: the pair 93.9 us b2b (2858 GB/s; the partial kernel 93.9 us alone, the fold 8.2 us
alone, mostly its launch), torch.mean 94.5 us, the copy 2.93 TB/s: the kernels run at the copy rate
(a fold by a whole block instead of one warp: 92.5 us, not kept).
The suite's back-to-back figure for the case was 107 us then (0.91x torch): its two input sets in turn
moved the input's pointer every call, so the plan ran plain launches, host-bound; with a graph per
input-pointer set (runtime/cuda_graphs.py GRAPH_VARIANTS) it ran 100 us (90% of copy) in the suite.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

from benchmarks.scripts.reduce_columns import _copies, _launcher, _op, _rotating_copy  # noqa: E402
from flame.runtime.profile import median_event_ms  # noqa: E402


def _b2b_ms(fn, calls: int = 20, reps: int = 10) -> float:

    def batch():
        for _ in range(calls):
            fn()

    return median_event_ms(batch, reps, warmup=2) / calls


def main() -> None:
    import cupy

    from flame.codegen import lower
    from flame.codegen.lower import single

    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=64 * 2**20)
    ap.add_argument("--reps", type=int, default=50)
    opts = ap.parse_args()
    props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
    print(f"device: {props['name'].decode()}, {props['multiProcessorCount']} SMs", flush=True)
    x = cupy.random.RandomState(3).standard_normal(opts.n, dtype=np.float32)
    want = float(np.mean(x.get().astype(np.float64)))
    ins = _copies(x, 1 << 30)
    copy = _rotating_copy(x.nbytes, 1 << 30)
    copy_ms = median_event_ms(copy, opts.reps, warmup=5)
    rows = [("copy (same bytes)", "", copy_ms, _b2b_ms(copy), "")]
    try:
        import torch

        tx = [torch.as_tensor(a, device="cuda") for a in ins]
        tturn = [0]

        def tmean():
            torch.mean(tx[tturn[0] % len(tx)])
            tturn[0] += 1

        rows.append(("torch.mean", "", median_event_ms(tmean, opts.reps, warmup=5), _b2b_ms(tmean), ""))
    except ImportError:
        pass
    kernels = lower(single(_op((opts.n,), "f32", (0,), "reduce_mean")))
    out = cupy.full((), np.nan, np.float32)
    scratch = cupy.empty(max(1, max(k.scratch for k in kernels)), np.uint8)
    run = _launcher(kernels, ins, out, scratch)
    run()
    cupy.cuda.get_current_stream().synchronize()
    err = abs(float(out.get()) - want) / max(abs(want), 1e-30)
    alone = [median_event_ms(_launcher([k], ins, out, scratch), opts.reps, warmup=5) for k in kernels]
    shape = " + ".join(f"{k.grid}x{k.block}" for k in kernels)
    times = " + ".join(f"{a * 1e3:.1f}" for a in alone)
    rows.append(("flame", shape, median_event_ms(run, opts.reps, warmup=5), _b2b_ms(run),
                 f"{times} us alone; rel err {err:.1e}"))
    print("\n| what | launch | us | us b2b | GB/s b2b | kernels |")
    print("|---|---|---|---|---|---|")
    for what, shape, ms, b2b, note in rows:
        moved = 2 * x.nbytes if what.startswith("copy") else x.nbytes
        print(f"| {what} | {shape} | {ms * 1e3:.1f} | {b2b * 1e3:.1f} | {moved / b2b / 1e6:.0f} | {note} |")


if __name__ == "__main__":
    main()
