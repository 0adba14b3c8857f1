"""Anomaly detection's step hook (flame.autograd.detect_anomaly): after each step of a backward
computation the reference executor runs, look for NaN in what the step's backward ops wrote, and raise
flame.errors.AnomalyError at the first, before any later step runs, naming the kernel or library call,
the op and its output, and the user's forward line the op is the gradient of (its BackwardLoc). As
PyTorch's anomaly mode, only gradient computations are checked (a forward NaN raises nothing, nor does
a recomputed forward value inside the backward) and only for NaN (an Inf passes). Inputs the plan
updates in place (parameters, optimizer state, accumulated .grads) are put back as they were when the
call began, so a step that raises has updated nothing."""

from __future__ import annotations

import math
import weakref

import numpy as np

from flame.errors import AnomalyError
from flame.ir.dtypes import is_ml_dtype
from flame.ir.evaluate import compute_op
from flame.ir.graph import is_backward, is_recompute
from flame.ir.printer import format_op
from flame.plan.steps import KernelLaunch, Plan
from flame.runtime.stepwise import units


def has_nan(a: np.ndarray) -> bool:
    """Whether floating-point array a holds a NaN (bfloat16 and the float8s read through f32)."""
    if a.dtype.kind not in "fcV" or a.size == 0:
        return False
    return bool(np.isnan(a.astype(np.float32) if is_ml_dtype(a.dtype) else a).any())


# id(plan) -> (a weak reference to the plan, its Checks) (a Plan is not hashable)
_CHECKS: dict[int, tuple[weakref.ref, Checks]] = {}


class Checks:
    """Where the watch looks in one plan. A kernel's intermediate values live in no buffer, so a kernel
    holding backward ops is evaluated op by op (the IR's reference of each) from its inputs just before it
    runs, after the step before it (`before`: the index of that step, -1 for the first); a library call's
    backward results are its outputs, read after its last step (`after`)."""

    def __init__(self, plan: Plan):
        at = {id(s): i for i, s in enumerate(plan.steps)}
        self.before: dict[int, tuple] = {}  # step index -> (unit, its backward ops)
        self.after: dict[int, tuple] = {}  # step index -> (unit, ((op, buffer id), ...))
        for unit in units(plan):
            mine = frozenset(op for op in unit.ops if is_backward(op) and not is_recompute(op))
            if not mine:
                continue
            if isinstance(unit.steps[0], KernelLaunch) and _readable(plan, unit):
                self.before[at[id(unit.steps[0])] - 1] = (unit, mine)
            else:
                outs = tuple((op, plan.buffer_of[op.out]) for op in unit.ops
                             if op in mine and plan.buffer_of.get(op.out) in unit.outs)
                if outs:
                    self.after[at[id(unit.steps[-1])]] = (unit, outs)

    def __bool__(self) -> bool:
        return bool(self.before or self.after)


def _readable(plan: Plan, unit) -> bool:
    """Whether every value unit's ops read from outside it is in a buffer of its own dtype and size."""
    made = {op.out for op in unit.ops}
    for op in unit.ops:
        for v in op.inputs:
            if v in made:
                continue
            b = plan.buffers.get(plan.buffer_of.get(v))
            if b is None or b.dtype != v.type.dtype or math.prod(b.shape) != v.type.numel:
                return False
    return True


def checks(plan: Plan) -> Checks:
    """The plan's Checks, worked out once."""
    known = _CHECKS.get(id(plan))
    if known is not None and known[0]() is plan:
        return known[1]
    found = Checks(plan)
    if len(_CHECKS) > 1024:  # forget the plans that are gone
        for key in [k for k, (ref, _) in _CHECKS.items() if ref() is None]:
            del _CHECKS[key]
    _CHECKS[id(plan)] = (weakref.ref(plan), found)
    return found


def watches(plan: Plan) -> bool:
    """Whether plan computes gradients (holds a backward op), that is, whether anomaly detection checks it."""
    return bool(checks(plan))


def _evaluate(plan: Plan, unit, mine: frozenset, bufs: dict):
    """unit's ops evaluated in order from the buffers it reads: (the first of `mine` returning NaN, its
    result), or None."""
    env: dict = {}
    with np.errstate(all="ignore"):  # IEEE results, as the executor's
        for op in unit.ops:
            args = [env[v] if v in env else bufs[plan.buffer_of[v]].reshape(v.type.shape) for v in op.inputs]
            env[op.out] = out = compute_op(op, args)
            if op in mine and has_nan(out):
                return op, out
    return None


class AnomalyWatch:
    """A step hook for runtime.reference.watch_steps: raises AnomalyError at the first step whose backward
    ops return NaN (a kernel's before it runs), after putting back the inputs the plan updates in place."""

    def __init__(self):
        self.saved: dict[int, list] = {}  # id(plan) -> [(its array, a copy)] of the running call's updated inputs

    def __call__(self, plan: Plan, index: int, step, bufs: dict) -> None:
        found = checks(plan)
        if index < 0:  # a call begins: keep what it may overwrite
            bids = {plan.inputs[i] for i in plan.graph.aliases.values()}
            self.saved[id(plan)] = [(bufs[b], bufs[b].copy()) for b in bids] if found else []
        elif index in found.after:
            unit, outs = found.after[index]
            for op, bid in outs:
                if has_nan(bufs[bid]):
                    self._raise(plan, unit, op, bufs[bid], f"buffer b{bid}")
        if index in found.before:
            unit, mine = found.before[index]
            bad = _evaluate(plan, unit, mine, bufs)
            if bad is not None:
                self._raise(plan, unit, bad[0], bad[1], "checked before it ran")
        if index == len(plan.steps) - 1:
            self.saved.pop(id(plan), None)

    def _raise(self, plan: Plan, unit, op, got: np.ndarray, where: str) -> None:
        saved = self.saved.pop(id(plan), ())
        for array, copy in saved:
            np.copyto(array, copy)
        raise AnomalyError(_message(plan, unit, op, got, where, bool(saved)))


def _message(plan: Plan, unit, op, got: np.ndarray, where: str, restored: bool) -> str:
    """PyTorch's "Function 'MulBackward0' returned nan values in its 0th output.", in flame's terms."""
    n = int(np.count_nonzero(np.isnan(got.astype(np.float32) if is_ml_dtype(got.dtype) else got)))
    kind = "kernel" if isinstance(unit.steps[0], KernelLaunch) else "library call"
    ids = plan.graph.numbering()
    forward = op.loc.splitlines()[0] if op.loc else "(not known)"
    lines = [f"Function '{op.name}' of the backward returned nan values in its output %{ids[op.out]} "
             f"({n} of {got.size} elements):",
             f"    {format_op(op, ids)}    ({kind} {unit.name} of {plan.name}, {where})",
             f"  the gradient of the forward line: {forward}"]
    if restored:
        lines.append("  the inputs this call updates in place (parameters, optimizer state, .grad) are left as "
                     "they were before it")
    lines.append("  (flame.autograd anomaly detection: detect_anomaly / set_detect_anomaly)")
    return "\n".join(lines)
