"""Write, per case of the suite, the compiled plan (its text) and every kernel source flame renders for
it, so that a change meant to make the compiler faster can be checked to change nothing it produces:

    FLAME_DEVICE=reference PYTHONPATH=. python3 -m benchmarks.scripts.plan_snapshot OUTDIR [--full]
    diff -r OUTDIR_before OUTDIR_after          # empty: the same plans and kernels

Quick sizes of every case; with --full also the full sizes of the real models (a few minutes on a
CPU: planning only, nothing runs). Prints each case's time to trace and compile."""

from __future__ import annotations

import os
import sys
import time

import flame
from flame.bench.spec import flame_inputs
from flame.bench.table import CASES

FULL = ("unet_train", "resnet_block_train", "gpt_block_train", "gpt_train", "mlp_bf16_train", "gpt_lora_train")


def main(argv: list[str]) -> None:
    if not argv or argv[0].startswith("-"):
        raise SystemExit(__doc__)
    out = argv[0]
    os.makedirs(out, exist_ok=True)
    jobs = [(c, True) for c in CASES] + ([(c, False) for c in CASES if c.name in FULL] if "--full" in argv else [])
    for case, quick in jobs:
        _snapshot(case, quick, out)


def _snapshot(case, quick: bool, out: str) -> None:
    sizes = case.sizes(quick)
    a = flame_inputs(case, sizes)
    bound = case.flame(sizes, a, flame.compile)
    data = [a[n] for n, inp in case.inputs(sizes).items() if not inp.state]
    c = bound.call
    fresh = type(c)(c.fn, c.name, memory_budget=c.memory_budget)
    t0 = time.perf_counter()
    entry = fresh._build(fresh._args(data))
    sec = time.perf_counter() - t0
    tag = f"{case.name}_{'quick' if quick else 'full'}"
    plan = entry.plan
    with open(os.path.join(out, tag + ".plan.txt"), "w") as f:
        f.write(str(plan))
    srcs = sorted({k.source for k in plan.kernels()})
    with open(os.path.join(out, tag + ".kernels.cu"), "w") as f:
        f.write("\n// ----\n".join(srcs))
    print(f"{tag}: {sec:.2f} s, {len(srcs)} kernel sources", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
