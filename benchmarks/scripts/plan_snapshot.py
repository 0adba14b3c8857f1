"""Write, per case of the `flame bench` suite at its quick sizes, what flame plans for the CUDA target
on any host (no GPU needed: the CUDA backend's capabilities, planned and rendered, nothing run):
the printed plan, every step with all its fields, the planned graph with its fusion groups, and every
kernel source. A change meant to change nothing that flame produces is checked with

    PYTHONPATH=. python3 -m benchmarks.scripts.plan_snapshot OUTDIR_before   # on the commit before
    PYTHONPATH=. python3 -m benchmarks.scripts.plan_snapshot OUTDIR_after    # on the change
    diff -r OUTDIR_before OUTDIR_after                                         # empty: the same plans and kernels

--reference also writes the plans made for the reference executor's target, --side those for the
CUDA target with optimizer updates on the side stream and bias gradients in their GEMMs (the settings
FLAME_SIDE_STREAM=1 and FLAME_MATMUL_BGRAD=1 choose), --full also the real models at their full sizes
(a few minutes on a CPU: planning only, nothing runs); names after the directory select cases."""

from __future__ import annotations

import dataclasses
import os
import sys
import time

import numpy as np

import flame
from flame import compiler
from flame.bench.spec import generate, to_flame
from flame.bench.table import CASES
from flame.errors import MemoryBudgetError
from flame.ir.graph import Op, Value
from flame.ir.printer import format_op, print_graph
from flame.runtime import device


def _arrays(case, sizes: dict) -> dict:
    """name -> flame tensor for every input of `case` at `sizes`, drawn as the suite draws them."""
    inputs = case.inputs(sizes)
    return {n: to_flame(x, inputs[n].dtype, copy=False) for n, x in generate(inputs, np, 0).items()}


def _show(x, ids: dict) -> str:
    """A step field as text: ops and values as the printer writes them, containers item by item."""
    if isinstance(x, Op):
        return format_op(x, ids)
    if isinstance(x, Value):
        return f"%{ids.get(x, '?')}"
    if isinstance(x, (tuple, list)):
        return "(" + ", ".join(_show(v, ids) for v in x) + ")"
    if isinstance(x, dict):
        return "{" + ", ".join(f"{_show(k, ids)}: {_show(v, ids)}" for k, v in x.items()) + "}"
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return (
            type(x).__name__
            + "("
            + ", ".join(f"{f.name}={_show(getattr(x, f.name), ids)}" for f in dataclasses.fields(x))
            + ")"
        )
    if callable(x):
        return getattr(x, "__qualname__", type(x).__name__)
    return repr(x)


def _steps(plan) -> str:
    ids = plan.graph.numbering()
    lines = []
    for s in plan.steps:
        fields = [f for f in dataclasses.fields(s) if f.name != "source"]
        lines.append(
            type(s).__name__ + "(" + ", ".join(f"{f.name}={_show(getattr(s, f.name), ids)}" for f in fields) + ")"
        )
    return "\n".join(lines) + "\n"


def _groups(graph) -> str:
    """The fusion groups, each with the fields it had when this check was written (a field added to
    FusionGroup later is not part of what must stay the same)."""
    ids = graph.numbering()
    return "".join(
        f"{g.kind} ops={_show(tuple(o.out for o in g.ops), ids)} outputs={_show(g.outputs, ids)} "
        f"epilogue={g.epilogue} reason={g.reason!r}\n"
        for g in graph.groups or ()
    )


FULL = ("unet_train", "resnet_block_train", "gpt_block_train", "gpt_train", "mlp_bf16_train", "gpt_lora_train")


def _plan(case, target: str, quick: bool = True):
    """The plan flame.compile makes for one call of `case` at its quick (or full) sizes, for `target`'s
    backend."""
    capabilities = compiler.capabilities
    chosen = capabilities("cuda" if target == "side" else target)
    if target == "side":
        chosen = dataclasses.replace(chosen, side_stream=True, bgrad_epilogue=True)
    compiler.capabilities = lambda name: chosen
    compiler._target.cache_clear()
    compiler._CACHE.clear()
    try:
        sizes = case.sizes(quick)
        a = _arrays(case, sizes)
        bound = case.flame(sizes, a, flame.compile)
        data = [a[n] for n, inp in case.inputs(sizes).items() if not inp.state]
        c = bound.call
        fresh = type(c)(c.fn, c.name, memory_budget=c.memory_budget)
        return fresh._build(fresh._args(data)).plan
    finally:
        compiler.capabilities = capabilities
        compiler._target.cache_clear()
        compiler._CACHE.clear()


def snapshot(out: str, names: list[str], targets: tuple[str, ...], full: bool = False) -> None:
    """Write every selected case's plan files for each target under `out`."""
    os.makedirs(out, exist_ok=True)
    device._chosen[:] = ["reference"]
    device.executor.cache_clear()
    jobs = [(c, True) for c in CASES] + ([(c, False) for c in CASES if c.name in FULL] if full else [])
    for case, quick in jobs:
        if names and case.name not in names:
            continue
        for target in targets:
            t0 = time.perf_counter()
            tag = os.path.join(out, f"{case.name}{'' if quick else '.full'}.{target}")
            try:
                plan = _plan(case, target, quick)
            except MemoryBudgetError as e:  # a budget the quick sizes cannot meet: its message is the outcome
                with open(tag + ".error.txt", "w") as f:
                    f.write(str(e).rsplit("\n  at ", 1)[0] + "\n")
                print(f"{case.name} ({target}): MemoryBudgetError", flush=True)
                continue
            with open(tag + ".plan.txt", "w") as f:
                f.write(str(plan) + "\n" + _steps(plan))
            with open(tag + ".graph.txt", "w") as f:
                f.write(print_graph(plan.graph) + "\n" + _groups(plan.graph))
            srcs = [k.source for k in plan.kernels()]
            with open(tag + ".kernels.cu", "w") as f:
                f.write("\n// ----\n".join(srcs))
            print(
                f"{case.name} ({target}): {time.perf_counter() - t0:.2f} s, {len(set(srcs))} kernel sources", flush=True
            )


if __name__ == "__main__":
    argv = sys.argv[1:]
    if not argv or argv[0].startswith("-"):
        raise SystemExit(__doc__)
    targets = ("cuda", *(["reference"] if "--reference" in argv else []), *(["side"] if "--side" in argv else []))
    snapshot(argv[0], [a for a in argv[1:] if not a.startswith("-")], targets, "--full" in argv)
