"""Run flame's step of one case of the suite (gpt_block_train by default; any case of the table, for
instance mlp_bf16_train or unet_train) a few times, for `flame profile` and memory checks:

    FLAME_GPT_CASE=gpt_train flame profile benchmarks/scripts/gpt_step.py
    python3 -m benchmarks.scripts.gpt_step mlp_bf16_train [--quick]

Inputs are drawn as the suite draws them (flame.bench.spec.generate);
prints the loss and, on the GPU, the CuPy pool's bytes in use and reserved after the calls.
FLAME_FP8_SCALING=delayed runs an `_fp8` case with delayed scaling (its recipe's `scaling`; the
cases use current scaling); FLAME_GPT_BATCH=N runs the case at batch N instead of its own."""

from __future__ import annotations

import os
import sys

import flame
from flame.bench.spec import flame_inputs, flat_outputs
from flame.bench.table import CASES


def _fp8_scaling(scaling: str) -> None:
    """The FP8 cases' Float8Recipe() made with `scaling` (they read flame.amp.Float8Recipe when they run)."""
    import flame.amp

    made = flame.amp.Float8Recipe
    flame.amp.Float8Recipe = lambda *a, **k: made(*a, **{"scaling": scaling, **k})


def main(argv: list[str]) -> None:
    if os.environ.get("FLAME_FP8_SCALING"):
        _fp8_scaling(os.environ["FLAME_FP8_SCALING"])
    name = argv[0] if argv and not argv[0].startswith("-") else os.environ.get("FLAME_GPT_CASE", "gpt_block_train")
    case = next((c for c in CASES if c.name == name), None)
    if case is None:
        raise SystemExit(f"no case {name!r} in the suite; the cases: {', '.join(c.name for c in CASES)}")
    sizes = case.sizes("--quick" in argv)
    if os.environ.get("FLAME_GPT_BATCH"):
        sizes = dict(sizes, batch=int(os.environ["FLAME_GPT_BATCH"]))
    a = flame_inputs(case, sizes)
    bound = case.flame(sizes, a, flame.compile)
    data = [a[n] for n, inp in case.inputs(sizes).items() if not inp.state]
    for _ in range(3):
        loss = bound.call(*data)
    first = next(iter(flat_outputs(loss)), None)
    shown = "no output" if first is None else f"first output's first element {float(first.numpy().flat[0]):.6f}"
    print(f"{name}: {shown}")
    if flame.runtime.device.cuda_available():
        import cupy

        pool = cupy.get_default_memory_pool()
        print(f"CuPy pool: {pool.used_bytes() / 2**20:.0f} MiB used, {pool.total_bytes() / 2**20:.0f} MiB reserved")


if __name__ == "__main__":
    main(sys.argv[1:])
