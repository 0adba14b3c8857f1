"""`flame check`: accuracy bisection. Each kernel runs on the GPU with the reference executor's
values of its inputs; the first whose output leaves tolerance (or, with the NaN watch, holds a NaN
or Inf) is reported with its IR and source. Without a GPU it checks the reference plan executor
(memory plan included) against the graph interpreter."""

from __future__ import annotations

import numpy as np

from flame.ir.evaluate import evaluate_graph
from flame.ir.printer import format_op
from flame.plan.steps import Plan
from flame.runtime.device import cuda_available
from flame.runtime.reference import run_graph, run_plan
from flame.runtime.stepwise import GpuUnitRunner, units

_LOOSE = {"float16": 1e-2, "bfloat16": 4e-2}  # f16/bf16 results round more coarsely


def _close(got: np.ndarray, want: np.ndarray, rtol: float, atol: float) -> tuple[bool, float]:
    """(within tolerance, worst relative error); a NaN must meet a NaN."""
    rt = max(rtol, _LOOSE.get(want.dtype.name, 0.0))
    g, w = got.astype(np.float64), want.astype(np.float64)
    fin = ~np.isnan(w)
    err = np.abs(g[fin] - w[fin]) / (np.abs(w[fin]) + atol / rt)
    worst = float(err.max()) if err.size else 0.0
    ok = np.array_equal(np.isnan(g), np.isnan(w)) and bool(np.allclose(g[fin], w[fin], rtol=rt, atol=atol))
    return ok, worst


def check_plan_gpu(plan: Plan, inputs: list[np.ndarray], rtol: float, atol: float,
                   nan_watch: bool) -> tuple[str, bool]:
    env = evaluate_graph(plan.graph, inputs)
    runner = GpuUnitRunner(plan, env)
    ids = plan.graph.numbering()
    for unit in units(plan):
        for bid, got, want in runner.run(unit):
            if want is None:
                continue
            if nan_watch:
                bad = not np.all(np.isfinite(got.astype(np.float64))) if got.dtype.kind in "fV" else False
                if bad:
                    ref_bad = not np.all(np.isfinite(want.astype(np.float64)))
                    return _report(unit, ids, f"produced NaN/Inf in b{bid} (the reference "
                                   f"{'does too' if ref_bad else 'does not'})"), False
                continue
            ok, worst = _close(got, want, rtol, atol)
            if not ok:
                return _report(unit, ids, f"diverges from the reference in b{bid}: worst relative error "
                               f"{worst:.3g} (rtol {rtol}, atol {atol})"), False
    what = "no NaN/Inf in any kernel output" if nan_watch else "every kernel matches the reference"
    return f"OK {plan.name}: {what} ({len(units(plan))} kernels checked on the GPU)", True


def _report(unit, ids, what: str) -> str:
    lines = [f"FIRST BAD KERNEL in plan: [{unit.index}] {unit.name} {what}", "  IR:"]
    lines += [f"    {format_op(o, ids, loc=True)}" for o in unit.ops]
    src = getattr(unit.steps[0], "source", "")
    if src:
        lines.append("  source:")
        lines += [f"    {i + 1:4d}  {ln}" for i, ln in enumerate(src.splitlines())]
    return "\n".join(lines)


def check_plan_reference(plan: Plan, inputs: list[np.ndarray], rtol: float, atol: float) -> tuple[str, bool]:
    want = run_graph(plan.graph, inputs)
    got = run_plan(plan, inputs)
    for i, (g, w) in enumerate(zip(got, want)):
        ok, worst = _close(g, w, rtol, atol)
        if not ok:
            return (f"MISMATCH {plan.name}: output {i} of the reference plan executor differs from the graph "
                    f"interpreter (worst relative error {worst:.3g}): the memory plan or a step is wrong"), False
    return (f"OK {plan.name}: reference plan executor matches the graph interpreter (no GPU here, so the "
            f"kernels themselves were not checked)"), True


def check_records(records, rtol: float = 1e-3, atol: float = 1e-4, nan_watch: bool = False) -> tuple[str, bool]:
    """Check every compiled function a script ran; returns (report, all good)."""
    gpu = cuda_available()
    out, good = [], True
    for r in records:
        if r.inputs is None:
            out.append(f"SKIP {r.name}: compiled but never called")
            continue
        text, ok = (check_plan_gpu(r.plan, r.inputs, rtol, atol, nan_watch) if gpu
                    else check_plan_reference(r.plan, r.inputs, rtol, atol))
        out.append(text)
        good &= ok
    return "\n".join(out), good
