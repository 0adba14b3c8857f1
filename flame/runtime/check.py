"""`flame check`: accuracy bisection and the NaN/Inf watch, on whichever executor the script ran.

With a GPU, each kernel runs on the GPU with the reference executor's values of its inputs; the first
whose output leaves tolerance (or, with the NaN watch, holds a NaN or Inf) is reported with its IR and
source. Without a GPU there are no kernels to check: the reference plan executor (memory plan and
steps) is compared with the graph interpreter op by op, and the report says so; the NaN watch then
runs over the script's real reference run, every step of every call of every compiled function
(`NanWatch`, hooked into runtime.reference), and names the first step producing a NaN or Inf."""

from __future__ import annotations

import numpy as np

from flame.ir.dtypes import is_ml_dtype
from flame.ir.evaluate import evaluate_graph
from flame.ir.printer import format_op
from flame.plan.steps import KernelLaunch, Plan
from flame.runtime.reference import run_graph, run_plan
from flame.runtime.stepwise import GpuUnitRunner, Unit, units

_LOOSE = {"float16": 1e-2, "bfloat16": 4e-2}  # f16/bf16 results round more coarsely


def _close(got: np.ndarray, want: np.ndarray, rtol: float, atol: float) -> tuple[bool, str]:
    """(within tolerance as numpy.allclose(rtol, atol) sees it, the worst error: relative, with atol / rtol
    as the floor of the reference's magnitude, or absolute when rtol is 0); a NaN must meet a NaN."""
    rt = max(rtol, _LOOSE.get(want.dtype.name, 0.0))
    g, w = got.astype(np.float64), want.astype(np.float64)
    fin = ~np.isnan(w)
    with np.errstate(invalid="ignore", divide="ignore"):  # inf - inf where both are the same infinity; x / 0
        err = np.where(g[fin] == w[fin], 0.0, np.abs(g[fin] - w[fin]))
        if rt > 0:
            err = np.where(err == 0, 0.0, err / (np.abs(w[fin]) + atol / rt))
    worst = float(np.nan_to_num(err, nan=np.inf).max()) if err.size else 0.0
    ok = np.array_equal(np.isnan(g), np.isnan(w)) and bool(np.allclose(g[fin], w[fin], rtol=rt, atol=atol))
    return ok, f"worst {'relative' if rt > 0 else 'absolute'} error {worst:.3g}"


def nonfinite(a: np.ndarray) -> str:
    """'' if every element of a is finite (or a is not floating point), else e.g. 'NaN (3 of 128 elements)'."""
    if a.dtype.kind not in "fcV" or a.size == 0:
        return ""
    a = a.astype(np.float64, copy=False) if is_ml_dtype(a.dtype) else a  # bfloat16, the float8s
    bad = ~np.isfinite(a)
    n = int(np.count_nonzero(bad))
    if not n:
        return ""
    what = "NaN" if np.isnan(a[bad]).any() else "Inf"
    if what == "NaN" and np.isinf(a[bad]).any():
        what = "NaN and Inf"
    return f"{what} ({n} of {a.size} elements)"


def check_plan_gpu(title: str, plan: Plan, inputs: list[np.ndarray], rtol: float, atol: float,
                   nan_watch: bool) -> tuple[str, bool]:
    env = evaluate_graph(plan.graph, inputs)
    runner = GpuUnitRunner(plan, env)
    ids = plan.graph.numbering()
    for unit in units(plan):
        for bid, got, want in runner.run(unit):
            if want is None:
                continue
            if nan_watch:
                bad = nonfinite(got)
                if bad:
                    ref_bad = nonfinite(want)
                    return _report(unit, ids, f"produced {bad} in b{bid} on the GPU (the reference "
                                   f"{'does too' if ref_bad else 'does not'})", title), False
                continue
            ok, worst = _close(got, want, rtol, atol)
            if not ok:
                return _report(unit, ids, f"diverges from the reference in b{bid}: {worst} (rtol {rtol}, "
                               f"atol {atol})", title), False
    what = "no NaN/Inf in any kernel output" if nan_watch else "every kernel matches the reference"
    return (f"OK {title}: {what} ({len(units(plan))} kernels run one by one on the GPU, on the first "
            f"call's inputs)"), True


def _report(unit: Unit, ids, what: str, title: str, where: str = "", source: bool = True) -> str:
    """The first bad kernel: what it did wrong, its IR with the user's lines, and (when it ran as
    CUDA) its source."""
    lines = [f"FIRST BAD KERNEL in {title}{where}: [{unit.index}] {unit.name} {what}", "  IR:"]
    lines += [f"    {format_op(o, ids, loc=True)}" for o in unit.ops]
    src = getattr(unit.steps[0], "source", "") if source else ""
    if src:
        lines.append("  source:")
        lines += [f"    {i + 1:4d}  {ln}" for i, ln in enumerate(src.splitlines())]
    return "\n".join(lines)


def check_plan_reference(title: str, plan: Plan, inputs: list[np.ndarray], rtol: float,
                         atol: float) -> tuple[str, bool]:
    """No GPU: the plan run by the reference executor (arena, in-place updates, every step handler)
    against the graph interpreter, on the first call's inputs."""
    want = run_graph(plan.graph, inputs)
    got = run_plan(plan, [a.copy() for a in inputs])  # the plan may update its inputs in place
    for i, (g, w) in enumerate(zip(got, want)):
        ok, worst = _close(g, w, rtol, atol)
        if not ok:
            return (f"MISMATCH {title}: output {i} of the reference plan executor differs from the graph "
                    f"interpreter ({worst}, rtol {rtol}, atol {atol}): the memory plan or a step is wrong"), False
    return (f"OK {title}: compared the reference executor running the plan ({len(plan.steps)} steps, memory "
            f"plan included) with the graph interpreter op by op, on the first call's inputs: all "
            f"{len(want)} outputs agree (rtol {rtol}, atol {atol}). No GPU here, so no CUDA kernel was "
            f"run or checked"), True


class NanWatch:
    """A step hook for runtime.reference.watch_steps: after every step of a watched plan, look for NaN
    or Inf in what the step wrote (and, at each call's first step, in the plan's inputs), and keep the
    first. Plans are watched once registered with `watch(title, plan)`."""

    def __init__(self):
        self.plans: dict[int, tuple[str, Plan, dict[int, Unit]]] = {}
        self.calls: dict[int, int] = {}
        self.found: dict[int, str] = {}  # id(plan) -> the report of its first NaN/Inf
        self.steps_checked = 0

    def watch(self, title: str, plan: Plan) -> None:
        by_step = {id(s): u for u in units(plan) for s in u.steps}
        self.plans[id(plan)] = (title, plan, by_step)

    def __call__(self, plan: Plan, index: int, step, bufs: dict) -> None:
        entry = self.plans.get(id(plan))
        if entry is None or id(plan) in self.found:
            return
        title, _, by_step = entry
        if index < 0:  # a call begins
            self.calls[id(plan)] = self.calls.get(id(plan), 0) + 1
            self._inputs(plan, bufs, title)
            return
        unit = by_step.get(id(step))
        if unit is None or unit.steps[-1] is not step:  # views, copies, and early parts of a kernel
            return
        if isinstance(step, KernelLaunch) and step.part[0] != step.part[1] - 1:
            return
        self.steps_checked += 1
        for bid in unit.outs:
            bad = nonfinite(bufs[bid])
            if bad:
                where = f", call {self.calls[id(plan)]}"
                self.found[id(plan)] = _report(unit, plan.graph.numbering(), f"produced {bad} in b{bid} "
                                               "(reference executor)", title, where, source=False)
                return

    def _inputs(self, plan: Plan, bufs: dict, title: str) -> None:
        roles = plan.graph.roles
        for i, bid in enumerate(plan.inputs):
            bad = nonfinite(bufs[bid])
            if bad:
                self.found[id(plan)] = (f"BAD INPUT in {title}, call {self.calls[id(plan)]}: input {i} "
                                        f"({roles[i]}, {plan.graph.inputs[i].type}) already holds {bad} "
                                        f"before any kernel ran")
                return

    def report(self, title: str, plan: Plan) -> tuple[str, bool]:
        key = id(plan)
        if key in self.found:
            return self.found[key], False
        calls = self.calls.get(key, 0)
        if not calls:
            return f"SKIP {title}: compiled but never called", True
        n = len(units(plan))
        return (f"OK {title}: no NaN/Inf in the inputs or in any output of its {n} kernels, over all "
                f"{calls} call(s) (reference executor, every step watched; no GPU here)"), True


def check_records(titled, rtol: float = 1e-3, atol: float = 1e-4, nan_watch: bool = False,
                  gpu: bool = True, watch: NanWatch | None = None) -> tuple[str, bool]:
    """Check every compiled function a script ran; titled: (title, debug record) pairs. Returns
    (report, all good). gpu: the script ran on the CUDA executor; otherwise the reference checks run
    (and `watch`, when given, holds the NaN watch of the run)."""
    out, good = [], True
    for title, r in titled:
        if watch is not None:
            text, ok = watch.report(title, r.plan)
        elif r.inputs is None:
            text, ok = f"SKIP {title}: compiled but never called", True
        elif gpu:
            text, ok = check_plan_gpu(title, r.plan, r.inputs, rtol, atol, nan_watch)
        else:
            text, ok = check_plan_reference(title, r.plan, r.inputs, rtol, atol)
        out.append(text)
        good &= ok
    return "\n".join(out), good
