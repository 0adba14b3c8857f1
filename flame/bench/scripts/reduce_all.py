"""The reduce_all case's whole-tensor mean (f32[64M] -> f32[]) as flame lowers it: the partial kernel
and the fold of its partials, each alone and as the pair, under several chunk counts
(flame/codegen/reduce.py _TARGET_BLOCKS), against a device copy of the same bytes and torch.mean, on
one GPU; every variant checked against NumPy in float64.

    PYTHONPATH=. python3 flame/bench/scripts/reduce_all.py [--blocks 1024,2048,2048w,4096,8192] [--reps 50]

A trailing w folds the partials with one warp (the fold before 2026-11-27) instead of a block.

Times: CUDA events, median of --reps after 5 warm-ups; "b2b": 20 calls issued back to back between
two events, per call. Inputs rotate over copies of at least 1 GiB in all, so nothing is served from L2.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

from flame.bench.scripts.reduce_columns import _copies, _launcher, _op  # noqa: E402
from flame.runtime.profile import median_event_ms  # noqa: E402


def _b2b_ms(fn, calls: int = 20, reps: int = 10) -> float:

    def batch():
        for _ in range(calls):
            fn()

    return median_event_ms(batch, reps, warmup=2) / calls


def main() -> None:
    import cupy

    import flame.codegen.reduce as red
    from flame.codegen import lower
    from flame.codegen.lower import single

    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=64 * 2**20)
    ap.add_argument("--blocks", default="1024,2048,2048w,4096,8192")
    ap.add_argument("--reps", type=int, default=50)
    opts = ap.parse_args()
    props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
    print(f"device: {props['name'].decode()}, {props['multiProcessorCount']} SMs", flush=True)
    x = cupy.random.RandomState(3).standard_normal(opts.n, dtype=np.float32)
    want = float(np.mean(x.get().astype(np.float64)))
    ins = _copies(x, 1 << 30)
    nbytes = x.nbytes + 4
    src = _copies(cupy.ones(nbytes // 4, np.float32), 1 << 30)
    dst = cupy.empty_like(src[0])
    turn = [0]

    def copy():
        cupy.copyto(dst, src[turn[0] % len(src)])
        turn[0] += 1

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
    default = red._TARGET_BLOCKS, red._FOLD_BLOCK_OUTPUTS
    for label in opts.blocks.split(","):
        blocks = int(label.rstrip("w"))
        red._TARGET_BLOCKS, red._FOLD_BLOCK_OUTPUTS = blocks, 0 if label.endswith("w") else default[1]
        try:
            kernels = lower(single(_op((opts.n,), "f32", (0,), "reduce_mean")))
        finally:
            red._TARGET_BLOCKS, red._FOLD_BLOCK_OUTPUTS = default
        out = cupy.full((), np.nan, np.float32)
        scratch = cupy.empty(max(1, max(k.scratch for k in kernels)), np.uint8)
        run = _launcher(kernels, ins, out, scratch)
        run()
        cupy.cuda.get_current_stream().synchronize()
        err = abs(float(out.get()) - want) / max(abs(want), 1e-30)
        alone = [median_event_ms(_launcher([k], ins, out, scratch), opts.reps, warmup=5) for k in kernels]
        shape = " + ".join(f"{k.grid}x{k.block}" for k in kernels)
        what = f"flame, {blocks} target blocks" + (", warp fold" if label.endswith("w") else "")
        times = " + ".join(f"{a * 1e3:.1f}" for a in alone)
        rows.append((what, shape, median_event_ms(run, opts.reps, warmup=5), _b2b_ms(run),
                     f"{times} us alone; rel err {err:.1e}"))
    print("\n| what | launch | us | us b2b | GB/s b2b | % of copy b2b | kernels |")
    print("|---|---|---|---|---|---|---|")
    copy_b2b = rows[0][3]
    for what, shape, ms, b2b, note in rows:
        print(f"| {what} | {shape} | {ms * 1e3:.1f} | {b2b * 1e3:.1f} | {nbytes / b2b / 1e6:.0f} | "
              f"{100 * copy_b2b / b2b:.1f}% | {note} |")


if __name__ == "__main__":
    main()
